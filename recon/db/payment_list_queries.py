"""The SQL of the console's payments list (``/payments``): payments through one filter, newest first, paged by
an id keyset, and the filter's totals per currency. Only ``recon.db.payment_list_store`` executes these.

Every condition is "parameter NULL (or 0) or the condition holds", so one statement serves every combination;
PostgreSQL plans each execution with its values (``plan_cache_mode = force_custom_plan``), so the conditions of the
filters not set fold away and "unfinished" is the very predicate of the partial index ``payments_at_risk``, which
its totals read alone. The other filters' totals read ``payments_list_facets`` (created_at, currency, amount,
INCLUDE status, psp, merchant_reference), a third of the table's pages, never the table. The amount range is given
in ten-thousandths of a major unit and compared in each currency's minor units (``review_queries.amount_within``),
so "from 100 to 500" means major units in every currency; the reference prefix is matched case-insensitively
(``lower(merchant_reference) LIKE``, the prefix's own ``%`` and ``_`` escaped), through the index
``payments_reference_lower`` on PostgreSQL. ``dispute`` keeps the payments with an open dispute (``open``), or with
one whose evidence is due before ``:evidence_before`` (``due_soon``): the overview's disputes figure links here
(index ``disputes_payment``).
"""

from __future__ import annotations

# Bandit: every "nosec B608" here marks an f-string that interpolates module constants only.
from recon.db.payment_queries import PAYMENT_COLUMNS, UNFINISHED
from recon.db.review_queries import FILTER_LISTS, amount_within
from recon.db.sql import Query

LIST_FILTER = f"""(CAST(:status AS TEXT) IS NULL OR status = :status)
              AND (:unfinished = 0 OR {UNFINISHED})
              AND (CAST(:psp AS TEXT) IS NULL OR psp = :psp)
              AND (CAST(:currency AS TEXT) IS NULL OR currency = :currency)
              AND created_at < :created_before AND created_at >= :created_after
              AND ((CAST(:min_scaled AS BIGINT) IS NULL AND CAST(:max_scaled AS BIGINT) IS NULL)
                   OR {amount_within(("min", ">="), ("max", "<="), open_ended=True)})
              AND (CAST(:prefix AS TEXT) IS NULL OR lower(merchant_reference) LIKE :prefix ESCAPE '\\')
              AND (CAST(:dispute AS TEXT) IS NULL OR EXISTS (
                   SELECT 1 FROM disputes d WHERE d.payment_id = payments.id AND d.status = 'opened'
                   AND (CAST(:dispute AS TEXT) = 'open'
                        OR (d.evidence_due_by IS NOT NULL AND d.evidence_due_by < :evidence_before))))"""  # nosec B608

payment_list_filtered = Query(
    "payment_list_filtered",
    "Run by the console's payments list: a page of the filtered payments, newest first, before an id.",
    sql=f"""SELECT {PAYMENT_COLUMNS} FROM payments
            WHERE {LIST_FILTER} AND id < :before_id
            ORDER BY id DESC LIMIT :n""",  # nosec B608  # constant SQL, values bound
    expanding=FILTER_LISTS,
)

payment_list_filtered_after = Query(
    "payment_list_filtered_after",
    "Run by the console's payments list for its previous page: the filtered payments after an id, oldest "
    "first (the page reverses them).",
    sql=f"""SELECT {PAYMENT_COLUMNS} FROM payments
            WHERE {LIST_FILTER} AND id > :after_id
            ORDER BY id LIMIT :n""",  # nosec B608  # constant SQL, values bound
    expanding=FILTER_LISTS,
)

payment_list_totals = Query(
    "payment_list_totals",
    "Run by the console's payments list: how many payments the filter matches and how much, per currency.",
    sql=f"""SELECT currency, count(*) AS n, sum(amount) AS amount FROM payments
            WHERE {LIST_FILTER}
            GROUP BY currency ORDER BY currency""",  # nosec B608  # constant SQL, values bound
    expanding=FILTER_LISTS,
)
