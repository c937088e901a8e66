"""Every SQL statement of the settlement report (``recon report``), named, with who runs it and why.

Placeholders as in ``recon.db.sql`` (``{json:…}``); only ``recon.db.report_store`` executes these.

The report works in a TEMPORARY table, ``report_lines``: one row per PSP reference (the PSP listing,
merged), private to the report's connection, gone with its transaction (PostgreSQL ``ON COMMIT DROP``) or
its connection (SQLite). Nothing here writes to ``payments`` or any other shared table.

Times in ``report_lines`` (``first_at``, ``last_at``) are integer microseconds since the Unix epoch on both
engines: they are only compared with each other, never with ``payments`` columns.
"""

from __future__ import annotations

# Bandit: every "nosec B608" here marks an f-string that interpolates module constants only (column
# lists, state predicates); values always travel as bound parameters.
from recon.db.sql import Query
from recon.rows import NO_ACCOUNT

#: the merged status of a PSP reference listed twice at one time with different statuses: neither copy wins
CONFLICTING = "conflicting"

report_lines_drop = Query(
    "report_lines_drop",
    "Run by the report before it starts: a temporary table left on a pooled connection is removed.",
    postgresql="DROP TABLE IF EXISTS pg_temp.report_lines",
    sqlite="DROP TABLE IF EXISTS temp.report_lines",
)

report_lines_create = Query(
    "report_lines_create",
    "Run by the report: the scratch table for the PSP listing, one row per PSP reference.",
    postgresql="""
        CREATE TEMPORARY TABLE report_lines (
            psp_reference text PRIMARY KEY, merchant_reference text, amount bigint NOT NULL,
            currency text NOT NULL, status text NOT NULL, first_at bigint NOT NULL, last_at bigint NOT NULL,
            lines int NOT NULL, seq bigint NOT NULL, payment_id bigint, fee bigint, net bigint,
            settlement_currency text, merchant_account text
        ) ON COMMIT DROP
    """,
    sqlite="""
        CREATE TEMPORARY TABLE report_lines (
            psp_reference TEXT PRIMARY KEY, merchant_reference TEXT, amount INTEGER NOT NULL,
            currency TEXT NOT NULL, status TEXT NOT NULL, first_at INTEGER NOT NULL, last_at INTEGER NOT NULL,
            lines INTEGER NOT NULL, seq INTEGER NOT NULL, payment_id INTEGER, fee INTEGER, net INTEGER,
            settlement_currency TEXT, merchant_account TEXT
        )
    """,
)

# The payment a line belongs to: by the PSP's reference first, else by our merchant reference (a charge whose
# reference we never stored: a crash between send and commit, or a second charge). Both use an index
# (payments_psp_reference, payments_merchant_reference_key). Only where the merchant accounts agree, as
# recon.reconcile.decide.accounts_agree says: a line of another account is not ours (missing_locally), and a
# side naming no account (a Stripe line; a payment stored with one of recon.rows.NO_ACCOUNT) agrees with any.
_NO_ACCOUNT = ", ".join(f"'{a}'" for a in sorted(NO_ACCOUNT))
_AGREES = f"(nullif({{acct}}, '') IS NULL OR p.merchant_account IN ({_NO_ACCOUNT}) OR p.merchant_account = {{acct}})"
_MATCH = f"""coalesce(
    (SELECT p.id FROM payments p WHERE p.psp = :psp AND p.psp_reference = {{ref}} AND {_AGREES}
     ORDER BY p.id LIMIT 1),
    (SELECT p.id FROM payments p WHERE p.psp = :psp AND p.merchant_reference = {{mref}} AND {_AGREES}))
"""  # nosec B608  # constant SQL, values bound

# A line already loaded (an Adyen payment settled, then refunded): merge. The latest event gives the status;
# two lines of one reference at the same time that disagree are CONFLICTING (never decided by the copy listed
# last: the line is then a status_mismatch a person reads); the earliest gives amount, currency, fee and net
# (later events, refunds or chargebacks, carry their own amounts; the charge's fee is the one that settled
# with it).
_MERGE = """
    merchant_reference = coalesce(report_lines.merchant_reference, excluded.merchant_reference),
    amount = CASE WHEN excluded.first_at < report_lines.first_at
                  THEN excluded.amount ELSE report_lines.amount END,
    currency = CASE WHEN excluded.first_at < report_lines.first_at
                    THEN excluded.currency ELSE report_lines.currency END,
    fee = CASE WHEN excluded.first_at < report_lines.first_at
               THEN excluded.fee ELSE report_lines.fee END,
    net = CASE WHEN excluded.first_at < report_lines.first_at
               THEN excluded.net ELSE report_lines.net END,
    settlement_currency = CASE WHEN excluded.first_at < report_lines.first_at
                               THEN excluded.settlement_currency ELSE report_lines.settlement_currency END,
    status = CASE WHEN excluded.last_at > report_lines.last_at THEN excluded.status
                  WHEN excluded.last_at < report_lines.last_at THEN report_lines.status
                  WHEN excluded.status = report_lines.status THEN report_lines.status
                  ELSE '{conflicting}' END,
    merchant_account = coalesce(report_lines.merchant_account, excluded.merchant_account),
    first_at = {least}(report_lines.first_at, excluded.first_at),
    last_at = {greatest}(report_lines.last_at, excluded.last_at),
    lines = report_lines.lines + excluded.lines,
    payment_id = coalesce(report_lines.payment_id, excluded.payment_id)
"""

_MERGE_PG = _MERGE.format(least="least", greatest="greatest", conflicting=CONFLICTING)
_MERGE_SQLITE = _MERGE.format(least="min", greatest="max", conflicting=CONFLICTING)

report_lines_upsert = Query(
    "report_lines_upsert",
    "Run by the report's loader: a batch of PSP lines (unique references), matched to our payments, merged.",
    postgresql=f"""
        INSERT INTO report_lines (psp_reference, merchant_reference, amount, currency, status,
                                  first_at, last_at, lines, seq, payment_id, fee, net, settlement_currency,
                                  merchant_account)
        SELECT r.psp_reference, r.merchant_reference, r.amount, r.currency, r.status, r.first_at, r.last_at,
               r.lines, r.seq,
               {_MATCH.format(ref="r.psp_reference", mref="r.merchant_reference", acct="r.merchant_account")},
               r.fee, r.net, r.settlement_currency, r.merchant_account
        FROM jsonb_to_recordset({{json:rows}}) AS r(psp_reference text, merchant_reference text,
             amount bigint, currency text, status text, first_at bigint, last_at bigint, lines int,
             seq bigint, fee bigint, net bigint, settlement_currency text, merchant_account text)
        ON CONFLICT (psp_reference) DO UPDATE SET {_MERGE_PG}
    """,  # nosec B608  # constant SQL, values bound
    sqlite=f"""
        INSERT INTO report_lines (psp_reference, merchant_reference, amount, currency, status,
                                  first_at, last_at, lines, seq, payment_id, fee, net, settlement_currency,
                                  merchant_account)
        SELECT value ->> '$.psp_reference', value ->> '$.merchant_reference', value ->> '$.amount',
               value ->> '$.currency', value ->> '$.status', value ->> '$.first_at', value ->> '$.last_at',
               value ->> '$.lines', value ->> '$.seq',
               {_MATCH.format(ref="value ->> '$.psp_reference'", mref="value ->> '$.merchant_reference'",
                              acct="value ->> '$.merchant_account'")},
               value ->> '$.fee', value ->> '$.net', value ->> '$.settlement_currency', value ->> '$.merchant_account'
        FROM json_each(:rows) ORDER BY key
        ON CONFLICT (psp_reference) DO UPDATE SET {_MERGE_SQLITE}
    """,  # nosec B608  # constant SQL, values bound
)

report_lines_index = Query(
    "report_lines_index",
    "Run by the report after loading: our unlisted payments are found by an anti-join on payment_id.",
    sql="CREATE INDEX report_lines_payment ON report_lines (payment_id)",
)

report_lines_analyze = Query(
    "report_lines_analyze",
    "Run by the report after loading: planner statistics for the temporary table (autovacuum never sees it).",
    postgresql="ANALYZE report_lines",
    sqlite="ANALYZE temp.report_lines",
)

# A manual-capture payment's amount is what it captured (a partial capture settles less than it authorised).
# rank 1 is the line that stands for its payment; rank > 1 are further PSP charges for the same payment (or,
# with no payment of ours, for the same merchant reference): duplicate_at_psp. The line carrying the reference
# we stored comes first, then a succeeded one, then the first settled.
report_lines_matched = Query(
    "report_lines_matched",
    "Run by the report: every merged PSP line with the payment it matched (if any), in listing order.",
    sql="""
        SELECT l.psp_reference, l.merchant_reference AS psp_merchant_reference, l.amount AS psp_amount,
               l.currency AS psp_currency, l.status AS psp_status, l.lines,
               p.id AS payment_id, p.merchant_reference, p.psp_reference AS our_psp_reference,
               CASE WHEN p.capture_mode = 'manual' AND p.status = 'succeeded' THEN p.captured_amount
                    ELSE p.amount END AS amount, p.currency,
               p.status, CASE WHEN p.created_at > :cutoff THEN 1 ELSE 0 END AS in_window, l.fee, l.net,
               l.settlement_currency, p.refunded_amount AS refunded,
               (SELECT d.psp_dispute_id || ' ' || d.status FROM disputes d WHERE d.payment_id = p.id
                ORDER BY d.id DESC LIMIT 1) AS dispute,
               row_number() OVER (
                   PARTITION BY p.id,
                       CASE WHEN p.id IS NULL
                            THEN coalesce('m:' || l.merchant_reference, 'r:' || l.psp_reference) END
                   ORDER BY CASE WHEN l.psp_reference = p.psp_reference THEN 0 ELSE 1 END,
                            CASE WHEN l.status = 'succeeded' THEN 0 ELSE 1 END, l.first_at, l.psp_reference) AS rank
        FROM report_lines l LEFT JOIN payments p ON p.id = l.payment_id
        ORDER BY l.seq
    """,
)

report_merchant_accounts = Query(
    "report_merchant_accounts",
    "Run by the report before listing: every merchant account our payments of this PSP were made in (Adyen "
    "lists settlements per account).",
    sql="SELECT DISTINCT merchant_account FROM payments WHERE psp = :psp ORDER BY merchant_account",
)

report_payments_unlisted = Query(
    "report_payments_unlisted",
    "Run by the report: our payments of the period that no PSP line stands for (payments_psp_created).",
    sql="""
        SELECT p.id AS payment_id, p.merchant_reference, p.psp_reference, p.amount, p.currency, p.status,
               CASE WHEN p.created_at > :cutoff THEN 1 ELSE 0 END AS in_window
        FROM payments p
        WHERE p.psp = :psp AND p.created_at >= :since AND p.created_at < :until
          AND NOT EXISTS (SELECT 1 FROM report_lines l WHERE l.payment_id = p.id
                          AND (p.psp_reference IS NULL OR l.psp_reference = p.psp_reference))
        ORDER BY p.created_at, p.id
    """,
)
