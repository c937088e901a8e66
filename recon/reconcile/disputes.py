"""Disputes from the PSPs' listings: what a lost or never-sent webhook did not tell, read and recorded the way the
webhook job records it (``recon.reconcile.webhook``), with the listing as evidence (dispute event source
``listing``; the payment's, ``reconcile``).

``fetch_disputes`` reads a PSP's listing of a window (``psp_adapters.protocol.DisputeSource``: Stripe's ``GET
/v1/disputes``, Adyen's Payment accounting reports) and, for each dispute, in one transaction:

| the listing says                                      | becomes                                              |
| ----------------------------------------------------- | ---------------------------------------------------- |
| a dispute of a payment we do not know (or of another  | nothing stored; counted ``unknown`` (its id listed)  |
| merchant account)                                     |                                                      |
| a dispute under another PSP reference than the one    | the dispute is not recorded on our payment: the      |
| our payment holds (found by our merchant reference)   | payment's evidence names both (``decide.conflict``), |
|                                                       | a final payment goes to review; ``conflicts``        |
| a dispute new to us, opened or lost                   | recorded; its payment reversed like a webhook's      |
|                                                       | chargeback (needs_review: psp_reversed, or a note)   |
| a dispute new to us, won or reversed                  | recorded; a note on its payment                      |
| a known dispute, a later status (the state machine)   | moved (``DisputeStore.record``)                      |
| a known dispute, the same or an older status          | noted, never moved back (evidence never overwrites)  |

A listing read twice records nothing new the second time but notes (``same``). Job kind ``disputes`` runs it
under a lease (payload ``{"psp": …, "since": "YYYY-MM-DD", "until": …}`` or ``"days_back": N``, as a
``[schedule.NAME] kind = "disputes"`` queues it); ``recon disputes fetch`` runs it in the foreground.

The rolling window (``days_back``, and ``recon sweep --disputes DAYS``) extends itself (``reach_back``): Stripe lists
a dispute by its creation, and a dispute changes weeks after it was opened (its evidence deadline moves, it is won
or lost), so the window starts at the earliest of ``days_back`` days ago, where the PSP's listing was last read to
without an error (the cursor ``dispute_reads.read_until``: a job that failed for longer than its window leaves no
gap) and the oldest open dispute's opening (less ``OPENED_MARGIN``), at a UTC midnight, never more than
``WINDOW_MAX_DAYS`` before its end. A read that ends without an error moves the cursor to the window's end. An
explicit ``since``/``until`` is read as given and moves no cursor.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, ClassVar

import sqlalchemy as sa

from psp_adapters.errors import PspError
from psp_adapters.protocol import DisputeNews, DisputeSource, ListedDispute, PspAdapter, Reversed
from recon.classify import classify
from recon.clock import Clock, SystemClock
from recon.db.database import Database
from recon.db.dispute_store import DisputeStore
from recon.db.payment_store import PaymentStore
from recon.dispute_rows import DisputeSource as Source
from recon.dispute_rows import DisputeStatus, DisputeWord
from recon.engine.lease import Lease
from recon.engine.outcome import Complete, Dead, Outcome
from recon.errors import ConfigError, UsageError
from recon.reconcile.decide import Heal, accounts_agree, conflict, late_news, outcome_details, reversal
from recon.rows import EventSource, Job, Note, Payment, PaymentStatus, Transition

log = logging.getLogger("recon.disputes")

DISPUTES_KIND = "disputes"
PAYLOAD_KEYS = {"psp", "since", "until", "days_back"}
#: the most days one fetch reads (Stripe decides a dispute within about 75 days of its opening)
WINDOW_MAX_DAYS = 120
#: how far before the oldest open dispute's recorded opening a rolling window starts: a dispute a webhook told of
#: was recorded when the webhook came, and Stripe retries a webhook for up to three days (docs.stripe.com/webhooks,
#: "Retry behavior"); one the listing found first is recorded as opened when the PSP created it
OPENED_MARGIN = timedelta(days=3)
#: (psp, since, until) -> what was fetched: ``App.fetch_disputes``
FetchFunc = Callable[[str, datetime, datetime], "DisputeFetch"]


@dataclass
class DisputeFetch:
    """What one listing did: disputes new to us, moved, noted (known, nothing new), of payments we do not know,
    and under another PSP reference than our payment's."""

    new: int = 0
    moved: int = 0
    same: int = 0
    unknown: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    #: the window read, ``[since, until)`` (a rolling one as ``reach_back`` extended it); not in ``to_dict``
    window: tuple[datetime, datetime] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "new": self.new,
            "moved": self.moved,
            "same": self.same,
            "unknown": self.unknown,
            "conflicts": self.conflicts,
        }


def dispute_source(adapter: PspAdapter) -> DisputeSource | None:
    """The adapter as a DisputeSource, or None when its PSP lists no disputes (an instrumented adapter has the
    method whatever its inner one: its ``lists_disputes`` says)."""
    if not isinstance(adapter, DisputeSource) or not getattr(adapter, "lists_disputes", True):
        return None
    return adapter


class DisputeRecorder:
    """Records each dispute of a listing on our payments (the module docstring's table)."""

    def __init__(
        self, db: Database, payments: PaymentStore, disputes: DisputeStore, *, psp: str, job: Job | None = None
    ) -> None:
        self.db, self.payments, self.disputes, self.psp, self.job = db, payments, disputes, psp, job

    def fetch(
        self, source: DisputeSource, since: datetime, until: datetime, *, merchant_accounts: Collection[str] = ()
    ) -> DisputeFetch:
        """Every dispute ``source`` lists in ``[since, until)``, recorded. PspError from the adapter: what was
        recorded before stays (each dispute is its own transaction; a second run notes it again)."""
        result = DisputeFetch(window=(since, until))
        for page in source.iter_disputes(since, until, merchant_accounts=merchant_accounts):
            for listed in page:
                with self.db.begin() as conn:
                    self._record(conn, listed, result)
        return result

    def _record(self, conn: sa.Connection, listed: ListedDispute, result: DisputeFetch) -> None:
        news = listed.news
        name = news.dispute_id or news.psp_reference or "?"
        payment = self.payments.for_psp_event(
            conn, psp=self.psp, psp_reference=news.psp_reference, merchant_reference=news.merchant_reference
        )
        if payment is None or not accounts_agree(payment.merchant_account, listed.merchant_account):
            result.unknown.append(name)
            return
        details = {**outcome_details(news), "listing": {"psp": self.psp, "created_at": listed.created_at.isoformat()}}
        taken = _taken(news)
        theirs = conflict(payment, taken)
        if theirs is not None:  # never recorded on our payment: evidence naming both, resolved visibly
            self._payment_word(conn, payment, theirs.review, {**details, **theirs.details()})
            result.conflicts.append(name)
            return
        dispute_id = news.dispute_id or payment.psp_reference or str(payment.id)
        known = self.disputes.known(conn, self.psp, dispute_id)
        word = DisputeWord(
            payment_id=payment.id,
            psp=self.psp,
            psp_dispute_id=dispute_id,
            status=DisputeStatus(news.state),
            amount=news.amount,
            currency=news.currency,
            fee=news.fee,
            reason=news.reason,
            psp_status=news.raw_status,
            evidence_due_by=news.due_by,
            opened_at=listed.created_at,
        )
        job_id, attempt = (self.job.id, self.job.attempts) if self.job else (None, None)
        _, moved = self.disputes.record(
            conn, word, details=details, job_id=job_id, attempt=attempt, source=Source.LISTING
        )
        if known is not None:
            result.moved += int(moved)
            result.same += int(not moved)
            return
        result.new += 1
        money_out = news.state in ("opened", "lost")
        self._payment_word(conn, payment, self._decide(payment, taken) if money_out else None, details)

    @staticmethod
    def _decide(payment: Payment, taken: Reversed) -> Heal | None:
        if payment.status is PaymentStatus.NEEDS_REVIEW:
            return None
        return late_news(payment, taken) if payment.status.final else reversal(payment, taken)

    def _payment_word(
        self, conn: sa.Connection, payment: Payment, decision: Heal | None, details: dict[str, Any]
    ) -> None:
        """The listing's word on the payment: the transition ``decision`` gives, else a note (compare-and-set on
        the status as read: a payment that moved meanwhile keeps its newer state, the dispute is recorded)."""
        job_id, attempt = (self.job.id, self.job.attempts) if self.job else (None, None)
        if decision is not None and self.payments.apply(
            conn,
            Transition(
                payment.id,
                payment.status,
                decision.target,
                EventSource.RECONCILE,
                details=details,
                job_id=job_id,
                attempt=attempt,
                **decision.fields(),
            ),
        ):
            return
        self.payments.note_many(
            conn,
            [Note(payment.id, payment.status, EventSource.RECONCILE, details=details, job_id=job_id, attempt=attempt)],
        )


def _taken(news: DisputeNews) -> Reversed:
    """A dispute as the money the PSP took back from its payment (the decision table's word for it)."""
    return Reversed(
        psp_reference=news.psp_reference,
        amount=news.amount,
        currency=news.currency,
        raw_status=news.raw_status,
        kind="dispute",
        reason=news.reason,
        merchant_reference=news.merchant_reference,
    )


class DisputesJob:
    """Job kind ``disputes``: its schedule's queue."""

    kind: ClassVar[str] = DISPUTES_KIND
    queue: ClassVar[str | None] = None

    def __init__(
        self,
        fetch_func: Callable[[str, datetime, datetime, Job, bool], DisputeFetch],
        *,
        psp_names: tuple[str, ...],
        clock: Clock | None = None,
    ) -> None:
        self.fetch_func, self.psp_names = fetch_func, psp_names
        self.clock = clock or SystemClock()

    def __call__(self, job: Job, lease: Lease) -> Outcome:
        try:
            psp, since, until = payload_window(
                job.payload, self.psp_names, today=self.clock.now().astimezone(UTC).date()
            )
        except UsageError as exc:
            return Dead(error_kind="validation", error=str(exc))
        rolling = "since" not in job.payload and "until" not in job.payload  # days_back: reach_back extends it
        try:
            result = self.fetch_func(psp, since, until, job, rolling)
        except PspError as exc:
            return classify(exc)
        except (ConfigError, UsageError) as exc:
            return Dead(error_kind="config", error=f"{type(exc).__name__}: {exc}")
        read = result.window or (since, until)
        log.info("disputes of %s from %s to %s: %s", psp, read[0].date(), read[1].date(), result.to_dict())
        return Complete()


def payload_window(
    payload: Mapping[str, Any], psp_names: tuple[str, ...], *, today: date
) -> tuple[str, datetime, datetime]:
    """(psp, since, until) of a payload, UTC midnights; UsageError naming the key that is wrong."""
    unknown_keys = sorted(set(payload) - PAYLOAD_KEYS)
    if unknown_keys:
        raise UsageError(f"{unknown_keys[0]}: unknown key (known: {', '.join(sorted(PAYLOAD_KEYS))})")
    psp = payload.get("psp")
    if psp not in psp_names:
        raise UsageError(f"psp: unknown PSP {psp!r} (known: {', '.join(psp_names)})")
    if "since" in payload or "until" in payload:
        since, until = _day(payload.get("since"), "since"), _day(payload.get("until"), "until")
    else:
        back = payload.get("days_back", 7)
        if isinstance(back, bool) or not isinstance(back, int) or not 1 <= back <= WINDOW_MAX_DAYS:
            raise UsageError(f"days_back: must be an integer from 1 to {WINDOW_MAX_DAYS}")
        since, until = today - timedelta(days=back), today + timedelta(days=1)
    return str(psp), *window(since, until)


def reach_back(since: datetime, until: datetime, *, read_until: datetime | None,
               oldest_open: datetime | None) -> datetime:
    """The start of a rolling window ``[since, until)`` (the module docstring): the earliest of ``since``,
    ``read_until`` (where the listing was last read to) and ``oldest_open`` (the oldest open dispute's opening) less
    ``OPENED_MARGIN``, as a UTC midnight, and never more than ``WINDOW_MAX_DAYS`` before ``until``."""
    reach = [since, *([read_until] if read_until else []), *([oldest_open - OPENED_MARGIN] if oldest_open else [])]
    start = datetime.combine(min(reach).astimezone(UTC).date(), time(), tzinfo=UTC)
    return max(start, until - timedelta(days=WINDOW_MAX_DAYS))


def window(since: date, until: date) -> tuple[datetime, datetime]:
    """``[since, until)`` as aware UTC midnights; UsageError unless it is 1 to ``WINDOW_MAX_DAYS`` days."""
    if not since < until or (until - since).days > WINDOW_MAX_DAYS:
        raise UsageError(f"since/until: must be a window of 1 to {WINDOW_MAX_DAYS} days")
    return datetime.combine(since, time(), tzinfo=UTC), datetime.combine(until, time(), tzinfo=UTC)


def _day(value: object, key: str) -> date:
    try:
        return date.fromisoformat(str(value))
    except ValueError:
        raise UsageError(f"{key}: must be a day, YYYY-MM-DD") from None
