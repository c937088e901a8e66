"""Every SQL statement about jobs and their attempt history, named ``<table>_<verb>[_<guard>]``, with who runs
it and why. Only ``recon.db.jobs_store`` executes these; the placeholders are ``recon.db.sql.Query``'s.
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


#: what a claim returns: only what a handler may read (the rest is known: state leased, owner = the worker). The
#: claim loop unpacks its rows by these names, in this order (``recon.db.jobs_store.claimed_job``)
CLAIM_FIELDS = ("id", "queue", "kind", "payload", "priority", "run_after", "attempts", "max_attempts", "lease_until",
                "unique_key", "tenant", "progress", "created_at", "last_error_kind", "free_attempts")
CLAIM_COLUMNS = ", ".join(CLAIM_FIELDS)
#: the same on PostgreSQL, with the JSON documents as text: psycopg's jsonb loader hands json.loads bytes,
#: whose encoding detection made it 2.5 µs a job, where the store's own json.loads of text costs 1
CLAIM_COLUMNS_PG = CLAIM_COLUMNS.replace(" payload,", " CAST(payload AS text) AS payload,").replace(
    " progress,", " CAST(progress AS text) AS progress,")
CLAIMABLE = "state IN ('pending', 'runnable', 'retryable')"
FINISHED = "state IN ('succeeded', 'dead', 'canceled')"
UNIQUE_ARBITER = f"(unique_key) WHERE unique_key IS NOT NULL AND NOT {FINISHED}"

job_lock_queue = Query(
    "job_lock_queue",
    "Run by enqueue when the queue has a max depth: serialises producers of one queue for the depth check.",
    # A statement of its own, before the one that counts: READ COMMITTED takes a statement's snapshot when
    # it starts, so a count in the statement that waited for the lock would miss the jobs its holder
    # committed meanwhile, and two producers could both pass the limit.
    postgresql="SELECT pg_advisory_xact_lock(hashtext('recon.queue.' || :queue))",
)

job_count_unfinished_in_queue = Query(
    "job_count_unfinished_in_queue",
    "Run by enqueue for backpressure (after the queue's lock, or inside BEGIN IMMEDIATE): unfinished jobs of a queue.",
    sql=f"SELECT count(*) FROM jobs WHERE queue = :queue AND NOT {FINISHED}",  # nosec B608
)

_ENQUEUE_RECORD = """jsonb_to_recordset({json:rows}) AS r(queue text, kind text, payload text, priority int,
             run_at timestamptz, delay double precision, max_attempts int, unique_key text, tenant text)"""
_ENQUEUE_DUE = "coalesce(r.run_at, {now} + make_interval(secs => r.delay))"

job_enqueue = Query(
    "job_enqueue",
    "Run by enqueue on PostgreSQL: a batch's insert, its depth check, its NOTIFY and the unfinished jobs that "
    "hold its unique keys, in one statement (in autocommit, when no queue has a max depth: one round trip).",
    # Rows tagged: 'i' the inserted ids and their unique keys, as two arrays in id order (one row, not one
    # per job: the client reads a 20,000-job batch's answer at once); 'h' an unfinished job holding a key of
    # the batch, as the statement's snapshot sees it (a holder that committed after it started is found by the store's
    # lookup); 'f' a queue over its max depth (adding, queue, depth, max_depth): then nothing is inserted and
    # nobody is woken; 'n' how many queues were notified. :limits is '[]' but for the first chunk of a
    # batch with limited queues, whose lock the caller took (job_lock_queue) in the same transaction.
    # NOTIFY is sent at commit, once per queue of the batch, whatever the unique keys did: as before.
    postgresql=f"""
        WITH r AS (
            SELECT * FROM {_ENQUEUE_RECORD}
        ), refused AS (
            SELECT l.queue, l.max_depth, l.adding,
                   (SELECT count(*) FROM jobs WHERE jobs.queue = l.queue AND NOT {FINISHED}) AS depth
            FROM jsonb_to_recordset({{json:limits}}) AS l(queue text, max_depth bigint, adding bigint)
        ), ins AS (
            INSERT INTO jobs (queue, kind, payload, state, priority, run_after, attempts, max_attempts,
                              unique_key, tenant, created_at)
            SELECT r.queue, r.kind, CAST(r.payload AS jsonb),
                   CASE WHEN {_ENQUEUE_DUE} > {{now}} THEN 'pending' ELSE 'runnable' END,
                   r.priority, {_ENQUEUE_DUE}, 0, r.max_attempts, r.unique_key, r.tenant, {{now}}
            FROM r
            WHERE NOT EXISTS (SELECT 1 FROM refused WHERE depth + adding > max_depth)
            ON CONFLICT {UNIQUE_ARBITER} DO NOTHING
            RETURNING id, unique_key
        ), woke AS (
            SELECT pg_notify('recon_jobs', d.queue) FROM (SELECT DISTINCT queue FROM r ORDER BY queue) AS d
            WHERE NOT EXISTS (SELECT 1 FROM refused WHERE depth + adding > max_depth)
        ), held AS (
            SELECT id, unique_key FROM jobs
            WHERE unique_key IN (SELECT unique_key FROM r WHERE unique_key IS NOT NULL) AND NOT {FINISHED}
        )
        SELECT 'i', CAST(NULL AS bigint), CAST(NULL AS text), CAST(NULL AS bigint), CAST(NULL AS bigint),
               array_agg(id ORDER BY id), array_agg(unique_key ORDER BY id) FROM ins
        UNION ALL SELECT 'h', id, unique_key, NULL, NULL, NULL, NULL FROM held
        UNION ALL SELECT 'f', adding, queue, depth, max_depth, NULL, NULL FROM refused WHERE depth + adding > max_depth
        UNION ALL SELECT 'n', count(*), NULL, NULL, NULL, NULL, NULL FROM woke
    """,  # nosec B608  # constant SQL, values bound
)

_ENQUEUE_ONE_DUE = "coalesce(CAST(:run_at AS timestamptz), {now} + {secs:delay})"

job_enqueue_one = Query(
    "job_enqueue_one",
    "Run by enqueue on PostgreSQL for one job of a queue without a max depth, in autocommit: insert and NOTIFY "
    "in one statement and one round trip; a held unique key inserts nothing (the store then reads its holder).",
    # (inserted id or NULL, queues woken). job_enqueue's shape for one row, with scalar parameters: no JSON
    # document to take apart. It reads no table, so its cached generic plan is as good as any (it runs on the
    # producer's sessions, Database.execute_driver(generic_plans=True)).
    postgresql=f"""
        WITH ins AS (
            INSERT INTO jobs (queue, kind, payload, state, priority, run_after, attempts, max_attempts,
                              unique_key, tenant, created_at)
            VALUES (:queue, :kind, CAST(:payload AS jsonb),
                    CASE WHEN {_ENQUEUE_ONE_DUE} > {{now}} THEN 'pending' ELSE 'runnable' END,
                    :priority, {_ENQUEUE_ONE_DUE}, 0, :max_attempts, :unique_key, :tenant, {{now}})
            ON CONFLICT {UNIQUE_ARBITER} DO NOTHING
            RETURNING id
        ), woke AS (
            SELECT pg_notify('recon_jobs', :queue)
        )
        SELECT (SELECT id FROM ins), (SELECT count(*) FROM woke)
    """,  # nosec B608  # constant SQL, values bound
)

job_insert_many = Query(
    "job_insert_many",
    "Run by enqueue on SQLite (inside BEGIN IMMEDIATE): a batch in one statement; a held unique key is skipped.",
    sqlite=f"""
        INSERT INTO jobs (queue, kind, payload, state, priority, run_after, attempts, max_attempts,
                          unique_key, tenant, created_at)
        SELECT value ->> '$.queue', value ->> '$.kind', value ->> '$.payload',
               CASE WHEN coalesce(value ->> '$.run_at', :now + CAST((value ->> '$.delay') * 1000000 AS INTEGER))
                         > :now THEN 'pending' ELSE 'runnable' END,
               value ->> '$.priority',
               coalesce(value ->> '$.run_at', :now + CAST((value ->> '$.delay') * 1000000 AS INTEGER)),
               0, value ->> '$.max_attempts', value ->> '$.unique_key', value ->> '$.tenant', :now
        FROM json_each(:rows) ORDER BY key
        ON CONFLICT {UNIQUE_ARBITER} DO NOTHING
        RETURNING id, unique_key
    """,  # nosec B608  # constant SQL, values bound
)

job_get_unfinished_by_unique_keys = Query(
    "job_get_unfinished_by_unique_keys",
    "Run by enqueue after a unique-key conflict it could not resolve: the unfinished job holding each key.",
    sql=f"SELECT id, unique_key FROM jobs WHERE unique_key IN :keys AND NOT {FINISHED}",  # nosec B608
    expanding=("keys",),
)

# --- lease: claim, heartbeat, progress, finish ---------------------------------------------------------------

_CLAIM_SET = """
    SET state = 'leased', lease_owner = :worker, lease_until = {now} + {secs:ttl},
        heartbeat_at = {now}, attempted_at = {now}, attempts = attempts + 1
"""

job_claim_available = Query(
    "job_claim_available",
    "Run by a worker's claim loop: leases up to :n due jobs of its queues in one atomic statement.",
    # "= ANY(ARRAY(...))", not "IN (...)": the update then always finds its rows by primary key. With IN,
    # the plan that PostgreSQL caches for the prepared statement guesses that LIMIT :n means a tenth of the
    # table and hash-joins a sequential scan of jobs (3.4 ms for 64 jobs of 20,000, against 0.5), so it
    # kept planning every claim afresh (0.2-0.4 ms each).
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
    # a success is never turned into canceled and leaves run_after, the last error and the budget alone
    sqlite="""
        UPDATE jobs SET state = 'succeeded', finished_at = :now, lease_owner = NULL, lease_until = NULL
        WHERE lease_owner = :worker AND state = 'leased'
          AND (id, attempts) IN (SELECT value ->> '$[0]', value ->> '$[1]' FROM json_each(:pairs))
        RETURNING id
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
    # and takes the batch as two arrays, not a JSON document to take apart (a quarter of the finish's
    # server CPU, measured with 64-job batches)
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
