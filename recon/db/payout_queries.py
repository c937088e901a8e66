"""Every SQL statement about ``payouts``, ``payout_lines``, ``payout_events``, ``payout_matches`` and
``payout_exceptions`` (migration 0017), and the reads of ``payments`` and ``bank_entries`` that link a payout to
them; only ``recon.db.payout_store`` executes these.

Days (``arrival_date``, ``booking_date``) are ``date`` on PostgreSQL and ISO text on SQLite (which sorts right).
"""

from __future__ import annotations

from recon.db.sql import Query

PAYOUT_COLUMNS = """id, psp, merchant_account, payout_ref, amount, currency, status, arrival_date, trace_ref,
    statement_descriptor, digest, version, line_count, lines_net, fetched_at, updated_at"""
LINE_COLUMNS = """id, payout_id, line_ref, kind, psp_reference, merchant_reference, gross, fee, net, currency,
    payment_id, missing_locally, movement_reference, refund_id, dispute_id"""
EXCEPTION_COLUMNS = """id, kind, payout_id, bank_entry_id, detail, state, created_at, resolved_by, resolution,
    resolved_at"""
#: a bank entry as the close sees it: signed (a debit's amount negative, as a negative payout's)
CREDIT_COLUMNS = """id, account, CASE WHEN direction = 'debit' THEN -amount ELSE amount END AS amount, direction,
    currency, booking_date, value_date, bank_reference, end_to_end_id, remittance, payout_id"""

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

dispute_fees_of_payouts = Query(
    "dispute_fees_of_payouts",
    "Run by the close: each dispute with a fee that a line of the payouts :ids carries, and the fees all the "
    "payout lines linked to it carry in its currency (any payout: a won dispute's reinstatement may come later).",
    sql="""SELECT l.payout_id, p.payout_ref, d.id AS dispute_id, d.psp_dispute_id, d.fee, d.currency,
                  (SELECT coalesce(sum(x.fee), 0) FROM payout_lines x
                   WHERE x.dispute_id = d.id AND x.currency = d.currency) AS carried,
                  (SELECT count(*) FROM payout_lines x
                   WHERE x.dispute_id = d.id AND x.currency <> d.currency) AS other_currency_lines
           FROM payout_lines l JOIN disputes d ON d.id = l.dispute_id JOIN payouts p ON p.id = l.payout_id
           WHERE l.payout_id IN :ids AND d.fee IS NOT NULL AND d.currency IS NOT NULL
           GROUP BY l.payout_id, p.payout_ref, d.id, d.psp_dispute_id, d.fee, d.currency
           ORDER BY l.payout_id, d.id""",
    expanding=("ids",),
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

credit_list = Query(
    "credit_list",
    "Run by the close: the entries of :accounts booked in [:since, :until), credits and debits (a negative "
    "payout is a debit), by id.",
    sql=f"""SELECT {CREDIT_COLUMNS} FROM bank_entries
            WHERE account IN :accounts AND booking_date >= :since AND booking_date < :until
              AND id > :after_id
            ORDER BY id LIMIT :n""",  # nosec B608  # column list constant
    expanding=("accounts",),
)

credit_get = Query(
    "credit_get",
    "Run by `recon payouts show` and the console: the bank entries a payout matched.",
    sql=f"""SELECT {CREDIT_COLUMNS} FROM bank_entries
            WHERE id IN (SELECT bank_entry_id FROM payout_matches WHERE payout_id = :payout_id) ORDER BY id""",  # nosec B608
)

match_insert = Query(
    "match_insert",
    "Run by the close: the payouts explained by bank entries (each pair stored once). PostgreSQL: the close's "
    "pairs as one JSON array in one statement; SQLite (in process, no round trips): executemany.",
    postgresql="""INSERT INTO payout_matches (payout_id, bank_entry_id, rule, bank_fee, matched_at)
                  SELECT r.payout_id, r.bank_entry_id, r.rule, r.bank_fee, {now}
                  FROM jsonb_to_recordset({json:rows}) AS r(payout_id bigint, bank_entry_id bigint, rule text,
                                                            bank_fee bigint)
                  ON CONFLICT (payout_id, bank_entry_id) DO NOTHING""",
    sqlite="""INSERT INTO payout_matches (payout_id, bank_entry_id, rule, bank_fee, matched_at)
              VALUES (:payout_id, :bank_entry_id, :rule, :bank_fee, {now})
              ON CONFLICT (payout_id, bank_entry_id) DO NOTHING""",
)

entry_link = Query(
    "entry_link",
    "Run by the close with match_insert: each entry's own link to (the first of) its payouts. PostgreSQL: one "
    "JSON array of (entry, payout) in the close's order, the first pair of an entry winning; SQLite: executemany.",
    postgresql="""UPDATE bank_entries e SET payout_id = l.payout_id
                  FROM (SELECT DISTINCT ON (r.id) r.id, r.payout_id
                        FROM ROWS FROM (jsonb_to_recordset({json:rows}) AS (id bigint, payout_id bigint))
                             WITH ORDINALITY AS r(id, payout_id, n)
                        ORDER BY r.id, r.n) AS l
                  WHERE e.id = l.id AND e.payout_id IS NULL""",
    sqlite="UPDATE bank_entries SET payout_id = :payout_id WHERE id = :id AND payout_id IS NULL",
)

match_list = Query(
    "match_list",
    "Run by the close: the matches of the payouts :ids.",
    sql="SELECT payout_id, bank_entry_id, rule, bank_fee FROM payout_matches WHERE payout_id IN :ids",
    expanding=("ids",),
)

match_list_of_entries = Query(
    "match_list_of_entries",
    "Run by the close: the matches of the bank entries :ids (a credit matched to a payout outside the window).",
    sql="SELECT payout_id, bank_entry_id, rule, bank_fee FROM payout_matches WHERE bank_entry_id IN :ids",
    expanding=("ids",),
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

exception_insert = Query(
    "exception_insert",
    "Run by the close: its exceptions, each unless one with its key is open, or was resolved by a person (their "
    "word stands until the payout changes: a reopened payout's exceptions are cleared). PostgreSQL: one JSON "
    "array in one statement, in order; SQLite: executemany.",
    postgresql="""INSERT INTO payout_exceptions (exception_key, kind, payout_id, bank_entry_id, detail, state,
                                                 created_at)
                  SELECT r.key, r.kind, r.payout_id, r.bank_entry_id, r.detail, 'open', {now}
                  FROM ROWS FROM (jsonb_to_recordset({json:rows}) AS (key text, kind text, payout_id bigint,
                                                                       bank_entry_id bigint, detail text))
                       WITH ORDINALITY AS r(key, kind, payout_id, bank_entry_id, detail, n)
                  WHERE NOT EXISTS (SELECT 1 FROM payout_exceptions x
                                    WHERE x.exception_key = r.key AND x.state = 'resolved')
                  ORDER BY r.n
                  ON CONFLICT (exception_key) WHERE state = 'open' DO NOTHING""",
    sqlite="""INSERT INTO payout_exceptions (exception_key, kind, payout_id, bank_entry_id, detail, state, created_at)
              SELECT :key, :kind, :payout_id, :bank_entry_id, :detail, 'open', {now}
              WHERE NOT EXISTS (SELECT 1 FROM payout_exceptions WHERE exception_key = :key AND state = 'resolved')
              ON CONFLICT (exception_key) WHERE state = 'open' DO NOTHING""",
)

exception_open_in_scope = Query(
    "exception_open_in_scope",
    "Run by the close: the open exceptions of the payouts :payouts or the entries :entries.",
    sql=f"""SELECT {EXCEPTION_COLUMNS}, exception_key FROM payout_exceptions
            WHERE state = 'open' AND (payout_id IN :payouts OR bank_entry_id IN :entries) ORDER BY id""",  # nosec B608
    expanding=("payouts", "entries"),
)

exception_clear = Query(
    "exception_clear",
    "Run by the close: the open exceptions :ids the evidence now explains are cleared.",
    sql="""UPDATE payout_exceptions SET state = 'cleared', resolved_at = {now}, resolution = :why
           WHERE id IN :ids AND state = 'open'""",
    expanding=("ids",),
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

exception_list = Query(
    "exception_list",
    "Run by `recon payouts exceptions`, `recon review list` and the console: exceptions by state, kind and "
    "payout PSP (a credit's exception has none: left out when :psp is given), by id.",
    postgresql=f"""SELECT {EXCEPTION_COLUMNS} FROM payout_exceptions
                   WHERE (CAST(:state AS text) IS NULL OR state = :state)
                     AND (CAST(:kind AS text) IS NULL OR kind = :kind)
                     AND (CAST(:psp AS text) IS NULL OR payout_id IN (SELECT id FROM payouts WHERE psp = :psp))
                     AND id > :after_id
                   ORDER BY id LIMIT :n""",  # nosec B608  # column list constant
    sqlite=f"""SELECT {EXCEPTION_COLUMNS} FROM payout_exceptions
               WHERE (:state IS NULL OR state = :state) AND (:kind IS NULL OR kind = :kind)
                 AND (:psp IS NULL OR payout_id IN (SELECT id FROM payouts WHERE psp = :psp)) AND id > :after_id
               ORDER BY id LIMIT :n""",  # nosec B608  # column list constant
)

exception_of_payout = Query(
    "exception_of_payout",
    "Run by `recon payouts show`: a payout's exceptions, every state.",
    sql=f"SELECT {EXCEPTION_COLUMNS} FROM payout_exceptions WHERE payout_id = :payout_id ORDER BY id",  # nosec B608
)

exception_get = Query(
    "exception_get",
    "Run by `recon payouts resolve`: one exception.",
    sql=f"SELECT {EXCEPTION_COLUMNS} FROM payout_exceptions WHERE id = :id",  # nosec B608
)

exception_resolve = Query(
    "exception_resolve",
    "Run by `recon payouts resolve` and the console: an open exception resolved by a person, with a reason.",
    sql="""UPDATE payout_exceptions SET state = 'resolved', resolved_by = :by, resolution = :reason,
                                        resolved_at = {now}
           WHERE id = :id AND state = 'open'""",
)

close_run_insert = Query(
    "close_run_insert",
    "Run by every close (`recon close`, the close schedule, the demo): the window it closed and what it left open.",
    sql="""INSERT INTO close_runs (psp, since, until, ran_at, payouts, open_items, closed)
           VALUES (:psp, :since, :until, {now}, :payouts, :open_items, :closed)""",
)

close_run_last = Query(
    "close_run_last",
    "Run by `recon stats`, the console's overview and the metrics: each PSP's last close.",
    sql="""SELECT r.psp, r.since, r.until, r.ran_at, r.payouts, r.open_items, r.closed FROM close_runs r
           WHERE r.id = (SELECT max(x.id) FROM close_runs x WHERE x.psp = r.psp) ORDER BY r.psp""",
)

exception_open_by_kind = Query(
    "exception_open_by_kind",
    "Run by `recon stats`, the review desk and the metrics: the open payout exceptions by kind.",
    sql="SELECT kind, COUNT(*) AS n FROM payout_exceptions WHERE state = 'open' GROUP BY kind ORDER BY kind",
)

exception_open_amounts = Query(
    "exception_open_amounts",
    "Run by `recon stats` and the metrics: per currency, the payouts with an open exception and the credits "
    "with one that names no payout (unexplained or ambiguous), their count and amount (debits negative).",
    sql="""SELECT 'payouts' AS side, currency, COUNT(*) AS n, SUM(amount) AS amount FROM payouts
           WHERE id IN (SELECT payout_id FROM payout_exceptions WHERE state = 'open' AND payout_id IS NOT NULL)
           GROUP BY currency
           UNION ALL
           SELECT 'bank_entries' AS side, currency, COUNT(*) AS n,
                  SUM(CASE WHEN direction = 'debit' THEN -amount ELSE amount END) AS amount FROM bank_entries
           WHERE id IN (SELECT bank_entry_id FROM payout_exceptions
                        WHERE state = 'open' AND payout_id IS NULL AND bank_entry_id IS NOT NULL)
           GROUP BY currency
           ORDER BY side, currency""",
)
