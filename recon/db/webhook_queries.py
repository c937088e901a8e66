"""Every SQL statement about ``webhook_events`` (migration 0009); only ``recon.db.webhook_store`` executes these."""

from __future__ import annotations

from recon.db.jobs_queries import worker_waits_for
from recon.db.sql import Query

WEBHOOK_COLUMNS = (
    "id, psp, event_id, event_type, occurred_at, received_at, psp_reference, merchant_reference, merchant_account, "
    "amount, currency, news, psp_status, reason, report, body, state, payment_id, applied_at, movement_reference, "
    "due_by, fee"
)

webhook_insert = Query(
    "webhook_insert",
    "Run by the webhook intake (`recon serve`), in the transaction that also queues the event's job: the event "
    "once; a redelivery (same PSP and event id) inserts nothing and returns no row.",
    postgresql="""
        INSERT INTO webhook_events (psp, event_id, event_type, occurred_at, received_at, psp_reference,
                                    merchant_reference, merchant_account, amount, currency, news, psp_status,
                                    reason, report, body, state, movement_reference, due_by, fee)
        VALUES (:psp, :event_id, :event_type, :occurred_at, {now}, :psp_reference, :merchant_reference,
                :merchant_account, :amount, :currency, :news, :psp_status, :reason, :report,
                CAST(:body AS jsonb), :state, :movement_reference, :due_by, :fee)
        ON CONFLICT (psp, event_id) DO NOTHING
        RETURNING id
    """,
    sqlite="""
        INSERT INTO webhook_events (psp, event_id, event_type, occurred_at, received_at, psp_reference,
                                    merchant_reference, merchant_account, amount, currency, news, psp_status,
                                    reason, report, body, state, movement_reference, due_by, fee)
        VALUES (:psp, :event_id, :event_type, :occurred_at, :now, :psp_reference, :merchant_reference,
                :merchant_account, :amount, :currency, :news, :psp_status, :reason, :report, :body, :state,
                :movement_reference, :due_by, :fee)
        ON CONFLICT (psp, event_id) DO NOTHING
        RETURNING id
    """,
)

webhook_get = Query("webhook_get", "Run by the webhook job: its event.",
                    sql=f"SELECT {WEBHOOK_COLUMNS} FROM webhook_events WHERE id = :id")  # nosec B608

webhook_mark_if_received = Query(
    "webhook_mark_if_received",
    "Run in the webhook job's fenced finish: how applying the event ended (compare-and-set on 'received': "
    "an event is applied once).",
    sql="""UPDATE webhook_events SET state = :state, payment_id = :payment_id, applied_at = {now}
           WHERE id = :id AND state = 'received' RETURNING id""",
)

webhook_get_many_to_apply = Query(
    "webhook_get_many_to_apply",
    "Run in the fenced finish of several webhook jobs at once: their events, without the stored body (what the "
    "job acts on is in the columns).",
    sql=f"""SELECT {WEBHOOK_COLUMNS.replace(", body,", ", NULL AS body,")} FROM webhook_events
            WHERE id IN :ids""",  # nosec B608  # constant SQL, values bound
    expanding=("ids",),
)

webhook_mark_many_if_received = Query(
    "webhook_mark_many_if_received",
    "Run in the fenced finish of several webhook jobs at once: how applying each event ended, each a "
    "compare-and-set on 'received' (an event is applied once); returns the ids marked.",
    postgresql="""
        UPDATE webhook_events AS w SET state = r.state, payment_id = r.payment_id, applied_at = {now}
        FROM jsonb_to_recordset({json:rows}) AS r(id bigint, state text, payment_id bigint)
        WHERE w.id = r.id AND w.state = 'received'
        RETURNING w.id
    """,
    sqlite="""
        UPDATE webhook_events SET state = r.state, payment_id = r.payment_id, applied_at = :now
        FROM (SELECT value ->> '$.id' AS id, value ->> '$.state' AS state, value ->> '$.payment_id' AS payment_id
              FROM json_each(:rows)) AS r
        WHERE webhook_events.id = r.id AND webhook_events.state = 'received'
        RETURNING webhook_events.id
    """,
)

webhook_counts = Query(
    "webhook_counts",
    "Run by `recon stats` and the console: events per PSP and state received since :since.",
    sql="""SELECT psp, state, count(*) FROM webhook_events WHERE received_at >= :since
           GROUP BY psp, state ORDER BY psp, state""",
)

webhook_unknown_between = Query(
    "webhook_unknown_between",
    "Run by `recon report`: events of :psp for payments we do not know, received in [:since, :until) "
    "(partial index webhook_events_unknown).",
    sql=f"""SELECT {WEBHOOK_COLUMNS} FROM webhook_events
            WHERE state = 'unknown_payment' AND psp = :psp AND received_at >= :since AND received_at < :until
            ORDER BY received_at, id""",  # nosec B608  # constant SQL, values bound
)

webhook_intake_batch = Query(
    "webhook_intake_batch",
    "Run by the webhook intake's writer (`recon serve` on PostgreSQL, a queue without max_depth): the events of "
    "several requests and one job each, and the workers' wake-up, in one autocommit statement (one round trip "
    "and one commit for the batch). A redelivery (same PSP and event id, stored or earlier in the batch) "
    "inserts nothing and returns no row; every inserted event returns (psp, event_id, its id, its job's id). "
    "The job is what JobStore.enqueue inserts for it (runnable now, unique key webhook:<id>); the job insert "
    "has no ON CONFLICT: a key that could clash would fail the statement, never leave an event without its "
    "job. The NOTIFY is an InitPlan, run once and only when a row is returned and a worker of the queue "
    "waits for work (jobs_queries.worker_waits_for); delivered at the commit.",
    postgresql=f"""
        WITH r AS (
            SELECT * FROM jsonb_to_recordset({{json:rows}}) AS r(ord int, psp text, event_id text, event_type text,
                 occurred_at timestamptz, psp_reference text, merchant_reference text, merchant_account text,
                 amount bigint, currency text, news text, psp_status text, reason text, report text, body jsonb,
                 movement_reference text, due_by timestamptz, fee bigint)
        ), ins AS (
            INSERT INTO webhook_events (psp, event_id, event_type, occurred_at, received_at, psp_reference,
                                        merchant_reference, merchant_account, amount, currency, news, psp_status,
                                        reason, report, body, state, movement_reference, due_by, fee)
            SELECT psp, event_id, event_type, occurred_at, {{now}}, psp_reference, merchant_reference,
                   merchant_account, amount, currency, news, psp_status, reason, report, body, 'received',
                   movement_reference, due_by, fee
            FROM r ORDER BY ord
            ON CONFLICT (psp, event_id) DO NOTHING
            RETURNING id, psp, event_id, merchant_account, report, news
        ), job AS (
            INSERT INTO jobs (queue, kind, payload, state, priority, run_after, attempts, max_attempts,
                              unique_key, tenant, created_at)
            SELECT :queue, :kind, CASE WHEN news = 'payout' THEN jsonb_build_object('webhook_id', id, 'payout', true)
                                       WHEN report IS NULL THEN jsonb_build_object('webhook_id', id)
                                       ELSE jsonb_build_object('webhook_id', id, 'report', true) END,
                   'runnable', 0, {{now}}, 0, :max_attempts,
                   'webhook:' || id, merchant_account, {{now}}
            FROM ins
            RETURNING id, unique_key
        )
        SELECT ins.psp, ins.event_id, ins.id, job.id,
               (SELECT pg_notify('recon_jobs', :queue) WHERE {worker_waits_for(":queue")})
        FROM ins JOIN job ON job.unique_key = 'webhook:' || ins.id
    """,  # nosec B608  # constant SQL, values bound
)
