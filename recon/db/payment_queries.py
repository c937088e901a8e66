"""Every SQL statement about payments but their changes: creation, lookups, listings, the review desk's and
the stats' reads. Named ``<table>_<verb>[_<guard>]``, with who runs it and why; a payment's changes after its
creation (compare-and-set transitions, notes, the audit trail) are ``recon.db.transition_queries``'s.

Placeholders as in ``recon.db.sql`` (``{now}``, ``{secs:…}``, ``{json:…}``); only ``recon.db.payment_store``
executes these.
"""

from __future__ import annotations

# Bandit: every "nosec B608" here marks an f-string that interpolates module constants only (column
# lists, state predicates); values always travel as bound parameters.
from recon.db.jobs_queries import FINISHED, UNIQUE_ARBITER, worker_waits_for
from recon.db.sql import Query

PAYMENT_COLUMNS = (
    "id, merchant_account, merchant_reference, amount, currency, psp, idempotency_key, status, created_at, "
    "updated_at, psp_reference, failure_reason, review_reason, payment_method, customer_reference, key_generation, "
    "key_sent_at, review_since, review_assignee, captured_amount, refunded_amount, capture_mode, authorised_at, "
    "authorisation_claimed"
)
UNFINISHED = "status IN ('created', 'processing', 'pending')"

payment_insert_many = Query(
    "payment_insert_many",
    "Run by payment creation (API, import, demo): a batch of new payments in one round trip.",
    postgresql="""
        INSERT INTO payments (merchant_account, merchant_reference, amount, currency, psp, idempotency_key,
                              status, created_at, updated_at, payment_method, customer_reference, capture_mode)
        SELECT r.merchant_account, r.merchant_reference, r.amount, r.currency, r.psp, r.idempotency_key,
               'created', coalesce(r.created_at, {now}), {now}, r.payment_method, r.customer_reference,
               coalesce(r.capture_mode, 'automatic')
        FROM jsonb_to_recordset({json:rows}) AS r(merchant_account text, merchant_reference text, amount bigint,
             currency text, psp text, idempotency_key text, created_at timestamptz, payment_method text,
             customer_reference text, capture_mode text)
        RETURNING id, merchant_reference
    """,
    sqlite="""
        INSERT INTO payments (merchant_account, merchant_reference, amount, currency, psp, idempotency_key,
                              status, created_at, updated_at, payment_method, customer_reference, capture_mode)
        SELECT value ->> '$.merchant_account', value ->> '$.merchant_reference', value ->> '$.amount',
               value ->> '$.currency', value ->> '$.psp', value ->> '$.idempotency_key', 'created',
               coalesce(value ->> '$.created_at', :now), :now, value ->> '$.payment_method',
               value ->> '$.customer_reference', coalesce(value ->> '$.capture_mode', 'automatic')
        FROM json_each(:rows) ORDER BY key
        RETURNING id, merchant_reference
    """,
)

payment_existing_references = Query(
    "payment_existing_references",
    "Run by import before inserting: which merchant references are taken already.",
    sql="SELECT merchant_reference FROM payments WHERE merchant_reference IN :refs",
    expanding=("refs",),
)

payment_create_with_charge_jobs = Query(
    "payment_create_with_charge_jobs",
    "Run by payment creation on PostgreSQL: a batch of payments, their charge jobs (with :charge), the creation "
    "events naming those jobs, and the NOTIFY, in one statement (in autocommit: one round trip).",
    # The charge job's unique key is charge:<payment id>; an unfinished job holding it already (only one
    # enqueued by hand could) is the payment's charge job, as enqueue would return it. Returns (payment id,
    # merchant reference, charge job id or NULL, queues woken).
    postgresql=f"""
        WITH p AS (
            INSERT INTO payments (merchant_account, merchant_reference, amount, currency, psp, idempotency_key,
                                  status, created_at, updated_at, payment_method, customer_reference, capture_mode)
            SELECT r.merchant_account, r.merchant_reference, r.amount, r.currency, r.psp, r.idempotency_key,
                   'created', coalesce(r.created_at, {{now}}), {{now}}, r.payment_method, r.customer_reference,
                   coalesce(r.capture_mode, 'automatic')
            FROM jsonb_to_recordset({{json:rows}}) AS r(merchant_account text, merchant_reference text,
                 amount bigint, currency text, psp text, idempotency_key text, created_at timestamptz,
                 payment_method text, customer_reference text, capture_mode text)
            RETURNING id, merchant_reference, merchant_account
        ), j AS (
            INSERT INTO jobs (queue, kind, payload, state, priority, run_after, attempts, max_attempts,
                              unique_key, tenant, created_at)
            SELECT :queue, :kind, jsonb_build_object('payment_id', p.id), 'runnable', 0, {{now}}, 0,
                   :max_attempts, 'charge:' || p.id, p.merchant_account, {{now}}
            FROM p WHERE CAST(:charge AS boolean)
            ORDER BY p.id
            ON CONFLICT {UNIQUE_ARBITER} DO NOTHING
            RETURNING id, unique_key
        ), held AS (
            SELECT id, unique_key FROM jobs
            WHERE CAST(:charge AS boolean) AND unique_key IN (SELECT 'charge:' || id FROM p)
              AND NOT {FINISHED}
        ), c AS (
            SELECT p.id, p.merchant_reference, coalesce(j.id, held.id) AS job_id
            FROM p LEFT JOIN j ON j.unique_key = 'charge:' || p.id
                   LEFT JOIN held ON held.unique_key = 'charge:' || p.id
        ), e AS (
            INSERT INTO payment_events (payment_id, from_status, to_status, source, job_id, attempt, details, at)
            SELECT c.id, NULL, 'created', 'manual', c.job_id, NULL, NULL, {{now}} FROM c
        ), woke AS (
            SELECT pg_notify('recon_jobs', :queue) WHERE CAST(:charge AS boolean) AND {worker_waits_for(":queue")}
        )
        SELECT c.id, c.merchant_reference, c.job_id, (SELECT count(*) FROM woke) FROM c
    """,  # nosec B608  # constant SQL, values bound
)

payment_get = Query("payment_get", "Run by handlers and `recon payments show`: one payment.",
                    sql=f"SELECT {PAYMENT_COLUMNS} FROM payments WHERE id = :id")  # nosec B608

payment_get_by_reference = Query(
    "payment_get_by_reference", "Run by `recon payments show REF`.",
    sql=f"SELECT {PAYMENT_COLUMNS} FROM payments WHERE merchant_reference = :ref",  # nosec B608
)

payment_get_many = Query(
    "payment_get_many", "Run by the sweep's summary: payments by id.",
    sql=f"SELECT {PAYMENT_COLUMNS} FROM payments WHERE id IN :ids ORDER BY id",  # nosec B608
    expanding=("ids",),
)

payment_list_page = Query(
    "payment_list_page",
    "Run by `recon payments list`: one page after an id cursor.",
    sql=f"""SELECT {PAYMENT_COLUMNS} FROM payments
            WHERE id > :after_id AND (CAST(:status AS TEXT) IS NULL OR status = :status)
              AND (CAST(:psp AS TEXT) IS NULL OR psp = :psp)
            ORDER BY id LIMIT :n""",  # nosec B608  # constant SQL, values bound
)

payment_list_stale = Query(
    "payment_list_stale",
    "Run by `recon sweep`: unfinished payments not updated since :cutoff, through the partial index.",
    sql=f"""SELECT {PAYMENT_COLUMNS} FROM payments
            WHERE {UNFINISHED} AND updated_at < :cutoff AND id > :after_id
              AND (CAST(:psp AS TEXT) IS NULL OR psp = :psp)
            ORDER BY id LIMIT :n""",  # nosec B608  # constant SQL, values bound
)

payment_psps_unfinished = Query(
    "payment_psps_unfinished",
    "Run by `recon worker` and `recon sweep` before any work: the PSPs that unfinished payments will call "
    "(through the partial index payments_stale).",
    sql=f"SELECT DISTINCT psp FROM payments WHERE {UNFINISHED}",  # nosec B608  # constant SQL, values bound
)

payment_events_for = Query(
    "payment_events_for",
    "Run by `recon payments show`: a payment's audit trail, oldest first.",
    sql="""SELECT id, payment_id, from_status, to_status, source, at, job_id, attempt, details
           FROM payment_events WHERE payment_id = :id ORDER BY id""",
)

payment_money_at_risk = Query(
    "payment_money_at_risk",
    "Run by `recon sweep`, `recon stats` and the console: unfinished payments' count and sum per currency and "
    "age bucket (an index-only scan of payments_at_risk).",
    sql=f"""SELECT currency,
                   CASE WHEN created_at >= :t_1h THEN 'lt_1h' WHEN created_at >= :t_1d THEN '1h_1d'
                        WHEN created_at >= :t_7d THEN '1d_7d' ELSE 'gt_7d' END AS bucket,
                   count(*) AS n, sum(amount) AS amount
            FROM payments WHERE {UNFINISHED}
            GROUP BY currency, bucket ORDER BY currency, bucket""",  # nosec B608  # constant SQL, values bound
)

job_unfinished_by_key = Query(
    "job_unfinished_by_key",
    "Run by the reconcile handler: is there an unfinished job with this unique key (a charge that may still "
    "send)? Reads the partial unique index over unfinished keys.",
    sql="SELECT 1 FROM jobs WHERE unique_key = :key AND NOT state IN ('succeeded', 'dead', 'canceled')",
)

payment_get_with_charge_lease = Query(
    "payment_get_with_charge_lease",
    "Run by the reconcile handler, first: the payment, and whether a charge job holds a live lease on it right "
    "now (one round trip for the two reads every reconcile attempt makes).",
    sql=f"""SELECT {PAYMENT_COLUMNS},
                   EXISTS (SELECT 1 FROM jobs WHERE unique_key = :key AND state = 'leased' AND lease_until > {{now}})
                   AS charge_leased
            FROM payments WHERE id = :id""",  # nosec B608  # constant SQL, values bound
)

payment_search = Query(
    "payment_search",
    "Run by the console's search and `recon review`: payments by merchant reference (unique key) or by PSP "
    "reference (index payments_psp_reference, one probe per PSP name).",
    sql=f"""SELECT {PAYMENT_COLUMNS} FROM payments WHERE merchant_reference = :text
            UNION
            SELECT {PAYMENT_COLUMNS} FROM payments WHERE psp IN :psps AND psp_reference = :text
            ORDER BY id LIMIT :n""",  # nosec B608  # constant SQL, values bound
    expanding=("psps",),
)

payment_review_summary = Query(
    "payment_review_summary",
    "Run by `recon stats` and the console's overview: how many payments are in needs_review and since when "
    "the oldest (partial index payments_review).",
    sql="SELECT count(*) AS n, min(review_since) AS oldest FROM payments WHERE status = 'needs_review'",
)

payment_latest_evidence = Query(
    "payment_latest_evidence",
    "Run by the review queue: each listed payment's latest event carrying a PSP answer (its details), one "
    "probe per payment through payment_events_payment.",
    postgresql="""
        SELECT p.id AS payment_id, e.details FROM unnest(CAST(:ids AS bigint[])) AS p(id)
        CROSS JOIN LATERAL (SELECT details FROM payment_events
                            WHERE payment_id = p.id AND details ? 'psp_outcome'
                            ORDER BY id DESC LIMIT 1) AS e
    """,
    sqlite="""
        SELECT j.value AS payment_id, (SELECT details FROM payment_events
                         WHERE payment_id = j.value AND json_extract(details, '$.psp_outcome') IS NOT NULL
                         ORDER BY id DESC LIMIT 1) AS details
        FROM json_each(:ids_json) AS j
    """,
)

payment_resolutions = Query(
    "payment_resolutions",
    "Run by `recon stats` and the metrics endpoint: manual resolutions out of needs_review since :since, per "
    "UTC day, operator and status (partial index payment_events_resolutions).",
    postgresql="""
        SELECT to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, details ->> 'operator' AS operator, to_status,
               count(*) AS n, count(*) FILTER (WHERE (details ->> 'override') = 'true') AS overrides
        FROM payment_events
        WHERE source = 'manual' AND from_status = 'needs_review' AND at >= :since
        GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
    """,
    sqlite="""
        SELECT strftime('%Y-%m-%d', at / 1000000, 'unixepoch') AS day,
               json_extract(details, '$.operator') AS operator, to_status, count(*) AS n,
               sum(CASE WHEN json_extract(details, '$.override') THEN 1 ELSE 0 END) AS overrides
        FROM payment_events
        WHERE source = 'manual' AND from_status = 'needs_review' AND at >= :since
        GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
    """,
)

payment_job_ids = Query(
    "payment_job_ids",
    "Run by `recon review show` and the console's payment page: the jobs of a payment: those its events name, "
    "and the unfinished or dead ones holding its charge or reconcile key.",
    sql="""SELECT DISTINCT job_id FROM payment_events WHERE payment_id = :id AND job_id IS NOT NULL
           UNION
           SELECT id FROM jobs WHERE unique_key IN :keys
                                 AND NOT state IN ('succeeded', 'dead', 'canceled')
           UNION
           SELECT id FROM jobs WHERE state = 'dead' AND unique_key IN :keys
           ORDER BY 1""",
    expanding=("keys",),
)

payment_get_by_psp_references = Query(
    "payment_get_by_psp_references",
    "Run by webhook jobs' finish: the payments their events name by the PSP's own reference "
    "(index payments_psp_reference).",
    sql=f"SELECT {PAYMENT_COLUMNS} FROM payments WHERE psp = :psp AND psp_reference IN :refs",  # nosec B608
    expanding=("refs",),
)

payment_get_by_references = Query(
    "payment_get_by_references",
    "Run by webhook jobs' finish: the payments their events name by our merchant reference.",
    sql=f"SELECT {PAYMENT_COLUMNS} FROM payments WHERE merchant_reference IN :refs",  # nosec B608
    expanding=("refs",),
)

payment_window_candidates = Query(
    "payment_window_candidates",
    "Run by a reconcile window job, first: the window's payments still unfinished, each with whether a charge "
    "job holds a live lease on it now (probes of the partial unique index over unfinished keys).",
    sql=f"""SELECT {PAYMENT_COLUMNS},
                   EXISTS (SELECT 1 FROM jobs WHERE jobs.unique_key = 'charge:' || CAST(payments.id AS TEXT)
                           AND jobs.state = 'leased' AND jobs.lease_until > {{now}}) AS charge_leased
            FROM payments WHERE id IN :ids AND {UNFINISHED} ORDER BY id""",  # nosec B608  # constant SQL, values bound
    expanding=("ids",),
)

job_reconcile_unfinished_by_keys = Query(
    "job_reconcile_unfinished_by_keys",
    "Run by `recon sweep`'s summary in bulk mode: the unfinished jobs holding these unique keys (reconcile:<id>), "
    "through the partial unique index over unfinished keys.",
    sql="""SELECT id, unique_key FROM jobs
           WHERE unique_key IN :keys AND NOT state IN ('succeeded', 'dead', 'canceled')""",
    expanding=("keys",),
)

job_reconcile_after = Query(
    "job_reconcile_after",
    "Run by `recon sweep`'s summary in bulk mode: reconcile jobs created after an id (the window jobs' "
    "fall-backs), a page by primary key.",
    sql="""SELECT id, unique_key FROM jobs WHERE id > :after_id AND kind = 'reconcile'
           ORDER BY id LIMIT :n""",
)
