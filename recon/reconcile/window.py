"""The reconcile window job: one PSP listing settles many payments (bulk reconciliation, docs/design.md).

Job kind ``reconcile_window``, payload ``{"psp": …, "since": ISO, "until": ISO, "ids": [payment id, …],
"accounts": [merchant account, …]}`` (at most ``[reconcile] window_max_payments`` ids, so payloads and finishes
stay bounded). The handler

1. reads the window's payments that are still unfinished, and whether a charge job holds a live lease on each;
2. lists the PSP's payments created in ``[since, until + window_slack)`` (``PspAdapter.iter_payments``), every
   page admitted by the PSP guard like any other call (``guard.admit``, ``permit.call``): a page is one call;
3. matches ours by PSP reference when we hold one, else by merchant reference;
4. decides each match with ``recon.reconcile.decide.heal``, the table per-payment reconciliation and webhooks
   share, and commits every heal in its fenced finish: one ``Complete(write=…)`` whose write applies all of them,
   each a compare-and-set with its own evidence (the listed answer), and enqueues, in the same transaction, the
   per-payment ``reconcile`` job (unique key ``reconcile:<id>``) of every payment the listing did not settle.

What falls back to the per-payment job, and when it runs:

| the listing                                           | fall-back job runs            |
| ----------------------------------------------------- | ----------------------------- |
| does not list it (not charged yet, sent late, lost)   | now (its own lookup, grace)   |
| lists it twice, or under another PSP reference        | now                           |
| says pending / cannot say                             | after the schedule's 1st wait |
| (a charge job holds a live lease on it)               | now (it waits for the charge) |

A lost compare-and-set (the payment changed meanwhile: a webhook, the charge) changes nothing and needs nothing
more. Snoozed by the guard mid-listing (its rate limit, a 429's cool-down, the breaker), the job commits the
heals of the pages it read with its snooze, and when it comes back lists only the part of the window its
still-unfinished payments span: no decision is lost and few pages are read twice.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from psp_adapters.errors import PspError
from psp_adapters.protocol import ListedPayment, PaymentPage, PspAdapter
from recon.classify import classify
from recon.db.jobs_store import EnqueueRow
from recon.db.payment_store import PaymentStore, Transition
from recon.engine.lease import Lease
from recon.engine.outcome import Complete, Dead, Outcome, Snooze
from recon.errors import ConfigError
from recon.payments.charge import config_dead, outcome_details
from recon.payments.guard import Guard, Unguarded
from recon.reconcile.config import ReconcileConfig
from recon.reconcile.decide import heal
from recon.reconcile.handler import RECONCILE_KIND, reconcile_key
from recon.rows import EventSource, Job, Payment

WINDOW_KIND = "reconcile_window"
#: attempts of a fall-back reconcile job (as the sweep's own)
FALLBACK_MAX_ATTEMPTS = 10


@dataclass(frozen=True, slots=True)
class Window:
    """A window job's payload, read and checked."""

    psp: str
    since: datetime
    until: datetime
    ids: tuple[int, ...]
    accounts: tuple[str, ...] = ()

    def payload(self) -> dict[str, Any]:
        return {"psp": self.psp, "since": self.since.isoformat(), "until": self.until.isoformat(),
                "ids": list(self.ids), "accounts": list(self.accounts)}

    @classmethod
    def of(cls, payload: dict[str, Any]) -> Window:
        """Raises ValueError (or KeyError, TypeError) on a payload no sweep wrote."""
        since, until = datetime.fromisoformat(payload["since"]), datetime.fromisoformat(payload["until"])
        if since.tzinfo is None or until.tzinfo is None or not since < until:
            raise ValueError("since and until must be aware, since before until")
        ids = tuple(int(i) for i in payload["ids"])
        return cls(str(payload["psp"]), since, until, ids, tuple(str(a) for a in payload.get("accounts") or ()))


@dataclass(slots=True)
class Listing:
    """The PSP's listing of one window, indexed the two ways we match."""

    by_psp_reference: dict[str, ListedPayment]
    by_reference: dict[str, list[ListedPayment]]
    pages: int = 0

    @classmethod
    def empty(cls) -> Listing:
        return cls({}, {})

    def add(self, page: PaymentPage) -> None:
        self.pages += 1
        for item in page:
            if item.psp_reference:
                self.by_psp_reference[item.psp_reference] = item
            if item.merchant_reference:
                self.by_reference.setdefault(item.merchant_reference, []).append(item)

    def match(self, payment: Payment) -> ListedPayment | None:
        """The listed payment that is ours: by the PSP reference we hold, else by our reference when the
        listing has exactly one payment with it (and no other PSP reference than ours). None: ambiguous or
        not listed."""
        if payment.psp_reference:
            found = self.by_psp_reference.get(payment.psp_reference)
            if found is not None and found.merchant_reference in (None, payment.merchant_reference):
                return found
            return None
        named = self.by_reference.get(payment.merchant_reference, [])
        return named[0] if len(named) == 1 else None


class WindowHandler:
    """Job kind ``reconcile_window`` (see the module docstring). ``healed`` counts the payments this process's
    window jobs handed to their finish as heals (a progress figure; the finish may still lose some)."""

    def __init__(self, ledger: PaymentStore, adapter_func: Callable[[str], PspAdapter], *, config: ReconcileConfig,
                 guard: Guard | None = None) -> None:
        self.ledger = ledger
        self.adapter_func = adapter_func
        self.config = config
        self.guard = guard or Unguarded()
        self.healed = 0

    def __call__(self, job: Job, lease: Lease) -> Outcome:
        try:
            window = Window.of(job.payload)
        except (KeyError, TypeError, ValueError) as exc:
            return Dead(error_kind="validation", error=f"reconcile_window payload: {exc}")
        candidates = self.ledger.window_candidates(window.ids)
        if not candidates:
            return Complete()
        try:
            adapter = self.adapter_func(window.psp)
        except ConfigError as exc:
            return config_dead(exc)
        if not getattr(adapter, "lists_payments", False):  # reconfigured since the sweep: one job each
            return self._finish(job, [], [(p, timedelta(0)) for p, _ in candidates])
        listing, held = self._list(adapter, window, candidates, lease)
        if isinstance(held, Snooze):  # keep what the pages so far settled; list the rest when it comes back
            heals, _ = self._decisions(job, candidates, listing, partial=True)
            return held if not heals else Snooze(held.delay, reason=held.reason, write=self._write(heals, []))
        if held is not None:
            return held
        heals, later = self._decisions(job, candidates, listing, partial=False)
        return self._finish(job, heals, later)

    def _list(self, adapter: PspAdapter, window: Window, candidates: Sequence[tuple[Payment, bool]],
              lease: Lease) -> tuple[Listing, Outcome | None]:
        """The listing of the part of the window our unfinished payments still span (a window snoozed midway
        and healed in part lists only the rest: Stripe lists newest first, the native sandbox oldest first),
        and the outcome that stopped it early, if any."""
        sent = [p.key_sent_at or p.created_at for p, _ in candidates]
        since = max(window.since, min(sent))
        until = max(min(window.until, max(sent) + timedelta(microseconds=1)), since + timedelta(microseconds=1))
        listing = Listing.empty()
        try:
            pages: Iterator[PaymentPage] = adapter.iter_payments(
                since, until + self.config.window_slack, merchant_accounts=window.accounts)
            while True:
                permit = self.guard.admit(window.psp, lease=lease)  # paused, cooling, breaker open, rate limit
                if isinstance(permit, Snooze):
                    return listing, permit
                lease.check()
                page = permit.call(lambda: next(pages, None))
                if page is None:
                    return listing, None
                listing.add(page)
        except PspError as exc:
            return listing, classify(exc)

    def _decisions(self, job: Job, candidates: Sequence[tuple[Payment, bool]], listing: Listing, *,
                   partial: bool) -> tuple[list[Transition], list[tuple[Payment, timedelta]]]:
        """The heals the listing gives, and what falls back (nothing while the listing is ``partial``)."""
        heals: list[Transition] = []
        later: list[tuple[Payment, timedelta]] = []
        evidence = {"listing": {"kind": WINDOW_KIND, "job_id": job.id, "pages": listing.pages}}
        for payment, charge_leased in candidates:
            listed = None if charge_leased else listing.match(payment)
            decision = heal(payment, listed.outcome) if listed is not None else None
            if listed is not None and decision is not None:
                heals.append(Transition(payment.id, payment.status, decision.target, EventSource.RECONCILE,
                                        details={**outcome_details(listed.outcome), **evidence}, job_id=job.id,
                                        attempt=job.attempts, **decision.fields()))
            elif partial:
                continue
            elif listed is not None:  # pending or cannot say: the per-payment schedule, its first wait spent
                later.append((payment, self._first_wait(payment)))
            else:
                later.append((payment, timedelta(0)))
        self.healed += len(heals)
        return heals, later

    def _first_wait(self, payment: Payment) -> timedelta:
        schedule = self.config.for_psp(payment.psp).schedule
        return schedule[0] if schedule else timedelta(0)

    def _finish(self, job: Job, heals: list[Transition], later: list[tuple[Payment, timedelta]]) -> Outcome:
        return Complete(write=self._write(heals, later))

    def _write(self, heals: list[Transition],
               later: list[tuple[Payment, timedelta]]) -> Callable[[sa.Connection], None]:
        rows = [EnqueueRow(queue=self.config.queue, kind=RECONCILE_KIND, payload_json=json.dumps({"payment_id": p.id}),
                           priority=0, run_at=None, delay=wait.total_seconds(), max_attempts=FALLBACK_MAX_ATTEMPTS,
                           unique_key=reconcile_key(p.id), tenant=p.merchant_account) for p, wait in later]

        def write(conn: sa.Connection) -> None:
            if heals:
                self.ledger.apply_many(conn, heals)
            if rows:
                self.ledger.enqueue_reconcile(conn, rows)

        return write
