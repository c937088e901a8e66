"""The payouts job: a PSP's payouts of a window fetched, each stored once with its lines (``PayoutStore.store``).

Job kind ``payouts``, payload ``{"psp": "stripe", "since": "2026-11-30", "until": "2026-12-01"}`` (days; or
``"days_back": N`` for the N days before today, UTC, to tomorrow, as a schedule queues it) and, from a
webhook's payout news (``news_job``), ``"files"``: the id the news names (Adyen's report file; a Stripe payout id,
which its adapter ignores: its payout is in the window). ``recon payouts fetch`` runs the same work in the foreground.

Each payout from the adapter (``psp_adapters.protocol.PayoutSource``) is stored with its lines; the store links
each line to our payment or marks it ``missing_locally``, and notices a payout that changed (and reopens its
close). The invariant, the nets of its lines adding up to its amount, is counted here and shown by the close
(``lines_differ``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, timedelta
from typing import Any, ClassVar

from psp_adapters.errors import PspError
from psp_adapters.protocol import PayoutSource, PspAdapter, PspPayout, PspPayoutLine
from recon.classify import classify
from recon.clock import Clock, SystemClock
from recon.db.payout_store import PayoutStore
from recon.engine.jobs import JobSpec
from recon.engine.lease import Lease
from recon.engine.outcome import Complete, Dead, Outcome
from recon.errors import ConfigError, UsageError
from recon.payout_rows import LineKind, NewPayout, NewPayoutLine, PayoutStatus
from recon.rows import Job
from recon.webhook_rows import WebhookRecord

PAYOUTS_KIND = "payouts"
PAYLOAD_KEYS = {"psp", "since", "until", "days_back", "files"}
#: the most days one job fetches
WINDOW_MAX_DAYS = 93
#: the days after today a window reaches (a payout expected tomorrow is listed already)
AROUND_DAYS = 1
#: (psp, since, until, files) -> what was fetched: ``App.fetch_payouts``
FetchFunc = Callable[[str, date, date, Sequence[str]], "FetchResult"]
#: the days back a webhook's payouts job looks: a payout fails or is reconciled within days of its arrival
NEWS_DAYS_BACK = 31


@dataclass
class FetchResult:
    new: int = 0
    same: int = 0
    changed: int = 0
    lines: int = 0
    lines_differ: list[str] = field(default_factory=list)  #: payout ids whose lines do not add up
    changes: list[str] = field(default_factory=list)  #: "po_…: amount 100 -> 90"

    def to_dict(self) -> dict[str, Any]:
        return {"new": self.new, "same": self.same, "changed": self.changed, "lines": self.lines,
                "lines_differ": self.lines_differ, "changes": self.changes}


def news_job(record: WebhookRecord, *, queue: str) -> JobSpec:
    """The payouts job a webhook's payout news queues (``recon.reconcile.webhook``): the PSP's payouts of the
    last ``NEWS_DAYS_BACK`` days and the report file the news names, where the PSP names one (Adyen); at most
    one such job waits per payout (its unique key)."""
    ref = record.psp_reference or ""
    return JobSpec(kind=PAYOUTS_KIND, queue=queue, unique_key=f"payouts:{record.psp}:{ref}"[:200],
                   payload={"psp": record.psp, "days_back": NEWS_DAYS_BACK, "files": [ref] if ref else []})


def payout_source(adapter: PspAdapter) -> PayoutSource | None:
    """The adapter as a PayoutSource, or None when its PSP lists no payouts."""
    if not isinstance(adapter, PayoutSource) or not getattr(adapter, "pays_out", True):
        return None
    return adapter


def fetch_payouts(store: PayoutStore, adapter: PspAdapter, *, psp: str, since: date, until: date,
                  files: Collection[str] = (), merchant_accounts: Collection[str] = ()) -> FetchResult:
    """Fetch ``psp``'s payouts arriving in ``[since, until)`` (and those of ``files``) and store each with its
    lines; ``merchant_accounts`` (our payments' accounts) are read besides those of the payouts stored.
    Raises UsageError when the PSP lists no payouts, PspError from the adapter."""
    source = payout_source(adapter)
    if source is None:
        raise UsageError(f"{psp}: its adapter lists no payouts")
    known = store.known_refs(psp, since=since - timedelta(days=WINDOW_MAX_DAYS))
    accounts = sorted({*merchant_accounts, *(ref.rsplit("/", 1)[0] for ref in known if "/" in ref)})
    result = FetchResult()
    for payout in source.iter_payouts(since, until, merchant_accounts=accounts, known=known, files=files):
        new = to_new_payout(psp, payout, source.payout_lines(payout))
        outcome = store.store(new)
        result.lines += len(new.lines)
        if outcome.result == "new":
            result.new += 1
        elif outcome.result == "changed":
            result.changed += 1
            result.changes.append(f"{payout.payout_id}: {'; '.join(outcome.changes)}")
        else:
            result.same += 1
        if new.lines and new.lines_net != new.amount:
            result.lines_differ.append(payout.payout_id)
    return result


def to_new_payout(psp: str, payout: PspPayout, lines: Collection[PspPayoutLine] | Any) -> NewPayout:
    """The adapter's payout and lines as the store's row (kinds and status checked by their enums)."""
    return NewPayout(
        psp=psp, merchant_account=payout.merchant_account or "", payout_ref=payout.payout_id, amount=payout.amount,
        currency=payout.currency, status=PayoutStatus(payout.status), arrival_date=payout.arrival_date,
        trace_ref=payout.trace_ref, statement_descriptor=payout.statement_descriptor,
        lines=tuple(NewPayoutLine(line_ref=ln.line_id, kind=LineKind(ln.kind), psp_reference=ln.psp_reference,
                                  merchant_reference=ln.merchant_reference, gross=ln.gross, fee=ln.fee, net=ln.net,
                                  currency=ln.currency, movement_reference=ln.movement_reference)
                    for ln in lines))


class PayoutsJob:
    """Job kind ``payouts``: on ``queue`` (``[close] queue``) when a webhook queues it, else its schedule's."""

    kind: ClassVar[str] = PAYOUTS_KIND

    def __init__(self, fetch_func: FetchFunc, *, psp_names: tuple[str, ...], queue: str | None = None,
                 clock: Clock | None = None) -> None:
        self.fetch_func, self.psp_names, self.queue = fetch_func, psp_names, queue
        self.clock = clock or SystemClock()

    def __call__(self, job: Job, lease: Lease) -> Outcome:
        try:
            psp, since, until, files = payload_window(job.payload, self.psp_names, today=self._today())
        except UsageError as exc:
            return Dead(error_kind="validation", error=str(exc))
        try:
            self.fetch_func(psp, since, until, files)
        except PspError as exc:
            return classify(exc)
        except (ConfigError, UsageError) as exc:
            return Dead(error_kind="config", error=f"{type(exc).__name__}: {exc}")
        return Complete()

    def _today(self) -> date:
        return self.clock.now().astimezone(UTC).date()


def payload_window(payload: Mapping[str, Any], psp_names: tuple[str, ...], *,
                   today: date) -> tuple[str, date, date, tuple[str, ...]]:
    """(psp, since, until, files) of a payload; UsageError naming the key that is wrong."""
    unknown_keys = sorted(set(payload) - PAYLOAD_KEYS)
    if unknown_keys:
        raise UsageError(f"{unknown_keys[0]}: unknown key (known: {', '.join(sorted(PAYLOAD_KEYS))})")
    psp = payload.get("psp")
    if psp not in psp_names:
        raise UsageError(f"psp: unknown PSP {psp!r} (known: {', '.join(psp_names)})")
    files = payload.get("files") or []
    if not isinstance(files, list) or not all(isinstance(f, str) and len(f) <= 200 for f in files) or len(files) > 50:
        raise UsageError("files: must be a list of at most 50 report file names")
    if "since" in payload or "until" in payload:
        since, until = _day(payload.get("since"), "since"), _day(payload.get("until"), "until")
    else:
        back = payload.get("days_back", 3)
        if isinstance(back, bool) or not isinstance(back, int) or not 0 <= back <= WINDOW_MAX_DAYS:
            raise UsageError(f"days_back: must be an integer from 0 to {WINDOW_MAX_DAYS}")
        since, until = today - timedelta(days=back), today + timedelta(days=AROUND_DAYS + 1)
    if not since < until or (until - since).days > WINDOW_MAX_DAYS:
        raise UsageError(f"since/until: must be a window of 1 to {WINDOW_MAX_DAYS} days")
    return str(psp), since, until, tuple(files)


def _day(value: object, key: str) -> date:
    try:
        return date.fromisoformat(str(value))
    except ValueError:
        raise UsageError(f"{key}: must be a day, YYYY-MM-DD") from None
