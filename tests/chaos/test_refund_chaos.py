"""Refunds under fire: never more than captured, never refunded twice per key, every refund final or in review.

On real PostgreSQL, through recon's real Stripe adapter against `recon psp-sandbox --flavor stripe` with faults
(5xx, answers lost after refunding, 429s, refunds pending then settled, refunds that fail after they succeeded):
payments are charged, then refunded by two writers racing for the same captures (many asks exceed what is left),
while three `recon worker` processes run the charge, refund and reconcile jobs and are killed with SIGKILL at
random, one frozen with SIGSTOP past its lease and resumed; sweeps run from a simulated cron. This test never
restarts PostgreSQL (the main chaos test does), so it may run alone: ``pytest -m chaos
tests/chaos/test_refund_chaos.py``.

Then, against the sandbox's own books (its Refund list per PaymentIntent) and our tables:

- per payment, ``refunded_amount`` is exactly the sum of its refunds that have not failed, and never more than
  it captured; the PSP refunded no more than the payment's amount;
- at the PSP, at most one refund per refund reference (one idempotency key each: never refunded twice);
- every refund the PSP holds under our reference is the one we stored (the same refund id), unless ours is in
  review; none that we failed as "never reached the PSP" exists there;
- every refund is final (succeeded, failed) or in needs_review; every refund job finished.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from recon.db.database import Database, connect
from recon.db.payment_store import PaymentStore
from recon.db.refund_store import RefundStore
from recon.errors import RefundRefused, StoreError
from recon.refund_rows import NewRefund
from recon.rows import NewPayment, PaymentStatus
from tests.chaos.harness import PSP_API_KEYS, Sandbox, WorkerProcess, base_env, psp_env, recon, write_config

pytestmark = pytest.mark.chaos
FAULTS = ("--rate-429", "0.03", "--retry-after", "1", "--rate-500", "0.05", "--rate-hang", "0.06",
          "--hang-seconds", "1.5", "--refund-pending-fraction", "0.2", "--refund-fail-fraction", "0.1",
          "--settle-after", "2", "--decline-suffix", "off")
PAYMENTS = 40
NEVER_REACHED = "never reached the PSP (not found after the grace period)"


@pytest.fixture
def pg(pg_migrated: str) -> Iterator[Database]:
    db = connect(pg_migrated)
    with db.begin() as conn:
        conn.execute(sa.text("TRUNCATE refund_events, refunds, payment_events, payments, job_attempts, jobs, "
                             "webhook_events RESTART IDENTITY CASCADE"))
    yield db
    db.dispose()


def psp_refunds(url: str, intent: str) -> list[dict[str, Any]]:
    """Every refund the Stripe sandbox holds for a PaymentIntent, through its own list API."""
    out: list[dict[str, Any]] = []
    params = {"payment_intent": intent, "limit": "100"}
    while True:
        page = httpx.get(f"{url}/v1/refunds", params=params, timeout=10,
                         headers={"Authorization": f"Bearer {PSP_API_KEYS['stripe']}"}).json()
        out.extend(page["data"])
        if not page["has_more"]:
            return out
        params = {**params, "starting_after": page["data"][-1]["id"]}


def unfinished(db: Database) -> tuple[int, int]:
    with db.begin() as conn:
        refunds = conn.execute(sa.text(
            "SELECT count(*) FROM refunds WHERE status IN ('created', 'processing', 'pending')")).scalar_one()
        jobs = conn.execute(sa.text("SELECT count(*) FROM jobs WHERE kind IN ('charge', 'refund') "
                                    "AND state NOT IN ('succeeded', 'dead', 'canceled')")).scalar_one()
    return int(refunds), int(jobs)


def test_refund_chaos__never_more_than_captured_never_twice(pg: Database, pg_migrated: str, tmp_path: Path,
                                                            request: pytest.FixtureRequest) -> None:
    rng = random.Random(20261205)
    sandbox = Sandbox(tmp_path / "psp.db", *FAULTS, "--seed", "11", psp="stripe")
    sandbox.start()
    request.addfinalizer(sandbox.stop)
    env = base_env(write_config(tmp_path / "recon.toml"), sandbox.url, **psp_env("stripe", sandbox.url))
    env.pop("RECON_STRIPE_WEBHOOK_SECRET", None)
    workers = [WorkerProcess(pg_migrated, env, tmp_path / f"worker-{i}.log", module="tests.chaos.compressed")
               for i in range(3)]
    for w in workers:
        request.addfinalizer(w.stop)
        w.start()
    PaymentStore(pg).create([NewPayment("chaos-shop", f"refund-{i:03d}", rng.randint(500, 5000), "EUR", "stripe",
                                        payment_method="pm_card_visa", customer_reference=f"cus_r{i:03d}")
                             for i in range(PAYMENTS)])
    deadline = time.monotonic() + 60  # the charges first (through the same faults): refunds need captures
    while time.monotonic() < deadline and sum(1 for _ in PaymentStore(pg).iter_payments(status="succeeded")) < 30:
        time.sleep(0.5)
    stop = threading.Event()
    asked: dict[str, Any] = {"created": 0, "refused": 0, "errors": []}

    def writer(seed: int) -> None:
        """Refunds of random parts of succeeded payments, racing the other writer for the same captures."""
        mine = random.Random(seed)
        n = 0
        while not stop.is_set():
            try:
                paid = list(PaymentStore(pg).iter_payments(status="succeeded"))
            except Exception as exc:  # recorded: the assertion below shows it
                asked["errors"].append(repr(exc)[:200])
                paid = []
            if paid:
                p = mine.choice(paid)
                amount = mine.randint(1, max(1, p.amount // 2))
                try:
                    RefundStore(pg).create([NewRefund(p.id, f"rf-{seed}-{n}", amount, None, "chaos")],
                                           queue="charges")
                    asked["created"] += 1
                except (RefundRefused, StoreError):
                    asked["refused"] += 1
                n += 1
            stop.wait(0.05)

    threads = [threading.Thread(target=writer, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    started = time.monotonic()
    frozen = False
    try:
        while time.monotonic() - started < 25:
            if not frozen and time.monotonic() - started > 8:
                frozen = True
                workers[0].freeze()
                time.sleep(4.5)  # past the 2 s lease: its refunds are rescued and run elsewhere
                workers[0].thaw()
            else:
                victim = rng.choice(workers[1:])
                victim.kill()
                victim.start()
            time.sleep(rng.uniform(0.5, 1.5))
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    sandbox.set_faults(rate_429=0, rate_500=0, rate_hang=0)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and unfinished(pg) != (0, 0):
        recon(pg_migrated, env, "sweep", "--older-than", "1s", "--json", timeout=60, module="tests.chaos.compressed")
        time.sleep(0.5)
    for w in workers:
        w.stop()

    with pg.begin() as conn:
        paid = dict(conn.execute(sa.text("SELECT status, count(*) FROM payments GROUP BY status")).all())
    assert asked["created"] > 20 and asked["refused"] > 0, (asked, paid)  # the writers raced for the captures
    assert unfinished(pg) == (0, 0), "every refund final or in review, every charge and refund job finished"
    problems: list[str] = []
    refunds = RefundStore(pg)
    for payment in PaymentStore(pg).iter_payments():
        ours = refunds.for_payment(payment.id)
        owed = sum(r.amount for r in ours if r.status is not PaymentStatus.FAILED)
        if payment.refunded_amount != owed or payment.refunded_amount > payment.captured_amount:
            problems.append(f"{payment.merchant_reference}: refunded {payment.refunded_amount}, owed {owed}, "
                            f"captured {payment.captured_amount}")
        if not payment.psp_reference or not ours:
            continue
        at_psp = psp_refunds(sandbox.url, payment.psp_reference)
        taken = sum(r["amount"] for r in at_psp if r["status"] in ("succeeded", "pending"))
        if taken > payment.amount:
            problems.append(f"{payment.merchant_reference}: the PSP refunded {taken} of {payment.amount}")
        by_ref: dict[str, list[dict[str, Any]]] = {}
        for r in at_psp:
            by_ref.setdefault(r["metadata"].get("refund_reference", ""), []).append(r)
        for ref, copies in by_ref.items():
            if len(copies) > 1:
                problems.append(f"{ref}: refunded {len(copies)} times at the PSP")
        for refund in ours:
            copies = by_ref.get(refund.refund_reference, [])
            if refund.failure_reason == NEVER_REACHED and copies:
                problems.append(f"{refund.refund_reference}: failed as never reached, but the PSP holds it")
            if copies and refund.status is not PaymentStatus.NEEDS_REVIEW and refund.psp_refund_id != copies[0]["id"]:
                problems.append(f"{refund.refund_reference}: ours names {refund.psp_refund_id}, the PSP "
                                f"{copies[0]['id']}")
    with pg.begin() as conn:
        statuses = dict(conn.execute(sa.text("SELECT status, count(*) FROM refunds GROUP BY status")).all())
    print(f"\nrefund chaos: asked {asked}, refunds by status {statuses}, "
          f"kills {sum(w.kills for w in workers)}")
    assert not problems, "\n".join(problems[:20])
