"""`recon sweep` and authorisations, on both databases, through the real command line and recon's Stripe adapter
against the sandbox's Stripe flavour (whose clock drives the expiry of authorisations left uncaptured, as Stripe
cancels them with ``cancellation_reason: automatic``): an authorisation within ``[psp.stripe]
authorisation_warning`` of its validity is flagged ``authorisation_expiring`` (exit 1); one past it is asked about
and ends failed, visibly; a capture stuck pending is healed by its reconcile job."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from psp_adapters.protocol import Secret
from psp_adapters.sandbox.server import SandboxServer
from psp_adapters.stripe.adapter import StripeAdapter
from recon import Handlers
from recon.db.database import Database
from recon.db.modification_store import ModificationStore
from recon.db.payment_store import PaymentStore
from recon.modification_rows import CAPTURE, ModificationSource, ModificationTransition, NewModification
from recon.payments.charge import ChargeHandler
from recon.rows import NewPayment, PaymentStatus
from tests.cli import Runner
from tests.integration.payment_flow import drain

KEY = "sk_test_expiry"
P = PaymentStatus


class Clock:
    """The sandbox's clock: real time plus an offset the test moves."""

    def __init__(self) -> None:
        self.offset = timedelta(0)

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def sandbox(tmp_path: Path, clock: Clock) -> Iterator[SandboxServer]:
    with SandboxServer(tmp_path / "stripe.db", flavor="stripe", api_key=KEY, now_func=clock) as server:
        yield server


@pytest.fixture
def env(sandbox: SandboxServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.delenv("RECON_CONFIG", raising=False)
    return {"RECON_STRIPE_API_KEY": KEY, "RECON_STRIPE_BASE_URL": sandbox.url}


def authorise(db: Database, sandbox: SandboxServer, refs: list[str]) -> list[int]:
    adapter = StripeAdapter(sandbox.url, api_key=Secret(KEY))
    ids = PaymentStore(db).create([NewPayment("default", ref, 5000, "EUR", "stripe", payment_method="pm_card_visa",
                                              customer_reference="cus_expiry", capture_mode="manual")
                                   for ref in refs])
    h = Handlers()
    h.register("charge", ChargeHandler(PaymentStore(db), lambda _n: adapter))
    drain(db, h, queues=["charges"])
    adapter.close()
    assert {PaymentStore(db).get(i).status for i in ids} == {P.AUTHORISED}  # type: ignore[union-attr]
    return ids


def authorised_ago(db: Database, pid: int, age: timedelta) -> None:
    """As if recon had seen it authorised ``age`` ago (recon's clock is the database's; the sandbox's moves)."""
    at = datetime.now(UTC) - age
    with db.begin() as conn:
        conn.execute(sa.text("UPDATE payments SET authorised_at = :at WHERE id = :id"),
                     {"at": db.to_db(at), "id": pid})


def test_sweep__flags_expiring_authorisations_and_ends_expired_ones(db: Database, db_url: str, recon: Runner,
                                                                    sandbox: SandboxServer, clock: Clock,
                                                                    env: dict[str, str]) -> None:
    fresh, expiring, expired = authorise(db, sandbox, ["a-fresh", "a-expiring", "a-expired"])
    authorised_ago(db, expiring, timedelta(days=6, hours=12))  # Stripe's 7 days, warned 1 day before
    authorised_ago(db, expired, timedelta(days=7, hours=1))
    clock.offset = timedelta(days=7, hours=1)  # the sandbox cancels what it authorised 7 days ago (all three)
    r = recon("sweep", "--json", db_url=db_url, env=env)
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    auth = doc["authorisations"]
    assert (auth["expiring"], auth["expired_checked"]) == (1, 1)
    assert [(p["payment"], p["reason"].split(":")[0]) for p in auth["payments"]] == [
        ("a-expiring", "authorisation_expiring"), ("a-expired", "authorisation_expiring")]
    payments = PaymentStore(db)
    ended = payments.get(expired)
    assert ended is not None and ended.status is P.FAILED
    assert ended.failure_reason == "psp: automatic (authorisation ended uncaptured)"
    assert [e.to_status for e in payments.events(expired)][-1] == "failed"
    assert {payments.get(fresh).status, payments.get(expiring).status} == {P.AUTHORISED}  # type: ignore[union-attr]
    r = recon("sweep", db_url=db_url, env=env)
    assert r.returncode == 1 and "authorisations: 1 expiring" in r.stdout and "a-expiring" in r.stdout


def test_sweep__heals_a_capture_stuck_pending_from_the_payment_intent(db: Database, db_url: str, recon: Runner,
                                                                      sandbox: SandboxServer,
                                                                      env: dict[str, str]) -> None:
    [pid] = authorise(db, sandbox, ["c-1"])
    payment = PaymentStore(db).get(pid)
    assert payment is not None and payment.psp_reference
    # captured at Stripe, the answer lost and the capture job's attempts spent: ours is pending
    httpx.post(f"{sandbox.url}/v1/payment_intents/{payment.psp_reference}/capture", data={"amount_to_capture": "4000"},
               headers={"Authorization": f"Bearer {KEY}"}, timeout=5).raise_for_status()
    store = ModificationStore(db)
    mid = store.create(NewModification(pid, CAPTURE, "c-1-capture1", "alice", amount=4000), queue="charges")
    with db.begin() as conn:
        assert store.apply(conn, ModificationTransition(mid, P.CREATED, P.PROCESSING, ModificationSource.MODIFICATION))
        assert store.apply(conn, ModificationTransition(mid, P.PROCESSING, P.PENDING, ModificationSource.MODIFICATION))
        conn.execute(sa.text("UPDATE jobs SET state = 'dead' WHERE kind = 'capture'"))
        conn.execute(sa.text("UPDATE modifications SET updated_at = :at"),
                     {"at": db.to_db(datetime.now(UTC) - timedelta(hours=1))})
    r = recon("sweep", "--json", db_url=db_url, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["captures"]["healed_succeeded"] == 1
    mod = store.get(mid)
    assert mod is not None and mod.status is P.SUCCEEDED and mod.psp_modification_id == payment.psp_reference
    paid = PaymentStore(db).get(pid)
    assert paid is not None and (paid.status, paid.captured_amount) == (P.SUCCEEDED, 4000)


def test_sweep__the_native_sandboxs_expired_authorisation_ends_failed(db: Database, db_url: str, recon: Runner,
                                                                      tmp_path: Path, clock: Clock,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from psp_adapters.sandbox.adapter import SandboxAdapter

    monkeypatch.delenv("RECON_CONFIG", raising=False)
    with SandboxServer(tmp_path / "native.db", api_key="sk_native", now_func=clock) as server:
        adapter = SandboxAdapter(server.url, api_key=Secret("sk_native"))
        [pid] = PaymentStore(db).create([NewPayment("default", "n-old", 5000, "EUR", "sandbox",
                                                    payment_method="tok_visa", capture_mode="manual")])
        h = Handlers()
        h.register("charge", ChargeHandler(PaymentStore(db), lambda _n: adapter))
        drain(db, h, queues=["charges"])
        adapter.close()
        assert PaymentStore(db).get(pid).status is P.AUTHORISED  # type: ignore[union-attr]
        authorised_ago(db, pid, timedelta(days=7, hours=1))
        clock.offset = timedelta(days=7, hours=1)
        r = recon("sweep", "--json", db_url=db_url,
                  env={"RECON_SANDBOX_BASE_URL": server.url, "RECON_SANDBOX_API_KEY": "sk_native"})
        assert r.returncode == 1, r.stderr
        assert json.loads(r.stdout)["authorisations"]["expired_checked"] == 1
    ended = PaymentStore(db).get(pid)
    assert ended is not None and ended.status is P.FAILED
    assert ended.failure_reason == "psp: expired (authorisation ended uncaptured)"
