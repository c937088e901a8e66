"""The SQL of the workers table and the pool's metrics (recon.metrics, `recon stats`); only
``recon.db.pool_store`` executes these. Placeholders as in ``recon.db.sql``."""

from __future__ import annotations

# Bandit: every "nosec B608" here marks an f-string that interpolates module constants only (column
# lists, state predicates); values always travel as bound parameters.
from recon.db.sql import Query

WORKER_COLUMNS = "id, host, pid, queues, slots, busy_slots, started_at, last_seen_at, stopped_at, counters"

worker_upsert = Query(
    "worker_upsert",
    "Run by a worker's presence thread every few seconds: its row in the pool, with its cumulative counters.",
    sql="""
        INSERT INTO workers (id, host, pid, queues, slots, busy_slots, started_at, last_seen_at, stopped_at,
                             counters)
        VALUES (:id, :host, :pid, {json:queues}, :slots, :busy_slots, {now}, {now},
                CASE WHEN :stopped = 1 THEN {now} END, {json:counters})
        ON CONFLICT (id) DO UPDATE SET
            queues = excluded.queues, slots = excluded.slots, busy_slots = excluded.busy_slots,
            last_seen_at = excluded.last_seen_at, stopped_at = coalesce(workers.stopped_at, excluded.stopped_at),
            counters = excluded.counters, waiting = workers.waiting AND excluded.stopped_at IS NULL
    """,
)

worker_set_waiting = Query(
    "worker_set_waiting",
    "Run by a listening worker's claim loop when its claims drain its queues (true) or come back full (false): "
    "whether enqueues NOTIFY it (jobs_queries.worker_waits_for).",
    sql="UPDATE workers SET waiting = :waiting WHERE id = :id AND waiting <> :waiting",
)

worker_delete_not_seen_since = Query(
    "worker_delete_not_seen_since",
    "Run by a worker as it starts: rows of workers not seen for the retention period are forgotten.",
    sql="DELETE FROM workers WHERE last_seen_at < {now} - {secs:retention}",
)

worker_list_seen_since = Query(
    "worker_list_seen_since",
    "Run by the metrics endpoint and `recon stats`: the workers seen since :since, oldest first.",
    sql=f"SELECT {WORKER_COLUMNS} FROM workers WHERE last_seen_at >= :since ORDER BY started_at, id",  # nosec B608
)

job_stats_depth_detail = Query(
    "job_stats_depth_detail",
    "Run by the metrics endpoint and `recon stats`: unfinished jobs per queue, kind, tenant, priority, state",
    sql="""SELECT queue, kind, coalesce(tenant, '') AS tenant, priority, state, count(*) AS n FROM jobs
           WHERE state IN ('pending', 'runnable', 'retryable', 'leased')
           GROUP BY queue, kind, coalesce(tenant, ''), priority, state ORDER BY 1, 2, 3, 4, 5""",
)

job_attempt_stats_by_kind = Query(
    "job_attempt_stats_by_kind",
    "Run by `recon stats`: attempts ended since :since per kind and outcome, with their attempt numbers.",
    sql="""SELECT j.kind, a.outcome, count(*) AS n, sum(a.attempt) AS attempts, max(a.attempt) AS most
           FROM job_attempts a JOIN jobs j ON j.id = a.job_id
           WHERE a.finished_at >= :since GROUP BY j.kind, a.outcome ORDER BY 1, 2""",
)

# Nearest-rank percentiles in portable SQL (SQLite has no percentile_cont): rank ceil(p * n) is
# (100p * n + 99) / 100 in integer arithmetic. Attempts a handler ended are timed, claim to finish commit;
# lease_expired and released attempts measure the lease, not the work, and are left out.
_ATTEMPT_DURATIONS = """
    WITH d AS (
        SELECT j.kind, {duration} AS secs FROM job_attempts a JOIN jobs j ON j.id = a.job_id
        WHERE a.finished_at >= :since AND a.started_at IS NOT NULL
          AND a.outcome IN ('succeeded', 'retried', 'snoozed', 'dead', 'canceled')
    ), ranked AS (
        SELECT kind, secs, row_number() OVER (PARTITION BY kind ORDER BY secs) AS rn,
               count(*) OVER (PARTITION BY kind) AS n
        FROM d
    )
    SELECT kind, max(n) AS n, max(CASE WHEN rn = (50 * n + 99) / 100 THEN secs END) AS p50,
           max(CASE WHEN rn = (95 * n + 99) / 100 THEN secs END) AS p95, max(secs) AS most, sum(secs) AS total
    FROM ranked GROUP BY kind ORDER BY kind
"""

job_attempt_stats_durations = Query(
    "job_attempt_stats_durations",
    "Run by `recon stats`: per kind, the count, p50, p95, max and sum of attempt durations since :since.",
    postgresql=_ATTEMPT_DURATIONS.replace(
        "{duration}", "CAST(extract(epoch FROM a.finished_at - a.started_at) AS double precision)"),
    sqlite=_ATTEMPT_DURATIONS.replace("{duration}", "(a.finished_at - a.started_at) / 1000000.0"),
)
