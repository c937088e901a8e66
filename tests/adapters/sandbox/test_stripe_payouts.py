"""The Stripe flavour pays out (``stripe_payouts``), driven by Stripe's official SDK (stripe-python) over real HTTP,
every answer checked against Stripe's canonical objects (``stripe_checks``): ``GET /v1/payouts`` with its filters
and auto-paging, ``GET /v1/payouts/{id}``, ``GET /v1/balance_transactions?payout=`` with the source expanded,
the payout's own balance transaction, failure, the balance, and the ``payout.*`` webhooks signed like Stripe's.

Expected amounts are computed here from what the test charged and the sandbox's documented fee
(2.9 % + 30, ``records.sandbox_fee``, whose doctest pins its values), never read back from the code under test.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
import stripe

from psp_adapters.protocol import Secret
from psp_adapters.sandbox import SandboxServer
from psp_adapters.sandbox.webhooks import WebhookConfig
from tests.adapters.sandbox.stripe_checks import CheckedClient, sdk
from tests.adapters.sandbox.test_flavor_stripe import START, Clock
from tests.adapters.sandbox.test_webhooks_stripe import SECRET, verified
from tests.adapters.sandbox.webhook_receiver import Receiver, receiving

KEY = "sk_test_payouts_0000"
DAY1 = START.replace(hour=0)  # 2026-03-02 00:00 UTC; START is noon that day
MIDNIGHT2 = DAY1 + timedelta(days=1)  # the payout of day 1 forms here
ARRIVAL2 = MIDNIGHT2 + timedelta(days=1)  # and arrives in the bank here


def fee(amount: int) -> int:
    """2.9 % + 30, half up (docs/psps.md; the same numbers as records.sandbox_fee's doctest)."""
    return {1000: 59, 2000: 88, 1250: 66, 3000: 117, 500: 45}[amount]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def server(clock: Clock) -> Iterator[SandboxServer]:
    with SandboxServer(flavor="stripe", api_key=KEY, now_func=clock) as srv:
        yield srv


@pytest.fixture
def checked() -> Iterator[CheckedClient]:
    client = CheckedClient()
    try:
        yield client
    finally:
        client.close()
    assert client.answers > 0 and client.checked > 0


@pytest.fixture
def client(server: SandboxServer, checked: CheckedClient) -> stripe.StripeClient:
    return sdk(server.url, KEY, client=checked)


def pay(client: stripe.StripeClient, amount: int, currency: str = "eur", method: str = "pm_card_visa") -> str:
    intent = client.v1.payment_intents.create(params={  # type: ignore[arg-type]
        "amount": amount, "currency": currency, "payment_method": method, "confirm": True, "off_session": True})
    return intent.id


def admin(server: SandboxServer, path: str, **body: object) -> httpx.Response:
    return httpx.post(f"{server.url}/_admin/{path}", json=body, headers={"Authorization": f"Bearer {KEY}"},
                      timeout=5)


def unix(at: datetime) -> int:
    return int(at.timestamp())


def test_payout__a_days_charges_and_refunds_paid_out_at_midnight_and_listed_with_their_sources(
    client: stripe.StripeClient, clock: Clock
) -> None:
    a, b = pay(client, 1000), pay(client, 2000)
    client.v1.refunds.create(params={"payment_intent": a, "amount": 300})
    assert list(client.v1.payouts.list().auto_paging_iter()) == []  # the day is not over

    clock.advance(hours=12, seconds=1)  # 00:00:01 the next day
    [payout] = client.v1.payouts.list().data

    expected = 1000 - fee(1000) + 2000 - fee(2000) - 300
    assert isinstance(payout, stripe.Payout) and payout.id.startswith("po_")
    assert (payout.amount, payout.currency, payout.status, payout.automatic) == (expected, "eur", "in_transit", True)
    assert (payout.created, payout.arrival_date) == (unix(MIDNIGHT2), unix(ARRIVAL2))
    assert (payout.method, payout.type, payout.reconciliation_status) == ("standard", "bank_account", "in_progress")
    assert payout.trace_id.status == "supported" and len(payout.trace_id.value) == 16
    assert client.v1.payouts.retrieve(payout.id).to_dict() == payout.to_dict()

    lines = client.v1.balance_transactions.list(params={"payout": payout.id, "expand": ["data.source"]}).data
    by_type = sorted((t.type, t.amount, t.fee, t.net) for t in lines)
    assert by_type == sorted([("charge", 1000, fee(1000), 1000 - fee(1000)),
                              ("charge", 2000, fee(2000), 2000 - fee(2000)), ("refund", -300, 0, -300),
                              ("payout", -expected, 0, -expected)])
    sources = {t.type: type(t.source) for t in lines}
    assert sources == {"charge": stripe.Charge, "refund": stripe.Refund, "payout": stripe.Payout}
    own = next(t for t in lines if t.type == "payout")
    assert own.id == payout.balance_transaction and own.source.id == payout.id  # type: ignore[union-attr]
    assert sum(t.net for t in lines if t.type != "payout") == payout.amount
    charged = {t.source.payment_intent for t in lines if t.type == "charge"}  # type: ignore[union-attr]
    assert charged == {a, b}
    assert client.v1.balance_transactions.retrieve(own.id).reporting_category == "payout"
    available = {e.currency: e.amount for e in client.v1.balance.retrieve().available}
    assert available == {"eur": 0}  # all of it paid out


def test_payout__paid_at_arrival_and_a_late_day_pays_out_each_day_on_its_own(
    client: stripe.StripeClient, clock: Clock
) -> None:
    pay(client, 1000)
    clock.advance(days=1)  # day 2, noon: day 1's payout formed at midnight
    pay(client, 2000)
    clock.advance(days=3)  # nobody asked for three days: days 2's payout formed too, both arrived

    payouts = list(client.v1.payouts.list(params={"limit": 1}).auto_paging_iter())

    assert [(p.amount, p.status, p.reconciliation_status) for p in payouts] == [
        (2000 - fee(2000), "paid", "completed"), (1000 - fee(1000), "paid", "completed")]
    assert [p.created for p in payouts] == [unix(MIDNIGHT2 + timedelta(days=1)), unix(MIDNIGHT2)]
    window = {"arrival_date": {"gte": unix(ARRIVAL2), "lt": unix(ARRIVAL2) + 1}}
    assert [p.id for p in client.v1.payouts.list(params=window).data] == [payouts[1].id]  # type: ignore[arg-type]
    assert [p.id for p in client.v1.payouts.list(params={"arrival_date": {"gt": unix(ARRIVAL2)}}).data] == [
        payouts[0].id]
    assert client.v1.payouts.list(params={"status": "in_transit"}).data == []
    with pytest.raises(stripe.InvalidRequestError) as missing:
        client.v1.payouts.retrieve("po_missing")
    assert missing.value.http_status == 404


def test_payout__a_negative_day_waits_and_currencies_pay_out_apart(client: stripe.StripeClient, clock: Clock) -> None:
    usd = pay(client, 3000, "usd")
    pay(client, 500)
    clock.advance(days=1)  # day 2: usd and eur paid out for day 1
    client.v1.refunds.create(params={"payment_intent": usd, "amount": 2000})  # day 2 usd: -2000, no payout
    clock.advance(days=1)  # day 3
    pay(client, 3000, "usd")
    clock.advance(days=1)  # day 4: day 2's refund and day 3's charge paid out together

    payouts = list(client.v1.payouts.list().auto_paging_iter())
    summary = sorted((p.currency, p.created, p.amount) for p in payouts)
    assert summary == [
        ("eur", unix(MIDNIGHT2), 500 - fee(500)),
        ("usd", unix(MIDNIGHT2), 3000 - fee(3000)),
        ("usd", unix(MIDNIGHT2 + timedelta(days=2)), -2000 + 3000 - fee(3000)),
    ]
    last = next(p for p in payouts if p.created == unix(MIDNIGHT2 + timedelta(days=2)))
    kinds = sorted(t.type for t in client.v1.balance_transactions.list(params={"payout": last.id}).data)
    assert kinds == ["charge", "payout", "refund"]


def test_payout__failed_even_after_paid_gives_the_money_back_and_the_next_payout_pays_it_again(
    client: stripe.StripeClient, clock: Clock, server: SandboxServer
) -> None:
    pay(client, 1000)
    clock.advance(days=2)  # day 1's payout formed and arrived
    [paid] = client.v1.payouts.list().data
    assert paid.status == "paid"

    answer = admin(server, f"payouts/{paid.id}/fail", failure_code="account_closed")
    assert answer.status_code == 200
    failed = client.v1.payouts.retrieve(paid.id, params={"expand": ["failure_balance_transaction"]})
    assert (failed.status, failed.failure_code) == ("failed", "account_closed")
    assert failed.failure_message == "The bank account has been closed."
    back = failed.failure_balance_transaction
    assert isinstance(back, stripe.BalanceTransaction) and (back.type, back.amount) == ("payout_failure", paid.amount)
    assert admin(server, f"payouts/{paid.id}/fail").status_code == 400  # once
    assert admin(server, "payouts/po_missing/fail").status_code == 404
    assert admin(server, f"payouts/{paid.id}/fail", failure_code="nope").status_code == 400

    clock.advance(days=1)  # the next midnight pays the returned money out again
    again = [p for p in client.v1.payouts.list().data if p.id != paid.id]
    assert [(p.amount, p.status) for p in again] == [(paid.amount, "in_transit")]
    lines = client.v1.balance_transactions.list(params={"payout": again[0].id}).data
    assert sorted(t.type for t in lines) == ["payout", "payout_failure"]
    credits = httpx.get(f"{server.url}/_admin/bank-credits?since=2026-03-01&until=2026-03-31", timeout=5).json()
    assert credits["credits"] == []  # the failed one made none; the new one has not arrived


# -- webhooks -----------------------------------------------------------------------------------------------------


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as r:
        yield r


def test_webhooks__payout_created_paid_reconciliation_completed_and_failed_signed_like_stripes(
    tmp_path: Path, clock: Clock, receiver: Receiver
) -> None:
    hooks = WebhookConfig(url=receiver.url, secret=Secret(SECRET), backoff_seconds=0.05,
                          events=frozenset({"payout.created", "payout.paid", "payout.failed",
                                            "payout.reconciliation_completed"}))
    with SandboxServer(tmp_path / "s.db", flavor="stripe", api_key=KEY, now_func=clock, webhooks=hooks) as srv:
        checked = CheckedClient()
        client = sdk(srv.url, KEY, client=checked)
        pay(client, 1000)
        clock.advance(days=1)
        [payout] = client.v1.payouts.list().data
        [created] = receiver.wait_for(1)
        clock.advance(days=1)
        client.v1.balance.retrieve()
        paid, completed = receiver.wait_for(3)[1:]
        admin(srv, f"payouts/{payout.id}/fail")
        failed = receiver.wait_for(4)[3]
        checked.close()

    events = [verified(d) for d in (created, paid, completed, failed)]
    assert [e.type for e in events] == ["payout.created", "payout.paid", "payout.reconciliation_completed",
                                        "payout.failed"]
    assert all(isinstance(e.data.object, stripe.Payout) and e.data.object.id == payout.id for e in events)
    assert [e.data.object.status for e in events] == ["in_transit", "paid", "paid", "failed"]


def test_defaults__the_endpoint_takes_the_payout_events_unless_told_otherwise() -> None:
    from psp_adapters.sandbox.stripe_events import DEFAULT_WEBHOOK_EVENTS

    assert {"payout.paid", "payout.failed", "payout.reconciliation_completed"} <= DEFAULT_WEBHOOK_EVENTS



def test_run_now__pays_out_at_once_and_the_next_midnight_pays_only_what_came_after(
    client: stripe.StripeClient, clock: Clock, server: SandboxServer
) -> None:
    pay(client, 1000)
    pay(client, 2000, "usd")
    answer = admin(server, "payouts/run")
    assert answer.status_code == 200
    made = {p["currency"]: p for p in answer.json()["payouts"]}
    assert {c: (p["amount"], p["status"], p["arrival_date"]) for c, p in made.items()} == {
        "eur": (1000 - fee(1000), "paid", unix(START)), "usd": (2000 - fee(2000), "paid", unix(START))}
    assert admin(server, "payouts/run").json() == {"payouts": []}  # nothing left
    clock.advance(seconds=1)  # (a frozen clock: what comes next must come after the run)
    pay(client, 3000)
    clock.advance(days=1)  # the midnight pays out only the 3000

    latest = client.v1.payouts.list(params={"limit": 1}).data[0]
    assert (latest.amount, latest.currency, latest.created) == (3000 - fee(3000), "eur", unix(MIDNIGHT2))
    lines = client.v1.balance_transactions.list(params={"payout": made["eur"]["id"], "type": "charge"}).data
    assert [t.amount for t in lines] == [1000]
    credits = httpx.get(f"{server.url}/_admin/bank-credits?since=2026-03-02&until=2026-03-02", timeout=5).json()
    assert sorted((c["currency"], c["amount"]) for c in credits["credits"]) == [
        ("EUR", 1000 - fee(1000)), ("USD", 2000 - fee(2000))]


def test_global_api__payout_list_auto_paging_and_balance_transactions_of_a_payout(
    clock: Clock, server: SandboxServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stripe-python's older global API, as many integrations still call it (docs.stripe.com/payouts/
    reconciliation: ``BalanceTransaction.list(payout=…, expand=["data.source"])``)."""
    monkeypatch.setattr(stripe, "api_key", KEY)
    monkeypatch.setattr(stripe, "api_base", server.url)
    for day in range(3):
        stripe.PaymentIntent.create(amount=1000 + day, currency="eur", payment_method="pm_card_visa", confirm=True,
                                    off_session=True)
        clock.advance(days=1)

    payouts = list(stripe.Payout.list(limit=2).auto_paging_iter())

    assert [p.amount for p in payouts] == [1002 - 59, 1001 - 59, 1000 - 59]  # newest first; 2.9 % + 30 = 59
    lines = stripe.BalanceTransaction.list(payout=payouts[-1].id, expand=["data.source"])
    assert [(t.type, type(t.source)) for t in lines.data] == [("charge", stripe.Charge), ("payout", stripe.Payout)]
    assert lines.data[0].source.amount == 1000
