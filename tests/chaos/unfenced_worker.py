"""The chaos suite's planted bug, as a test-only entry point: ``python -m tests.chaos.unfenced_worker ARGS``
runs ``recon ARGS`` with fencing removed, so that the suite can prove its invariants catch exactly that.

Finishes ignore the lease (no owner + attempt check: a stale worker's answer overwrites a newer one), and
payment transitions ignore the expected status (no compare-and-set). Nothing in the shipped package can
switch fencing off: this module swaps the fenced statements for unfenced ones in its own process only.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa

from recon.db.jobs_store import JobStore
from recon.db.payment_store import PaymentStore
from recon.db.sql import Query
from recon.rows import Finish, Transition, check_transition

job_finish_one_unfenced = Query(
    "job_finish_one_unfenced",
    "UNSAFE, the planted bug: ends an attempt without checking that the lease is still ours.",
    sql="""
        UPDATE jobs SET state = :state, lease_owner = NULL, lease_until = NULL,
            run_after = CASE WHEN CAST(:delay AS REAL) IS NULL THEN run_after
                             ELSE {now} + {secs:delay} END,
            finished_at = CASE WHEN :state IN ('succeeded', 'dead', 'canceled') THEN {now} END,
            last_error_kind = coalesce(:error_kind, last_error_kind), last_error = coalesce(:error, last_error),
            max_attempts = max_attempts + :bump, free_attempts = free_attempts + :bump
        WHERE id = :id
        RETURNING attempted_at, state
    """,
)

job_attempt_insert_unfenced = Query(
    "job_attempt_insert_unfenced",
    "UNSAFE, the planted bug: a history row that silently yields to an existing one.",
    sql="""
        INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome, error_kind, error)
        VALUES (:id, :attempt, :worker, :started_at, {now}, :outcome, :error_kind, :error)
        ON CONFLICT (job_id, attempt) DO NOTHING
    """,
)

payment_transition_unfenced = Query(
    "payment_transition_unfenced",
    "UNSAFE, the planted bug: a payment status write without compare-and-set.",
    sql="""
        UPDATE payments SET status = :to_status, updated_at = {now},
            psp_reference = coalesce(:psp_reference, psp_reference),
            failure_reason = coalesce(:failure_reason, failure_reason),
            review_reason = coalesce(:review_reason, review_reason)
        WHERE id = :id AND CAST(:from_status AS TEXT) IS NOT NULL
        RETURNING id
    """,
)


def finish_unfenced(self: JobStore, *, worker: str, finishes: Sequence[Finish],
                    write: Callable[[sa.Connection], Any] | None = None, via: Any = None) -> set[int]:
    """JobStore.finish without the lease check: every finish "matches", whoever holds the lease now."""
    with self.db.begin() as conn:
        now = self.db.now_param()
        for f in finishes:
            row = conn.execute(job_finish_one_unfenced.for_dialect(self.db.dialect),
                               f.row() | {"worker": worker, "now": now}).first()
            if row is not None:
                conn.execute(job_attempt_insert_unfenced.for_dialect(self.db.dialect),
                             {"id": f.id, "attempt": f.attempt, "worker": worker, "started_at": row[0],
                              "now": now, "outcome": f.outcome, "error_kind": f.error_kind, "error": f.error})
        if write is not None and finishes:
            write(conn)
    return {f.id for f in finishes}


def apply_unfenced(self: PaymentStore, conn: sa.Connection, t: Transition) -> bool:
    """PaymentStore.apply without compare-and-set: the status is written whatever it is now."""
    check_transition(t.from_status, t.to_status)
    row = conn.execute(payment_transition_unfenced.for_dialect(self.db.dialect), {
        "id": t.payment_id, "from_status": str(t.from_status), "to_status": str(t.to_status),
        "psp_reference": t.psp_reference, "failure_reason": t.failure_reason, "review_reason": t.review_reason,
        "now": self.db.now_param()}).first()
    if row is None:
        return False
    self._events(conn, [dict(payment_id=t.payment_id, from_status=str(t.from_status), to_status=str(t.to_status),
                             source=str(t.source), job_id=t.job_id, attempt=t.attempt, details=t.details)])
    return True


def remove_fencing() -> None:
    JobStore.finish = finish_unfenced  # type: ignore[method-assign]
    PaymentStore.apply = apply_unfenced  # type: ignore[method-assign]


if __name__ == "__main__":
    remove_fencing()
    from recon.cli import main

    print("tests.chaos.unfenced_worker: fencing is OFF (the chaos suite's planted bug)", file=sys.stderr)
    main(sys.argv[1:])
