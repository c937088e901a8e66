"""Every SQL statement about ``bank_statements`` and ``bank_entries`` (migration 0016); only
``recon.db.bank_store`` executes these.

Dates (``booking_date``, ``period_*``) are ``date`` on PostgreSQL and ISO text (``YYYY-MM-DD``) on SQLite, which
compares and sorts correctly as text.
"""

from __future__ import annotations

from recon.db.sql import Query

_STATEMENT_COLUMNS = """id, account, statement_ref, sequence, currency, opening_balance, closing_balance, period_start,
    period_end, entry_count, format, file_name, file_digest, imported_at"""
_ENTRY_COLUMNS = """id, account, entry_key, statement_id, booking_date, value_date, amount, direction, currency,
    bank_reference, end_to_end_id, counterparty, remittance, bank_code, payout_id, imported_at"""

bank_statement_insert = Query(
    "bank_statement_insert",
    "Run by `recon bank import` in its transaction: a statement, unless the same one is stored (then no row).",
    sql="""INSERT INTO bank_statements (account, statement_ref, sequence, currency, opening_balance, closing_balance,
                                        period_start, period_end, entry_count, format, file_name, file_digest,
                                        imported_at)
           VALUES (:account, :statement_ref, :sequence, :currency, :opening_balance, :closing_balance, :period_start,
                   :period_end, :entry_count, :format, :file_name, :file_digest, {now})
           ON CONFLICT (account, statement_ref, sequence, period_start, period_end) DO NOTHING
           RETURNING id""",
)

bank_statement_by_identity = Query(
    "bank_statement_by_identity",
    "Run by `recon bank import` when a statement was stored before: its row, to compare the balances.",
    sql=f"""SELECT {_STATEMENT_COLUMNS} FROM bank_statements
            WHERE account = :account AND statement_ref = :statement_ref AND sequence = :sequence
              AND period_start = :period_start AND period_end = :period_end""",  # nosec B608  # column list constant
)

bank_entry_known = Query(
    "bank_entry_known",
    "Run by `recon bank import` per batch: which of these keys (a JSON array) the account has, with what they said.",
    postgresql="""SELECT e.entry_key, e.amount, e.direction, e.currency, e.booking_date
                  FROM jsonb_array_elements_text({json:keys}) AS k(entry_key)
                  JOIN bank_entries e ON e.account = :account AND e.entry_key = k.entry_key""",
    sqlite="""SELECT entry_key, amount, direction, currency, booking_date FROM bank_entries
              WHERE account = :account AND entry_key IN (SELECT value FROM json_each(:keys))""",
)

bank_entry_insert = Query(
    "bank_entry_insert",
    "Run by `recon bank import` per batch: the new entries, in file order; a key stored already is left alone. "
    "PostgreSQL: the batch as one JSON array in one statement, returning the keys it stored; SQLite (in process, "
    "no round trips): executemany of the entries it does not have.",
    postgresql="""
        INSERT INTO bank_entries (account, entry_key, statement_id, booking_date, value_date, amount, direction,
                                  currency, bank_reference, end_to_end_id, counterparty, remittance, bank_code,
                                  imported_at)
        SELECT r.account, r.entry_key, r.statement_id, r.booking_date, r.value_date, r.amount, r.direction,
               r.currency, r.bank_reference, r.end_to_end_id, r.counterparty, r.remittance, r.bank_code, {now}
        FROM ROWS FROM (jsonb_to_recordset({json:rows}) AS (account text, entry_key text, statement_id bigint,
             booking_date date, value_date date, amount bigint, direction text, currency text, bank_reference text,
             end_to_end_id text, counterparty text, remittance text, bank_code text)) WITH ORDINALITY
             AS r(account, entry_key, statement_id, booking_date, value_date, amount, direction, currency,
                  bank_reference, end_to_end_id, counterparty, remittance, bank_code, n)
        ORDER BY r.n
        ON CONFLICT (account, entry_key) DO NOTHING
        RETURNING entry_key
    """,
    sqlite="""
        INSERT INTO bank_entries (account, entry_key, statement_id, booking_date, value_date, amount, direction,
                                  currency, bank_reference, end_to_end_id, counterparty, remittance, bank_code,
                                  imported_at)
        VALUES (:account, :entry_key, :statement_id, :booking_date, :value_date, :amount, :direction, :currency,
                :bank_reference, :end_to_end_id, :counterparty, :remittance, :bank_code, :now)
        ON CONFLICT (account, entry_key) DO NOTHING
    """,
)

bank_entry_list = Query(
    "bank_entry_list",
    "Run by `recon bank list`: entries of an account and from a day on, an id cursor per page.",
    postgresql=f"""SELECT {_ENTRY_COLUMNS} FROM bank_entries
                   WHERE (CAST(:account AS text) IS NULL OR account = :account)
                     AND (CAST(:since AS date) IS NULL OR booking_date >= CAST(:since AS date))
                     AND id > :after_id
                   ORDER BY id LIMIT :n""",  # nosec B608  # column list constant
    sqlite=f"""SELECT {_ENTRY_COLUMNS} FROM bank_entries
               WHERE (:account IS NULL OR account = :account) AND (:since IS NULL OR booking_date >= :since)
                 AND id > :after_id
               ORDER BY id LIMIT :n""",  # nosec B608  # column list constant
)

bank_entry_lookup = Query(
    "bank_entry_lookup",
    "Run by `recon bank show`: the entries an operator's word names: an id, a bank reference or an end-to-end id.",
    sql=f"""SELECT {_ENTRY_COLUMNS} FROM bank_entries
            WHERE id = :id OR bank_reference = :ref OR end_to_end_id = :ref
            ORDER BY id LIMIT 50""",  # nosec B608  # column list constant
)

bank_statement_get = Query(
    "bank_statement_get",
    "Run by `recon bank show`: the statement an entry came from.",
    sql=f"SELECT {_STATEMENT_COLUMNS} FROM bank_statements WHERE id = :id",  # nosec B608  # column list constant
)
