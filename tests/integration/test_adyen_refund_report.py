"""An Adyen refund whose webhook was lost, healed by its reconcile job from the Payment accounting report, on both
databases, against the sandbox's Adyen flavour through recon's real Adyen adapter (``sandbox_flow``).

Adyen answers a refund ``[received]`` and tells its end by the REFUND / REFUND_FAILED / REFUNDED_REVERSED webhooks
and by the daily report's rows of the refunded payment (SentForRefund, Refunded, RefundFailed, RefundedReversed),
which name the refund in ``Modification Psp Reference`` and ``Modification Merchant Reference``. Here every
webhook is dropped: the report alone decides. A Refunded row makes the refund succeeded; a RefundedReversed row
sends it to review (as the webhook does); a row with our refund reference under another refund id is a conflict
(review), never a replacement of the id we hold.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from recon import Client, Settings
from recon.reconcile.refund import REFUND_RECONCILE_KIND, refund_reconcile_key
from recon.refund_rows import NewRefund
from recon.rows import PaymentStatus
from tests.integration.payment_flow import wait_for
from tests.integration.sandbox_flow import ACCOUNT, Flow, open_flow

P = PaymentStatus


@pytest.fixture
def flow(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Flow]:
    with open_flow("adyen", db_url, tmp_path, monkeypatch) as opened:
        opened.post("/_admin/faults", {"settle_after_seconds": 0})
        yield opened


def refunded_without_webhooks(flow: Flow, reference: str, amount: int) -> int:
    """Our refund of a fresh payment, sent by its refund job ([received]: pending); the REFUND webhook lost."""
    [pid] = flow.charge(1)
    queue = flow.app.payments_config.queue
    [rid] = flow.app.refunds.create([NewRefund(pid, reference, amount, None, "ann")], queue=queue)
    flow.run("refund")
    seen: list[str] = []
    wait_for(lambda: bool(seen.extend(flow.deliver(drop=True))) or "REFUND" in seen, timeout=20)
    sent = flow.app.refunds.get(rid)
    assert sent is not None and sent.status is P.PENDING and sent.psp_refund_id  # no webhook told recon
    return rid


def reconcile(flow: Flow, rid: int, *, recheck: bool = False) -> None:
    Client(flow.app.jobs, Settings()).enqueue(
        REFUND_RECONCILE_KIND,
        {"refund_id": rid, **({"recheck": True} if recheck else {})},
        queue=flow.app.reconcile_config.queue,
        unique_key=refund_reconcile_key(rid),
    )
    flow.run(REFUND_RECONCILE_KIND)


def test_adyen_refund__lost_webhook__healed_to_succeeded_from_the_report(flow: Flow) -> None:
    rid = refunded_without_webhooks(flow, "rf-lost-hook", 2000)
    held = flow.app.refunds.get(rid)
    assert held is not None
    reconcile(flow, rid)
    healed = flow.app.refunds.get(rid)
    assert healed is not None and healed.status is P.SUCCEEDED and healed.psp_refund_id == held.psp_refund_id
    last = flow.app.refunds.events(rid)[-1]
    assert last.source == "reconcile"
    assert last.details["psp_status"] == "Refunded"


def test_adyen_refund__a_refunded_reversed_row_sends_it_to_review(flow: Flow) -> None:
    rid = refunded_without_webhooks(flow, "rf-reversed", 1500)
    held = flow.app.refunds.get(rid)
    assert held is not None
    flow.post(f"/_admin/refunds/{held.psp_refund_id}/reverse")
    assert "REFUNDED_REVERSED" in flow.deliver(drop=True)  # lost too
    reconcile(flow, rid)
    found = flow.app.refunds.get(rid)
    assert found is not None and found.status is P.NEEDS_REVIEW
    assert (found.review_reason or "").startswith("refund_reversed: the PSP says RefundedReversed")
    assert found.psp_refund_id == held.psp_refund_id


def test_adyen_refund__a_row_naming_another_refund_id_is_a_conflict(flow: Flow) -> None:
    rid = refunded_without_webhooks(flow, "rf-twice", 1000)
    held = flow.app.refunds.get(rid)
    assert held is not None and held.psp_refund_id
    payment = flow.payment(held.payment_id)
    # a second refund at Adyen under our refund's reference (made outside recon): another pspReference
    answer = flow.admin.post(
        f"/v72/payments/{payment.psp_reference}/refunds",
        json={"amount": {"value": 500, "currency": "EUR"}, "merchantAccount": ACCOUNT, "reference": "rf-twice"},
    )
    assert answer.status_code == 201, answer.text
    other = answer.json()["pspReference"]
    assert other != held.psp_refund_id
    wait_for(lambda: "REFUND" in flow.deliver(drop=True), timeout=20)
    reconcile(flow, rid)
    found = flow.app.refunds.get(rid)
    assert found is not None and found.status is P.NEEDS_REVIEW
    assert found.review_reason == (
        f"reference_conflict: ours is {held.psp_refund_id}, the PSP names {other} for "
        "our refund rf-twice (a second refund, or not ours: a person looks)"
    )
    assert found.psp_refund_id == held.psp_refund_id  # evidence never overwrites


def test_adyen_refund__a_recheck_finds_a_succeeded_refund_reversed_in_the_report(flow: Flow) -> None:
    """Final states stay re-checkable: the REFUND webhook came, the REFUNDED_REVERSED one was lost."""
    [pid] = flow.charge(1)
    queue = flow.app.payments_config.queue
    [rid] = flow.app.refunds.create([NewRefund(pid, "rf-recheck", 1200, None, "ann")], queue=queue)
    flow.run("refund")
    wait_for(lambda: "REFUND" in flow.deliver(), timeout=20)
    made = flow.app.refunds.get(rid)
    assert made is not None and made.status is P.SUCCEEDED
    flow.post(f"/_admin/refunds/{made.psp_refund_id}/reverse")
    assert "REFUNDED_REVERSED" in flow.deliver(drop=True)
    reconcile(flow, rid, recheck=True)
    found = flow.app.refunds.get(rid)
    assert found is not None and found.status is P.NEEDS_REVIEW
    assert (found.review_reason or "").startswith(
        "refund_reversed: the PSP says RefundedReversed for a refund ours was succeeded"
    )
