"""Adyen's disputes as its Payment accounting report tells them: the listing side of the chargeback webhooks.

Adyen has no dispute listing in Checkout; its daily Payment accounting report (``report``) journals a dispute's
steps as rows of the disputed payment (docs.adyen.com/reporting/invoice-reconciliation/payment-accounting-report,
"Record types"): ``Chargeback`` (the money withdrawn), ``ChargebackReversed`` (it came back), ``SecondChargeback``
(withdrawn again after a defence: lost). Each maps to the ``DisputeNews`` state the webhooks' event codes give
(``webhook.DISPUTE_STATES``): opened, reversed, lost. As for the webhooks, a payment has one dispute, whose id is
the payment's pspReference. ``Main Amount`` is what was withdrawn (its size); the fee is the row's Commission
(``ReportRow.fee``) when the report books it in the payment's currency, else unknown (None).
"""

from __future__ import annotations

from psp_adapters.adyen.report import ReportRow
from psp_adapters.protocol import DisputeNews, ListedDispute

#: the record types of a dispute's steps -> DisputeNews' state
RECORD_STATES = {"Chargeback": "opened", "ChargebackReversed": "reversed", "SecondChargeback": "lost"}


def to_listed(row: ReportRow, *, merchant_account: str) -> ListedDispute | None:
    """The dispute step a report row is, or None when the row is not one."""
    state = RECORD_STATES.get(row.record_type)
    if state is None:
        return None
    fee = row.fee if row.settlement_currency == row.currency else None
    news = DisputeNews(
        psp_reference=row.psp_reference,
        merchant_reference=row.merchant_reference,
        amount=abs(row.amount),
        currency=row.currency,
        raw_status=row.record_type,
        state=state,
        dispute_id=row.psp_reference,
        fee=fee,
    )
    return ListedDispute(news, created_at=row.booked_at, merchant_account=merchant_account)
