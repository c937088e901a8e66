"""Every SQL statement about captures and cancels: their creation with the authorisation's bound, lookups,
compare-and-set transitions, notes and the audit trail, the sweep's and the stats' reads, and the payment's side
of a confirmed capture. Named ``<table>_<verb>[_<guard>]``, with who runs it and why; only
``recon.db.modification_store`` executes these. Placeholders as in ``recon.db.sql``.

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

# Bandit: every "nosec B608" here marks an f-string that interpolates module constants only (column
# lists, state predicates); values always travel as bound parameters.
from recon.db.sql import Query

MODIFICATION_COLUMNS = (
    "id, payment_id, kind, modification_reference, amount, currency, psp, status, psp_modification_id, "
    "idempotency_key, requested_by, failure_reason, review_reason, created_at, updated_at, sent_at"
)
UNFINISHED = "status IN ('created', 'processing', 'pending')"

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

modification_event_insert = Query(
    "modification_event_insert",
    "Run with every modification change: the audit trail, one row per change or note.",
    sql="""INSERT INTO modification_events (modification_id, from_status, to_status, source, job_id, attempt,
                                            details, at)
           VALUES (:modification_id, :from_status, :to_status, :source, :job_id, :attempt, {json:details}, {now})""",
)

modification_existing_references = Query(
    "modification_existing_references",
    "Run by `recon capture` / `recon cancel` before inserting: which references are taken already.",
    sql="SELECT modification_reference FROM modifications WHERE modification_reference IN :refs",
    expanding=("refs",),
)

modification_get = Query("modification_get", "Run by the capture and cancel handlers: one modification.",
                         sql=f"SELECT {MODIFICATION_COLUMNS} FROM modifications WHERE id = :id")  # nosec B608

modification_get_by_reference = Query(
    "modification_get_by_reference", "Run by webhooks naming our reference and by `recon capture` output.",
    sql=f"SELECT {MODIFICATION_COLUMNS} FROM modifications WHERE modification_reference = :ref",  # nosec B608
)

modification_get_by_psp_id = Query(
    "modification_get_by_psp_id", "Run by the webhook job: the modification an event names by the PSP's id.",
    sql=f"""SELECT {MODIFICATION_COLUMNS} FROM modifications WHERE psp = :psp AND psp_modification_id = :psp_id
            ORDER BY id LIMIT 1""",  # nosec B608
)

modification_list_for_payment = Query(
    "modification_list_for_payment", "Run by `recon payments show`: a payment's captures and cancels.",
    sql=f"SELECT {MODIFICATION_COLUMNS} FROM modifications WHERE payment_id = :payment_id ORDER BY id",  # nosec B608
)

modification_events_for = Query(
    "modification_events_for", "Run by `recon payments show --json` and the tests: a modification's audit trail.",
    sql="""SELECT id, modification_id, from_status, to_status, source, job_id, attempt, details, at
           FROM modification_events WHERE modification_id = :id ORDER BY id""",
)

modification_transition_if_status = Query(
    "modification_transition_if_status",
    "Run by the capture/cancel, reconcile and webhook jobs: compare-and-set of a modification's status (no row: "
    "it changed, or the transition names another PSP id than the one stored, which is never replaced).",
    sql="""
        UPDATE modifications SET status = :to_status, updated_at = {now},
            psp_modification_id = coalesce(psp_modification_id, :psp_modification_id),
            failure_reason = coalesce(:failure_reason, failure_reason),
            review_reason = coalesce(:review_reason, review_reason)
        WHERE id = :id AND status = :from_status
          AND (psp_modification_id IS NULL OR CAST(:psp_modification_id AS TEXT) IS NULL
               OR psp_modification_id = :psp_modification_id)
        RETURNING id, payment_id, kind, amount, modification_reference, requested_by
    """,
)

modification_touch_if_status = Query(
    "modification_touch_if_status",
    "Run before an audit event without a status change: proves the status is still :status (and locks the row).",
    sql="UPDATE modifications SET updated_at = {now} WHERE id = :id AND status = :status RETURNING id",
)

modification_set_psp_id_if_null = Query(
    "modification_set_psp_id_if_null",
    "Run by the modification's job the moment the PSP names its id (a pending answer): stored where none is.",
    sql="""UPDATE modifications SET psp_modification_id = :psp_id, updated_at = {now}
           WHERE id = :id AND status = :status AND psp_modification_id IS NULL RETURNING id""",
)

modification_mark_sent_if_unfinished = Query(
    "modification_mark_sent_if_unfinished",
    "Run by the capture/cancel job right before each send: locks the row, proves it is still unfinished (so a "
    "'never reached the PSP' heal and a send cannot both happen) and stamps when the request first went out.",
    sql=f"""UPDATE modifications SET updated_at = {{now}}, sent_at = coalesce(sent_at, {{now}})
            WHERE id = :id AND {UNFINISHED} RETURNING status""",  # nosec B608  # constant SQL, values bound
)

modification_list_stale = Query(
    "modification_list_stale",
    "Run by `recon sweep`: unfinished captures and cancels not changed since :cutoff, a page after an id cursor.",
    sql=f"""SELECT {MODIFICATION_COLUMNS} FROM modifications
            WHERE {UNFINISHED} AND updated_at < :cutoff AND (CAST(:psp AS TEXT) IS NULL OR psp = :psp)
              AND id > :after_id
            ORDER BY id LIMIT :n""",  # nosec B608  # constant SQL, values bound
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

modification_job_unfinished = Query(
    "modification_job_unfinished",
    "Run by the modification's reconcile job before 'never reached the PSP': may its own job still send?",
    sql="SELECT id FROM jobs WHERE unique_key = :key AND state NOT IN ('succeeded', 'dead', 'canceled')",
)
