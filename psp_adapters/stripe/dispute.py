"""Stripe's Dispute object (docs.stripe.com/api/disputes/object) as recon's ``DisputeNews``: one mapping for the
webhooks' ``charge.dispute.*`` (``webhook``) and the listing ``GET /v1/disputes`` (``StripeAdapter.iter_disputes``).

A Dispute's ``status`` is ``warning_needs_response``, ``warning_under_review``, ``warning_closed``,
``needs_response``, ``under_review``, ``won`` or ``lost`` (docs.stripe.com/api/disputes/object#dispute_object-
status). ``won`` and ``lost`` end it; ``warning_closed`` (an inquiry that never became a chargeback: no money
moved) reads as won; every other status, and any Stripe may add, is opened: never a guessed end. ``amount`` is
what was withdrawn (Stripe's units of ``currency``), ``evidence_details.due_by`` the evidence deadline, and the
fees are those of its ``balance_transactions`` (the withdrawal's, and the reinstatement's when won).
"""

from __future__ import annotations

from collections.abc import Mapping

from psp_adapters._wire import JsonFields
from psp_adapters.protocol import DisputeNews, ListedDispute
from psp_adapters.stripe.wire import PSP_NAME, from_stripe_amount

_json = JsonFields(PSP_NAME)

#: a Dispute's final statuses -> DisputeNews' state; every other status is opened
ENDS = {"won": "won", "lost": "lost", "warning_closed": "won"}


def to_news(obj: Mapping[str, object]) -> DisputeNews:
    """A Dispute object's news: its evidence deadline and the fees its balance transactions carry (Stripe's units);
    PspProtocolError when a field it needs is missing or of the wrong type."""
    currency = _json.require(obj, "currency", str).upper()
    status = _json.require(obj, "status", str)
    evidence = obj.get("evidence_details")
    due_by = _json.optional_unix_time(evidence, "due_by") if isinstance(evidence, Mapping) else None
    txns = obj.get("balance_transactions")
    fees = [
        _json.amount(t, "fee")
        for t in (txns if isinstance(txns, list) else [])
        if isinstance(t, Mapping) and isinstance(t.get("fee"), int)
    ]
    return DisputeNews(
        psp_reference=_json.optional(obj, "payment_intent", str),
        currency=currency,
        amount=from_stripe_amount(_json.amount(obj, "amount"), currency),
        raw_status=status,
        state=ENDS.get(status, "opened"),
        dispute_id=_json.require(obj, "id", str),
        reason=_json.optional(obj, "reason", str),
        due_by=due_by,
        fee=from_stripe_amount(sum(fees), currency) if fees else None,
    )


def to_listed(payload: object) -> ListedDispute:
    """A Dispute of a list page: its news (``to_news``) and its ``created`` (unix seconds)."""
    doc = _json.as_object(payload, "dispute")
    return ListedDispute(to_news(doc), created_at=_json.unix_time(doc, "created"))
