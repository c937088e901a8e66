"""The SQL statements of captures and cancels alone: their creation with the authorisation's bound, the payment's
side of a confirmed capture, the stats' and the authorisations' reads. Named ``<table>_<verb>[_<guard>]``, with
who runs it and why; only ``recon.db.modification_store`` executes these. What captures and cancels share with
refunds (lookups, compare-and-set transitions, notes and the audit trail, the sweep's reads) is
``recon.db.movement_queries``. Placeholders as in ``recon.db.sql``.

**The bound.** ``payments.authorisation_claimed`` is what the payment's captures and cancels that have not failed
claim of its authorisation, and never exceeds its amount: ``payment_claim_capture`` claims a capture's amount and
``payment_claim_cancel`` the whole amount, each only when nothing is claimed yet (one live capture or cancel per
payment: Stripe captures once, and recon does on every PSP), each one conditional UPDATE in the
modification's own transaction, so a capture and a cancel (or two captures) racing on two workers serialise on
the payment's row (PostgreSQL re-evaluates the WHERE on the row it waited for; SQLite has one writer) and the
loser matches no row; the check ``payments_claims_within_authorisation`` is the backstop. A modification that
fails gives its claim back (``payment_release_claim``) in the transaction of that transition.
"""

from __future__ import annotations

from recon.db.sql import Query

payment_claim_capture = Query(
    "payment_claim_capture",
    "Run by capture creation, in its transaction: claims the capture's amount, at most the authorised amount, of an "
    "authorised manual-capture payment only while nothing is claimed (one capture per payment, as Stripe allows; "
    "no row: refused).",
    sql="""UPDATE payments SET authorisation_claimed = authorisation_claimed + :amount
           WHERE id = :payment_id AND status = 'authorised' AND capture_mode = 'manual' AND psp_reference IS NOT NULL
             AND authorisation_claimed = 0 AND authorisation_claimed + :amount <= amount
           RETURNING currency, psp""",
)

payment_claim_cancel = Query(
    "payment_claim_cancel",
    "Run by cancel creation, in its transaction: claims the whole authorisation of an authorised manual-capture "
    "payment only when no capture or cancel claims any of it (no row: refused).",
    sql="""UPDATE payments SET authorisation_claimed = amount
           WHERE id = :payment_id AND status = 'authorised' AND capture_mode = 'manual' AND psp_reference IS NOT NULL
             AND authorisation_claimed = 0
           RETURNING currency, psp, amount""",
)

payment_release_claim = Query(
    "payment_release_claim",
    "Run with a modification's transition to failed, in its transaction: its claim is given back.",
    sql="""UPDATE payments SET authorisation_claimed = authorisation_claimed - :amount
           WHERE id = :payment_id AND authorisation_claimed >= :amount RETURNING id""",
)

payment_set_captured = Query(
    "payment_set_captured",
    "Run with a capture's success, in its transaction, right after its payment moved to succeeded: the payment "
    "captured what the capture did, not its whole amount (the refund bound follows it).",
    sql="""UPDATE payments SET captured_amount = :captured
           WHERE id = :payment_id AND status = 'succeeded' AND refunded_amount <= :captured RETURNING id""",
)

payment_claim_room = Query(
    "payment_claim_room",
    "Run when a capture or cancel was refused, to say why: the payment's status, mode, reference and amounts.",
    sql="""SELECT id, status, capture_mode, psp_reference, currency, amount, authorisation_claimed
           FROM payments WHERE id = :payment_id""",
)

modification_insert = Query(
    "modification_insert",
    "Run by capture and cancel creation (`recon capture`, `recon cancel`), after the payment's claim in the "
    "same transaction.",
    sql="""INSERT INTO modifications (payment_id, kind, modification_reference, amount, currency, psp, status,
                                      idempotency_key, requested_by, created_at, updated_at)
           VALUES (:payment_id, :kind, :modification_reference, :amount, :currency, :psp, 'created',
                   :idempotency_key, :requested_by, {now}, {now})
           RETURNING id""",
)


modification_counts = Query(
    "modification_counts",
    "Run by `recon stats` and the metrics: captures and cancels per kind, status and currency, with their sum.",
    sql="""SELECT kind, status, currency, count(*) AS n, sum(amount) AS amount FROM modifications
           GROUP BY kind, status, currency""",
)

payment_authorised_totals = Query(
    "payment_authorised_totals",
    "Run by `recon stats` and the metrics: money authorised and not captured, per currency (partial index "
    "payments_authorised).",
    sql="""SELECT currency, count(*) AS n, sum(amount) AS amount FROM payments WHERE status = 'authorised'
           GROUP BY currency""",
)

payment_list_authorised = Query(
    "payment_list_authorised",
    "Run by `recon sweep`: authorised payments of a PSP authorised before :cutoff (expiring or expired), a page "
    "after an id cursor (partial index payments_authorised).",
    sql="""SELECT id, merchant_reference, psp, amount, currency, authorised_at FROM payments
           WHERE status = 'authorised' AND psp = :psp AND authorised_at < :cutoff AND id > :after_id
           ORDER BY id LIMIT :n""",
)
