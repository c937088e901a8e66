"""Every SQL statement that changes a payment after its creation: compare-and-set transitions (one and many),
notes (an audit event with no status change), the PSP reference remembered, the key generation moved, the lock
before a send, and the audit trail's insert. Named ``<table>_<verb>[_<guard>]``, with who runs it and why; only
``recon.db.transition_store`` executes these. Placeholders as in ``recon.db.sql``.
"""

from __future__ import annotations

# Bandit: every "nosec B608" here marks an f-string that interpolates module constants only (column
# lists, state predicates); values always travel as bound parameters.
from recon.db.payment_queries import UNFINISHED
from recon.db.sql import Query

# A PSP reference, once stored, is never replaced: a transition naming another one matches no row (it does not
# move the payment) and the store tells that apart from a lost compare-and-set (PspReferenceConflict).
_SAME_REFERENCE = "({stored} IS NULL OR {given} IS NULL OR {stored} = {given})"

payment_event_insert_many = Query(
    "payment_event_insert_many",
    "Run with every payment change: the audit trail, one row per status change.",
    postgresql="""
        INSERT INTO payment_events (payment_id, from_status, to_status, source, job_id, attempt, details, at)
        SELECT r.payment_id, r.from_status, r.to_status, r.source, r.job_id, r.attempt, r.details, {now}
        FROM jsonb_to_recordset({json:rows}) AS r(payment_id bigint, from_status text, to_status text,
             source text, job_id bigint, attempt int, details jsonb)
    """,
    sqlite="""
        INSERT INTO payment_events (payment_id, from_status, to_status, source, job_id, attempt, details, at)
        SELECT value ->> '$.payment_id', value ->> '$.from_status', value ->> '$.to_status', value ->> '$.source',
               value ->> '$.job_id', value ->> '$.attempt', json_extract(value, '$.details'), :now
        FROM json_each(:rows) ORDER BY key
    """,
)

payment_transition_if_status = Query(
    "payment_transition_if_status",
    "Run by charge and reconcile handlers: compare-and-set of a payment's status (no row: it changed, or the "
    "transition names another PSP reference than the one stored).",
    sql=f"""
        UPDATE payments SET status = :to_status, updated_at = {{now}},
            psp_reference = coalesce(psp_reference, :psp_reference),
            failure_reason = coalesce(:failure_reason, failure_reason),
            review_reason = coalesce(:review_reason, review_reason),
            review_since = CASE WHEN :to_status = 'needs_review' THEN {{now}} ELSE review_since END,
            captured_amount = CASE WHEN :to_status = 'succeeded' AND captured_amount = 0 THEN amount
                                   ELSE captured_amount END,
            authorised_at = CASE WHEN :to_status = 'authorised' THEN {{now}} ELSE authorised_at END
        WHERE id = :id AND status = :from_status
          AND {_SAME_REFERENCE.format(stored="psp_reference", given="CAST(:psp_reference AS TEXT)")}
        RETURNING id
    """,  # nosec B608  # constant SQL, values bound
)

payment_set_psp_reference_if_status = Query(
    "payment_set_psp_reference_if_status",
    "Run by the charge and webhook jobs when the PSP answered pending: keep its reference for reconciliation "
    "(only where none is stored: a stored reference is never replaced).",
    sql="""UPDATE payments SET psp_reference = :psp_reference, updated_at = {now}
           WHERE id = :id AND status = :status AND psp_reference IS NULL RETURNING id""",
)

payment_touch_if_unfinished = Query(
    "payment_touch_if_unfinished",
    "Run by the charge handler right before each send: locks the payment row and proves it is still "
    "unfinished, so a concurrent 'failed, never reached the PSP' heal and a send cannot both happen; "
    "stamps when the current idempotency key was first sent (PSPs count a key's retention from its first use).",
    sql=f"""UPDATE payments SET updated_at = {{now}}, key_sent_at = coalesce(key_sent_at, {{now}})
            WHERE id = :id AND {UNFINISHED} RETURNING status""",  # nosec B608  # constant SQL, values bound
)

payment_touch_if_status = Query(
    "payment_touch_if_status",
    "Run before an audit event without a status change (new PSP evidence for a pending payment): locks the "
    "row and proves the status is still :status, so the event never lands after a concurrent change.",
    sql="UPDATE payments SET updated_at = {now} WHERE id = :id AND status = :status RETURNING id",
)

payment_next_key_generation_if = Query(
    "payment_next_key_generation_if",
    "Run by the charge handler when the PSP has forgotten the current key and has no payment for it: the "
    "next charge uses a new key generation (compare-and-set on the generation; no row: someone else did).",
    sql=f"""UPDATE payments SET key_generation = key_generation + 1, key_sent_at = NULL, updated_at = {{now}}
            WHERE id = :id AND key_generation = :generation AND {UNFINISHED}
            RETURNING key_generation""",  # nosec B608  # constant SQL, values bound
)

payment_touch_many_if_status = Query(
    "payment_touch_many_if_status",
    "Run before audit events without a status change for several payments at once (webhook jobs' finish): "
    "each a compare-and-set on its payment's status, as payment_touch_if_status; returns the ids still there.",
    postgresql="""
        UPDATE payments AS p SET updated_at = {now}
        FROM jsonb_to_recordset({json:rows}) AS r(id bigint, status text)
        WHERE p.id = r.id AND p.status = r.status
        RETURNING p.id
    """,
    sqlite="""
        UPDATE payments SET updated_at = :now
        FROM (SELECT value ->> '$.id' AS id, value ->> '$.status' AS status FROM json_each(:rows)) AS r
        WHERE payments.id = r.id AND payments.status = r.status
        RETURNING payments.id
    """,
)

payment_transition_many_if_status = Query(
    "payment_transition_many_if_status",
    "Run in the fenced finish of reconcile window jobs and webhook jobs: their transitions, each a "
    "compare-and-set on its own payment's status (and, as payment_transition_if_status, never replacing a stored "
    "PSP reference), in one statement; returns the ids that moved (the others changed meanwhile, or conflict).",
    postgresql=f"""
        UPDATE payments AS p SET status = r.to_status, updated_at = {{now}},
            psp_reference = coalesce(p.psp_reference, r.psp_reference),
            failure_reason = coalesce(r.failure_reason, p.failure_reason),
            review_reason = coalesce(r.review_reason, p.review_reason),
            review_since = CASE WHEN r.to_status = 'needs_review' THEN {{now}} ELSE p.review_since END,
            captured_amount = CASE WHEN r.to_status = 'succeeded' AND p.captured_amount = 0 THEN p.amount
                                   ELSE p.captured_amount END,
            authorised_at = CASE WHEN r.to_status = 'authorised' THEN {{now}} ELSE p.authorised_at END
        FROM jsonb_to_recordset({{json:rows}}) AS r(id bigint, from_status text, to_status text, psp_reference text,
             failure_reason text, review_reason text)
        WHERE p.id = r.id AND p.status = r.from_status
          AND {_SAME_REFERENCE.format(stored="p.psp_reference", given="r.psp_reference")}
        RETURNING p.id
    """,  # nosec B608  # constant SQL, values bound
    sqlite=f"""
        UPDATE payments SET status = r.to_status, updated_at = :now,
            psp_reference = coalesce(payments.psp_reference, r.psp_reference),
            failure_reason = coalesce(r.failure_reason, payments.failure_reason),
            review_reason = coalesce(r.review_reason, payments.review_reason),
            review_since = CASE WHEN r.to_status = 'needs_review' THEN :now ELSE payments.review_since END,
            captured_amount = CASE WHEN r.to_status = 'succeeded' AND payments.captured_amount = 0 THEN payments.amount
                                   ELSE payments.captured_amount END,
            authorised_at = CASE WHEN r.to_status = 'authorised' THEN :now ELSE payments.authorised_at END
        FROM (SELECT value ->> '$.id' AS id, value ->> '$.from_status' AS from_status,
                     value ->> '$.to_status' AS to_status, value ->> '$.psp_reference' AS psp_reference,
                     value ->> '$.failure_reason' AS failure_reason, value ->> '$.review_reason' AS review_reason
              FROM json_each(:rows)) AS r
        WHERE payments.id = r.id AND payments.status = r.from_status
          AND {_SAME_REFERENCE.format(stored="payments.psp_reference", given="r.psp_reference")}
        RETURNING payments.id
    """,  # nosec B608  # constant SQL, values bound
)

payment_references_many = Query(
    "payment_references_many",
    "Run after transitions that matched no row: each payment's status and PSP reference, to tell a stored "
    "reference that refused another apart from a lost compare-and-set; and before transitions whose reasons "
    "hold a card-like run: the reference those reasons keep as it is.",
    sql="SELECT id, status, psp_reference FROM payments WHERE id IN :ids",
    expanding=("ids",),
)
