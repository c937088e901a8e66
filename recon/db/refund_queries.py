"""Every SQL statement about refunds: their creation with the payment's bound, lookups, compare-and-set
transitions, notes and the audit trail, the reconcile sweep's and the stats' reads. Named
``<table>_<verb>[_<guard>]``, with who runs it and why; only ``recon.db.refund_store`` executes these.
Placeholders as in ``recon.db.sql``.

**The bound.** ``payments.refunded_amount`` is the sum of the payment's refunds that have not failed, and never
exceeds ``captured_amount``: ``payment_reserve_refund`` adds a refund's amount with one conditional UPDATE in the
refund's own transaction, so two refunds racing on two workers serialise on the payment's row (PostgreSQL
re-evaluates the WHERE on the row it waited for; SQLite has one writer), and the loser matches no row; the
check constraint ``payments_refunds_within_capture`` is the backstop. A refund that fails gives its amount back
(``payment_release_refund``) in the transaction of that transition.
"""

from __future__ import annotations

# Bandit: every "nosec B608" here marks an f-string that interpolates module constants only (column
# lists, state predicates); values always travel as bound parameters.
from recon.db.sql import Query

REFUND_COLUMNS = (
    "id, payment_id, refund_reference, amount, currency, reason, psp, status, psp_refund_id, idempotency_key, "
    "requested_by, failure_reason, review_reason, created_at, updated_at, sent_at"
)
UNFINISHED = "status IN ('created', 'processing', 'pending')"

payment_reserve_refund = Query(
    "payment_reserve_refund",
    "Run by refund creation, in the refund's transaction: adds the refund to the payment's refunded amount only "
    "while the payment succeeded, holds its PSP reference and has that much captured left (no row: refused).",
    sql="""UPDATE payments SET refunded_amount = refunded_amount + :amount
           WHERE id = :payment_id AND status = 'succeeded' AND psp_reference IS NOT NULL
             AND refunded_amount + :amount <= captured_amount
           RETURNING currency, psp""",
)

payment_release_refund = Query(
    "payment_release_refund",
    "Run with a refund's transition to failed, in its transaction: its amount no longer counts against the "
    "payment's captured amount.",
    sql="""UPDATE payments SET refunded_amount = refunded_amount - :amount
           WHERE id = :payment_id AND refunded_amount >= :amount RETURNING id""",
)

payment_refund_room = Query(
    "payment_refund_room",
    "Run when a refund was refused, to say why: the payment's status, reference and amounts.",
    sql="""SELECT id, status, psp_reference, currency, amount, captured_amount, refunded_amount
           FROM payments WHERE id = :payment_id""",
)

refund_insert = Query(
    "refund_insert",
    "Run by refund creation (import, `recon refund`), after the payment's reserve in the same transaction.",
    sql="""INSERT INTO refunds (payment_id, refund_reference, amount, currency, reason, psp, status, idempotency_key,
                                requested_by, created_at, updated_at)
           VALUES (:payment_id, :refund_reference, :amount, :currency, :reason, :psp, 'created', :idempotency_key,
                   :requested_by, {now}, {now})
           RETURNING id""",
)

refund_event_insert = Query(
    "refund_event_insert",
    "Run with every refund change: the audit trail, one row per change or note.",
    sql="""INSERT INTO refund_events (refund_id, from_status, to_status, source, job_id, attempt, details, at)
           VALUES (:refund_id, :from_status, :to_status, :source, :job_id, :attempt, {json:details}, {now})""",
)

refund_existing_references = Query(
    "refund_existing_references",
    "Run by the refunds import before inserting: which refund references are taken already.",
    sql="SELECT refund_reference FROM refunds WHERE refund_reference IN :refs",
    expanding=("refs",),
)

refund_get = Query("refund_get", "Run by the refund handlers: one refund.",
                   sql=f"SELECT {REFUND_COLUMNS} FROM refunds WHERE id = :id")  # nosec B608

refund_get_by_reference = Query(
    "refund_get_by_reference", "Run by `recon refunds show` and webhooks naming our refund reference.",
    sql=f"SELECT {REFUND_COLUMNS} FROM refunds WHERE refund_reference = :ref",  # nosec B608
)

refund_get_by_psp_refund_id = Query(
    "refund_get_by_psp_refund_id", "Run by the webhook job: the refund an event names by the PSP's refund id.",
    sql=f"""SELECT {REFUND_COLUMNS} FROM refunds WHERE psp = :psp AND psp_refund_id = :psp_refund_id
            ORDER BY id LIMIT 1""",  # nosec B608
)

refund_list_for_payment = Query(
    "refund_list_for_payment", "Run by `recon payments show`: a payment's refunds, oldest first.",
    sql=f"SELECT {REFUND_COLUMNS} FROM refunds WHERE payment_id = :payment_id ORDER BY id",  # nosec B608
)

refund_events_for = Query(
    "refund_events_for", "Run by `recon refunds show`: a refund's audit trail.",
    sql="""SELECT id, refund_id, from_status, to_status, source, job_id, attempt, details, at
           FROM refund_events WHERE refund_id = :id ORDER BY id""",
)

refund_transition_if_status = Query(
    "refund_transition_if_status",
    "Run by the refund, reconcile and webhook jobs and review: compare-and-set of a refund's status (no row: it "
    "changed, or the transition names another PSP refund id than the one stored, which is never replaced).",
    sql="""
        UPDATE refunds SET status = :to_status, updated_at = {now},
            psp_refund_id = coalesce(psp_refund_id, :psp_refund_id),
            failure_reason = coalesce(:failure_reason, failure_reason),
            review_reason = coalesce(:review_reason, review_reason)
        WHERE id = :id AND status = :from_status
          AND (psp_refund_id IS NULL OR CAST(:psp_refund_id AS TEXT) IS NULL OR psp_refund_id = :psp_refund_id)
        RETURNING id, payment_id, amount
    """,
)

refund_touch_if_status = Query(
    "refund_touch_if_status",
    "Run before an audit event without a status change: proves the status is still :status (and locks the row).",
    sql="UPDATE refunds SET updated_at = {now} WHERE id = :id AND status = :status RETURNING id",
)

refund_set_psp_refund_id_if_null = Query(
    "refund_set_psp_refund_id_if_null",
    "Run by the refund job the moment the PSP names its refund id (a pending answer): stored where none is.",
    sql="""UPDATE refunds SET psp_refund_id = :psp_refund_id, updated_at = {now}
           WHERE id = :id AND status = :status AND psp_refund_id IS NULL RETURNING id""",
)

refund_mark_sent_if_unfinished = Query(
    "refund_mark_sent_if_unfinished",
    "Run by the refund job right before each send: locks the refund row, proves it is still unfinished (so a "
    "'never reached the PSP' heal and a send cannot both happen) and stamps when the request first went out.",
    sql=f"""UPDATE refunds SET updated_at = {{now}}, sent_at = coalesce(sent_at, {{now}})
            WHERE id = :id AND {UNFINISHED} RETURNING status""",  # nosec B608  # constant SQL, values bound
)

refund_list_stale = Query(
    "refund_list_stale",
    "Run by `recon sweep`: unfinished refunds not changed since :cutoff, a page after an id cursor.",
    sql=f"""SELECT {REFUND_COLUMNS} FROM refunds
            WHERE {UNFINISHED} AND updated_at < :cutoff AND (CAST(:psp AS TEXT) IS NULL OR psp = :psp)
              AND id > :after_id
            ORDER BY id LIMIT :n""",  # nosec B608  # constant SQL, values bound
)

refund_counts = Query(
    "refund_counts",
    "Run by `recon stats` and the metrics: refunds per status and currency, with their sum.",
    sql="SELECT status, currency, count(*) AS n, sum(amount) AS amount FROM refunds GROUP BY status, currency",
)

refund_job_unfinished = Query(
    "refund_job_unfinished",
    "Run by the refund's reconcile job before 'never reached the PSP': may its refund job still send?",
    sql="SELECT id FROM jobs WHERE unique_key = :key AND state NOT IN ('succeeded', 'dead', 'canceled')",
)
