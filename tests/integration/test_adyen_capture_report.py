"""An Adyen capture or cancel whose webhook was lost, healed by its reconcile job from the Payment accounting report,
on both databases, against the sandbox's Adyen flavour through recon's real Adyen adapter (``sandbox_flow``); and
``recon review recheck`` finding a succeeded capture the report shows failed afterwards.

Adyen answers a capture or cancel ``[received]`` and tells its end by the CAPTURE / CAPTURE_FAILED / CANCELLATION
webhooks and by the daily report's rows of the payment (docs.adyen.com/reporting/reports-and-the-payments-lifecycle:
SentForSettle, Settled, Cancelled; docs.adyen.com/online-payments/capture/failure-reasons: CaptureFailed), which
name the modification in ``Modification Psp Reference`` and ``Modification Merchant Reference``. Here the webhooks
are dropped: the report alone decides.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from recon import Client, Settings
from recon.operator_rows import Role
from recon.reconcile.modification import MODIFICATION_RECONCILE_KIND, modification_reconcile_key
from recon.rows import NewPayment, PaymentStatus
from tests.cli import Runner
from tests.integration.payment_flow import wait_for
from tests.integration.sandbox_flow import ACCOUNT, Flow, open_flow

P = PaymentStatus


@pytest.fixture
def flow(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Flow]:
    with open_flow("adyen", db_url, tmp_path, monkeypatch) as opened:
        yield opened


def authorised(flow: Flow, ref: str) -> int:
    """A 50.00 EUR payment authorised for a manual capture through recon's Adyen adapter."""
    [pid] = flow.app.payments.create([NewPayment(ACCOUNT, ref, 5000, "EUR", "adyen", payment_method="pm_card_visa",
                                                 customer_reference="cus_adyen_mods", capture_mode="manual")])
    flow.run("charge")
    flow.deliver()
    assert flow.payment(pid).status is P.AUTHORISED
    return pid


def sent(flow: Flow, ref: str, kind: str, *, amount: str | None = None, drop: bool = True) -> int:
    """Our capture (or cancel) of ``ref``, sent by its job ([received]: pending); its webhook lost when ``drop``."""
    made = (flow.app.actions.capture(ref, amount=amount, by="ann") if kind == "capture"
            else flow.app.actions.cancel_authorisation(ref, by="ann"))
    flow.run(kind)
    code = "CAPTURE" if kind == "capture" else "CANCELLATION"
    seen: list[str] = []
    wait_for(lambda: bool(seen.extend(flow.deliver(drop=drop))) or code in seen, timeout=20)
    return made.id


def reconcile(flow: Flow, mid: int) -> None:
    Client(flow.app.jobs, Settings()).enqueue(
        MODIFICATION_RECONCILE_KIND,
        {"modification_id": mid},
        queue=flow.app.reconcile_config.queue,
        unique_key=modification_reconcile_key(mid),
    )
    flow.run(MODIFICATION_RECONCILE_KIND)


def test_adyen_capture__lost_webhook__healed_to_succeeded_with_the_captured_amount(
    flow: Flow, staff: dict[str, Role]
) -> None:
    pid = authorised(flow, "order-hc")
    mid = sent(flow, "order-hc", "capture", amount="30.00")
    held = flow.app.modifications.get(mid)
    assert held is not None and held.status is P.PENDING and held.psp_modification_id  # no webhook told recon
    assert flow.payment(pid).status is P.AUTHORISED
    reconcile(flow, mid)
    healed = flow.app.modifications.get(mid)
    assert healed is not None and healed.status is P.SUCCEEDED
    assert healed.psp_modification_id == held.psp_modification_id
    last = flow.app.modifications.events(mid)[-1]
    assert last.source == "reconcile" and (last.details or {}).get("psp_status") == "Settled"
    payment = flow.payment(pid)
    assert (payment.status, payment.captured_amount) == (P.SUCCEEDED, 3000)


def test_adyen_cancel__lost_webhook__healed_to_succeeded_and_the_payment_ends(
    flow: Flow, staff: dict[str, Role]
) -> None:
    pid = authorised(flow, "order-hx")
    mid = sent(flow, "order-hx", "cancel")
    held = flow.app.modifications.get(mid)
    assert held is not None and held.status is P.PENDING and held.psp_modification_id
    reconcile(flow, mid)
    healed = flow.app.modifications.get(mid)
    assert healed is not None and healed.status is P.SUCCEEDED
    assert (flow.app.modifications.events(mid)[-1].details or {}).get("psp_status") == "Cancelled"
    payment = flow.payment(pid)
    assert payment.status is P.FAILED and payment.captured_amount == 0


def test_adyen_capture__recheck_finds_a_capture_the_report_shows_failed(
    flow: Flow, db_url: str, recon: Runner, staff: dict[str, Role]
) -> None:
    """Final states stay re-checkable: the CAPTURE webhook came, the CAPTURE_FAILED one was lost."""
    pid = authorised(flow, "order-fc")
    mid = sent(flow, "order-fc", "capture", drop=False)
    made = flow.app.modifications.get(mid)
    assert made is not None and made.status is P.SUCCEEDED and made.psp_modification_id
    assert (flow.payment(pid).status, flow.payment(pid).captured_amount) == (P.SUCCEEDED, 5000)
    failed = flow.post(f"/_admin/modifications/{made.psp_modification_id}/fail")
    assert failed["outcome"] == "capture_failed"
    assert "CAPTURE_FAILED" in flow.deliver(drop=True)  # lost: recon still says captured
    asked = recon("review", "recheck", "order-fc-capture1", "--by", "ann", db_url=db_url)
    assert asked.returncode == 0, asked.stderr
    flow.run(MODIFICATION_RECONCILE_KIND)
    found = flow.app.modifications.get(mid)
    assert found is not None and found.status is P.NEEDS_REVIEW
    assert found.review_reason == (
        "status_mismatch: the PSP says CaptureFailed for capture order-fc-capture1, ours succeeded, "
        "reason CaptureFailed"
    )
    assert found.psp_modification_id == made.psp_modification_id
    payment = flow.payment(pid)
    assert payment.status is P.NEEDS_REVIEW and payment.review_reason == found.review_reason
