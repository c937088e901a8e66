"""Every SQL statement that enqueues jobs: the batch insert with its depth check, NOTIFY and held unique keys,
the single job's, SQLite's, and the queue's lock and count. Only ``recon.db.enqueue_store`` executes these; the
placeholders are ``recon.db.sql.Query``'s.
"""

from __future__ import annotations

# Bandit: every "nosec B608" here marks an f-string that interpolates module constants only (column
# lists, state predicates); values always travel as bound parameters.
from recon.db.jobs_queries import FINISHED, UNIQUE_ARBITER, worker_waits_for
from recon.db.sql import Query

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
    # NOTIFY is sent at commit, once per queue of the batch that a worker waits for, whatever the unique keys
    # did (jobs_queries.worker_waits_for).
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
            WHERE NOT EXISTS (SELECT 1 FROM refused WHERE depth + adding > max_depth) AND {worker_waits_for("d.queue")}
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
            SELECT pg_notify('recon_jobs', :queue) WHERE {worker_waits_for(":queue")}
        )
        SELECT (SELECT id FROM ins), (SELECT count(*) FROM woke)
    """,  # nosec B608  # constant SQL, values bound
)

job_enqueue_one_now = Query(
    "job_enqueue_one_now",
    "Run by enqueue on PostgreSQL for one job due now, without a unique key, of a queue without a max depth, in "
    "autocommit: job_enqueue_one's effect in fewer steps (a plain insert and the NOTIFY, one round trip).",
    # Nothing can conflict (no unique key) and nothing is computed (runnable now): no ON CONFLICT (whose
    # speculative insertion costs the server even when the key is NULL), no CTE. The NOTIFY is an InitPlan of
    # the RETURNING list, run once. Returns (id, queues woken). Reads only the waiting workers (an empty
    # partial index, mostly): its generic plan is as good as any.
    postgresql=f"""
        INSERT INTO jobs (queue, kind, payload, state, priority, run_after, attempts, max_attempts, tenant, created_at)
        VALUES (:queue, :kind, CAST(:payload AS jsonb), 'runnable', :priority, {{now}}, 0, :max_attempts, :tenant,
                {{now}})
        RETURNING id,
            (SELECT count(*) FROM (SELECT pg_notify('recon_jobs', :queue) WHERE {worker_waits_for(":queue")}) AS n)
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
