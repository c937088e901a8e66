"""The reconcile window job: one PSP listing settles many payments (bulk reconciliation, docs/design.md).

Job kind ``reconcile_window``, payload ``{"psp": …, "since": ISO, "until": ISO, "ids": [payment id, …],
"accounts": [merchant account, …]}`` (at most ``[reconcile] window_max_payments`` ids, so payloads and finishes
stay bounded). The handler

1. reads the window's payments that are still unfinished, and whether a charge job holds a live lease on each;
2. lists the PSP's payments created in ``[since, until + window_slack)`` (``PspAdapter.iter_payments``), every
   page admitted by the PSP guard like any other call (``guard.admit``, ``permit.call``): a page is one call;
3. matches ours (``Listing.match``): only listed payments whose merchant account agrees with ours
   (``decide.accounts_agree``: Adyen lists per account; an item of another account is not ours); by the PSP
   reference we hold, else by our merchant reference;
4. decides each match with ``recon.reconcile.decide.heal``, the table per-payment reconciliation and webhooks
   share, and commits every heal in its fenced finish: one ``Complete(write=…)`` whose write applies all of them,
   each a compare-and-set with its own evidence (the listed answer), and enqueues, in the same transaction, the
   per-payment ``reconcile`` job (unique key ``reconcile:<id>``) of every payment the listing did not settle.

What falls back to the per-payment job, and when it runs:

| the listing                                           | fall-back job runs            |
| ----------------------------------------------------- | ----------------------------- |
| does not list it (not charged yet, sent late, lost)   | now (its own lookup, grace)   |
| lists its PSP reference twice (whatever each copy says), or two payments under our reference we hold none for | now |
| lists another PSP reference than ours under our reference | now, with a note naming both (evidence, never a heal) |
| says pending / cannot say                             | after the schedule's 1st wait |
| (a charge job holds a live lease on it)               | now (it waits for the charge) |
| breaks its pagination (a repeated cursor, a page past the bound, no progress) | now, all: the job is dead (*) |

(*) PspProtocolError, ``psp_adapters.pager``; error kind ``protocol``.

A listing that broke its protocol is not evidence: nothing is healed from the pages it gave, every unfinished
payment of the window gets its reconcile job now (committed with the job's finish), and the job is **dead**
with error kind ``protocol`` rather than retried or complete: another run would list the same broken pages
(retrying only delays the payments' own jobs, and a sweep that waits for its jobs would wait for the retries),
and complete would hide that the PSP's listing is broken; a dead job is kept, shown (``recon jobs list --state
dead``, the console) and replayable once the PSP is fixed, while its payments are reconciled one by one.

A lost compare-and-set (the payment changed meanwhile: a webhook, the charge) changes nothing and needs nothing
more. Snoozed by the guard mid-listing (its rate limit, a 429's cool-down, the breaker), the job commits the
heals of the pages it read with its snooze, and when it comes back lists only the part of the window its
still-unfinished payments span: no decision is lost and few pages are read twice. Hazard: a duplicate or a
conflicting copy on a page not yet read when it snoozed cannot stop a heal made from the pages before it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, ClassVar

import sqlalchemy as sa

from psp_adapters.errors import PspError, PspProtocolError
from psp_adapters.protocol import ListedPayment, PaymentPage, PspAdapter
from recon.classify import classify
from recon.db.payment_store import PaymentStore
from recon.engine.lease import Lease
from recon.engine.outcome import Complete, Dead, Outcome, Snooze
from recon.errors import ConfigError
from recon.payments.charge import config_dead
from recon.payments.guard import Guard, Unguarded
from recon.reconcile.config import ReconcileConfig
from recon.reconcile.decide import accounts_agree, conflict_details, heal, outcome_details
from recon.reconcile.handler import reconcile_row
from recon.rows import EventSource, Job, Note, Payment, Transition

WINDOW_KIND = "reconcile_window"


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


@dataclass(frozen=True, slots=True)
class Match:
    """What a listing says about one of our payments: ``listed``, the one listed payment that is ours, when
    exactly one is; ``others``, the listed payments under our reference (and account) naming another PSP
    reference than the one we hold: a conflict, kept as evidence, never healed from."""

    listed: ListedPayment | None = None
    others: tuple[ListedPayment, ...] = ()


@dataclass(slots=True)
class Listing:
    """The PSP's listing of one window, indexed the two ways we match. Every copy is kept: a payment listed
    twice is ambiguous, never decided by one of its copies."""

    by_psp_reference: dict[str, list[ListedPayment]]
    by_reference: dict[str, list[ListedPayment]]
    pages: int = 0

    @classmethod
    def empty(cls) -> Listing:
        return cls({}, {})

    def add(self, page: PaymentPage) -> None:
        self.pages += 1
        for item in page:
            if item.psp_reference:
                self.by_psp_reference.setdefault(item.psp_reference, []).append(item)
            if item.merchant_reference:
                self.by_reference.setdefault(item.merchant_reference, []).append(item)

    def match(self, payment: Payment) -> Match:
        """The listed payment that is ours (see ``Match``). Only items whose merchant account agrees count. By
        the PSP reference we hold (listed once, under our reference or none); else by our reference, when
        the listing has exactly one payment with it, listed once. Anything else is ``Match()``: not listed, or
        ambiguous, for the payment's own reconcile job."""
        mine = self._ours(self.by_reference.get(payment.merchant_reference, []), payment)
        if payment.psp_reference:
            others = tuple(i for i in mine if i.psp_reference and i.psp_reference != payment.psp_reference)
            if others:
                return Match(others=others)
            named = self._ours(self.by_psp_reference.get(payment.psp_reference, []), payment)
            if len(named) == 1 and named[0].merchant_reference in (None, payment.merchant_reference):
                return self._once(named[0])
            return Match()
        return self._once(mine[0]) if len(mine) == 1 else Match()

    def _once(self, item: ListedPayment) -> Match:
        """``item``, unless its PSP reference is listed more than once (whatever each copy says)."""
        copies = self.by_psp_reference.get(item.psp_reference, []) if item.psp_reference else [item]
        return Match(listed=item) if len(copies) == 1 else Match()

    @staticmethod
    def _ours(items: list[ListedPayment], payment: Payment) -> list[ListedPayment]:
        return [i for i in items if accounts_agree(payment.merchant_account, i.merchant_account)]


@dataclass(slots=True)
class Decisions:
    """What one listing decides for a window's payments: ``heals`` (transitions), ``notes`` (evidence naming
    another PSP reference than ours) and ``later`` (each payment whose reconcile job runs after the wait)."""

    heals: list[Transition] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    later: list[tuple[Payment, timedelta]] = field(default_factory=list)


class WindowHandler:
    """Job kind ``reconcile_window`` (see the module docstring). ``healed`` counts the payments this process's
    window jobs handed to their finish as heals (a progress figure; the finish may still lose some)."""

    kind: ClassVar[str] = WINDOW_KIND

    def __init__(self, ledger: PaymentStore, adapter_func: Callable[[str], PspAdapter], *, config: ReconcileConfig,
                 guard: Guard | None = None) -> None:
        self.queue = config.queue
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
        every = Decisions(later=[(p, timedelta(0)) for p, _ in candidates])
        if not getattr(adapter, "lists_payments", False):  # reconfigured since the sweep: one job each
            return Complete(write=self._write(every))
        listing, held = self._list(adapter, window, candidates, lease)
        if isinstance(held, PspProtocolError):  # a broken listing is no evidence: every payment on its own
            kind = classify(held)
            return Dead(error_kind=kind.error_kind, error=f"listing abandoned, {len(candidates)} payments handed "
                                                          f"to their reconcile jobs: {kind.error}",
                        write=self._write(every))
        if isinstance(held, Snooze):  # keep what the pages so far settled; list the rest when it comes back
            decided = self._decisions(job, candidates, listing, partial=True)
            return held if not decided.heals else Snooze(held.delay, reason=held.reason, write=self._write(decided))
        if held is not None:
            return held
        return Complete(write=self._write(self._decisions(job, candidates, listing, partial=False)))

    def _list(self, adapter: PspAdapter, window: Window, candidates: Sequence[tuple[Payment, bool]],
              lease: Lease) -> tuple[Listing, Outcome | PspProtocolError | None]:
        """The listing of the part of the window our unfinished payments still span (a window snoozed midway
        and healed in part lists only the rest: Stripe lists newest first, the native sandbox oldest first),
        and what stopped it early, if anything: the guard's snooze, another PSP error's outcome, or the
        PspProtocolError of a listing that broke its protocol (``psp_adapters.pager``)."""
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
        except PspProtocolError as exc:
            return listing, exc
        except PspError as exc:
            return listing, classify(exc)

    def _decisions(self, job: Job, candidates: Sequence[tuple[Payment, bool]], listing: Listing, *,
                   partial: bool) -> Decisions:
        """The heals the listing gives, and what falls back (nothing while the listing is ``partial``)."""
        decided = Decisions()
        evidence = {"listing": {"kind": WINDOW_KIND, "job_id": job.id, "pages": listing.pages}}
        for payment, charge_leased in candidates:
            found = Match() if charge_leased else listing.match(payment)
            listed = found.listed
            decision = heal(payment, listed.outcome) if listed is not None else None
            if listed is not None and decision is not None:
                decided.heals.append(Transition(
                    payment.id, payment.status, decision.target, EventSource.RECONCILE, job_id=job.id,
                    attempt=job.attempts, details={**outcome_details(listed.outcome), **evidence}, **decision.fields()))
            elif partial:
                continue
            elif listed is not None:  # pending or cannot say: the per-payment schedule, its first wait spent
                decided.later.append((payment, self._first_wait(payment)))
            else:
                decided.later.append((payment, timedelta(0)))
                if found.others and payment.psp_reference:  # the evidence, naming both, for its reconcile job
                    decided.notes.append(Note(payment.id, payment.status, EventSource.RECONCILE, details={
                        **conflict_details(payment.psp_reference, [str(i.psp_reference) for i in found.others]),
                        "listed": [outcome_details(i.outcome) for i in found.others], **evidence},
                        job_id=job.id, attempt=job.attempts))
        self.healed += len(decided.heals)
        return decided

    def _first_wait(self, payment: Payment) -> timedelta:
        schedule = self.config.for_psp(payment.psp).schedule
        return schedule[0] if schedule else timedelta(0)

    def _write(self, decided: Decisions) -> Callable[[sa.Connection], None]:
        rows = [reconcile_row(p, queue=self.config.queue, delay=wait) for p, wait in decided.later]

        def write(conn: sa.Connection) -> None:
            if decided.heals:
                self.ledger.apply_many(conn, decided.heals)
            if decided.notes:
                self.ledger.note_many(conn, decided.notes)
            if rows:
                self.ledger.enqueue_reconcile(conn, rows)

        return write
