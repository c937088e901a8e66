"""recon.reconcile.decide: every row of its tables, and whose evidence it is (evidence naming another PSP
reference than ours).

``test_decide__every_row_of_the_table`` has a case for every row of the module docstring's two tables (the
table and the cases are checked to match, row for row), its expected decisions written out here, from
docs/design.md's tables, never computed by the module (procrastinate's retry.py and test_retry.py).

The conflict cases are docs/design.md's rules, written out here ("Evidence never overwrites what we know"):
evidence from another merchant account is not ours; a side naming no account (Stripe; a payment stored with
the import's "default" label) agrees with any; evidence naming another PSP reference than the one we hold is
never a heal: pushed or listed, it is a note naming both (and, for an unfinished payment, its reconcile job);
answering our own question, it sends an unfinished payment to review; a final payment hearing of money moved
under another reference goes to review; anything else about a final payment is a note.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from psp_adapters.protocol import (
    ActionRequired,
    Authorised,
    Failed,
    NotFound,
    PaymentOutcome,
    Pending,
    Reversed,
    Succeeded,
    Unknown,
)
from recon.payments.importer import DEFAULT_ACCOUNT
from recon.reconcile import decide
from recon.reconcile.decide import (
    Conflict,
    Heal,
    RefundHeal,
    accounts_agree,
    charged,
    conflict,
    heal,
    late_news,
    outcome_details,
    refund_heal,
    refund_sent,
    reversal,
)
from recon.refund_rows import Refund
from recon.rows import NO_ACCOUNT, Payment, PaymentStatus

P = PaymentStatus
T = datetime(2026, 12, 1, tzinfo=UTC)


def payment(status: PaymentStatus, psp_reference: str | None, failure_reason: str | None = None) -> Payment:
    return Payment(id=7, merchant_account="AcmeShopEU", merchant_reference="order-7", amount=1000, currency="EUR",
                   psp="stripe", idempotency_key="k", status=status, created_at=T, updated_at=T,
                   psp_reference=psp_reference, failure_reason=failure_reason)


SUCCEEDED_B = Succeeded(psp_reference="pi_B", amount=1000, currency="EUR", raw_status="succeeded",
                        merchant_reference="order-7")
FAILED_B = Failed(psp_reference="pi_B", raw_status="canceled", merchant_reference="order-7", reason="abandoned")
REFUND_B = Reversed(psp_reference="pi_B", amount=1000, currency="EUR", merchant_reference="order-7", kind="refund")
PENDING_UNNAMED = Pending(raw_status="processing", merchant_reference="order-7")


@pytest.mark.parametrize(("ours", "theirs", "agree"), [
    ("AcmeShopEU", "AcmeShopEU", True),
    ("AcmeShopEU", "AcmeShopUS", False),  # two shops of one company, one merchant reference
    ("AcmeShopEU", None, True),  # Stripe names no account
    ("default", "AcmeShopUS", True),  # ours names none: the import's label
    ("", "AcmeShopUS", True),
    ("AcmeShopEU", "", True),
])
def test_accounts_agree__only_two_named_accounts_can_disagree(ours: str, theirs: str | None, agree: bool) -> None:
    assert accounts_agree(ours, theirs) is agree


def test_accounts_agree__the_imports_label_names_no_account() -> None:
    assert DEFAULT_ACCOUNT in NO_ACCOUNT


# (our status, the reference we hold, the news, asked) -> None: no conflict; "note": a note naming both (the
# caller adds the reconcile job for an unfinished payment); "review": needs_review, reference_conflict
CASES = [
    (P.PENDING, "pi_A", SUCCEEDED_B, False, "note"),
    (P.PROCESSING, "pi_A", FAILED_B, False, "note"),
    (P.PENDING, "pi_A", SUCCEEDED_B, True, "review"),  # our own question, answered about another payment
    (P.SUCCEEDED, "pi_A", SUCCEEDED_B, False, "review"),  # charged twice?
    (P.FAILED, "pi_A", SUCCEEDED_B, False, "review"),
    (P.SUCCEEDED, "pi_A", REFUND_B, False, "review"),
    (P.SUCCEEDED, "pi_A", FAILED_B, False, "note"),  # no money moved under the other reference
    (P.NEEDS_REVIEW, "pi_A", SUCCEEDED_B, False, "note"),  # the person deciding sees it
    (P.NEEDS_REVIEW, "pi_A", SUCCEEDED_B, True, "note"),
    (P.PENDING, None, SUCCEEDED_B, False, None),  # nothing stored yet: the evidence may name it
    (P.PENDING, "pi_B", SUCCEEDED_B, True, None),  # ours
    (P.PENDING, "pi_A", PENDING_UNNAMED, False, None),  # names no reference
]


@pytest.mark.parametrize(("status", "held", "news", "asked", "expected"), CASES)
def test_conflict__evidence_naming_another_psp_reference_is_never_a_heal(
        status: PaymentStatus, held: str | None, news: PaymentOutcome | Reversed, asked: bool,
        expected: str | None) -> None:
    found = conflict(payment(status, held), news, asked=asked)
    if expected is None:
        assert found is None
        return
    assert found is not None and (found.ours, found.theirs) == (held, "pi_B")
    assert found.details() == {"psp_reference_conflict": {"ours": held, "theirs": ["pi_B"]}}
    if expected == "note":
        assert found.review is None
    else:
        assert found.review is not None and found.review.target is P.NEEDS_REVIEW
        assert found.review.psp_reference is None, "a review never carries the other reference"
        reason = found.review.review_reason or ""
        assert reason.startswith("reference_conflict:") and "pi_A" in reason and "pi_B" in reason


# --- the module docstring's tables, row by row -----------------------------------------------------------------

SUCCEEDED_A = Succeeded(psp_reference="pi_A", amount=1000, currency="EUR", raw_status="succeeded",
                        merchant_reference="order-7")
LESS_A = Succeeded(psp_reference="pi_A", amount=900, currency="EUR", raw_status="succeeded")
DOLLARS_A = Succeeded(psp_reference="pi_A", amount=1000, currency="usd", raw_status="succeeded")
ACTION_A = ActionRequired(psp_reference="pi_A", raw_status="requires_action")
DECLINED_A = Failed(psp_reference="pi_A", raw_status="requires_payment_method", reason="card_declined")
CANCELED_A = Failed(psp_reference="pi_A", raw_status="canceled")
REFUND_A = Reversed(psp_reference="pi_A", amount=1000, currency="EUR", raw_status="refunded", kind="refund")
DISPUTE_A = Reversed(psp_reference="pi_A", amount=250, currency="EUR", kind="dispute", reason="fraudulent")
P_PENDING, P_SUCCEEDED = payment(P.PENDING, None), payment(P.SUCCEEDED, "pi_A")
WHY_CONFLICT = "(a second charge, or not ours: a person looks)"
REVIEW = P.NEEDS_REVIEW
AUTHORISED_A = Authorised(psp_reference="pi_A", amount=1000, currency="EUR", raw_status="requires_capture")
MANUAL_PENDING = replace(payment(P.PENDING, None), capture_mode="manual")

#: (the row, as its cells but the last: what the PSP says | ours), the call, the decision the row gives
TABLE: list[tuple[str, Callable[[], Any], Any]] = [
    ("anything, from another merchant account | any", lambda: accounts_agree("AcmeShopEU", "AcmeShopUS"), False),
    ("anything under another PSP reference (4), pushed or listed | unfinished",
     lambda: conflict(payment(P.PENDING, "pi_A"), SUCCEEDED_B), Conflict("pi_A", "pi_B")),
    ("anything under another PSP reference (4), pushed or listed | unfinished",
     lambda: conflict(payment(P.PROCESSING, "pi_A"), REFUND_B), Conflict("pi_A", "pi_B")),
    ("anything under another PSP reference, answering our question (3) | unfinished",
     lambda: conflict(payment(P.PENDING, "pi_A"), SUCCEEDED_B, asked=True),
     Conflict("pi_A", "pi_B", Heal(REVIEW, review_reason="reference_conflict: ours is pi_A, the PSP says succeeded "
                                                         f"about pi_B under our reference {WHY_CONFLICT}"))),
    ("succeeded, refunded, disputed under another PSP reference | succeeded, failed",
     lambda: conflict(payment(P.FAILED, "pi_A"), SUCCEEDED_B),
     Conflict("pi_A", "pi_B", Heal(REVIEW, review_reason="reference_conflict: ours is pi_A, the PSP says succeeded "
                                                         f"about pi_B under our reference {WHY_CONFLICT}"))),
    ("succeeded, refunded, disputed under another PSP reference | succeeded, failed",
     lambda: conflict(payment(P.SUCCEEDED, "pi_A"), REFUND_B),
     Conflict("pi_A", "pi_B", Heal(REVIEW, review_reason="reference_conflict: ours is pi_A, the PSP reports a "
                                                         f"refund about pi_B under our reference {WHY_CONFLICT}"))),
    ("anything else under another PSP reference | final",
     lambda: conflict(payment(P.SUCCEEDED, "pi_A"), FAILED_B), Conflict("pi_A", "pi_B")),
    ("anything else under another PSP reference | final",
     lambda: conflict(payment(P.NEEDS_REVIEW, "pi_A"), SUCCEEDED_B), Conflict("pi_A", "pi_B")),
    ("succeeded, same amount and currency | unfinished", lambda: heal(P_PENDING, SUCCEEDED_A),
     Heal(P.SUCCEEDED, psp_reference="pi_A")),
    ("succeeded, other amount or currency | unfinished", lambda: heal(P_PENDING, LESS_A),
     Heal(REVIEW, psp_reference="pi_A", review_reason="amount_mismatch: ours 1000 EUR, PSP 900")),
    ("succeeded, other amount or currency | unfinished", lambda: heal(payment(P.PROCESSING, "pi_A"), DOLLARS_A),
     Heal(REVIEW, psp_reference="pi_A", review_reason="currency_mismatch: ours EUR, PSP USD")),
    ("customer action required | unfinished", lambda: heal(P_PENDING, ACTION_A),
     Heal(REVIEW, psp_reference="pi_A",
          review_reason="authentication_required: customer authentication required (PSP status requires_action)")),
    ("failed / canceled | unfinished", lambda: heal(P_PENDING, DECLINED_A),
     Heal(P.FAILED, psp_reference="pi_A", failure_reason="psp: card_declined")),
    ("failed / canceled | unfinished", lambda: heal(payment(P.CREATED, None), CANCELED_A),
     Heal(P.FAILED, psp_reference="pi_A", failure_reason="psp: canceled")),
    ("refunded by no more than our own refunds | succeeded",
     lambda: late_news(replace(P_SUCCEEDED, captured_amount=1000, refunded_amount=1000), REFUND_A), None),
    ("refunded by no more than our own refunds | succeeded",  # more than ours: a surprise, as below
     lambda: late_news(replace(P_SUCCEEDED, captured_amount=1000, refunded_amount=400), REFUND_A),
     Heal(REVIEW, psp_reference="pi_A",
          review_reason="psp_reversed: refunded 10.00 EUR at the PSP while ours was succeeded")),
    ("refunded or disputed | unfinished, succeeded, failed", lambda: reversal(P_PENDING, REFUND_A),
     Heal(REVIEW, psp_reference="pi_A",
          review_reason="psp_reversed: refunded 10.00 EUR at the PSP while ours was pending")),
    ("refunded or disputed | unfinished, succeeded, failed", lambda: late_news(P_SUCCEEDED, DISPUTE_A),
     Heal(REVIEW, psp_reference="pi_A", review_reason="psp_reversed: disputed (chargeback) 2.50 EUR at the PSP "
                                                      "while ours was succeeded, reason fraudulent")),
    ("refunded or disputed | unfinished, succeeded, failed", lambda: late_news(payment(P.FAILED, "pi_A"), REFUND_A),
     Heal(REVIEW, psp_reference="pi_A",
          review_reason="psp_reversed: refunded 10.00 EUR at the PSP while ours was failed")),
    ("succeeded | failed", lambda: late_news(payment(P.FAILED, "pi_A", "declined: card_declined"), SUCCEEDED_A),
     Heal(REVIEW, psp_reference="pi_A",
          review_reason="status_mismatch: ours failed (declined: card_declined), the PSP says succeeded")),
    ("anything else | final", lambda: late_news(P_SUCCEEDED, SUCCEEDED_A), None),
    ("anything else | final", lambda: late_news(payment(P.FAILED, "pi_A"), DECLINED_A), None),
    ("anything else | final", lambda: late_news(payment(P.NEEDS_REVIEW, "pi_A"), REFUND_A), None),
    ("succeeded, same amount and currency", lambda: charged(payment(P.PROCESSING, None), SUCCEEDED_A),
     Heal(P.SUCCEEDED, psp_reference="pi_A")),
    ("succeeded, other amount or currency", lambda: charged(payment(P.PROCESSING, None), LESS_A),
     Heal(REVIEW, psp_reference="pi_A", review_reason="amount_mismatch: ours 1000 EUR, PSP 900")),
    ("customer action required", lambda: charged(payment(P.PROCESSING, None), ACTION_A),
     Heal(REVIEW, psp_reference="pi_A",
          review_reason="authentication_required: customer authentication required (PSP status requires_action)")),
    ("declined", lambda: charged(payment(P.PROCESSING, None), DECLINED_A),
     Heal(P.FAILED, psp_reference="pi_A", failure_reason="declined: card_declined")),
    ("declined", lambda: charged(payment(P.PROCESSING, None), Failed()),
     Heal(P.FAILED, failure_reason="declined: no reason")),
    ("pending, cannot say, not found", lambda: charged(payment(P.PROCESSING, None), Pending(psp_reference="pi_A")),
     Heal(P.PENDING, psp_reference="pi_A")),
    ("pending, cannot say, not found", lambda: charged(payment(P.PENDING, "pi_A"), Unknown(raw_status="on_hold")),
     Heal(P.PENDING)),
    ("pending, cannot say, not found", lambda: charged(payment(P.PROCESSING, None), NotFound()), Heal(P.PENDING)),
    # manual capture (issue 25 item 3): Stripe's requires_capture, Adyen's Authorised with manualCapture
    ("authorised or succeeded, a manual-capture payment, same amount | unfinished",
     lambda: heal(MANUAL_PENDING, AUTHORISED_A), Heal(P.AUTHORISED, psp_reference="pi_A")),
    ("authorised or succeeded, a manual-capture payment, same amount | unfinished",  # Adyen's AUTHORISATION event
     lambda: heal(MANUAL_PENDING, SUCCEEDED_A), Heal(P.AUTHORISED, psp_reference="pi_A")),
    ("authorised or succeeded, other amount or currency | unfinished, manual",
     lambda: heal(MANUAL_PENDING, replace(AUTHORISED_A, amount=900)),
     Heal(REVIEW, psp_reference="pi_A", review_reason="amount_mismatch: ours 1000 EUR, PSP 900")),
    ("authorised, an automatic-capture payment | unfinished", lambda: heal(P_PENDING, AUTHORISED_A), None),
    ("failed / canceled (the authorisation expired: Stripe's automatic) | authorised",
     lambda: late_news(payment(P.AUTHORISED, "pi_A"), Failed(psp_reference="pi_A", raw_status="canceled",
                                                             reason="automatic")),
     Heal(P.FAILED, psp_reference="pi_A", failure_reason="psp: automatic (authorisation ended uncaptured)")),
    ("authorised or succeeded, a manual-capture payment", lambda: charged(replace(MANUAL_PENDING, status=P.PROCESSING),
                                                             AUTHORISED_A),
     Heal(P.AUTHORISED, psp_reference="pi_A")),
    ("authorised for an automatic-capture payment", lambda: charged(payment(P.PROCESSING, None), AUTHORISED_A),
     Heal(P.PENDING, psp_reference="pi_A")),
]


def docstring_rows() -> list[str]:
    """The rows of decide's tables, each as its cells but the last, headers and rules left out."""
    rows = []
    for line in (decide.__doc__ or "").splitlines():
        if line.startswith("| ") and set(line) - set("|- "):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            rows.append(" | ".join(cells[:-1]))
    return [row for row in rows if row not in ("the PSP says | ours", "our charge's answer")]


def test_decide__the_tables_and_their_cases_match_row_for_row() -> None:
    rows = docstring_rows()
    assert len(rows) == 24 and len(set(rows)) == len(rows)
    assert sorted({row for row, _, _ in TABLE}) == sorted(rows)


@pytest.mark.parametrize(("row", "call", "expected"), TABLE, ids=[f"{i}: {row}" for i, (row, _, _) in enumerate(TABLE)])
def test_decide__every_row_of_the_table(row: str, call: Callable[[], Any], expected: Any) -> None:
    assert call() == expected


def test_outcome_details__every_answer_joins_the_audit_trail_with_what_the_psp_said() -> None:
    assert outcome_details(DECLINED_A) == {"psp_outcome": "failed", "psp_status": "requires_payment_method",
                                           "psp_reference": "pi_A", "psp_amount": None, "psp_currency": None,
                                           "reason": "card_declined"}
    assert outcome_details(REFUND_A) == {"psp_outcome": "reversed", "psp_status": "refunded", "psp_reference": "pi_A",
                                         "psp_amount": 1000, "psp_currency": "EUR"}


# --- refunds: the two tables of decide's refund section (its comment block), row for row --------------------

def refund(status: PaymentStatus, psp_refund_id: str | None = None) -> Refund:
    return Refund(id=3, payment_id=7, refund_reference="rf-7", amount=400, currency="EUR", psp="stripe",
                  status=status, idempotency_key="recon-refund-k", requested_by="alice", created_at=T, updated_at=T,
                  psp_refund_id=psp_refund_id)


RE_A = Succeeded(psp_reference="re_A", amount=400, currency="EUR", raw_status="succeeded", merchant_reference="rf-7")
RE_B = Succeeded(psp_reference="re_B", amount=400, currency="EUR", raw_status="succeeded")
RE_LESS = Succeeded(psp_reference="re_A", amount=300, currency="EUR", raw_status="succeeded")
RE_FAILED = Failed(psp_reference="re_A", amount=400, currency="EUR", raw_status="failed",
                   reason="expired_or_canceled_card")
RH = RefundHeal
CONFLICT_B = ("reference_conflict: ours is re_A, the PSP names re_B for our refund rf-7 (a second refund, or not "
              "ours: a person looks)")

REFUND_TABLE: list[tuple[str, Callable[[], Any], Any]] = [
    ("anything naming another PSP refund id than the one stored",
     lambda: refund_sent(refund(P.PENDING, "re_A"), RE_B), RH(REVIEW, review_reason=CONFLICT_B)),
    ("succeeded, same amount and currency", lambda: refund_sent(refund(P.PROCESSING), RE_A),
     RH(P.SUCCEEDED, psp_refund_id="re_A")),
    ("succeeded, other amount or currency", lambda: refund_sent(refund(P.PROCESSING), RE_LESS),
     RH(REVIEW, psp_refund_id="re_A", review_reason="amount_mismatch: ours 400 EUR, PSP 300")),
    ("failed", lambda: refund_sent(refund(P.PROCESSING), RE_FAILED),
     RH(P.FAILED, psp_refund_id="re_A", failure_reason="declined: expired_or_canceled_card")),
    ("pending, action required, cannot say, not found",
     lambda: refund_sent(refund(P.PROCESSING), Pending(psp_reference="re_A", raw_status="received")),
     RH(P.PENDING, psp_refund_id="re_A")),
    ("pending, action required, cannot say, not found",
     lambda: refund_sent(refund(P.PROCESSING), ActionRequired(psp_reference="re_A")),
     RH(P.PENDING, psp_refund_id="re_A")),
    ("pending, action required, cannot say, not found", lambda: refund_sent(refund(P.PENDING, "re_A"), NotFound()),
     RH(P.PENDING)),
    ("anything naming another PSP refund id | not failed/review",
     lambda: refund_heal(refund(P.SUCCEEDED, "re_A"), RE_B), RH(REVIEW, review_reason=CONFLICT_B)),
    ("anything naming another PSP refund id | not failed/review",
     lambda: refund_heal(refund(P.FAILED, "re_A"), RE_B), None),
    ("succeeded, same amount and currency | unfinished", lambda: refund_heal(refund(P.PENDING, "re_A"), RE_A),
     RH(P.SUCCEEDED, psp_refund_id="re_A")),
    ("succeeded, other amount or currency | unfinished", lambda: refund_heal(refund(P.PENDING), RE_LESS),
     RH(REVIEW, psp_refund_id="re_A", review_reason="amount_mismatch: ours 400 EUR, PSP 300")),
    ("failed | unfinished", lambda: refund_heal(refund(P.PROCESSING), RE_FAILED),
     RH(P.FAILED, psp_refund_id="re_A", failure_reason="psp: expired_or_canceled_card")),
    ("failed, or reversed (Adyen REFUNDED_REVERSED) | succeeded",
     lambda: refund_heal(refund(P.SUCCEEDED, "re_A"), RE_FAILED),
     RH(REVIEW, psp_refund_id="re_A", review_reason="refund_reversed: the PSP says failed for a refund ours was "
                                                    "succeeded, reason expired_or_canceled_card")),
    ("failed, or reversed (Adyen REFUNDED_REVERSED) | succeeded",
     lambda: refund_heal(refund(P.SUCCEEDED, "re_A"), Pending(psp_reference="re_A", raw_status="REFUNDED_REVERSED"),
                         reversed_=True),
     RH(REVIEW, psp_refund_id="re_A", review_reason="refund_reversed: the PSP says REFUNDED_REVERSED for a refund "
                                                    "ours was succeeded")),
    ("reversed | unfinished",
     lambda: refund_heal(refund(P.PENDING, "re_A"), Pending(psp_reference="re_A", raw_status="REFUNDED_REVERSED"),
                         reversed_=True),
     RH(REVIEW, psp_refund_id="re_A", review_reason="refund_reversed: the PSP says REFUNDED_REVERSED for a refund "
                                                    "ours was pending")),
    ("anything else | any", lambda: refund_heal(refund(P.SUCCEEDED, "re_A"), RE_A), None),
    ("anything else | any", lambda: refund_heal(refund(P.PENDING, "re_A"), Pending(psp_reference="re_A")), None),
    ("anything else | any", lambda: refund_heal(refund(P.FAILED, "re_A"), RE_FAILED), None),
    ("anything else | any", lambda: refund_heal(refund(P.NEEDS_REVIEW, "re_A"), RE_A), None),
]


def refund_comment_rows() -> list[str]:
    """The rows of the refund section's two tables (a comment block of decide), headers and rules left out."""
    rows = []
    for line in inspect.getsource(decide).splitlines():
        if line.startswith("# | ") and set(line) - set("#|- "):
            cells = [cell.strip() for cell in line[2:].strip().strip("|").split("|")]
            rows.append(" | ".join(cells[:-1]))
    return [row for row in rows if row not in ("the PSP answers", "the PSP says | ours")]


def test_decide__the_refund_tables_and_their_cases_match_row_for_row() -> None:
    rows = refund_comment_rows()
    assert len(rows) == 12 and len(set(rows)) == len(rows)
    assert sorted({row for row, _, _ in REFUND_TABLE}) == sorted(rows)


@pytest.mark.parametrize(("row", "call", "expected"), REFUND_TABLE,
                         ids=[f"{i}: {row}" for i, (row, _, _) in enumerate(REFUND_TABLE)])
def test_decide__every_row_of_the_refund_tables(row: str, call: Callable[[], Any], expected: Any) -> None:
    assert call() == expected


def test_decide__refund_answer__a_reversed_refund_reads_as_the_refunded_reversed_webhook() -> None:
    """fetch_refund's Reversed (Adyen's RefundedReversed report row) is Pending plus the reversed flag, as
    refund_news_outcome reads the REFUNDED_REVERSED webhook; any other answer passes unchanged."""
    row = Reversed(psp_reference="re_A", amount=400, currency="EUR", raw_status="RefundedReversed",
                   merchant_reference="rf-7", kind="refund")
    answer, reversed_ = decide.refund_answer(row)
    assert (answer, reversed_) == (Pending(psp_reference="re_A", amount=400, currency="EUR",
                                           raw_status="RefundedReversed", merchant_reference="rf-7"), True)
    assert refund_heal(refund(P.PENDING, "re_A"), answer, reversed_=reversed_) == RH(
        REVIEW, psp_refund_id="re_A",
        review_reason="refund_reversed: the PSP says RefundedReversed for a refund ours was pending")
    assert decide.refund_answer(RE_A) == (RE_A, False)
