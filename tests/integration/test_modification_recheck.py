"""``recon review recheck MOD_REF`` for a capture or a cancel, on both databases, against the sandbox's Stripe
flavour (``sandbox_flow``): the final modification re-asked from the PSP (GET /v1/payment_intents/{id}: Stripe's
capture is read back as the intent ``succeeded`` with ``amount_received``, a cancel as ``canceled``:
docs.stripe.com/api/payment_intents/object#payment_intent_object-status). A succeeded capture whose intent was
canceled afterwards (its payment_intent.canceled webhook lost), or a succeeded cancel whose intent was captured
afterwards, goes to review with its payment; an agreeing answer only joins the audit trail; a PSP id other than
the one stored is a reference_conflict, and the stored id stays.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from psp_adapters.protocol import Succeeded
from recon.modification_rows import Modification, ModificationSource, ModificationTransition
from recon.operator_rows import Role
from recon.payments.modification import capturing_adapter, modification_request
from recon.rows import NewPayment, PaymentStatus
from tests.cli import Runner
from tests.integration.sandbox_flow import ACCOUNT, Flow, open_flow

P = PaymentStatus


@pytest.fixture
def flow(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Flow]:
    with open_flow("stripe", db_url, tmp_path, monkeypatch) as opened:
        yield opened


def authorised(flow: Flow, ref: str) -> int:
    """A 50.00 EUR payment authorised for a manual capture through recon's Stripe adapter."""
    [pid] = flow.app.payments.create(
        [
            NewPayment(
                ACCOUNT,
                ref,
                5000,
                "EUR",
                "stripe",
                payment_method="pm_card_visa",
                customer_reference="cus_recheck",
                capture_mode="manual",
            )
        ]
    )
    flow.run("charge")
    flow.deliver()
    assert flow.payment(pid).status is P.AUTHORISED
    return pid


def modified(flow: Flow, ref: str, kind: str, *, amount: str | None = None) -> Modification:
    """Our capture (or cancel) of ``ref``, asked by ann, sent by its job, succeeded."""
    made = (
        flow.app.actions.capture(ref, amount=amount, by="ann")
        if kind == "capture"
        else flow.app.actions.cancel_authorisation(ref, by="ann")
    )
    flow.run(kind)
    flow.deliver()
    done = flow.app.modifications.get(made.id)
    assert done is not None and done.status is P.SUCCEEDED and done.psp_modification_id
    return done


def recheck(flow: Flow, recon: Runner, db_url: str, ref: str) -> dict[str, object]:
    asked = recon("review", "recheck", ref, "--by", "ann", "--json", db_url=db_url)
    assert asked.returncode == 0, asked.stderr
    flow.run("reconcile_modification")
    return json.loads(asked.stdout)  # type: ignore[no-any-return]


def audit_actions(flow: Flow, ref: str) -> list[tuple[str, str, str]]:
    with flow.app.db.begin() as conn:
        rows = conn.execute(
            sa.text("SELECT actor, action, outcome FROM audit_log WHERE subject = :s ORDER BY id"), {"s": ref}
        ).all()
    return [(r.actor, r.action, r.outcome) for r in rows]


def test_recheck__a_capture_the_psp_canceled_afterwards_goes_to_review_with_its_payment(
    flow: Flow, db_url: str, recon: Runner, staff: dict[str, Role]
) -> None:
    pid = authorised(flow, "order-c1")
    mod = modified(flow, "order-c1", "capture", amount="30.00")
    assert (flow.payment(pid).status, flow.payment(pid).captured_amount) == (P.SUCCEEDED, 3000)
    flow.post(f"/_admin/payments/{flow.payment(pid).psp_reference}/cancel", {"reason": "fraudulent"})
    assert "payment_intent.canceled" in flow.deliver(drop=True)  # lost: recon still says captured
    asked = recheck(flow, recon, db_url, mod.modification_reference)
    assert (asked["capture"], asked["queue"]) == ("order-c1-capture1", flow.app.reconcile_config.queue)
    found = flow.app.modifications.get(mod.id)
    assert found is not None and found.status is P.NEEDS_REVIEW
    assert found.review_reason == (
        "status_mismatch: the PSP says canceled for capture order-c1-capture1, ours succeeded, reason fraudulent"
    )
    assert found.psp_modification_id == mod.psp_modification_id
    payment = flow.payment(pid)
    assert payment.status is P.NEEDS_REVIEW and payment.review_reason == found.review_reason
    [event] = [e for e in flow.app.modifications.events(mod.id) if e.to_status == "needs_review"]
    assert event.source == "reconcile" and (event.details or {}).get("recheck") is True
    assert (event.details or {}).get("psp_status") == "canceled"
    shown = json.loads(recon("payments", "show", "order-c1", "--json", db_url=db_url).stdout)
    assert [(m["modification_reference"], m["status"]) for m in shown["modifications"]] == [
        ("order-c1-capture1", "needs_review")
    ]
    assert ("ann", "modification.recheck", "done") in audit_actions(flow, "order-c1-capture1")
    refused = recon("review", "recheck", "order-c1-capture1", "--by", "vic", db_url=db_url)  # a viewer may not
    assert refused.returncode == 2 and "viewer" in refused.stderr


def test_recheck__a_cancel_the_psp_captured_afterwards_goes_to_review_with_its_payment(
    flow: Flow, db_url: str, recon: Runner, staff: dict[str, Role]
) -> None:
    pid = authorised(flow, "order-x1")
    mod = modified(flow, "order-x1", "cancel")
    assert flow.payment(pid).status is P.FAILED
    flow.post(f"/_admin/payments/{flow.payment(pid).psp_reference}/settle")
    flow.deliver(drop=True)
    recheck(flow, recon, db_url, mod.modification_reference)
    found = flow.app.modifications.get(mod.id)
    assert found is not None and found.status is P.NEEDS_REVIEW
    assert found.review_reason == (
        "status_mismatch: the PSP says succeeded for cancel order-x1-cancel1, ours succeeded, reason already captured"
    )
    assert flow.payment(pid).status is P.NEEDS_REVIEW


def test_recheck__an_agreeing_answer_joins_the_audit_trail_and_nothing_moves(
    flow: Flow, db_url: str, recon: Runner, staff: dict[str, Role]
) -> None:
    pid = authorised(flow, "order-a1")
    mod = modified(flow, "order-a1", "capture")
    before = len(flow.app.modifications.events(mod.id))
    recheck(flow, recon, db_url, mod.modification_reference)
    found = flow.app.modifications.get(mod.id)
    assert found is not None and found.status is P.SUCCEEDED
    events = flow.app.modifications.events(mod.id)
    assert len(events) == before + 1
    noted = events[-1]
    assert (noted.from_status, noted.to_status, noted.source) == ("succeeded", "succeeded", "reconcile")
    assert (noted.details or {}).get("recheck") is True and (noted.details or {}).get("psp_amount") == 5000
    assert (flow.payment(pid).status, flow.payment(pid).captured_amount) == (P.SUCCEEDED, 5000)


def test_recheck__another_psp_id_than_the_stored_one_is_a_conflict_and_never_replaces_it(
    flow: Flow, db_url: str, recon: Runner, staff: dict[str, Role]
) -> None:
    pid = authorised(flow, "order-r1")
    mod = modified(flow, "order-r1", "capture")
    with flow.app.db.begin() as conn:  # as if an earlier answer had named another intent
        conn.execute(
            sa.text("UPDATE modifications SET psp_modification_id = 'pi_stored' WHERE id = :id"), {"id": mod.id}
        )
    recheck(flow, recon, db_url, mod.modification_reference)
    found = flow.app.modifications.get(mod.id)
    assert found is not None and found.status is P.NEEDS_REVIEW and found.psp_modification_id == "pi_stored"
    assert found.review_reason == (
        f"reference_conflict: ours is pi_stored, the PSP names {flow.payment(pid).psp_reference} for our capture "
        "order-r1-capture1 (a second capture, or not ours: a person looks)"
    )
    assert flow.payment(pid).status is P.NEEDS_REVIEW


def test_recheck__a_failed_capture_the_psp_captured_goes_to_review_with_its_payment(
    flow: Flow, db_url: str, recon: Runner, staff: dict[str, Role]
) -> None:
    pid = authorised(flow, "order-f1")
    made = flow.app.actions.capture("order-f1", amount="30.00", by="ann")
    never = "never reached the PSP (not found after the grace period)"
    with flow.app.db.begin() as conn:  # healed as never sent while its request was on the way
        assert flow.app.modifications.apply(
            conn,
            ModificationTransition(made.id, P.CREATED, P.FAILED, ModificationSource.RECONCILE, failure_reason=never),
        )
    # the request reached Stripe after all: the PaymentIntent is succeeded with amount_received 3000
    adapter = capturing_adapter(flow.app.adapter, "stripe")
    answer = adapter.modify_payment(modification_request(made, flow.payment(pid)), idempotency_key=made.idempotency_key)
    assert isinstance(answer, Succeeded) and answer.amount == 3000
    assert "payment_intent.succeeded" in flow.deliver(drop=True)  # lost: recon still says failed
    assert flow.payment(pid).status is P.AUTHORISED
    recheck(flow, recon, db_url, "order-f1-capture1")
    found = flow.app.modifications.get(made.id)
    reason = (
        "status_mismatch: ours failed (never reached the PSP (not found after the grace period)), the PSP says "
        "succeeded 30.00 EUR for capture order-f1-capture1"
    )
    assert found is not None and (found.status, found.review_reason) == (P.NEEDS_REVIEW, reason)
    assert found.psp_modification_id == flow.payment(pid).psp_reference and found.failure_reason == never
    [event] = [e for e in flow.app.modifications.events(made.id) if e.to_status == "needs_review"]
    assert (event.from_status, event.source) == ("failed", "reconcile")
    assert (event.details or {}).get("recheck") is True and (event.details or {}).get("psp_amount") == 3000
    payment = flow.payment(pid)
    assert (payment.status, payment.review_reason, payment.captured_amount) == (P.NEEDS_REVIEW, reason, 0)
    listed = json.loads(recon("review", "list", "--json", db_url=db_url).stdout)
    assert [(i["merchant_reference"], i["kind"]) for i in listed["payments"]] == [("order-f1", "status_mismatch")]


def test_recheck__an_unknown_reference_exits_2_naming_it(db_url: str, recon: Runner, staff: dict[str, Role]) -> None:
    r = recon("review", "recheck", "nope-capture1", "--by", "ann", db_url=db_url)
    assert r.returncode == 2 and "nope-capture1" in r.stderr
