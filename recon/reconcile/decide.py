"""What the PSP's word means for one of our payments: one table for reconciliation and webhooks.

``heal`` is the part of the table in recon.reconcile.handler that ends an unfinished payment; ``reversal``
and ``late_news`` are what a webhook adds about a payment that is final already. Both return the target
status with the fields its transition sets, or None when nothing changes.

| the PSP says                       | ours                | becomes                                           |
| ---------------------------------- | ------------------- | ------------------------------------------------- |
| succeeded, same amount and currency | unfinished         | succeeded                                         |
| succeeded, other amount or currency | unfinished         | needs_review (amount_mismatch / currency_mismatch) |
| customer action required           | unfinished          | needs_review (authentication_required)            |
| failed / canceled                  | unfinished          | failed                                            |
| refunded or disputed               | unfinished, succeeded, failed | needs_review (psp_reversed)             |
| succeeded                          | failed              | needs_review (status_mismatch)                    |
| anything else                      | final               | nothing (a redelivery, or older news)             |
"""

from __future__ import annotations

from dataclasses import dataclass

from psp_adapters.protocol import ActionRequired, Failed, PaymentOutcome, Reversed, Succeeded
from recon.payments.charge import authentication_reason, mismatch
from recon.payments.money import format_amount
from recon.rows import Payment, PaymentStatus


@dataclass(frozen=True, slots=True)
class Heal:
    target: PaymentStatus
    psp_reference: str | None = None
    failure_reason: str | None = None
    review_reason: str | None = None

    def fields(self) -> dict[str, str | None]:
        return {"psp_reference": self.psp_reference, "failure_reason": self.failure_reason,
                "review_reason": self.review_reason}


def heal(payment: Payment, answer: PaymentOutcome) -> Heal | None:
    """The final status the PSP's answer gives an unfinished payment; None: no final answer yet."""
    ref = answer.psp_reference
    match answer:
        case Succeeded():
            problem = mismatch(payment, answer)
            if problem:
                return Heal(PaymentStatus.NEEDS_REVIEW, psp_reference=ref, review_reason=problem)
            return Heal(PaymentStatus.SUCCEEDED, psp_reference=ref)
        case ActionRequired():
            return Heal(PaymentStatus.NEEDS_REVIEW, psp_reference=ref, review_reason=authentication_reason(answer))
        case Failed(reason=reason):
            return Heal(PaymentStatus.FAILED, psp_reference=ref,
                        failure_reason=f"psp: {reason or answer.raw_status or 'failed'}")
    return None


def reversal(payment: Payment, news: Reversed) -> Heal:
    """A refund or dispute: money the PSP took back. Never healed: a person looks."""
    taken = format_amount(news.amount, news.currency) if news.amount is not None and news.currency else "an amount"
    what = "refunded" if news.kind == "refund" else "disputed (chargeback)"
    why = f", reason {news.reason}" if news.reason else ""
    return Heal(PaymentStatus.NEEDS_REVIEW, psp_reference=news.psp_reference,
                review_reason=f"psp_reversed: {what} {taken} at the PSP while ours was {payment.status}{why}")


def late_news(payment: Payment, news: PaymentOutcome | Reversed) -> Heal | None:
    """What news about a payment that is final already changes: a reversal of it, or a success of one we
    hold as failed, goes to review; anything else is a redelivery or older news (None)."""
    if isinstance(news, Reversed) and payment.status in (PaymentStatus.SUCCEEDED, PaymentStatus.FAILED):
        return reversal(payment, news)
    if isinstance(news, Succeeded) and payment.status is PaymentStatus.FAILED:
        return Heal(PaymentStatus.NEEDS_REVIEW, psp_reference=news.psp_reference,
                    review_reason=f"status_mismatch: ours failed ({payment.failure_reason or 'no reason'}), the "
                                  f"PSP says {news.raw_status or 'succeeded'}")
    return None
