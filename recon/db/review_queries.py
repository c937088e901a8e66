"""Every SQL statement of the review queue as a workflow: the queue read through one filter (a page after or
before a keyset cursor, its totals per currency), assignments, and comments. Named ``<table>_<verb>``, with
who runs it and why; only ``recon.db.review_store`` executes these.

The filter (``QUEUE_FILTER``) is one predicate over the partial index ``payments_review`` (or
``payments_review_assignee``): every condition is "parameter NULL (or 0) or the condition holds", so one
statement serves every combination of filters. PostgreSQL plans each execution with its parameters' values,
so the conditions of the filters not set fold away. The partial index ``payments_review_facets`` holds every
column the filter reads (currency, amount, review_since, and on PostgreSQL psp, review_assignee and
review_reason as included columns), so every filter's totals read that index alone, never the payments table.
A payment's kind, severity and due-by are derived in SQL from its
review reason, amount and review_since exactly as ``recon.review`` derives them in Python (the tests compare
the two), from parameters the desk computes out of ``[review]`` (``QueueRules``).
"""

from __future__ import annotations

# Bandit: every "nosec B608" here marks an f-string that interpolates module constants only (column lists,
# the kind names of ReviewKind); values always travel as bound parameters.
from recon.db.payment_queries import PAYMENT_COLUMNS
from recon.db.sql import Query
from recon.review_rows import ReviewKind

#: the kinds a reason's first word names ("other" is what none of them matches)
KNOWN_KINDS = tuple(k.value for k in ReviewKind if k is not ReviewKind.OTHER)


def _like(kind: str) -> str:
    escaped = kind.replace("_", "\\_")
    return f"(review_reason = '{kind}' OR review_reason LIKE '{escaped}:%' ESCAPE '\\')"


#: the kind of a payment's review reason, as ``recon.review.review_kind`` reads it
KIND = ("CASE " + " ".join(f"WHEN {_like(k)} THEN '{k}'" for k in KNOWN_KINDS)
        + " WHEN review_reason LIKE 'no final answer%' THEN 'no_final_answer' ELSE 'other' END")


#: each exponent's currencies, as the parameters FILTER_LISTS give them (2: every currency in none of the lists)
_EXPONENT_GROUPS = ((2, "currency NOT IN :exponent_0 AND currency NOT IN :exponent_3 AND currency NOT IN :exponent_4"),
                    (0, "currency IN :exponent_0"), (3, "currency IN :exponent_3"), (4, "currency IN :exponent_4"))


def amount_within(*bounds: tuple[str, str], open_ended: bool = False) -> str:
    """``amount`` compared with thresholds given in ten-thousandths of a major unit (every ISO-4217 exponent is
    0, 2, 3 or 4), each in the row's currency's minor units, from the parameters ``minor_thresholds`` gives:
    ``bounds`` are (name, operator) pairs, such as ("min", ">=") and ("max", "<="). With ``open_ended`` a
    threshold whose parameter is NULL holds for every amount; without it, it holds for none.

    Written as one disjunct per exponent, its integer comparisons before its currencies: most rows fail the
    comparisons and never reach the currency lists. The amount scaled to ten-thousandths (a NUMERIC product per
    row) and then a CASE over the currency lists before every comparison cost the severity filter and the
    payments list's amount range most of their time over 100,000 rows (docs/benchmarks.md)."""
    groups = []
    for exponent, member in _EXPONENT_GROUPS:
        tests = [f"amount {op} CAST(:{name}_{exponent} AS BIGINT)" for name, op in bounds]
        if open_ended:
            tests = [f"(CAST(:{name}_{exponent} AS BIGINT) IS NULL OR {t})" for (name, _), t in zip(bounds, tests,
                                                                                                   strict=True)]
        groups.append("(" + " AND ".join([*tests, member]) + ")")
    return "(" + " OR ".join(groups) + ")"


def minor_thresholds(name: str, scaled: int | None, *, at_least: bool) -> dict[str, int | None]:
    """``amount_within``'s parameters: ``scaled`` (ten-thousandths of a major unit) in each exponent's minor
    units, exactly: ``amount * 10^(4-e) >= scaled`` iff ``amount >= ceil(scaled / 10^(4-e))`` (``at_least``), and
    ``<= scaled`` iff ``amount <= floor(...)``. None stays None (no threshold)."""
    out: dict[str, int | None] = {}
    for exponent in (0, 2, 3, 4):
        unit = 10 ** (4 - exponent)
        out[f"{name}_{exponent}"] = None if scaled is None else (-(-scaled // unit) if at_least else scaled // unit)
    return out


HIGH = f"(review_since < :high_since OR {amount_within(('high_min', '>='))})"
MEDIUM = f"(review_since < :medium_since OR {amount_within(('medium_min', '>='))})"
#: in review since before its kind's due cutoff: past its due-by. ``due_first`` and ``due_last`` are the
#: earliest and the latest of the kinds' cutoffs: an item in review since before the first is overdue whatever
#: its kind, one since the last or after is not, and only those between have their kind read from the reason
#: (a CASE of string tests per row, most of the overdue filter's time over 100,000 items when every row paid it)
OVERDUE = (f"(review_since < :due_first OR (review_since < :due_last AND review_since < CASE {KIND} "
           + " ".join(f"WHEN '{k.value}' THEN :due_{k.value}" for k in ReviewKind) + " END))")

#: the kind filter. A known kind is its reason's own prefix, written so that the planner estimates it from
#: review_reason's statistics (a CASE expression it cannot, and it then read the whole index to sort a page);
#: no reason starts with two kinds, so it matches what KIND says. "other" is what KIND says it is.
KIND_IS = f"""(CAST(:kind AS TEXT) <> 'other' AND (review_reason = :kind OR review_reason LIKE :kind_like ESCAPE '\\'
                   OR (CAST(:kind AS TEXT) = 'no_final_answer' AND review_reason LIKE 'no final answer%'))
               OR (CAST(:kind AS TEXT) = 'other' AND {KIND} = 'other'))"""

QUEUE_FILTER = f"""status = 'needs_review'
              AND (:has_cutoff = 0 OR review_since < :cutoff)
              AND (CAST(:psp AS TEXT) IS NULL OR psp = :psp)
              AND (CAST(:currency AS TEXT) IS NULL OR currency = :currency)
              AND (CAST(:assignee AS TEXT) IS NULL OR review_assignee = :assignee)
              AND (:unassigned = 0 OR review_assignee IS NULL)
              AND (CAST(:kind AS TEXT) IS NULL OR {KIND_IS})
              AND (:overdue = 0 OR {OVERDUE})
              AND (CAST(:severity AS TEXT) IS NULL
                   OR (CAST(:severity AS TEXT) = 'high' AND {HIGH})
                   OR (CAST(:severity AS TEXT) = 'medium' AND {MEDIUM} AND NOT {HIGH})
                   OR (CAST(:severity AS TEXT) = 'low' AND NOT {MEDIUM}))"""

#: the parameters QUEUE_FILTER's lists take (expanding)
FILTER_LISTS = ("exponent_0", "exponent_3", "exponent_4")

review_queue_after = Query(
    "review_queue_after",
    "Run by `recon review list`, the console's review queue and bulk resolve: a page of the filtered queue, "
    "longest in review first, after a (review_since, id) cursor (partial index payments_review).",
    sql=f"""SELECT {PAYMENT_COLUMNS} FROM payments
            WHERE {QUEUE_FILTER}
              AND (review_since > :after_since OR (review_since = :after_since AND id > :after_id))
            ORDER BY review_since, id LIMIT :n""",  # nosec B608  # constant SQL, values bound
    expanding=FILTER_LISTS,
)

review_queue_before = Query(
    "review_queue_before",
    "Run by the console's review queue for its previous page: the filtered queue before a (review_since, id) "
    "cursor, nearest first (the page reverses it).",
    sql=f"""SELECT {PAYMENT_COLUMNS} FROM payments
            WHERE {QUEUE_FILTER}
              AND (review_since < :before_since OR (review_since = :before_since AND id < :before_id))
            ORDER BY review_since DESC, id DESC LIMIT :n""",  # nosec B608  # constant SQL, values bound
    expanding=FILTER_LISTS,
)

review_queue_totals = Query(
    "review_queue_totals",
    "Run by the review queue, bulk resolve's preview, `recon stats` (overdue) and the metrics endpoint: how "
    "many payments the filter matches and how much, per currency.",
    sql=f"""SELECT currency, count(*) AS n, sum(amount) AS amount FROM payments
            WHERE {QUEUE_FILTER}
            GROUP BY currency ORDER BY currency""",  # nosec B608  # constant SQL, values bound
    expanding=FILTER_LISTS,
)

payment_assign_review = Query(
    "payment_assign_review",
    "Run by `recon review assign` and the console: the payment's assignee, only while it is in review.",
    sql="UPDATE payments SET review_assignee = :assignee WHERE id = :id AND status = 'needs_review'",
)

review_comment_insert = Query(
    "review_comment_insert",
    "Run by `recon review comment|assign` and the console: one comment or assignment on a payment.",
    sql="""INSERT INTO review_comments (payment_id, at, author, kind, body)
           VALUES (:payment_id, {now}, :author, :kind, :body)""",
)

review_comments_for = Query(
    "review_comments_for",
    "Run by `recon review show` and the console's payment page: a payment's comments and assignments, oldest "
    "first (index review_comments_payment).",
    sql="""SELECT id, payment_id, at, author, kind, body FROM review_comments
           WHERE payment_id = :payment_id ORDER BY id""",
)
