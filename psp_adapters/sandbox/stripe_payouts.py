"""Stripe's payouts (docs.stripe.com/api/payouts) and the balance transactions they pay out
(docs.stripe.com/api/balance_transactions, docs.stripe.com/payouts/reconciliation), as the sandbox forms them.

The rule (automatic daily payouts, a sandbox simplification of Stripe's schedule): at each UTC midnight of the
server's clock, per currency, every balance transaction not yet paid out (charges, refunds, disputes, refund
failures, returned payouts), created before that midnight, is paid out in one payout if their net sum is
positive; otherwise they wait for the next midnight that ends a day with activity. So a test that charged
1000 and 2000 EUR on one day can compute the payout: ``sum(net)`` of that day, created at the next midnight
(``created``), due in the bank one day later (``arrival_date``, midnight UTC; weekends and holidays ignored).
The work runs with the rest of the clock-driven work (``api.tick``, before every request and between webhook
deliveries), so a payout forms on time whatever the polling, and the days a tick skipped are formed in order.

A payout is ``in_transit`` until its arrival date, then ``paid`` with ``reconciliation_status`` ``completed``
(``in_progress`` before). Its own balance transaction (type ``payout``, the amount negative) is dated at its
creation; ``POST /_admin/payouts/{id}/fail`` (``failure_code``, default ``could_not_process``) fails it, even
after it was paid (banks return payouts days later): ``failed``, ``failure_code``, ``failure_message`` and a
``payout_failure`` balance transaction giving the money back, which the next payout pays out again.
``trace_id`` is ``{"status": "supported", "value": …}`` from creation: 16 characters, the end-to-end id the
bank statement carries (``bank_credits``), short enough for MT940's ``:61:`` reference.

Events (``stripe_events``): ``payout.created`` when it forms, ``payout.paid`` and
``payout.reconciliation_completed`` at its arrival, ``payout.failed`` when it fails.

A sandbox simplification: what a payout paid out is read from the books as they are now, so an admin status
change of a payment already paid out (``POST /_admin/payments/{ref}/fail``) takes its charge out of the payout's
lines, and the lines no longer add up to the amount; the PSP's own refunds and disputes never do that.

Storage: payouts and their balance transactions are documents (``ledger_documents``: types ``payout`` and
``payout_txn``); which transactions a payout paid out is its window (``sandbox_since``, ``sandbox_until``) and
currency; ``payout_state`` remembers the last midnight handled and, per currency, where unpaid transactions start.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from psp_adapters.sandbox import stripe_objects as so
from psp_adapters.sandbox.bank_credits import BankCredit, bank_reference
from psp_adapters.sandbox.core import Scope
from psp_adapters.sandbox.ledger_documents import Document
from psp_adapters.sandbox.records import random_id
from psp_adapters.sandbox.stripe_books import FLAVOR, PAYOUT, PAYOUT_TXN, StripeBooks
from psp_adapters.sandbox.stripe_form import Params, missing, unix
from psp_adapters.sandbox.stripe_lists import created_window, expanded, listing, paginate
from psp_adapters.sandbox.stripe_wire import balance_transaction
from psp_adapters.sandbox.webhook_events import Change
from psp_adapters.sandbox.wire import format_timestamp, parse_timestamp

_STATE = "payout_state"
_STATE_ID = "sandbox_payout_state"
#: the bank account payouts go to (a Stripe BankAccount id, docs.stripe.com/api/external_account_bank_accounts)
DESTINATION = "ba_1SandboxBankAccount00000"
#: the time from a payout's creation to its arrival in the bank
ARRIVAL_AFTER = timedelta(days=1)
#: Stripe's payout failure codes (docs.stripe.com/api/payouts/failures) the sandbox knows, with their messages
FAILURES = {
    "account_closed": "The bank account has been closed.",
    "account_frozen": "The bank account has been frozen.",
    "bank_account_restricted": "The bank account has restrictions on either the type or number of payouts allowed.",
    "could_not_process": "The bank could not process this payout.",
    "insufficient_funds": "Your Stripe account has insufficient funds to cover the payout.",
    "invalid_account_number": "The routing number seems correct, but the account number is invalid.",
    "no_account": "The bank account details on file are probably incorrect.",
}
_EPOCH = datetime.fromtimestamp(0, UTC)


@dataclass(frozen=True, slots=True)
class Txn:
    """A balance transaction: when (``created``), its place among those of the same instant, its id and the
    object as the API serves it."""

    at: datetime
    order: int
    id: str
    doc: dict[str, object]

    @property
    def currency(self) -> str:
        return str(self.doc["currency"])

    @property
    def net(self) -> int:
        net = self.doc["net"]
        return net if isinstance(net, int) else 0


def transactions(
    books: StripeBooks, lo: datetime, hi: datetime, type_filter: str | None = None, *, payouts: bool = True
) -> list[Txn]:
    """Balance transactions created in ``[lo, hi)``, newest first; ``payouts=False`` leaves out the payouts' own
    (type ``payout``) — what a payout pays out."""
    ledger, found = books.ledger, list[Txn]()
    if type_filter in (None, "charge"):
        for record in ledger.succeeded_between(lo, hi, flavor=FLAVOR):
            assert record.settled_at is not None  # nosec B101  # type narrowing, not a check
            txn = "txn_" + record.psp_reference[3:]
            found.append(Txn(record.settled_at, 0, txn, balance_transaction(record, record)))
    for adjustment, record in ledger.adjustments_between(lo, hi, flavor=FLAVOR):
        kind = "refund" if adjustment.kind == "refund" else "adjustment"
        if type_filter in (None, kind):
            txn = "txn_" + adjustment.id.split("_", 1)[1]
            found.append(Txn(adjustment.created_at, 1, txn, balance_transaction(adjustment, record)))
    if type_filter in (None, "refund_failure"):
        for adjustment, record in ledger.adjustments_between(lo, hi, flavor=FLAVOR, failed=True):
            at = adjustment.updated_at or adjustment.created_at
            txn = "txn_F" + adjustment.id.removeprefix("re_")
            found.append(Txn(at, 2, txn, balance_transaction(adjustment, record, failure=True)))
    for document in ledger.documents(PAYOUT_TXN, lo=lo, hi=hi):
        kind = str(document.body.get("type"))
        if (payouts or kind != "payout") and type_filter in (None, kind):
            found.append(Txn(document.created_at, 3, document.id, dict(document.body)))
    found.sort(key=lambda t: (t.at, t.order, t.id), reverse=True)
    return found


def paid_out(books: StripeBooks, payout: dict[str, object]) -> list[Txn]:
    """The balance transactions ``payout`` paid out, newest first, then its own (type ``payout``)."""
    since, until = parse_timestamp(str(payout["sandbox_since"])), parse_timestamp(str(payout["sandbox_until"]))
    currency = str(payout["currency"])
    lines = [t for t in transactions(books, since, until, payouts=False) if t.currency == currency]
    own = books.ledger.get_document(str(payout["balance_transaction"]), type=PAYOUT_TXN)
    return [*lines, *([Txn(own.created_at, 3, own.id, dict(own.body))] if own else [])]


def payout(books: StripeBooks, payout_id: str) -> dict[str, object] | None:
    """A payout as stored (with its ``sandbox_`` fields), or None."""
    found = books.ledger.get_document(payout_id, type=PAYOUT) if payout_id.startswith("po_") else None
    return dict(found.body) if found is not None else None


def payouts(books: StripeBooks) -> list[dict[str, object]]:
    """Every payout as stored, newest first."""
    return [dict(d.body) for d in books.ledger.documents(PAYOUT)]


def transaction(books: StripeBooks, txn_id: str) -> dict[str, object] | None:
    found = books.ledger.get_document(txn_id, type=PAYOUT_TXN)
    return dict(found.body) if found is not None else None


def public(stored: dict[str, object]) -> dict[str, object]:
    return so.public(stored)


# -- forming, paying and failing --------------------------------------------------------------------------------


@dataclass(slots=True)
class _State:
    """``payout_state``: the last midnight handled, where each currency's unpaid transactions start when not
    there, and the payouts in transit (id -> arrival, unix seconds)."""

    through: datetime
    carry: dict[str, datetime]
    in_transit: dict[str, int]

    @classmethod
    def load(cls, books: StripeBooks) -> _State:
        found = books.ledger.get_document(_STATE_ID, type=_STATE)
        body = dict(found.body) if found is not None else {}
        kept, moving = body.get("carry"), body.get("in_transit")
        return cls(
            through=parse_timestamp(str(body["through"])) if "through" in body else _EPOCH,
            carry={str(c): parse_timestamp(str(t)) for c, t in (kept.items() if isinstance(kept, dict) else ())},
            in_transit={str(i): int(str(a)) for i, a in (moving.items() if isinstance(moving, dict) else ())},
        )

    def save(self, books: StripeBooks) -> None:
        doc = {"through": format_timestamp(self.through),
               "carry": {c: format_timestamp(t) for c, t in self.carry.items()}, "in_transit": self.in_transit}
        books.ledger.put_document(Document(_STATE_ID, _STATE, None, _EPOCH, doc))

    def unpaid(self, books: StripeBooks, until: datetime) -> dict[str, tuple[datetime, list[Txn]]]:
        """Per currency: where its unpaid transactions start, and those created before ``until``, oldest first."""
        found = transactions(books, min([self.through, *self.carry.values()]), until, payouts=False)
        by_currency = {}
        for currency in sorted({t.currency for t in found} | set(self.carry)):
            since = self.carry.get(currency, self.through)
            mine = sorted((t for t in found if t.currency == currency and t.at >= since),
                          key=lambda t: (t.at, t.order, t.id))
            by_currency[currency] = (since, mine)
        return by_currency


def tick(books: StripeBooks, scope: Scope) -> None:
    """Form the payouts due by ``scope.now`` and mark paid those that arrived (inside the tick's transaction).
    Cheap when nothing is due: one read of the state document."""
    now = scope.now
    midnight = datetime.combine(now.astimezone(UTC).date(), time(0), tzinfo=UTC)
    state = _State.load(books)
    if state.through >= midnight and all(unix(now) < arrival for arrival in state.in_transit.values()):
        return
    if state.through < midnight:
        for currency, (since, txns) in state.unpaid(books, midnight).items():
            left = _form(books, scope, currency, since, txns, state.in_transit)
            if left is None:
                state.carry.pop(currency, None)
            else:
                state.carry[currency] = left
        state.through = midnight
    for payout_id in sorted(i for i, arrival in state.in_transit.items() if unix(now) >= arrival):
        del state.in_transit[payout_id]
        stored = payout(books, payout_id)
        if stored is None or stored["status"] != "in_transit":
            continue  # failed before it arrived
        paid = {**stored, "status": "paid", "reconciliation_status": "completed"}
        _save(books, paid)
        scope.tell(Change("payout.paid", None, document=public(paid)))
        scope.tell(Change("payout.reconciliation_completed", None, document=public(paid)))
    state.save(books)


def pay_out_now(books: StripeBooks, scope: Scope) -> list[dict[str, object]]:
    """``POST /_admin/payouts/run``: per currency, every unpaid transaction created so far in one payout, created
    and arrived now (paid at once), when their sum is positive; the daily rule goes on from there."""
    tick(books, scope)
    state = _State.load(books)
    until = scope.now + timedelta(microseconds=1)  # what was created at this very instant is included
    made = []
    for currency, (since, txns) in state.unpaid(books, until).items():
        net = sum(t.net for t in txns)
        if net > 0:
            made.append(public(_create(books, scope, currency, since, until, net, arrival=scope.now)))
            state.carry[currency] = until
    state.save(books)
    return made


def _form(
    books: StripeBooks, scope: Scope, currency: str, since: datetime, txns: list[Txn], in_transit: dict[str, int]
) -> datetime | None:
    """Pay out ``txns`` (oldest first, all from ``since``) day by day; where the unpaid ones start, or None."""
    running, start = 0, since
    for day, day_txns in _days(txns):
        running += sum(t.net for t in day_txns)
        end = datetime.combine(day + timedelta(days=1), time(0), tzinfo=UTC)
        if running > 0:
            created = _create(books, scope, currency, start, end, running)
            if created["status"] == "in_transit":
                in_transit[str(created["id"])] = int(str(created["arrival_date"]))
            running, start = 0, end
    return start if any(t.at >= start for t in txns) else None


def _days(txns: list[Txn]) -> Iterator[tuple[date, list[Txn]]]:
    day = _EPOCH.date()
    batch: list[Txn] = []
    for t in txns:
        d = t.at.astimezone(UTC).date()
        if batch and d != day:
            yield day, batch
            batch = []
        day = d
        batch.append(t)
    if batch:
        yield day, batch


def _create(
    books: StripeBooks, scope: Scope, currency: str, since: datetime, until: datetime, amount: int,
    arrival: datetime | None = None,
) -> dict[str, object]:
    payout_id = random_id("po_")
    txn_id = "txn_" + payout_id.removeprefix("po_")
    arrival = until + ARRIVAL_AFTER if arrival is None else arrival
    paid = scope.now >= arrival
    stored: dict[str, object] = {
        "id": payout_id, "object": "payout", "amount": amount, "application_fee": None,
        "application_fee_amount": None, "arrival_date": unix(arrival), "automatic": True,
        "balance_transaction": txn_id, "created": unix(until), "currency": currency, "description": "STRIPE PAYOUT",
        "destination": DESTINATION, "failure_balance_transaction": None, "failure_code": None,
        "failure_message": None, "livemode": False, "metadata": {}, "method": "standard", "original_payout": None,
        "payout_method": None, "reconciliation_status": "completed" if paid else "in_progress", "reversed_by": None,
        "source_type": "card", "statement_descriptor": None, "status": "paid" if paid else "in_transit",
        "trace_id": {"status": "supported", "value": trace_value(payout_id)}, "type": "bank_account",
        "sandbox_since": format_timestamp(since), "sandbox_until": format_timestamp(until),
    }  # fmt: skip
    _put_txn(books, txn_id, until, payout_id, currency, -amount, "payout", "payout", "STRIPE PAYOUT")
    books.ledger.put_document(Document(payout_id, PAYOUT, None, until, stored))
    scope.tell(Change("payout.created", None, document=public(stored)))
    if paid:
        scope.tell(Change("payout.paid", None, document=public(stored)))
        scope.tell(Change("payout.reconciliation_completed", None, document=public(stored)))
    return stored


def fail(books: StripeBooks, scope: Scope, payout_id: str, code: str) -> dict[str, object] | str:
    """Fail a payout (``FAILURES`` code); its money comes back in a ``payout_failure`` balance transaction. The
    payout as served, or why not: ``resource_missing``, ``failure_code_invalid``, ``already_failed``."""
    stored = payout(books, payout_id)
    if stored is None:
        return "resource_missing"
    if code not in FAILURES:
        return "failure_code_invalid"
    if stored["status"] == "failed":
        return "already_failed"
    txn_id = random_id("txn_")
    amount = stored["amount"]
    assert isinstance(amount, int)  # nosec B101  # type narrowing: written by _create
    _put_txn(books, txn_id, scope.now, payout_id, str(stored["currency"]), amount, "payout_failure",
             "payout_reversal", f"FAILURE FOR PAYOUT ({payout_id})")
    failed = {**stored, "status": "failed", "failure_code": code, "failure_message": FAILURES[code],
              "failure_balance_transaction": txn_id}
    _save(books, failed)
    scope.tell(Change("payout.failed", None, document=public(failed)))
    return public(failed)


def trace_value(payout_id: str) -> str:
    """The payout's trace id: 16 characters, stable for the payout (the bank's end-to-end id)."""
    return "STR" + hashlib.sha256(payout_id.encode()).hexdigest()[:13].upper()


def _put_txn(
    books: StripeBooks, txn_id: str, at: datetime, payout_id: str, currency: str, amount: int, kind: str,
    category: str, description: str,
) -> None:
    doc = {
        "id": txn_id, "object": "balance_transaction", "amount": amount, "available_on": unix(at),
        "balance_type": "payments", "created": unix(at), "currency": currency, "description": description,
        "exchange_rate": None, "fee": 0, "fee_details": [], "net": amount, "reporting_category": category,
        "source": payout_id, "status": "available", "type": kind,
    }  # fmt: skip
    books.ledger.put_document(Document(txn_id, PAYOUT_TXN, payout_id, at, doc))


def _save(books: StripeBooks, stored: dict[str, object]) -> None:
    created = datetime.fromtimestamp(int(str(stored["created"])), UTC)
    books.ledger.put_document(Document(str(stored["id"]), PAYOUT, None, created, stored))





# -- the endpoints -----------------------------------------------------------------------------------------------


def retrieve_payout(books: StripeBooks, params: Params, payout_id: str) -> dict[str, object]:
    params.check_known({"expand"})
    stored = payout(books, payout_id)
    if stored is None:
        raise missing("payout", payout_id, param="payout")
    return expanded(public(stored), params, books.lookup)


def list_payouts(books: StripeBooks, params: Params) -> dict[str, object]:
    """``GET /v1/payouts``: newest first, by ``arrival_date`` and ``created`` (unix seconds or ranges),
    ``status`` and ``destination``; paged like every list."""
    params.check_known({"arrival_date", "created", "destination", "status", "limit", "starting_after",
                        "ending_before", "expand"})
    arrival_lo, arrival_hi = created_window(params, "arrival_date")
    created_lo, created_hi = created_window(params, "created")
    status, destination = params.text("status"), params.text("destination")
    found = [
        p for p in payouts(books)
        if unix(arrival_lo) <= int(str(p["arrival_date"])) < unix(arrival_hi)
        and unix(created_lo) <= int(str(p["created"])) < unix(created_hi)
        and status in (None, p["status"]) and destination in (None, p["destination"])
    ]
    page, more = paginate(found, params, id_of=lambda p: str(p["id"]), kind="payout")
    return expanded(listing("/v1/payouts", [public(p) for p in page], more), params, books.lookup)


# -- the bank ----------------------------------------------------------------------------------------------------

#: who the bank names as the payer of Stripe's payouts
COUNTERPARTY = "STRIPE PAYMENTS EUROPE LTD"


def bank_credits(books: StripeBooks, since: date, until: date) -> list[BankCredit]:
    """The credits of the payouts paid (not failed) with an arrival date in ``[since, until]``."""
    found = []
    for stored in payouts(books):
        arrival = datetime.fromtimestamp(int(str(stored["arrival_date"])), UTC).date()
        amount, payout_id = stored["amount"], str(stored["id"])
        if stored["status"] == "paid" and since <= arrival <= until and isinstance(amount, int):
            found.append(BankCredit(amount, str(stored["currency"]).upper(), arrival, arrival,
                                    bank_reference(payout_id), trace_value(payout_id), COUNTERPARTY,
                                    f"STRIPE PAYOUT {payout_id}", (payout_id,)))
    return found
