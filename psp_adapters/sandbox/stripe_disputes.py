"""Stripe's Disputes as the Stripe flavour serves them (docs.stripe.com/api/disputes)::

    GET /v1/disputes[?charge=ch_…|payment_intent=pi_…][&created…][&limit][&starting_after|ending_before]
    GET /v1/disputes/{id}

Newest first, paged by id (``stripe_lists``), ``expand[]`` through ``data``; each a Dispute as its events carry it
(``stripe_wire.dispute_object``), its status as the admin API left it (``needs_response``, ``won``, ``lost``).
"""

from __future__ import annotations

from psp_adapters.sandbox.stripe_books import FLAVOR, StripeBooks
from psp_adapters.sandbox.stripe_form import Params, missing
from psp_adapters.sandbox.stripe_lists import created_window, expanded, listing, paginate


def list_disputes(books: StripeBooks, params: Params) -> dict[str, object]:
    params.check_known({"charge", "payment_intent", "created", "limit", "starting_after", "ending_before", "expand"})
    charge_id, intent_id = params.text("charge"), params.text("payment_intent")
    of = None
    if charge_id or intent_id:
        record = books.payment_of_charge(charge_id) if charge_id else books.payment(intent_id or "")
        if record is None:
            raise missing("charge" if charge_id else "payment_intent", charge_id or intent_id or "")
        of = record.psp_reference
    lo, hi = created_window(params)
    disputes = books.ledger.adjustments_page("dispute", flavor=FLAVOR, lo=lo, hi=hi, psp_reference=of)
    page, more = paginate(disputes, params, id_of=lambda d: d.id, kind="dispute")
    return expanded(listing("/v1/disputes", [books.dispute(d) for d in page], more), params, books.lookup)


def retrieve_dispute(books: StripeBooks, params: Params, dispute_id: str) -> dict[str, object]:
    params.check_known({"expand"})
    found = books.ledger.get_adjustment(dispute_id)
    if found is None or found.kind != "dispute" or books.payment(found.psp_reference) is None:
        raise missing("dispute", dispute_id)
    return expanded(books.dispute(found), params, books.lookup)
