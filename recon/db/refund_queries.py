"""The SQL statements of refunds alone: their creation with the payment's bound, and the stats' read. Named
``<table>_<verb>[_<guard>]``, with who runs it and why; only ``recon.db.refund_store`` executes these. What
refunds share with captures and cancels (lookups, compare-and-set transitions, notes and the audit trail, the
sweep's reads) is ``recon.db.movement_queries``. Placeholders as in ``recon.db.sql``.

**The bound.** ``payments.refunded_amount`` is the sum of the payment's refunds that have not failed, and never
exceeds ``captured_amount``: ``payment_reserve_refund`` adds a refund's amount with one conditional UPDATE in the
refund's own transaction, so two refunds racing on two workers serialise on the payment's row (PostgreSQL
re-evaluates the WHERE on the row it waited for; SQLite has one writer), and the loser matches no row; the
check constraint ``payments_refunds_within_capture`` is the backstop. A refund that fails gives its amount back
(``payment_release_refund``) in the transaction of that transition.
"""

from __future__ import annotations

from recon.db.sql import Query

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


refund_counts = Query(
    "refund_counts",
    "Run by `recon stats` and the metrics: refunds per status and currency, with their sum.",
    sql="SELECT status, currency, count(*) AS n, sum(amount) AS amount FROM refunds GROUP BY status, currency",
)
