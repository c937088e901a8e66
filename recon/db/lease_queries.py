"""Every SQL statement about a job's lease: the claim, heartbeats, progress checkpoints, the fenced finishes and
their attempt history, and the stuck watcher's rescue of expired leases. Every write after a claim is fenced by
``id + lease_owner + attempts``. Only ``recon.db.lease_store`` executes these; the placeholders are
``recon.db.sql.Query``'s.
"""

from __future__ import annotations

# Bandit: every "nosec B608" here marks an f-string that interpolates module constants only (column
# lists, state predicates); values always travel as bound parameters.
from recon.db.jobs_queries import CLAIMABLE
from recon.db.sql import Query

#: what a claim returns: only what a handler may read (the rest is known: state leased, owner = the worker). The
#: claim loop unpacks its rows by these names, in this order (``recon.db.lease_store.claimed_job``)
CLAIM_FIELDS = ("id", "queue", "kind", "payload", "priority", "run_after", "attempts", "max_attempts", "lease_until",
                "unique_key", "tenant", "progress", "created_at", "last_error_kind", "free_attempts")
CLAIM_COLUMNS = ", ".join(CLAIM_FIELDS)
#: the same on PostgreSQL, with the JSON documents as text: psycopg's jsonb loader hands json.loads bytes,
#: whose encoding detection cost more than twice the store's own json.loads of text (docs/benchmarks.md)
CLAIM_COLUMNS_PG = CLAIM_COLUMNS.replace(" payload,", " CAST(payload AS text) AS payload,").replace(
    " progress,", " CAST(progress AS text) AS progress,")

_CLAIM_SET = """
    SET state = 'leased', lease_owner = :worker, lease_until = {now} + {secs:ttl},
        heartbeat_at = {now}, attempted_at = {now}, attempts = attempts + 1
"""

job_claim_available = Query(
    "job_claim_available",
    "Run by a worker's claim loop: leases up to :n due jobs of its queues in one atomic statement.",
    # "= ANY(ARRAY(...))", not "IN (...)": the update then always finds its rows by primary key. With IN,
    # the plan that PostgreSQL caches for the prepared statement guesses that LIMIT :n means a tenth of the
    # table and hash-joins a sequential scan of jobs, several times slower than the primary key, so it kept
    # planning every claim afresh (docs/benchmarks.md, how recon got here).
    postgresql=f"""
        UPDATE jobs {_CLAIM_SET}
        WHERE id = ANY(ARRAY(
            SELECT id FROM jobs
            WHERE {CLAIMABLE} AND queue IN :queues AND run_after <= {{now}} AND NOT cancel_requested
            ORDER BY priority DESC, run_after, id
            LIMIT :n
            FOR UPDATE SKIP LOCKED))
        RETURNING {CLAIM_COLUMNS_PG}
    """,  # nosec B608  # constant SQL, values bound
    # SQLite: the store runs this inside BEGIN IMMEDIATE, which holds the database's single write lock.
    sqlite=f"""
        UPDATE jobs {_CLAIM_SET}
        WHERE id IN (
            SELECT id FROM jobs
            WHERE {CLAIMABLE} AND queue IN :queues AND run_after <= {{now}} AND NOT cancel_requested
            ORDER BY priority DESC, run_after, id
            LIMIT :n)
        RETURNING {CLAIM_COLUMNS}
    """,  # nosec B608  # constant SQL, values bound
    expanding=("queues",),
)

job_extend_leases_if_owner = Query(
    "job_extend_leases_if_owner",
    "Run by a worker's heartbeat thread: extends every lease it still holds; a missing id is a lost lease.",
    postgresql="""
        UPDATE jobs SET lease_until = {now} + {secs:ttl}, heartbeat_at = {now}
        FROM (SELECT unnest(CAST(:ids AS bigint[])) AS id, unnest(CAST(:attempts AS int[])) AS attempt) AS l
        WHERE jobs.id = ANY(CAST(:ids AS bigint[])) AND jobs.id = l.id AND jobs.attempts = l.attempt
          AND jobs.lease_owner = :worker
          AND jobs.state = 'leased'
        RETURNING jobs.id, jobs.cancel_requested
    """,
    sqlite="""
        UPDATE jobs SET lease_until = {now} + {secs:ttl}, heartbeat_at = {now}
        WHERE lease_owner = :worker AND state = 'leased'
          AND (id, attempts) IN (SELECT value ->> '$[0]', value ->> '$[1]' FROM json_each(:pairs))
        RETURNING id, cancel_requested
    """,
)

job_list_leased_by = Query(
    "job_list_leased_by",
    "Run by a worker's claim loop after a claim whose commit it never heard of: every lease it holds.",
    sql="SELECT id, attempts FROM jobs WHERE lease_until IS NOT NULL AND lease_owner = :worker AND state = 'leased'",
)

job_save_progress_if_owner = Query(
    "job_save_progress_if_owner",
    "Run by a handler through its lease: stores a resume checkpoint, fenced like every write after a claim.",
    sql="""
        UPDATE jobs SET progress = {json:progress}
        WHERE id = :id AND lease_owner = :worker AND attempts = :attempt AND state = 'leased'
    """,
)

job_is_leased_by = Query(
    "job_is_leased_by",
    "Run inside a finish transaction by domain writes that must be fenced: is the lease still ours?",
    sql="SELECT 1 FROM jobs WHERE id = :id AND lease_owner = :worker AND attempts = :attempt AND state = 'leased'",
)

# Finishing: a row per job with its target state. run_after is {now} + delay. A cancel requested while
# the job ran turns a retry or snooze into canceled. bump raises max_attempts by one for outcomes that do
# not spend an attempt (snooze, release).
_FINISH_STATE = (
    "CASE WHEN jobs.cancel_requested AND {target} IN ('retryable', 'pending', 'runnable') "
    "THEN 'canceled' ELSE {target} END"
)

job_finish_many_if_owner = Query(
    "job_finish_many_if_owner",
    "Run by a worker's finisher: ends a batch of attempts, fenced by owner + attempt, and records history.",
    postgresql=f"""
        WITH v AS (
            SELECT * FROM jsonb_to_recordset({{json:rows}}) AS v(id bigint, attempt int, state text,
                 delay double precision, outcome text, error_kind text, error text, bump int)
        ), done AS (
            UPDATE jobs SET
                state = {_FINISH_STATE.format(target="v.state")},
                run_after = CASE WHEN v.delay IS NULL THEN jobs.run_after
                                 ELSE {{now}} + make_interval(secs => v.delay) END,
                finished_at = CASE WHEN v.state IN ('succeeded', 'dead', 'canceled') OR jobs.cancel_requested
                                   THEN {{now}} END,
                lease_owner = NULL, lease_until = NULL,
                last_error_kind = coalesce(v.error_kind, jobs.last_error_kind),
                last_error = coalesce(v.error, jobs.last_error),
                max_attempts = jobs.max_attempts + v.bump, free_attempts = jobs.free_attempts + v.bump
            FROM v
            -- "= ANY(:ids)" lets the planner drive the update from the primary key (it knows the array's
            -- length); joined on v alone, it estimates one leased row for the worker and may scan the
            -- whole table. Its nested loop over v is quadratic in the batch: the worker's finisher turns
            -- nested loops off for its session (JobStore.dedicated) and gets a hash join.
            WHERE jobs.id = ANY(CAST(:ids AS bigint[])) AND jobs.id = v.id AND jobs.attempts = v.attempt
              AND jobs.lease_owner = :worker AND jobs.state = 'leased'
            RETURNING jobs.id, jobs.attempts, jobs.attempted_at, jobs.state, v.outcome, v.error_kind, v.error
        ), history AS (
            INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome, error_kind, error)
            SELECT id, attempts, :worker, attempted_at, {{now}},
                   CASE WHEN state = 'canceled' THEN 'canceled' ELSE outcome END, error_kind, error
            FROM done
        )
        SELECT id FROM done
    """,  # nosec B608  # constant SQL, values bound
)

job_attempt_insert_many_if_owner_sqlite = Query(
    "job_attempt_insert_many_if_owner_sqlite",
    "Run by a worker's finisher on SQLite, just before job_finish_many_if_owner_sqlite in the same transaction: "
    "the history rows of the batch's attempts whose lease still matches (the ones that update will end).",
    # the outcome is 'canceled' when the update will make the job canceled (_FINISH_STATE), as PostgreSQL's
    # history CTE reads it from the updated row
    sqlite=f"""
        INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome, error_kind, error)
        SELECT jobs.id, jobs.attempts, :worker, jobs.attempted_at, :now,
               CASE WHEN {_FINISH_STATE.format(target="v.value ->> '$.state'")} = 'canceled' THEN 'canceled'
                    ELSE v.value ->> '$.outcome' END,
               v.value ->> '$.error_kind', v.value ->> '$.error'
        FROM json_each(:rows) AS v JOIN jobs ON jobs.id = v.value ->> '$.id'
        WHERE jobs.attempts = v.value ->> '$.attempt' AND jobs.lease_owner = :worker AND jobs.state = 'leased'
    """,  # nosec B608  # constant SQL, values bound
)

job_finish_succeeded_if_owner_sqlite = Query(
    "job_finish_succeeded_if_owner_sqlite",
    "Run by a worker's finisher on SQLite for a batch's plain successes (its dedicated connection, inside "
    "BEGIN IMMEDIATE): their history rows, then job_finish_succeeded_if_owner's update, the same fence.",
    # two statements in one string would not run through sqlite3's execute: the store runs the two halves
    sqlite="""
        INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome)
        SELECT jobs.id, jobs.attempts, :worker, jobs.attempted_at, :now, 'succeeded'
        FROM json_each(:pairs) AS v JOIN jobs ON jobs.id = v.value ->> '$[0]'
        WHERE jobs.attempts = v.value ->> '$[1]' AND jobs.lease_owner = :worker AND jobs.state = 'leased'
    """,
)

job_finish_succeeded_update_sqlite = Query(
    "job_finish_succeeded_update_sqlite",
    "Run by a worker's finisher on SQLite right after job_finish_succeeded_if_owner_sqlite: ends those attempts.",
    # a success is never turned into canceled and leaves run_after, the last error and the budget alone. Joined
    # to the pairs (UPDATE ... FROM: each pair finds its job by primary key), not "(id, attempts) IN (SELECT ...)",
    # which read the pairs' JSON twice and built two temporary b-trees of them: 0.4-0.7 us a job more
    # (docs/benchmarks.md, "SQLite drain, CPU per job (fourth pass)")
    sqlite="""
        UPDATE jobs SET state = 'succeeded', finished_at = :now, lease_owner = NULL, lease_until = NULL
        FROM json_each(:pairs) AS v
        WHERE jobs.id = v.value ->> '$[0]' AND jobs.attempts = v.value ->> '$[1]'
          AND jobs.lease_owner = :worker AND jobs.state = 'leased'
        RETURNING jobs.id
    """,
)

job_finish_many_if_owner_sqlite = Query(
    "job_finish_many_if_owner_sqlite",
    "Run by a worker's finisher on SQLite (its dedicated connection, inside BEGIN IMMEDIATE): ends a batch of "
    "attempts, fenced by owner + attempt; the store writes the history rows of those it returns.",
    # job_finish_many_if_owner's update, without the data-modifying CTE SQLite lacks: its history rows were
    # written by job_attempt_insert_many_if_owner_sqlite, under the same fence, in the same transaction
    sqlite=f"""
        UPDATE jobs SET
            state = {_FINISH_STATE.format(target="v.state")},
            run_after = CASE WHEN v.delay IS NULL THEN jobs.run_after
                             ELSE :now + CAST(v.delay * 1000000 AS INTEGER) END,
            finished_at = CASE WHEN v.state IN ('succeeded', 'dead', 'canceled') OR jobs.cancel_requested
                               THEN :now END,
            lease_owner = NULL, lease_until = NULL,
            last_error_kind = coalesce(v.error_kind, jobs.last_error_kind),
            last_error = coalesce(v.error, jobs.last_error),
            max_attempts = jobs.max_attempts + v.bump, free_attempts = jobs.free_attempts + v.bump
        FROM (SELECT value ->> '$.id' AS id, value ->> '$.attempt' AS attempt, value ->> '$.state' AS state,
                     value ->> '$.delay' AS delay, value ->> '$.error_kind' AS error_kind,
                     value ->> '$.error' AS error, value ->> '$.bump' AS bump
              FROM json_each(:rows)) AS v
        WHERE jobs.id = v.id AND jobs.attempts = v.attempt AND jobs.lease_owner = :worker AND jobs.state = 'leased'
        RETURNING id
    """,  # nosec B608  # constant SQL, values bound
)

job_finish_succeeded_if_owner = Query(
    "job_finish_succeeded_if_owner",
    "Run by a worker's finisher on PostgreSQL for the plain successes of a batch (no error, delay or bump): "
    "job_finish_many_if_owner's effect on them, fenced the same way, in fewer steps.",
    # A success is never turned into canceled (_FINISH_STATE only turns retries, snoozes and releases) and
    # leaves run_after, the last error and the attempt budget alone: this statement writes only what changes
    # and takes the batch as two arrays, not a JSON document to take apart (which was a large share of the
    # finish's server CPU: docs/benchmarks.md)
    postgresql="""
        WITH done AS (
            UPDATE jobs SET state = 'succeeded', finished_at = {now}, lease_owner = NULL, lease_until = NULL
            FROM unnest(CAST(:ids AS bigint[]), CAST(:attempts AS int[])) AS v(id, attempt)
            WHERE jobs.id = ANY(CAST(:ids AS bigint[])) AND jobs.id = v.id AND jobs.attempts = v.attempt
              AND jobs.lease_owner = :worker AND jobs.state = 'leased'
            RETURNING jobs.id, jobs.attempts, jobs.attempted_at
        ), history AS (
            INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome)
            SELECT id, attempts, :worker, attempted_at, {now}, 'succeeded' FROM done
        )
        SELECT id FROM done
    """,
)

job_finish_one_if_owner = Query(
    "job_finish_one_if_owner",
    "Run by a worker's finisher on SQLite (no data-modifying CTEs): ends one attempt, fenced.",
    sqlite=f"""
        UPDATE jobs SET
            state = {_FINISH_STATE.format(target=":state")},
            run_after = CASE WHEN :delay IS NULL THEN run_after ELSE :now + CAST(:delay * 1000000 AS INTEGER) END,
            finished_at = CASE WHEN :state IN ('succeeded', 'dead', 'canceled') OR cancel_requested
                               THEN :now END,
            lease_owner = NULL, lease_until = NULL,
            last_error_kind = coalesce(:error_kind, last_error_kind),
            last_error = coalesce(:error, last_error),
            max_attempts = max_attempts + :bump, free_attempts = free_attempts + :bump
        WHERE id = :id AND attempts = :attempt AND lease_owner = :worker AND state = 'leased'
        RETURNING attempted_at, state
    """,  # nosec B608  # constant SQL, values bound
)

job_attempt_insert = Query(
    "job_attempt_insert",
    "Run in the same transaction as an attempt's end (SQLite finish, watcher): one history row per claim.",
    sql="""
        INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome, error_kind, error)
        VALUES (:id, :attempt, :worker, :started_at, :now, :outcome, :error_kind, :error)
    """,
)

# --- the stuck watcher ---------------------------------------------------------------------------------------

job_rescue_expired = Query(
    "job_rescue_expired",
    "Run by the stuck watcher: leases that expired go back to retryable, or dead when attempts are spent.",
    postgresql="""
        WITH expired AS (
            SELECT id, lease_owner, attempts, attempted_at FROM jobs
            WHERE state = 'leased' AND lease_until < {now}
            ORDER BY id LIMIT :n
            FOR UPDATE SKIP LOCKED
        ), done AS (
            UPDATE jobs SET
                state = CASE WHEN jobs.cancel_requested THEN 'canceled'
                             WHEN jobs.attempts >= jobs.max_attempts THEN 'dead' ELSE 'retryable' END,
                finished_at = CASE WHEN jobs.cancel_requested OR jobs.attempts >= jobs.max_attempts
                                   THEN {now} END,
                run_after = {now}, lease_owner = NULL, lease_until = NULL,
                last_error_kind = 'lease_expired',
                last_error = 'lease expired: worker ' || expired.lease_owner || ' stopped heartbeating'
            FROM expired
            WHERE jobs.id = expired.id AND jobs.state = 'leased' AND jobs.lease_until < {now}
            RETURNING jobs.id, jobs.attempts, jobs.state, expired.lease_owner, expired.attempted_at,
                      jobs.last_error
        ), history AS (
            INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome, error_kind, error)
            SELECT id, attempts, lease_owner, attempted_at, {now}, 'lease_expired', 'lease_expired', last_error
            FROM done
        )
        SELECT id, state FROM done
    """,
)

job_list_expired = Query(
    "job_list_expired",
    "Run by the stuck watcher on SQLite, inside BEGIN IMMEDIATE: the expired leases to rescue.",
    sqlite="""
        SELECT id, lease_owner, attempts, attempted_at FROM jobs
        WHERE state = 'leased' AND lease_until < :now ORDER BY id LIMIT :n
    """,
)

job_rescue_one = Query(
    "job_rescue_one",
    "Run by the stuck watcher on SQLite: rescues one expired lease (re-checking expiry and owner).",
    sqlite="""
        UPDATE jobs SET
            state = CASE WHEN cancel_requested THEN 'canceled'
                         WHEN attempts >= max_attempts THEN 'dead' ELSE 'retryable' END,
            finished_at = CASE WHEN cancel_requested OR attempts >= max_attempts THEN :now END,
            run_after = :now, lease_owner = NULL, lease_until = NULL,
            last_error_kind = 'lease_expired',
            last_error = 'lease expired: worker ' || lease_owner || ' stopped heartbeating'
        WHERE id = :id AND state = 'leased' AND lease_until < :now AND lease_owner = :worker AND attempts = :attempt
        RETURNING state, last_error
    """,
)
