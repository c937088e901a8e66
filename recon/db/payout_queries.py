"""Every SQL statement about ``payouts``, ``payout_lines`` and ``payout_events`` (migration 0017), the reads of
``payments``, ``refunds`` and ``disputes`` that link a payout's lines to them, and what a payout's reopening
undoes of its close; ``recon.db.payout_store`` executes these (and ``recon.db.close_store`` the events it adds).
The close's own statements (matches, exceptions, its runs, the bank entries it reads): ``recon.db.close_queries``.

Days (``arrival_date``) are ``date`` on PostgreSQL and ISO text on SQLite (which sorts right).
"""

from __future__ import annotations

from recon.db.sql import Query

PAYOUT_COLUMNS = """id, psp, merchant_account, payout_ref, amount, currency, status, arrival_date, trace_ref,
    statement_descriptor, digest, version, line_count, lines_net, fetched_at, updated_at"""
LINE_COLUMNS = """id, payout_id, line_ref, kind, psp_reference, merchant_reference, gross, fee, net, currency,
    payment_id, missing_locally, movement_reference, refund_id, dispute_id"""

payout_get_by_ref = Query(
    "payout_get_by_ref",
    "Run by the payouts job before storing a fetched payout: the stored one, to compare.",
    sql=f"SELECT {PAYOUT_COLUMNS} FROM payouts WHERE psp = :psp AND payout_ref = :payout_ref",  # nosec B608
)

payout_get = Query(
    "payout_get",
    "Run by `recon payouts show` and the console: one payout by id.",
    sql=f"SELECT {PAYOUT_COLUMNS} FROM payouts WHERE id = :id",  # nosec B608  # column list constant
)

payout_psps = Query(
    "payout_psps",
    "Run by `recon payouts show` when a payout id is given without a PSP: the PSPs that have payouts.",
    sql="SELECT DISTINCT psp FROM payouts ORDER BY psp",
)

payout_insert = Query(
    "payout_insert",
    "Run by the payouts job: a payout seen for the first time (a concurrent job's copy wins: no row).",
    sql="""INSERT INTO payouts (psp, merchant_account, payout_ref, amount, currency, status, arrival_date, trace_ref,
                                statement_descriptor, digest, version, line_count, lines_net, fetched_at, updated_at)
           VALUES (:psp, :merchant_account, :payout_ref, :amount, :currency, :status, :arrival_date, :trace_ref,
                   :statement_descriptor, :digest, 1, :line_count, :lines_net, {now}, {now})
           ON CONFLICT (psp, payout_ref) DO NOTHING
           RETURNING id""",
)

payout_update_if_version = Query(
    "payout_update_if_version",
    "Run by the payouts job when a stored payout comes back changed: compare-and-set on its version.",
    sql="""UPDATE payouts SET amount = :amount, currency = :currency, status = :status, arrival_date = :arrival_date,
                              trace_ref = :trace_ref, statement_descriptor = :statement_descriptor, digest = :digest,
                              version = version + 1, line_count = :line_count, lines_net = :lines_net,
                              fetched_at = {now}, updated_at = {now}
           WHERE id = :id AND version = :version""",
)

payout_touch = Query(
    "payout_touch",
    "Run by the payouts job when a stored payout comes back the same: when it was last seen.",
    sql="UPDATE payouts SET fetched_at = {now} WHERE id = :id",
)

payout_line_insert = Query(
    "payout_line_insert",
    "Run by the payouts job (executemany): a payout's lines; a line stored before is left alone.",
    sql="""INSERT INTO payout_lines (payout_id, line_ref, kind, psp_reference, merchant_reference, gross, fee, net,
                                     currency, payment_id, missing_locally, movement_reference, refund_id, dispute_id)
           VALUES (:payout_id, :line_ref, :kind, :psp_reference, :merchant_reference, :gross, :fee, :net, :currency,
                   :payment_id, :missing_locally, :movement_reference, :refund_id, :dispute_id)
           ON CONFLICT (payout_id, line_ref) DO NOTHING""",
)

refund_ids_by_psp_refund_id = Query(
    "refund_ids_by_psp_refund_id",
    "Run by the payouts job: our refunds of :psp whose PSP refund ids are among :refs (a line's movement).",
    sql="SELECT psp_refund_id AS ref, id FROM refunds WHERE psp = :psp AND psp_refund_id IN :refs",
    expanding=("refs",),
)

dispute_ids_by_psp_dispute_id = Query(
    "dispute_ids_by_psp_dispute_id",
    "Run by the payouts job: our disputes of :psp whose PSP ids are among :refs (a line's movement, or, Adyen's "
    "one dispute per payment, the payment's PSP reference).",
    sql="SELECT psp_dispute_id AS ref, id FROM disputes WHERE psp = :psp AND psp_dispute_id IN :refs",
    expanding=("refs",),
)

payment_ids_by_psp_reference = Query(
    "payment_ids_by_psp_reference",
    "Run by the payouts job: our payments of :psp whose PSP references are among :refs.",
    sql="SELECT psp_reference AS ref, id FROM payments WHERE psp = :psp AND psp_reference IN :refs",
    expanding=("refs",),
)

payment_ids_by_merchant_reference = Query(
    "payment_ids_by_merchant_reference",
    "Run by the payouts job for lines no PSP reference found: our payments of :psp by merchant reference (and "
    "account, where the payout has one).",
    sql="""SELECT merchant_reference AS ref, id FROM payments
           WHERE psp = :psp AND merchant_reference IN :refs AND (:account = '' OR merchant_account = :account)""",
    expanding=("refs",),
)

payout_event_insert = Query(
    "payout_event_insert",
    "Run by the payouts job and the close: one line of a payout's history.",
    sql="INSERT INTO payout_events (payout_id, at, kind, detail) VALUES (:payout_id, {now}, :kind, :detail)",
)

payout_event_insert_many = Query(
    "payout_event_insert_many",
    "Run by the close: the history lines of its new matches. PostgreSQL: one JSON array in one statement, in "
    "order; SQLite: executemany.",
    postgresql="""INSERT INTO payout_events (payout_id, at, kind, detail)
                  SELECT r.payout_id, {now}, r.kind, r.detail
                  FROM ROWS FROM (jsonb_to_recordset({json:rows}) AS (payout_id bigint, kind text, detail text))
                       WITH ORDINALITY AS r(payout_id, kind, detail, n)
                  ORDER BY r.n""",
    sqlite="INSERT INTO payout_events (payout_id, at, kind, detail) VALUES (:payout_id, {now}, :kind, :detail)",
)

payout_events_of = Query(
    "payout_events_of",
    "Run by `recon payouts show`: a payout's history, oldest first.",
    sql="SELECT payout_id, at, kind, detail FROM payout_events WHERE payout_id = :payout_id ORDER BY id",
)

payout_lines_of = Query(
    "payout_lines_of",
    "Run by the close and `recon payouts show`: a payout's lines, a page at a time by id.",
    sql=f"""SELECT {LINE_COLUMNS} FROM payout_lines WHERE payout_id = :payout_id AND id > :after_id
            ORDER BY id LIMIT :n""",  # nosec B608  # column list constant
)

#: the payouts of a close's window (`payout_list`'s conditions), for the reads of their lines in one statement
_WINDOW_PG = """SELECT id FROM payouts WHERE psp = :psp AND arrival_date >= CAST(:since AS date)
                 AND arrival_date < CAST(:until AS date) AND id <= :last_id"""
_WINDOW_SQLITE = """SELECT id FROM payouts WHERE psp = :psp AND arrival_date >= :since AND arrival_date < :until
                     AND id <= :last_id"""
_REPORT_LINES = """SELECT payout_id, merchant_reference, psp_reference, kind, gross, fee, net, currency, payment_id,
                          missing_locally
                   FROM payout_lines WHERE payout_id IN ({}) ORDER BY payout_id, id"""
_LINE_TOTALS = """SELECT kind, currency, SUM(gross) AS gross, SUM(fee) AS fee, SUM(net) AS net
                  FROM payout_lines WHERE payout_id IN ({}) GROUP BY kind, currency"""

payout_report_lines = Query(
    "payout_report_lines",
    "Run by the close's report, streamed: what it prints of the lines of the window's payouts (up to :last_id, "
    "the last the close read), by payout and id. One statement, not one per page of payouts: with no "
    "statistics (a table never analysed) the planner reads a page's `IN` list by a scan of every line.",
    postgresql=_REPORT_LINES.format(_WINDOW_PG),
    sqlite=_REPORT_LINES.format(_WINDOW_SQLITE),
)

payout_line_totals = Query(
    "payout_line_totals",
    "Run by the close: per line kind and currency of the window's payouts (up to :last_id), the sums of gross, "
    "fee and net.",
    postgresql=_LINE_TOTALS.format(_WINDOW_PG),
    sqlite=_LINE_TOTALS.format(_WINDOW_SQLITE),
)

payout_list = Query(
    "payout_list",
    "Run by `recon payouts list`, the close and the console: payouts by PSP, status and arrival window, by id.",
    postgresql=f"""SELECT {PAYOUT_COLUMNS} FROM payouts
                   WHERE (CAST(:psp AS text) IS NULL OR psp = :psp)
                     AND (CAST(:status AS text) IS NULL OR status = :status)
                     AND (CAST(:since AS date) IS NULL OR arrival_date >= CAST(:since AS date))
                     AND (CAST(:until AS date) IS NULL OR arrival_date < CAST(:until AS date))
                     AND id > :after_id
                   ORDER BY id LIMIT :n""",  # nosec B608  # column list constant
    sqlite=f"""SELECT {PAYOUT_COLUMNS} FROM payouts
               WHERE (:psp IS NULL OR psp = :psp) AND (:status IS NULL OR status = :status)
                 AND (:since IS NULL OR arrival_date >= :since) AND (:until IS NULL OR arrival_date < :until)
                 AND id > :after_id
               ORDER BY id LIMIT :n""",  # nosec B608  # column list constant
)

entry_unlink = Query(
    "entry_unlink",
    "Run when a payout is reopened (it changed at the PSP): its entries are unmatched again.",
    sql="""UPDATE bank_entries SET payout_id = NULL
           WHERE id IN (SELECT bank_entry_id FROM payout_matches WHERE payout_id = :payout_id)""",
)

match_delete = Query(
    "match_delete",
    "Run when a payout is reopened, after entry_unlink: its matches (the events keep what they were).",
    sql="DELETE FROM payout_matches WHERE payout_id = :payout_id",
)

exception_clear_of_payout = Query(
    "exception_clear_of_payout",
    "Run when a payout is reopened: its open and resolved exceptions are cleared (the next close decides again; "
    "a resolution keeps its operator and reason, the reopening appended).",
    sql="""UPDATE payout_exceptions SET state = 'cleared', resolved_at = {now},
                                        resolution = CASE WHEN resolution IS NULL THEN :why
                                                          ELSE resolution || ' / ' || :why END
           WHERE payout_id = :payout_id AND state IN ('open', 'resolved')""",
)
