"""Every SQL statement about ``webhook_events`` (migration 0009); only ``recon.db.webhook_store`` executes these."""

from __future__ import annotations

from recon.db.sql import Query

WEBHOOK_COLUMNS = (
    "id, psp, event_id, event_type, occurred_at, received_at, psp_reference, merchant_reference, merchant_account, "
    "amount, currency, news, psp_status, reason, report, body, state, payment_id, applied_at"
)

webhook_insert = Query(
    "webhook_insert",
    "Run by the webhook intake (`recon serve`), in the transaction that also queues the event's job: the event "
    "once; a redelivery (same PSP and event id) inserts nothing and returns no row.",
    postgresql="""
        INSERT INTO webhook_events (psp, event_id, event_type, occurred_at, received_at, psp_reference,
                                    merchant_reference, merchant_account, amount, currency, news, psp_status,
                                    reason, report, body, state)
        VALUES (:psp, :event_id, :event_type, :occurred_at, {now}, :psp_reference, :merchant_reference,
                :merchant_account, :amount, :currency, :news, :psp_status, :reason, :report,
                CAST(:body AS jsonb), :state)
        ON CONFLICT (psp, event_id) DO NOTHING
        RETURNING id
    """,
    sqlite="""
        INSERT INTO webhook_events (psp, event_id, event_type, occurred_at, received_at, psp_reference,
                                    merchant_reference, merchant_account, amount, currency, news, psp_status,
                                    reason, report, body, state)
        VALUES (:psp, :event_id, :event_type, :occurred_at, :now, :psp_reference, :merchant_reference,
                :merchant_account, :amount, :currency, :news, :psp_status, :reason, :report, :body, :state)
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
