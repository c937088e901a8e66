"""Every SQL statement about jobs as a table: their columns and state predicates (the other job queries'
vocabulary), one job, a page of them, their history, cancel and retry, the counts. Named
``<table>_<verb>[_<guard>]``, with who runs it and why; only ``recon.db.jobs_store`` executes these. A job's
enqueue is ``recon.db.enqueue_queries``'s, its lease (claim, heartbeat, finish, rescue) ``recon.db.lease_queries``'s.
The placeholders are ``recon.db.sql.Query``'s.
"""

from __future__ import annotations

# Bandit: every "nosec B608" here marks an f-string that interpolates module constants only (column
# lists, state predicates); values always travel as bound parameters.
from typing import Any

from recon.db.database import Database, json_from_db
from recon.db.sql import Query
from recon.rows import Job, JobState

JOB_COLUMNS = (
    "id, queue, kind, payload, state, priority, run_after, attempts, max_attempts, lease_owner, lease_until, "
    "heartbeat_at, attempted_at, unique_key, last_error_kind, last_error, tenant, progress, created_at, "
    "finished_at, cancel_requested, free_attempts"
)


def job_from_row(db: Database, r: Any) -> Job:
    """A ``Job`` from a row of ``JOB_COLUMNS``, read by name."""
    m, t = r._mapping, db.from_db
    return Job(
        id=int(m["id"]), queue=m["queue"], kind=m["kind"], payload=json_from_db(m["payload"]) or {},
        state=JobState(m["state"]), priority=int(m["priority"]), run_after=t(m["run_after"]),  # type: ignore[arg-type]
        attempts=int(m["attempts"]), max_attempts=int(m["max_attempts"]), lease_owner=m["lease_owner"],
        lease_until=t(m["lease_until"]), heartbeat_at=t(m["heartbeat_at"]), attempted_at=t(m["attempted_at"]),
        unique_key=m["unique_key"], last_error_kind=m["last_error_kind"], last_error=m["last_error"],
        tenant=m["tenant"], progress=json_from_db(m["progress"]), created_at=t(m["created_at"]),  # type: ignore[arg-type]
        finished_at=t(m["finished_at"]), cancel_requested=bool(m["cancel_requested"]),
        free_attempts=int(m["free_attempts"]),
    )


CLAIMABLE = "state IN ('pending', 'runnable', 'retryable')"
FINISHED = "state IN ('succeeded', 'dead', 'canceled')"
UNIQUE_ARBITER = f"(unique_key) WHERE unique_key IS NOT NULL AND NOT {FINISHED}"


def worker_waits_for(queue: str) -> str:
    """SQL: a worker of ``queue`` (an SQL expression) waits for work (``workers.waiting``: it listens for
    wake-ups and its last claim drained its queues). The condition of every enqueue's NOTIFY (docs/design.md,
    wake-ups): a busy worker claims again without one, and a NOTIFY costs the committing enqueue the
    notification queue's lock."""
    return f"EXISTS (SELECT 1 FROM workers WHERE waiting AND workers.queues ? {queue})"  # nosec B608  # constant SQL

# --- operations ----------------------------------------------------------------------------------------------

job_get = Query("job_get", "Run by `recon jobs show` and the library API: one job.",
                sql=f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = :id")  # nosec B608  # constant SQL, values bound

job_get_many = Query("job_get_many", "Run by `recon sweep`'s summary: the jobs it enqueued.",
                     sql=f"SELECT {JOB_COLUMNS} FROM jobs WHERE id IN :ids ORDER BY id",  # nosec B608
                     expanding=("ids",))

job_attempts_for = Query(
    "job_attempts_for",
    "Run by `recon jobs show`: a job's attempt history, oldest first.",
    sql="""SELECT job_id, attempt, worker, started_at, finished_at, outcome, error_kind, error
           FROM job_attempts WHERE job_id = :id ORDER BY attempt""",
)

job_cancel_unleased = Query(
    "job_cancel_unleased",
    "Run by `recon jobs cancel`: a job that is not running is canceled at once.",
    sql=f"""UPDATE jobs SET state = 'canceled', finished_at = {{now}}, cancel_requested = TRUE
            WHERE id = :id AND {CLAIMABLE} RETURNING id""",  # nosec B608  # constant SQL, values bound
)

job_request_cancel_leased = Query(
    "job_request_cancel_leased",
    "Run by `recon jobs cancel`: a running job is told through its next heartbeat.",
    sql="UPDATE jobs SET cancel_requested = TRUE WHERE id = :id AND state = 'leased' RETURNING id",
)

job_retry_now = Query(
    "job_retry_now",
    "Run by `recon jobs retry`: a dead, canceled or waiting job becomes runnable now, with attempts to spare.",
    sql="""UPDATE jobs SET state = 'runnable', run_after = {now}, finished_at = NULL, cancel_requested = FALSE,
                max_attempts = CASE WHEN attempts >= max_attempts THEN attempts + 1 ELSE max_attempts END,
                free_attempts = attempts
            WHERE id = :id AND state IN ('dead', 'canceled', 'retryable', 'pending') RETURNING id""",
)

job_list_page = Query(
    "job_list_page",
    "Run by `recon jobs list`: one page of jobs after an id cursor, newest filters applied in SQL.",
    sql=f"""SELECT {JOB_COLUMNS} FROM jobs
            WHERE id > :after_id
              AND (CAST(:state AS TEXT) IS NULL OR state = :state)
              AND (CAST(:queue AS TEXT) IS NULL OR queue = :queue)
              AND (CAST(:kind AS TEXT) IS NULL OR kind = :kind)
            ORDER BY id LIMIT :n""",  # nosec B608  # constant SQL, values bound
)

job_stats_depth = Query(
    "job_stats_depth",
    "Run by `recon stats`: job counts per queue and state.",
    sql="SELECT queue, state, count(*) FROM jobs GROUP BY queue, state ORDER BY queue, state",
)

job_stats_depth_unfinished = Query(
    "job_stats_depth_unfinished",
    "Run by the console's overview: unfinished job counts per queue and state, read through the partial "
    "indexes of claimable and leased jobs (finished jobs, however many, are not counted).",
    sql=f"""SELECT queue, state, count(*) FROM jobs WHERE {CLAIMABLE}
            GROUP BY queue, state
            UNION ALL
            SELECT queue, 'leased', count(*) FROM jobs WHERE state = 'leased' AND lease_until IS NOT NULL
            GROUP BY queue
            UNION ALL
            SELECT queue, 'dead', count(*) FROM jobs WHERE state = 'dead'
            GROUP BY queue
            ORDER BY 1, 2""",  # nosec B608  # constant SQL, values bound
)

job_stats_oldest_runnable = Query(
    "job_stats_oldest_runnable",
    "Run by `recon stats`: per queue, the run_after of the oldest job that is due and waiting for a worker.",
    sql=f"""SELECT queue, min(run_after) FROM jobs WHERE {CLAIMABLE} AND run_after <= {{now}}
            GROUP BY queue ORDER BY queue""",  # nosec B608  # constant SQL, values bound
)

job_stats_attempt_outcomes = Query(
    "job_stats_attempt_outcomes",
    "Run by `recon stats`: attempt outcomes since a time (lease expirations, retries, deaths).",
    sql="SELECT outcome, count(*) FROM job_attempts WHERE finished_at >= :since GROUP BY outcome",
)

job_db_now = Query(
    "job_db_now",
    "Run by `recon stats`: the database clock, so ages are measured against the clock leases use.",
    sql="SELECT {now}",
)
