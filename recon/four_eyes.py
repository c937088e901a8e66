"""Four eyes: actions one operator requests and another approves (``recon approvals``, the console's
``/approvals``).

**What needs them**: resolving a payment against the PSP's answer (``--override``), a PSP pause, a replay of more
than ``[four_eyes] replay_count`` dead jobs (default 100) or of jobs whose payments and refunds add up to more than
``[four_eyes.replay_amount]`` in a currency (minor units per ISO-4217 code, default 10,000 EUR, USD, GBP and JPY;
a currency not listed has no amount limit), and a bulk resolve of more than ``bulk_resolve_count`` payments
(default 10; the bulk resolve registers its executor with ``FourEyes.register``). The request is stored
with what will run (``payload``) and is audited; it is **pending** until an approver (role approver or admin)
other than the requester approves or rejects it, or ``[four_eyes] expires_after`` passes (default 24 hours,
between 5 minutes and 7 days): then it is **expired** and nothing runs.

**One winner.** A decision is one compare-and-set (``state = 'pending' AND expires_at > now AND requested_by <>
:by``): of two approvals at once exactly one matches, the other is told the request was decided already (the table
refuses a decider equal to the requester as well). The action then runs as the requester, with the approver
recorded beside them; its outcome is stored in ``result`` (state ``approved``) or, when it fails, ``failed`` with
the reason. Hazard: a process that dies between the decision and the action's end leaves an approved request
without a result; the audit trail shows whether the action ran.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from recon.audit import entry
from recon.config import unknown
from recon.db.approval_store import ApprovalStore
from recon.db.audit_store import AuditStore
from recon.db.control_store import ControlStore
from recon.db.database import Database
from recon.db.jobs_store import JobStore
from recon.durations import parse_duration
from recon.engine.replay import replay
from recon.errors import ConfigError, NotAllowed, ReconError, UsageError
from recon.operator_rows import Approval, ApprovalState, Role
from recon.payments import guard
from recon.payments.money import MINOR_UNITS, format_amount
from recon.review import ReviewDesk
from recon.rows import JobFilter

log = logging.getLogger(__name__)

EXPIRES_DEFAULT = timedelta(hours=24)
REPLAY_COUNT_DEFAULT = 100
BULK_RESOLVE_COUNT_DEFAULT = 10
#: ISO-4217 code -> minor units: a replay moving more than this in the currency needs four eyes (10,000 of each)
REPLAY_AMOUNT_DEFAULT = {"EUR": 1_000_000, "USD": 1_000_000, "GBP": 1_000_000, "JPY": 1_000_000}
#: the largest amount threshold, in minor units (ten times the largest amount a payment may have is far below it)
AMOUNT_MAX = 10**15
_KEYS = {"expires_after", "replay_count", "bulk_resolve_count", "replay_amount"}

#: (the approved request, its approver) -> what it did, one line
Executor = Callable[[Approval, str], str]


@dataclass(frozen=True, slots=True)
class FourEyesConfig:
    """``[four_eyes]``: ``expires_after`` (5m to 7d), ``replay_count`` and ``bulk_resolve_count`` (0 to 10^6: more
    than this many need an approval; 0: every one); ``[four_eyes.replay_amount]``: ISO-4217 code -> minor units (0
    to 10^15: a replay whose jobs' payments and refunds add up to more in that currency needs an approval; the
    table replaces ``REPLAY_AMOUNT_DEFAULT`` whole, so an empty one turns the amount rule off)."""

    expires_after: timedelta = EXPIRES_DEFAULT
    replay_count: int = REPLAY_COUNT_DEFAULT
    bulk_resolve_count: int = BULK_RESOLVE_COUNT_DEFAULT
    replay_amount: dict[str, int] = field(default_factory=lambda: dict(REPLAY_AMOUNT_DEFAULT))

    def amount_over(self, totals: Mapping[str, int]) -> str | None:
        """The first currency (by code) whose total is over its ``replay_amount``, as a phrase for the request's
        subject ("12,000.00 EUR over 10,000.00 EUR"); None when every currency is within its threshold."""
        for currency in sorted(totals):
            limit = self.replay_amount.get(currency)
            if limit is not None and totals[currency] > limit:
                return (f"{format_amount(totals[currency], currency, grouped=True)} over "
                        f"{format_amount(limit, currency, grouped=True)}")
        return None

    @classmethod
    def load(cls, table: Mapping[str, Any] | None, *, source: str = "config") -> FourEyesConfig:
        table = dict(table or {})
        where = f"{source}: four_eyes"
        for key in table:
            if key not in _KEYS:
                raise unknown("key", key, _KEYS, f"{where}.")
        expires = EXPIRES_DEFAULT
        if "expires_after" in table:
            value = table["expires_after"]
            try:
                expires = parse_duration(str(value)) if isinstance(value, str) else timedelta(-1)
            except UsageError:
                expires = timedelta(-1)
            if not timedelta(minutes=5) <= expires <= timedelta(days=7):
                raise ConfigError(f"{where}.expires_after: a duration between 5m and 7d, got {value!r}")
        counts = {}
        for key, default in (("replay_count", REPLAY_COUNT_DEFAULT), ("bulk_resolve_count",
                                                                      BULK_RESOLVE_COUNT_DEFAULT)):
            value = table.get(key, default)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1_000_000:
                raise ConfigError(f"{where}.{key}: an integer from 0 to 1000000, got {value!r}")
            counts[key] = value
        amounts = _amounts(table.get("replay_amount", REPLAY_AMOUNT_DEFAULT), where)
        return cls(expires_after=expires, replay_amount=amounts, **counts)


def _amounts(table: Any, where: str) -> dict[str, int]:
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}.replay_amount: a table of ISO-4217 code = minor units, got {table!r}")
    out = {}
    for code, value in table.items():
        if code not in MINOR_UNITS:
            raise ConfigError(f"{where}.replay_amount.{code}: not an ISO-4217 currency code (upper case, e.g. EUR)")
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= AMOUNT_MAX:
            raise ConfigError(f"{where}.replay_amount.{code}: an integer of minor units from 0 to {AMOUNT_MAX}, "
                              f"got {value!r}")
        out[code] = value
    return out


class Desk(Protocol):
    """What the executors need of the App (recon.app.App is one)."""

    @property
    def db(self) -> Database: ...
    @property
    def review(self) -> ReviewDesk: ...
    @property
    def controls(self) -> ControlStore: ...
    @property
    def jobs(self) -> JobStore: ...
    @property
    def audit(self) -> AuditStore: ...


class FourEyes:
    """Requests, decisions and the executors of approved actions (module docstring)."""

    def __init__(self, desk: Desk, config: FourEyesConfig) -> None:
        self.desk = desk
        self.config = config
        self.store = ApprovalStore(desk.db)
        self.executors: dict[str, Executor] = {
            "review.resolve": self._resolve, "psp.pause": self._pause, "jobs.replay": self._replay}

    def register(self, action: str, executor: Executor) -> None:
        """Another four-eyes action (the bulk resolve): what runs when a request for ``action`` is approved."""
        self.executors[action] = executor

    def request(self, action: str, subject: str, payload: dict[str, Any], *, by: str) -> Approval:
        """A pending request by operator ``by`` (already authorized for the action), audited."""
        if action not in self.executors:
            raise ValueError(f"no four-eyes executor for {action!r}")
        with self.desk.db.begin() as conn:
            approval = self.store.insert(conn, action=action, subject=subject, payload=payload, requested_by=by,
                                         ttl=self.config.expires_after)
            self.desk.audit.append(conn, [entry(by, action, subject, "requested", approval=approval.id,
                                                payload=payload)])
        return approval

    def in_state(self, state: ApprovalState = ApprovalState.PENDING, *, limit: int = 200) -> list[Approval]:
        self.expire()
        with self.desk.db.autocommit() as conn:
            return self.store.in_state(conn, state, limit=limit)

    def get(self, approval_id: int) -> Approval:
        self.expire()
        with self.desk.db.autocommit() as conn:
            found = self.store.get(conn, approval_id)
        if found is None:
            raise UsageError(f"approval {approval_id}: no such request (recon approvals list)")
        return found

    def expire(self) -> list[Approval]:
        """Pending requests past their time become expired, each audited."""
        with self.desk.db.begin() as conn:
            expired = self.store.expire(conn)
            self.desk.audit.append(conn, [entry("system:four_eyes", a.action, a.subject, "expired", approval=a.id,
                                                requested_by=a.requested_by) for a in expired])
        return expired

    def approve(self, approval_id: int, *, by: str) -> Approval:
        """Approve and run it (``by`` authorized as an approver, not the requester). UsageError when it is not
        pending any more (decided by someone else first, or expired) or is ``by``'s own."""
        decided = self._decide(approval_id, ApprovalState.APPROVED, by=by)
        try:
            result, failed = self.executors[decided.action](decided, by), False
        except ReconError as exc:
            result, failed = f"{type(exc).__name__}: {exc}", True
        with self.desk.db.begin() as conn:
            self.store.set_result(conn, decided.id, failed=failed, result=result)
            self.desk.audit.append(conn, [entry(by, decided.action, decided.subject, "failed" if failed else "done",
                                                approval=decided.id, requested_by=decided.requested_by,
                                                result=result)])
        return self.get(decided.id)

    def reject(self, approval_id: int, *, by: str) -> Approval:
        return self._decide(approval_id, ApprovalState.REJECTED, by=by)

    def _decide(self, approval_id: int, state: ApprovalState, *, by: str) -> Approval:
        self.expire()
        verb = "approve" if state is ApprovalState.APPROVED else "reject"
        with self.desk.db.begin() as conn:
            decided = self.store.decide(conn, approval_id, state=state, by=by)
            if decided is None:
                current = self.store.get(conn, approval_id)
            else:
                self.desk.audit.append(conn, [entry(by, decided.action, decided.subject, str(state),
                                                    approval=decided.id, requested_by=decided.requested_by)])
                return decided
        if current is None:
            raise UsageError(f"approval {approval_id}: no such request (recon approvals list)")
        if current.requested_by == by:
            raise NotAllowed(f"approval {approval_id}: requested by {by}; another approver must {verb} it "
                             "(four eyes)")
        raise UsageError(f"approval {approval_id}: not pending any more ({current.state}"
                         + (f" by {current.decided_by}" if current.decided_by else "") + "); nothing done")

    # --- the executors -------------------------------------------------------------------------------------

    def _resolve(self, approval: Approval, approver: str) -> str:
        p = approval.payload
        done = self.desk.review.resolve(p["reference"], to=p["to"], reason=p["reason"], by=approval.requested_by,
                                        override=True, approved_by=approver, difference=p.get("difference"))
        return f"payment {p['reference']} resolved as {done.payment.status} (an override, approved by {approver})"

    def _pause(self, approval: Approval, approver: str) -> str:
        p = approval.payload
        guard.pause(self.desk.controls, p["psp"], by=f"{approval.requested_by} (approved by {approver})",
                    reason=p.get("reason"))
        return f"psp {p['psp']} paused"

    def _replay(self, approval: Approval, approver: str) -> str:
        p = approval.payload
        since = datetime.fromisoformat(p["finished_since"]) if p.get("finished_since") else None
        filters = JobFilter(queue=p.get("queue"), kind=p.get("kind"), error_kind=p.get("error_kind"),
                            finished_since=since)
        run = replay(self.desk.jobs, filters, budget=int(p["budget"]),
                     limit=int(p["limit"]) if p.get("limit") is not None else None,
                     operator=f"{approval.requested_by} (approved by {approver})")
        return f"replayed {len(run.replayed)} dead jobs; {len(run.skipped)} left dead (their unique key is held)"


def needs_approver(role: Role) -> bool:
    """Whether ``role`` may decide another's request."""
    return role.allows(Role.APPROVER)


def replay_payload(filters: JobFilter, *, budget: int, limit: int | None) -> dict[str, Any]:
    """What a replay request stores: its filters, the attempts it adds and how many jobs it may move at most."""
    return {"queue": filters.queue, "kind": filters.kind, "error_kind": filters.error_kind,
            "finished_since": filters.finished_since.isoformat() if filters.finished_since else None,
            "budget": budget, "limit": limit}
