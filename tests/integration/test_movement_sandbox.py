"""Refunds and payout lines end to end on both databases against the sandbox's flavours (``sandbox_flow``).

Adyen's refunds are asynchronous (docs.adyen.com/online-payments/refund): ``POST /payments/{pspReference}/refunds``
answers ``[received]`` (our refund pending, the modification's pspReference stored as its PSP refund id), then the
REFUND webhook decides it; REFUND_FAILED and REFUNDED_REVERSED come after a success (the scheme failed it; the money
came back). Stripe's "refunds can fail after they succeed" (docs.stripe.com/refunds#failed-refunds): when that
webhook is lost, ``recon review recheck REFUND_REF`` asks GET /v1/refunds/{id} and sends the refund to review.
A payout's refund and dispute lines name the movement (Stripe's balance transaction source, Adyen's Modification
Reference) and link to our refund and dispute: ``recon payouts show`` prints them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from recon.operator_rows import Role
from recon.refund_rows import NewRefund
from recon.rows import PaymentStatus
from tests.cli import Runner
from tests.integration.payment_flow import wait_for
from tests.integration.sandbox_flow import Flow, open_flow

P = PaymentStatus


@pytest.fixture
def flow(
    request: pytest.FixtureRequest, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Flow]:
    with open_flow(request.param, db_url, tmp_path, monkeypatch) as opened:
        yield opened


def refund(flow: Flow, pid: int, reference: str, amount: int) -> int:
    """Our refund of ``amount`` on payment ``pid``, sent by its refund job."""
    queue = flow.app.payments_config.queue
    [rid] = flow.app.refunds.create([NewRefund(pid, reference, amount, None, "ann")], queue=queue)
    flow.run("refund")
    return rid


def status(flow: Flow, rid: int) -> P:
    found = flow.app.refunds.get(rid)
    assert found is not None
    return found.status


@pytest.mark.parametrize("flow", ["adyen"], indirect=True)
def test_adyen_refunds__received_then_refund_refund_failed_and_refunded_reversed(flow: Flow) -> None:
    [paid] = flow.charge(1)
    [failing] = flow.charge(1, method="pm_card_refundFail", first=1)  # the scheme fails its refunds after success
    flow.post("/_admin/faults", {"settle_after_seconds": 0})
    ok = refund(flow, paid, "rf-ok", 2000)
    fails = refund(flow, failing, "rf-fails", 1000)
    sent = flow.app.refunds.get(ok)
    assert sent is not None and sent.status is P.PENDING and sent.psp_refund_id  # [received]: the PSP's id kept
    seen: list[str] = []
    wait_for(lambda: bool(seen.extend(flow.deliver())) or status(flow, fails) is P.NEEDS_REVIEW, timeout=20)
    assert {"REFUND", "REFUND_FAILED"} <= set(seen)
    assert status(flow, ok) is P.SUCCEEDED
    failed = flow.app.refunds.get(fails)
    assert failed is not None and (failed.review_reason or "").startswith("refund_reversed:")
    flow.post(f"/_admin/refunds/{sent.psp_refund_id}/reverse")
    assert "REFUNDED_REVERSED" in flow.deliver()
    reversed_ = flow.app.refunds.get(ok)
    assert reversed_ is not None and reversed_.status is P.NEEDS_REVIEW
    assert (reversed_.review_reason or "").startswith("refund_reversed: the PSP says REFUNDED_REVERSED")


@pytest.mark.parametrize("flow", ["stripe"], indirect=True)
def test_stripe_refund_reversed_after_success__its_lost_webhook_made_good_by_review_recheck(
    flow: Flow, db_url: str, recon: Runner, staff: dict[str, Role]
) -> None:
    [pid] = flow.charge(1)
    rid = refund(flow, pid, "rf-1", 1500)
    flow.deliver()
    made = flow.app.refunds.get(rid)
    assert made is not None and made.status is P.SUCCEEDED and made.psp_refund_id
    flow.post(f"/_admin/refunds/{made.psp_refund_id}/reverse")
    assert "charge.refund.updated" in flow.deliver(drop=True)  # lost: recon still says succeeded
    assert status(flow, rid) is P.SUCCEEDED
    asked = recon("review", "recheck", "rf-1", "--by", "ann", "--json", db_url=db_url)
    assert asked.returncode == 0, asked.stderr
    flow.run("reconcile_refund")
    found = flow.app.refunds.get(rid)
    assert found is not None and found.status is P.NEEDS_REVIEW
    assert (found.review_reason or "").startswith("refund_reversed: the PSP says failed")
    refused = recon("review", "recheck", "rf-1", "--by", "vic", db_url=db_url)  # a viewer may not
    assert refused.returncode == 2


@pytest.mark.parametrize("flow", ["stripe", "adyen"], indirect=True)
def test_payout_lines__link_our_refund_and_dispute(flow: Flow, db_url: str, recon: Runner) -> None:
    refunded, disputed = flow.charge(2)
    rid = refund(flow, refunded, "rf-paid-out", 1200)
    dispute = flow.dispute(disputed)
    wait_for(lambda: bool(flow.deliver()) and status(flow, rid) is P.SUCCEEDED, timeout=20)
    [ours] = flow.app.disputes.for_payment(disputed)
    flow.post("/_admin/payouts/run")
    today = datetime.now(UTC).date()
    fetched = flow.app.fetch_payouts(flow.psp, today - timedelta(days=3), today + timedelta(days=5))
    assert fetched.new >= 1
    shown = [
        json.loads(recon("payouts", "show", str(p.id), "--json", db_url=db_url).stdout)
        for p in flow.app.payouts.iter_payouts(psp=flow.psp)
    ]
    lines = [ln for doc in shown for ln in doc["lines"]]
    refund_line = next(ln for ln in lines if ln["kind"] == "refund")
    made = flow.app.refunds.get(rid)
    assert made is not None
    assert (refund_line["movement_reference"], refund_line["refund_id"], refund_line["refund"]) == (
        made.psp_refund_id,
        rid,
        "rf-paid-out",
    )
    dispute_line = next(ln for ln in lines if ln["kind"] == "dispute")
    assert (dispute_line["movement_reference"], dispute_line["dispute_id"], dispute_line["dispute"]) == (
        dispute,
        ours.id,
        ours.psp_dispute_id,
    )
    charge_line = next(ln for ln in lines if ln["kind"] == "charge")
    assert (charge_line["movement_reference"], charge_line["refund_id"], charge_line["dispute_id"]) == (None,) * 3
    text = recon("payouts", "show", str(shown[0]["payout"]["id"]), db_url=db_url).stdout
    assert "(our refund rf-paid-out)" in text or "(our refund rf-paid-out)" in "".join(
        recon("payouts", "show", str(d["payout"]["id"]), db_url=db_url).stdout for d in shown
    )


@pytest.mark.parametrize("flow", ["stripe"], indirect=True)
def test_stripe_refund_failed_after_success__its_webhooks_send_it_to_review(flow: Flow) -> None:
    [pid] = flow.charge(1)
    rid = refund(flow, pid, "rf-2", 700)
    flow.deliver()
    made = flow.app.refunds.get(rid)
    assert made is not None and made.status is P.SUCCEEDED
    flow.post(f"/_admin/refunds/{made.psp_refund_id}/reverse")
    told = flow.deliver()
    assert {"refund.updated", "charge.refund.updated", "refund.failed"} <= set(told)
    found = flow.app.refunds.get(rid)
    assert found is not None and found.status is P.NEEDS_REVIEW
    reason = found.review_reason or ""
    assert reason.startswith("refund_reversed: the PSP says failed for a refund ours was succeeded")
    payment = flow.app.payments.get(pid)
    assert payment is not None and payment.refunded_amount == 700  # in review it still counts until a person decides
