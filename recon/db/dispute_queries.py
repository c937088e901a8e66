"""Every SQL statement about disputes; only ``recon.db.dispute_store`` executes these. Placeholders as in
``recon.db.sql``."""

from __future__ import annotations

from recon.db.sql import Query

DISPUTE_COLUMNS = ("id, payment_id, psp, psp_dispute_id, status, amount, currency, fee, reason, psp_status, "
                   "evidence_due_by, opened_at, updated_at")

dispute_insert_if_new = Query(
    "dispute_insert_if_new",
    "Run by the webhook job and the listing: the dispute the PSP tells of, once (unique on psp and its id; no "
    "row: known); opened when the PSP says it was (a listing's creation), else now.",
    postgresql="""INSERT INTO disputes (payment_id, psp, psp_dispute_id, status, amount, currency, fee, reason,
                                        psp_status, evidence_due_by, opened_at, updated_at)
                  VALUES (:payment_id, :psp, :psp_dispute_id, :status, :amount, :currency, :fee, :reason,
                          :psp_status, :evidence_due_by, coalesce(CAST(:opened_at AS timestamptz), {now}), {now})
                  ON CONFLICT (psp, psp_dispute_id) DO NOTHING
                  RETURNING id""",
    sqlite="""INSERT INTO disputes (payment_id, psp, psp_dispute_id, status, amount, currency, fee, reason, psp_status,
                                    evidence_due_by, opened_at, updated_at)
              VALUES (:payment_id, :psp, :psp_dispute_id, :status, :amount, :currency, :fee, :reason, :psp_status,
                      :evidence_due_by, coalesce(:opened_at, {now}), {now})
              ON CONFLICT (psp, psp_dispute_id) DO NOTHING
              RETURNING id""",
)

dispute_get_for_update = Query(
    "dispute_get_for_update",
    "Run by the webhook job before a dispute's change: the row, locked on PostgreSQL.",
    postgresql="""SELECT id, payment_id, psp, psp_dispute_id, status, amount, currency, fee, reason, psp_status,
                         evidence_due_by, opened_at, updated_at
                  FROM disputes WHERE psp = :psp AND psp_dispute_id = :psp_dispute_id FOR UPDATE""",
    sqlite="""SELECT id, payment_id, psp, psp_dispute_id, status, amount, currency, fee, reason, psp_status,
                     evidence_due_by, opened_at, updated_at
              FROM disputes WHERE psp = :psp AND psp_dispute_id = :psp_dispute_id""",
)

dispute_update_if_status = Query(
    "dispute_update_if_status",
    "Run by the webhook job: a dispute's new status and what the PSP says now (compare-and-set on the status; "
    "what the PSP did not say is kept).",
    sql="""UPDATE disputes SET status = :to_status, updated_at = {now},
               amount = coalesce(:amount, amount), currency = coalesce(:currency, currency),
               fee = coalesce(:fee, fee), reason = coalesce(:reason, reason),
               psp_status = coalesce(:psp_status, psp_status),
               evidence_due_by = coalesce(:evidence_due_by, evidence_due_by)
           WHERE id = :id AND status = :from_status
           RETURNING id""",
)

dispute_event_insert = Query(
    "dispute_event_insert",
    "Run with every dispute change or note: its audit trail.",
    sql="""INSERT INTO dispute_events (dispute_id, from_status, to_status, source, job_id, attempt, details, at)
           VALUES (:dispute_id, :from_status, :to_status, :source, :job_id, :attempt, {json:details}, {now})""",
)

dispute_list_for_payment = Query(
    "dispute_list_for_payment", "Run by `recon payments show` and the review desk: a payment's disputes.",
    sql="""SELECT id, payment_id, psp, psp_dispute_id, status, amount, currency, fee, reason, psp_status,
                  evidence_due_by, opened_at, updated_at
           FROM disputes WHERE payment_id = :payment_id ORDER BY id""",
)

dispute_get = Query(
    "dispute_get", "Run by `recon disputes show`: one dispute by the PSP's id (of any PSP when psp is NULL).",
    sql="""SELECT id, payment_id, psp, psp_dispute_id, status, amount, currency, fee, reason, psp_status,
                  evidence_due_by, opened_at, updated_at
           FROM disputes WHERE psp_dispute_id = :psp_dispute_id AND (CAST(:psp AS TEXT) IS NULL OR psp = :psp)
           ORDER BY id LIMIT 2""",
)

dispute_list_page = Query(
    "dispute_list_page",
    "Run by `recon disputes list`: disputes by id, filtered by status and PSP when given, a page after a cursor.",
    sql="""SELECT id, payment_id, psp, psp_dispute_id, status, amount, currency, fee, reason, psp_status,
                  evidence_due_by, opened_at, updated_at
           FROM disputes
           WHERE id > :after_id AND (CAST(:status AS TEXT) IS NULL OR status = :status)
             AND (CAST(:psp AS TEXT) IS NULL OR psp = :psp)
           ORDER BY id LIMIT :n""",
)

dispute_events_of = Query(
    "dispute_events_of", "Run by `recon disputes show`: a dispute's audit trail, oldest first.",
    sql="""SELECT from_status, to_status, source, job_id, attempt, details, at
           FROM dispute_events WHERE dispute_id = :dispute_id ORDER BY id""",
)

dispute_open_totals = Query(
    "dispute_open_totals",
    "Run by `recon stats`, the metrics and the overview: open disputes per currency, the amount withdrawn, the "
    "fees, and how many have their evidence due before :soon (the partial index disputes_open_due).",
    sql="""SELECT currency, count(*) AS n, coalesce(sum(amount), 0) AS withdrawn, coalesce(sum(fee), 0) AS fees,
                  sum(CASE WHEN evidence_due_by IS NOT NULL AND evidence_due_by < :soon THEN 1 ELSE 0 END) AS due_soon
           FROM disputes WHERE status = 'opened' GROUP BY currency ORDER BY currency""",
)

dispute_status_counts = Query(
    "dispute_status_counts", "Run by `recon stats` and `recon report`: disputes per PSP and status.",
    sql="""SELECT psp, status, count(*) AS n FROM disputes GROUP BY psp, status ORDER BY psp, status""",
)

dispute_by_id = Query(
    "dispute_by_id", "Run by `recon payouts show`: the dispute a payout line is linked to.",
    sql="""SELECT id, payment_id, psp, psp_dispute_id, status, amount, currency, fee, reason, psp_status,
                  evidence_due_by, opened_at, updated_at
           FROM disputes WHERE id = :id""",
)

dispute_oldest_open = Query(
    "dispute_oldest_open",
    "Run by the `disputes` job and `recon sweep --disputes`: when the oldest dispute still open with a PSP opened "
    "(its listing window reaches back to it: a dispute is listed by its creation and decided weeks later).",
    sql="""SELECT min(opened_at) AS opened_at FROM disputes WHERE psp = :psp AND status = 'opened'""",
)

dispute_read_get = Query(
    "dispute_read_get",
    "Run by the `disputes` job and `recon sweep --disputes`: where the PSP's listing was last read to (no row: "
    "never).",
    sql="""SELECT read_until FROM dispute_reads WHERE psp = :psp""",
)

dispute_read_advance = Query(
    "dispute_read_advance",
    "Run by the `disputes` job and `recon sweep --disputes` after a listing read without an error: the cursor "
    "moves to the window's end, never back (an older window read later leaves it).",
    sql="""INSERT INTO dispute_reads (psp, read_until, read_at) VALUES (:psp, :read_until, {now})
           ON CONFLICT (psp) DO UPDATE SET
               read_until = CASE WHEN excluded.read_until > dispute_reads.read_until THEN excluded.read_until
                                 ELSE dispute_reads.read_until END,
               read_at = excluded.read_at""",
)
