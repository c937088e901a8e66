"""ControlStore: per-PSP pause switch, cool-down, circuit breaker and rate-limit bucket in ``psp_controls``.

The only code that executes ``control_queries``. Every method is one short transaction, and every state
change is one conditional statement (see the queries module), so any number of workers on any number of
hosts may call these at once. Times come from the database clock on PostgreSQL (or the store's fixed clock
in tests), from the process clock on SQLite; each answer carries the ``now`` it was computed at, so callers
turn absolute times into delays without comparing clocks.

Every statement's parameters pass through ``_p``, the storage boundary (``recon.redact``): an operator's name
and reason, a PSP error's text, are redacted there, whichever statement writes them (a text compared by a
statement, the snooze reason, is redacted as the text it is compared with was).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

import sqlalchemy as sa

from recon.control_rows import Admission, FailureRecord, PspControl
from recon.db import control_queries as cq
from recon.db.database import Database
from recon.db.sql import Query
from recon.redact import redact_row

T = TypeVar("T")


class ControlStore:
    """``statements`` counts the statements executed, for the guard's cost measurement (bench/sweep.py)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.statements = 0
        self._count_lock = threading.Lock()

    # --- the guard's statements ---------------------------------------------------------------------------

    def ensure(self, psp: str) -> None:
        """Create the PSP's row if it does not exist yet (idempotent)."""
        self._run(lambda conn: conn.execute(self._q(cq.psp_control_ensure), self._p(psp=psp)))

    def admit(self, psp: str, *, rate: float | None, capacity: float, batch: int) -> Admission | None:
        """Read the PSP's state and, unless it is paused, cooling down or its breaker is not closed, take
        ``batch`` tokens (the whole tokens available when fewer; ``rate=None``: no limit, always ``batch``).
        None when the PSP has no row (call ``ensure``)."""
        row = self._run(lambda conn: conn.execute(self._q(cq.psp_control_admit), self._p(
            psp=psp, rate=rate, cap=capacity, k=batch)).first())
        if row is None:
            return None
        m, t = row._mapping, self.db.from_db
        now = t(m["db_now"])
        assert now is not None  # nosec B101  # type narrowing, not a check
        return Admission(paused=bool(m["paused"]), cooldown_until=t(m["cooldown_until"]),
                         breaker_state=m["breaker_state"], probe_at=t(m["probe_at"]), failures=int(m["failures"]),
                         granted=int(m["last_grant"]), tokens=float(m["tokens"]), now=now)

    def claim_probe(self, psp: str, *, probe_for: float) -> datetime | None:
        """Win the half-open probe slot (its expiry, the probe's token), or None when another worker has it
        or the probe time has not come."""
        value = self._run(lambda conn: conn.execute(self._q(cq.psp_control_claim_probe),
                                                    self._p(psp=psp, probe_for=probe_for)).scalar())
        return self.db.from_db(value)

    def record_failure(self, psp: str, *, threshold: int, force: bool, open_for: float,
                       reason: str) -> FailureRecord:
        """Count one failure; open the breaker when ``threshold`` consecutive failures are reached from
        closed, or at once with ``force`` (auth) from closed or half-open."""
        row = self._on_row(psp, lambda conn: conn.execute(self._q(cq.psp_control_record_failure), self._p(
            psp=psp, threshold=threshold, force=1 if force else 0, open_for=open_for, reason=reason)).first())
        m, t = row._mapping, self.db.from_db
        return FailureRecord(breaker_state=m["breaker_state"], failures=int(m["failures"]), probe_at=t(m["probe_at"]),
                             opened=m["breaker_state"] == "open" and t(m["opened_at"]) == t(m["db_now"]))

    def reopen_if_probe(self, psp: str, *, token: datetime, open_for: float, reason: str) -> datetime | None:
        """A failed probe re-opens the breaker (returns the next probe time), if the slot ``token`` is
        still its own; None otherwise."""
        value = self._run(lambda conn: conn.execute(self._q(cq.psp_control_reopen_if_probe), self._p(
            psp=psp, token=self.db.to_db(token), open_for=open_for, reason=reason)).scalar())
        return self.db.from_db(value)

    def close_if_probe(self, psp: str, *, token: datetime) -> bool:
        """A successful probe closes the breaker, if the slot ``token`` is still its own."""
        return self._run(lambda conn: conn.execute(self._q(cq.psp_control_close_if_probe), self._p(
            psp=psp, token=self.db.to_db(token))).first()) is not None

    def reset_failures(self, psp: str) -> bool:
        return self._run(lambda conn: conn.execute(self._q(cq.psp_control_reset_failures),
                                                   self._p(psp=psp)).first()) is not None

    def cool_down(self, psp: str, *, seconds: float) -> datetime:
        """Every worker backs off from the PSP until now + ``seconds`` (a later end already set stands)."""
        value = self._on_row(psp, lambda conn: conn.execute(self._q(cq.psp_control_cool_down),
                                                            self._p(psp=psp, seconds=seconds)).scalar())
        until = self.db.from_db(value)
        assert until is not None  # nosec B101  # type narrowing, not a check
        return until

    # --- operators (`recon psp …`) -------------------------------------------------------------------------

    def pause(self, psp: str, *, by: str, reason: str | None) -> None:
        self._run(lambda conn: conn.execute(self._q(cq.psp_control_pause),
                                            self._p(psp=psp, by=by, reason=reason)))

    def resume(self, psp: str, *, by: str, snooze_reason: str) -> tuple[bool, int]:
        """Un-pause (recording ``by`` and the time) and, in the same transaction, make the jobs snoozed by the
        pause (``snooze_reason``) due now. Returns (was paused, jobs woken)."""
        def run(conn: sa.Connection) -> tuple[bool, int]:
            was = conn.execute(self._q(cq.psp_control_resume), self._p(psp=psp, by=by)).first() is not None
            woken = conn.execute(self._q(cq.job_wake_snoozed_for), self._p(reason=snooze_reason)).rowcount
            return was, int(woken or 0)
        return self._run(run)

    def list_controls(self) -> tuple[list[PspControl], datetime]:
        """Every PSP row, and the database's now."""
        def run(conn: sa.Connection) -> tuple[list[Any], Any]:
            rows = conn.execute(self._q(cq.psp_control_list), self._p()).all()
            now = rows[0]._mapping["db_now"] if rows else conn.execute(self._q(cq.psp_control_db_now),
                                                                        self._p()).scalar()
            return list(rows), now
        rows, now = self._run(run)
        t = self.db.from_db
        controls = [PspControl(psp=m["psp"], paused=bool(m["paused"]), paused_by=m["paused_by"],
                               paused_at=t(m["paused_at"]), pause_reason=m["pause_reason"],
                               resumed_by=m["resumed_by"], resumed_at=t(m["resumed_at"]),
                               cooldown_until=t(m["cooldown_until"]), breaker_state=m["breaker_state"],
                               failures=int(m["failures"]), opened_at=t(m["opened_at"]), probe_at=t(m["probe_at"]),
                               breaker_reason=m["breaker_reason"], updated_at=t(m["updated_at"]))
                    for m in (r._mapping for r in rows)]
        now_dt = t(now)
        assert now_dt is not None  # nosec B101  # type narrowing, not a check
        return controls, now_dt

    # --- plumbing ----------------------------------------------------------------------------------------

    def _on_row(self, psp: str, func: Callable[[sa.Connection], T | None]) -> T:
        """Run an UPDATE … RETURNING of the PSP's row, creating the row first if it is missing."""
        result = self._run(func)
        if result is None:
            self.ensure(psp)
            result = self._run(func)
        assert result is not None  # nosec B101  # type narrowing, not a check
        return result

    def _run(self, func: Callable[[sa.Connection], T]) -> T:
        with self._count_lock:
            self.statements += 1
        with self.db.begin() as conn:
            return func(conn)

    def _p(self, **params: Any) -> dict[str, Any]:
        """A statement's parameters at the storage boundary (module docstring), with ``now``."""
        return {**redact_row(params), "now": self.db.now_param()}

    def _q(self, query: Query) -> sa.TextClause:
        return query.for_dialect(self.db.dialect)
