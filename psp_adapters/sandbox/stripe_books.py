"""The Stripe flavour's view of the sandbox's books: every object it serves, found by its id and rendered as the
API serves it now (``stripe_wire``, ``stripe_objects``). Endpoints (``stripe_intents``, ``stripe_money``,
``stripe_customers``, ``stripe_events``) and expansions (``stripe_expand``) read through it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from psp_adapters.sandbox import stripe_objects as so
from psp_adapters.sandbox import stripe_wire as sw
from psp_adapters.sandbox.cards import TestCard, card_of, card_or_visa
from psp_adapters.sandbox.ledger import Ledger
from psp_adapters.sandbox.movements import REFUND_FAILED, Adjustment
from psp_adapters.sandbox.records import PaymentRecord

FLAVOR = "stripe"
#: document types of the payouts and of their own balance transactions (``stripe_payouts``)
PAYOUT = "payout"
PAYOUT_TXN = "payout_txn"


class StripeBooks:
    """Objects of the Stripe flavour by id (None: not one of ours)."""

    def __init__(self, ledger: Ledger, *, now_func: Callable[[], datetime]) -> None:
        self.ledger = ledger
        self.now = now_func

    # -- payments ------------------------------------------------------------------------------------------

    def payment(self, intent_id: str) -> PaymentRecord | None:
        record = self.ledger.get_payment(intent_id) if intent_id.startswith("pi_") else None
        return record if record is not None and record.flavor == FLAVOR else None

    def payment_of_charge(self, charge_id: str) -> PaymentRecord | None:
        record = self.payment("pi_" + charge_id.removeprefix("ch_")) if charge_id.startswith("ch_") else None
        return record if record is not None and record.charged else None

    def adjustments(self, record: PaymentRecord) -> list[Adjustment]:
        return self.ledger.adjustments_of([record.psp_reference])[record.psp_reference]

    def card(self, payment_method: str | None) -> TestCard:
        """The test card behind a payment method: a test id's own, a stored one's token's, else a Visa."""
        stored = self.ledger.get_document(payment_method, type="payment_method") if payment_method else None
        token = stored.body.get("sandbox_token") if stored is not None else payment_method
        return card_or_visa(token if isinstance(token, str) else None)

    def known_card(self, payment_method: str) -> bool:
        """Whether ``payment_method`` is a test card id or a PaymentMethod stored here."""
        return card_of(payment_method) is not None or self.ledger.get_document(
            payment_method, type="payment_method") is not None

    def intent(self, record: PaymentRecord) -> dict[str, object]:
        return sw.payment_intent(record, self.card(record.payment_method))

    def charge(self, record: PaymentRecord) -> dict[str, object]:
        return sw.charge_object(record, self.adjustments(record), self.card(record.payment_method))

    def refund(self, adjustment: Adjustment) -> dict[str, object]:
        record = self.ledger.get_payment(adjustment.psp_reference)
        assert record is not None  # nosec B101  # an adjustment's payment always exists (foreign key)
        return sw.refund_object(adjustment, record)

    def refund_by_id(self, refund_id: str) -> Adjustment | None:
        found = self.ledger.get_adjustment(refund_id) if refund_id.startswith("re_") else None
        return found if found is not None and found.kind == "refund" and self.payment(found.psp_reference) else None

    def dispute(self, adjustment: Adjustment) -> dict[str, object]:
        record = self.ledger.get_payment(adjustment.psp_reference)
        assert record is not None  # nosec B101  # an adjustment's payment always exists (foreign key)
        return sw.dispute_object(adjustment, record)

    def transaction(self, txn_id: str) -> dict[str, object] | None:
        """A balance transaction by id: a captured charge's, a refund's, a refund failure's or a dispute's."""
        rest = txn_id.removeprefix("txn_")
        if not txn_id.startswith("txn_") or not rest:
            return None
        record = self.payment("pi_" + rest)
        if record is not None and record.captured and record.settled_at is not None:
            return sw.balance_transaction(record, record)
        paid_out = self.ledger.get_document(txn_id, type=PAYOUT_TXN)
        if paid_out is not None:
            return dict(paid_out.body)
        failure = rest.startswith("F") and self.refund_by_id("re_" + rest[1:])
        if failure and failure.status == REFUND_FAILED:
            return sw.balance_transaction(failure, self._payment_of(failure), failure=True)
        for prefix in ("re_", "dp_"):
            adjustment = self.ledger.get_adjustment(prefix + rest)
            if adjustment is not None and self.payment(adjustment.psp_reference):
                return sw.balance_transaction(adjustment, self._payment_of(adjustment))
        return None

    def _payment_of(self, adjustment: Adjustment) -> PaymentRecord:
        record = self.ledger.get_payment(adjustment.psp_reference)
        assert record is not None  # nosec B101  # foreign key
        return record

    def payout(self, payout_id: str) -> dict[str, object] | None:
        """A payout as the API serves it (``stripe_payouts``), else None."""
        found = self.ledger.get_document(payout_id, type=PAYOUT) if payout_id.startswith("po_") else None
        return so.public(found.body) if found is not None else None

    # -- documents -----------------------------------------------------------------------------------------

    def customer(self, customer_id: str) -> dict[str, object] | None:
        found = self.ledger.get_document(customer_id, type="customer")
        return so.public(found.body) if found is not None else None

    def payment_method(self, method_id: str) -> dict[str, object] | None:
        """A stored PaymentMethod, or a test one served fresh (unattached), else None."""
        found = self.ledger.get_document(method_id, type="payment_method")
        if found is not None:
            return so.public(found.body)
        card = card_of(method_id)
        if card is None:
            return None
        return so.public(so.payment_method(method_id, card, created=self.now(), customer=None, metadata={},
                                           token=method_id))

    def lookup(self, object_id: str) -> dict[str, object] | None:
        """Any object by its id (what an expansion replaces the id with), else None."""
        prefix = object_id.split("_", 1)[0] + "_"
        if prefix == "pi_":
            record = self.payment(object_id)
            return self.intent(record) if record else None
        if prefix == "ch_":
            record = self.payment_of_charge(object_id)
            return self.charge(record) if record else None
        if prefix == "re_":
            refund = self.refund_by_id(object_id)
            return self.refund(refund) if refund else None
        if prefix == "dp_":
            dispute = self.ledger.get_adjustment(object_id)
            return self.dispute(dispute) if dispute and self.payment(dispute.psp_reference) else None
        finders: dict[str, Callable[[str], dict[str, object] | None]] = {
            "txn_": self.transaction, "cus_": self.customer, "pm_": self.payment_method, "po_": self.payout,
        }
        finder = finders.get(prefix)
        return finder(object_id) if finder else None
