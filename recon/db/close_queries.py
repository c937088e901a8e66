"""Every SQL statement of the close (``recon.db.close_store`` executes them): ``payout_matches`` and
``payout_exceptions`` (migration 0017), ``close_runs``, the bank entries it reads and links, and the dispute fees
its payouts' lines carry. A payout's own statements: ``recon.db.payout_queries``.

Days (``booking_date``, a run's window) are ``date`` on PostgreSQL and ISO text on SQLite (which sorts right).
"""

from __future__ import annotations

from recon.db.sql import Query

EXCEPTION_COLUMNS = """id, kind, payout_id, bank_entry_id, detail, state, created_at, resolved_by, resolution,
    resolved_at"""
#: a bank entry as the close sees it: signed (a debit's amount negative, as a negative payout's)
CREDIT_COLUMNS = """id, account, CASE WHEN direction = 'debit' THEN -amount ELSE amount END AS amount, direction,
    currency, booking_date, value_date, bank_reference, end_to_end_id, remittance, payout_id"""

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
