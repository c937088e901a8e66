"""Disputes end to end on both databases against the sandbox's Stripe and Adyen flavours: recon charges through its
real adapters, the sandbox's admin API opens and decides disputes (``admin_movements``), its signed webhooks (Stripe's
``charge.dispute.*``; Adyen's NOTIFICATION_OF_CHARGEBACK, CHARGEBACK, CHARGEBACK_REVERSED, SECOND_CHARGEBACK) reach
`recon serve`'s application, and the webhooks a test drops are made good by the PSP's listing (``recon disputes
fetch``: Stripe's ``GET /v1/disputes``, Adyen's Payment accounting report). The sandbox signs; recon verifies with
its own receivers; nothing of the wire is written by the test.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from recon.dispute_rows import DisputeStatus
from recon.rows import PaymentStatus
from tests.cli import Runner
from tests.integration.sandbox_flow import KEY, Flow, open_flow

P = PaymentStatus
D = DisputeStatus


@pytest.fixture
def flow(
    request: pytest.FixtureRequest, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Flow]:
    with open_flow(request.param, db_url, tmp_path, monkeypatch) as opened:
        yield opened


@pytest.mark.parametrize("flow", ["stripe"], indirect=True)
def test_stripe_sandbox__disputes_told_by_webhooks_and_made_good_by_the_listing(
    flow: Flow, db_url: str, recon: Runner
) -> None:
    told, lost_hooks = flow.charge(2)
    first = flow.dispute(told)
    assert flow.deliver() == ["charge.dispute.created", "charge.dispute.funds_withdrawn"]
    [opened] = flow.app.disputes.for_payment(told)
    assert (opened.psp_dispute_id, opened.status, opened.amount, opened.currency) == (first, D.OPENED, 5000, "EUR")
    assert opened.evidence_due_by is not None and opened.fee == 1500
    assert flow.payment(told).status is P.NEEDS_REVIEW  # the money withdrawn: a person looks
    flow.post(f"/_admin/disputes/{first}/close", {"outcome": "won"})
    assert flow.deliver() == ["charge.dispute.closed", "charge.dispute.funds_reinstated"]
    assert flow.app.disputes.for_payment(told)[0].status is D.WON

    second = flow.dispute(lost_hooks)
    flow.deliver(drop=True)  # lost: recon never hears of it from a webhook
    assert flow.app.disputes.for_payment(lost_hooks) == []
    assert flow.fetch() == {"new": 1, "moved": 0, "same": 1, "unknown": [], "conflicts": []}
    [listed] = flow.app.disputes.for_payment(lost_hooks)
    assert (listed.psp_dispute_id, listed.status, listed.amount) == (second, D.OPENED, 5000)
    assert flow.payment(lost_hooks).status is P.NEEDS_REVIEW
    flow.post(f"/_admin/disputes/{second}/close", {"outcome": "lost"})
    flow.deliver(drop=True)
    assert flow.fetch() == {"new": 0, "moved": 1, "same": 1, "unknown": [], "conflicts": []}
    assert flow.app.disputes.for_payment(lost_hooks)[0].status is D.LOST
    assert flow.fetch()["same"] == 2  # read again: noted, nothing moves

    doc = json.loads(recon("disputes", "show", second, "--json", db_url=db_url).stdout)
    assert [(e["from_status"], e["to_status"], e["source"]) for e in doc["events"]] == [
        (None, "opened", "listing"),
        ("opened", "lost", "listing"),
        ("lost", "lost", "listing"),
    ]
    listed_all = json.loads(recon("disputes", "list", "--json", db_url=db_url).stdout)["disputes"]
    assert [(d["payment"], d["status"]) for d in listed_all] == [("order-0", "won"), ("order-1", "lost")]
    text = recon("disputes", "list", "--status", "won", db_url=db_url).stdout
    assert "1 disputes" in text and "order-0" in text and "order-1" not in text


@pytest.mark.parametrize("flow", ["adyen"], indirect=True)
def test_adyen_sandbox__notified_charged_back_reversed_then_second_chargeback(flow: Flow) -> None:
    [pid] = flow.charge(1)
    dispute = flow.dispute(pid, notify_first=True)
    assert flow.deliver()[:2] == ["NOTIFICATION_OF_CHARGEBACK", "CHARGEBACK"]
    [opened] = flow.app.disputes.for_payment(pid)
    assert (opened.status, opened.psp_status, opened.amount) == (D.OPENED, "CHARGEBACK", 5000)
    assert opened.evidence_due_by is not None  # NOTIFICATION_OF_CHARGEBACK's defensePeriodEndsAt
    assert flow.payment(pid).status is P.NEEDS_REVIEW
    flow.post(f"/_admin/disputes/{dispute}/close", {"outcome": "won"})
    assert "CHARGEBACK_REVERSED" in flow.deliver()
    assert flow.app.disputes.for_payment(pid)[0].status is D.REVERSED
    flow.post(f"/_admin/disputes/{dispute}/close", {"outcome": "lost"})
    assert "SECOND_CHARGEBACK" in flow.deliver()
    assert flow.app.disputes.for_payment(pid)[0].status is D.LOST  # Adyen's documented order ends lost
    # the day's report: Chargeback, ChargebackReversed, SecondChargeback rows, each older news than lost: noted
    assert flow.fetch() == {"new": 0, "moved": 0, "same": 3, "unknown": [], "conflicts": []}
    assert flow.app.disputes.for_payment(pid)[0].status is D.LOST


@pytest.mark.parametrize("flow", ["adyen"], indirect=True)
def test_adyen_sandbox__a_chargeback_whose_webhooks_were_lost_is_read_from_the_report(flow: Flow) -> None:
    [pid] = flow.charge(1)
    flow.dispute(pid)
    flow.deliver(drop=True)
    assert flow.fetch() == {"new": 1, "moved": 0, "same": 0, "unknown": [], "conflicts": []}
    [listed] = flow.app.disputes.for_payment(pid)
    assert (listed.status, listed.psp_status, listed.amount) == (D.OPENED, "Chargeback", 5000)
    assert flow.payment(pid).status is P.NEEDS_REVIEW
    assert flow.fetch() == {"new": 0, "moved": 0, "same": 1, "unknown": [], "conflicts": []}


@pytest.mark.parametrize("flow", ["stripe"], indirect=True)
def test_sweep__reads_the_dispute_listing_and_counts_the_open_disputes(flow: Flow, db_url: str, recon: Runner) -> None:
    [pid] = flow.charge(1)
    dispute = flow.dispute(pid)
    flow.deliver(drop=True)  # its webhooks lost
    env = {"RECON_STRIPE_API_KEY": KEY, "RECON_STRIPE_BASE_URL": flow.server.url}
    quiet = json.loads(recon("sweep", "--json", db_url=db_url, env=env).stdout)["disputes"]
    assert (quiet["fetched"], quiet["open"]) == ({}, 0)  # without --disputes no listing is read
    swept = recon("sweep", "--disputes", "2", "--json", db_url=db_url, env=env)
    assert swept.returncode == 0, swept.stderr
    doc = json.loads(swept.stdout)["disputes"]
    assert doc["fetched"] == {"stripe": {"new": 1, "moved": 0, "same": 0, "unknown": [], "conflicts": []}}
    assert (doc["open"], doc["withdrawn"], doc["due_soon"]) == (1, {"EUR": 5000}, 0)  # due in 21 days
    assert [d.psp_dispute_id for d in flow.app.disputes.for_payment(pid)] == [dispute]
    text = " ".join(recon("sweep", "--disputes", "2", db_url=db_url, env=env).stdout.split())
    assert "stripe disputes read: 0 new, 0 moved, 1 unchanged" in text
    assert "open disputes 1 (50.00 EUR withdrawn), evidence due within 7 days: 0" in text


@pytest.mark.parametrize("flow", ["stripe"], indirect=True)
def test_disputes_fetch__a_dispute_of_a_payment_we_do_not_know_exits_1_naming_it(
    flow: Flow, db_url: str, recon: Runner
) -> None:
    made = flow.admin.post(
        "/v1/payment_intents",
        data={  # charged at the PSP, never by recon
            "amount": "2500",
            "currency": "eur",
            "confirm": "true",
            "payment_method": "pm_card_visa",
            "off_session": "true",
            "metadata[merchant_reference]": "not-ours",
        },
    )
    assert made.status_code == 200, made.text
    dispute = flow.post(f"/_admin/payments/{made.json()['id']}/dispute")["id"]
    day = datetime.now(UTC).date()
    env = {"RECON_STRIPE_API_KEY": KEY, "RECON_STRIPE_BASE_URL": flow.server.url}
    r = recon(
        "disputes",
        "fetch",
        "--psp",
        "stripe",
        "--since",
        str(day - timedelta(days=1)),
        "--until",
        str(day + timedelta(days=1)),
        "--json",
        db_url=db_url,
        env=env,
    )
    assert r.returncode == 1, r.stderr
    assert json.loads(r.stdout)["unknown"] == [dispute]
    text = recon(
        "disputes",
        "fetch",
        "--psp",
        "stripe",
        "--since",
        str(day),
        "--until",
        str(day + timedelta(days=1)),
        db_url=db_url,
        env=env,
    ).stdout
    assert f"of a payment we do not know: {dispute}" in text
    bad = recon(
        "disputes", "fetch", "--psp", "stripe", "--since", str(day), "--until", str(day), db_url=db_url, env=env
    )
    assert bad.returncode == 2 and "since/until: must be a window of 1 to 120 days" in bad.stderr
    assert recon("disputes", "show", dispute, db_url=db_url).returncode == 2  # never stored
