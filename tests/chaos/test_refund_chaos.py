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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.db.refund_store import RefundStore
from recon.errors import RefundRefused, StoreError
from recon.refund_rows import NewRefund
from recon.rows import NewPayment, Payment, PaymentStatus
from tests.chaos.harness import PSP_API_KEYS
from tests.chaos.movement_harness import NEVER_REACHED, MovementChaos, emptied, run, unfinished

pytestmark = pytest.mark.chaos
FAULTS = ("--rate-429", "0.03", "--retry-after", "1", "--rate-500", "0.05", "--rate-hang", "0.06",
          "--hang-seconds", "1.5", "--refund-pending-fraction", "0.2", "--refund-fail-fraction", "0.1",
          "--settle-after", "2", "--decline-suffix", "off")
PAYMENTS = 40
JOB_KINDS = ("charge", "refund")


@pytest.fixture
def pg(pg_migrated: str) -> Iterator[Database]:
    with emptied(pg_migrated, ("refund_events", "refunds", "payment_events", "payments", "job_attempts", "jobs",
                               "webhook_events")) as db:
        yield db


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


def payments(rng: random.Random) -> list[NewPayment]:
    return [NewPayment("chaos-shop", f"refund-{i:03d}", rng.randint(500, 5000), "EUR", "stripe",
                       payment_method="pm_card_visa", customer_reference=f"cus_r{i:03d}") for i in range(PAYMENTS)]


def ask(pg: Database, mine: random.Random, p: Payment, ref: str) -> None:
    """A refund of a random part of a succeeded payment, racing the other writer for the same captures."""
    amount = mine.randint(1, max(1, p.amount // 2))
    RefundStore(pg).create([NewRefund(p.id, f"rf-{ref}", amount, None, "chaos")], queue="charges")


CHAOS = MovementChaos(FAULTS, 11, payments, "succeeded", ask, (RefundRefused, StoreError), "refunds", JOB_KINDS)


def test_refund_chaos__never_more_than_captured_never_twice(pg: Database, pg_migrated: str, tmp_path: Path,
                                                            request: pytest.FixtureRequest) -> None:
    done = run(CHAOS, pg, pg_migrated, tmp_path, request, rng=random.Random(20261205))
    asked = done.asked

    with pg.begin() as conn:
        paid = dict(conn.execute(sa.text("SELECT status, count(*) FROM payments GROUP BY status")).all())
    assert asked["created"] > 20 and asked["refused"] > 0, (asked, paid)  # the writers raced for the captures
    assert unfinished(pg, table="refunds", job_kinds=JOB_KINDS) == (0, 0), (
        "every refund final or in review, every charge and refund job finished")
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
        at_psp = psp_refunds(done.sandbox.url, payment.psp_reference)
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
          f"kills {done.kills}")
    assert not problems, "\n".join(problems[:20])
