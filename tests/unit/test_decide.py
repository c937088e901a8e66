"""recon.reconcile.decide: whose evidence it is, and evidence naming another PSP reference than ours.

The expected rows are docs/design.md's rules, written out here ("Evidence never overwrites what we know"):
evidence from another merchant account is not ours; a side naming no account (Stripe; a payment stored with
the import's "default" label) agrees with any; evidence naming another PSP reference than the one we hold is
never a heal: pushed or listed, it is a note naming both (and, for an unfinished payment, its reconcile job);
answering our own question, it sends an unfinished payment to review; a final payment hearing of money moved
under another reference goes to review; anything else about a final payment is a note.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from psp_adapters.protocol import Failed, PaymentOutcome, Pending, Reversed, Succeeded
from recon.payments.importer import DEFAULT_ACCOUNT
from recon.reconcile.decide import accounts_agree, conflict
from recon.rows import NO_ACCOUNT, Payment, PaymentStatus

P = PaymentStatus
T = datetime(2026, 12, 1, tzinfo=UTC)


def payment(status: PaymentStatus, psp_reference: str | None) -> Payment:
    return Payment(id=7, merchant_account="AcmeShopEU", merchant_reference="order-7", amount=1000, currency="EUR",
                   psp="stripe", idempotency_key="k", status=status, created_at=T, updated_at=T,
                   psp_reference=psp_reference)


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
