"""Captures and cancels under fire: one live capture or cancel per authorisation, never captured more than
authorised, never twice per key, every capture and cancel final or in review.

On real PostgreSQL, through recon's real Stripe adapter against `recon psp-sandbox --flavor stripe` with faults
(5xx, answers lost after capturing, 429s, slow settlement): manual-capture payments are authorised, then two
writers race for the same authorisations, each asking a capture (of a random part) or a cancel (most asks are
refused: one per payment), while three `recon worker` processes run the charge, capture, cancel and reconcile jobs
and are killed with SIGKILL at random, one frozen with SIGSTOP past its lease and resumed; sweeps run at the end.
This test never restarts PostgreSQL, so it may run alone: ``pytest -m chaos tests/chaos/test_capture_chaos.py``.

Then, against the sandbox's own books (each PaymentIntent, read through its API) and our tables:

- per payment, ``authorisation_claimed`` is exactly the amount of its one capture or cancel that has not failed
  (at most one), never more than it authorised;
- the PSP captured no more than our capture asked (``amount_received`` at most its amount) and, when ours
  succeeded, exactly what we recorded (``captured_amount``); a PaymentIntent canceled is a payment failed and
  captured nothing; a payment still ``authorised`` is ``requires_capture`` there;
- none that we failed as "never reached the PSP" changed the PaymentIntent;
- every capture and cancel is final (succeeded, failed) or in needs_review; every job of theirs finished.
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
from recon.db.modification_store import ModificationStore
from recon.db.payment_store import PaymentStore
from recon.errors import ModificationRefused, StoreError
from recon.modification_rows import CANCEL, CAPTURE, NewModification
from recon.rows import NewPayment, Payment, PaymentStatus
from tests.chaos.harness import PSP_API_KEYS
from tests.chaos.movement_harness import NEVER_REACHED, MovementChaos, emptied, run, unfinished

pytestmark = pytest.mark.chaos
FAULTS = ("--rate-429", "0.03", "--retry-after", "1", "--rate-500", "0.05", "--rate-hang", "0.08",
          "--hang-seconds", "1.5", "--settle-after", "2", "--decline-suffix", "off")
PAYMENTS = 40
JOB_KINDS = ("charge", "capture", "cancel")
P = PaymentStatus


@pytest.fixture
def pg(pg_migrated: str) -> Iterator[Database]:
    with emptied(pg_migrated, ("modification_events", "modifications", "refund_events", "refunds", "payment_events",
                               "payments", "job_attempts", "jobs", "webhook_events")) as db:
        yield db


def intent(url: str, intent_id: str) -> dict[str, Any]:
    """The PaymentIntent as the Stripe sandbox holds it, through its own API."""
    return httpx.get(f"{url}/v1/payment_intents/{intent_id}", timeout=10,  # type: ignore[no-any-return]
                     headers={"Authorization": f"Bearer {PSP_API_KEYS['stripe']}"}).json()


def payments(rng: random.Random) -> list[NewPayment]:
    return [NewPayment("chaos-shop", f"auth-{i:03d}", rng.randint(500, 5000), "EUR", "stripe",
                       payment_method="pm_card_visa", customer_reference=f"cus_a{i:03d}", capture_mode="manual")
            for i in range(PAYMENTS)]


def ask(pg: Database, mine: random.Random, p: Payment, ref: str) -> None:
    """A capture of a random part, or a cancel, of an authorised payment, racing the other writer."""
    kind = CANCEL if mine.random() < 0.25 else CAPTURE
    amount = mine.randint(1, p.amount) if kind == CAPTURE else None
    ModificationStore(pg).create(NewModification(p.id, kind, f"m-{ref}", "chaos", amount=amount), queue="charges")


CHAOS = MovementChaos(FAULTS, 13, payments, "authorised", ask, (ModificationRefused, StoreError), "modifications",
                      JOB_KINDS)


def test_capture_chaos__one_per_authorisation_never_more_never_twice(pg: Database, pg_migrated: str, tmp_path: Path,
                                                                     request: pytest.FixtureRequest) -> None:
    done = run(CHAOS, pg, pg_migrated, tmp_path, request, rng=random.Random(20261205))
    asked = done.asked
    assert asked["created"] > 20 and asked["refused"] > 0, asked  # the writers raced for the authorisations
    assert unfinished(pg, table="modifications", job_kinds=JOB_KINDS) == (0, 0), (
        "every capture and cancel final or in review, every job finished")
    problems: list[str] = []
    mods = ModificationStore(pg)
    for payment in PaymentStore(pg).iter_payments():
        ours = mods.for_payment(payment.id)
        live = [m for m in ours if m.status is not P.FAILED]
        if len(live) > 1 or payment.authorisation_claimed != sum(m.amount for m in live) \
                or payment.authorisation_claimed > payment.amount:
            problems.append(f"{payment.merchant_reference}: claimed {payment.authorisation_claimed}, live "
                            f"{[(m.kind, m.amount, str(m.status)) for m in live]}")
        if not payment.psp_reference or payment.status not in (P.AUTHORISED, P.SUCCEEDED, P.FAILED):
            continue
        pi = intent(done.sandbox.url, payment.psp_reference)
        received = int(pi.get("amount_received") or 0)
        captures = [m for m in ours if m.kind == CAPTURE and m.status is not P.FAILED]
        if received and (not captures or received > captures[0].amount):
            problems.append(f"{payment.merchant_reference}: the PSP captured {received}, ours {captures}")
        if payment.status is P.SUCCEEDED and (pi["status"] != "succeeded" or payment.captured_amount != received):
            problems.append(f"{payment.merchant_reference}: ours captured {payment.captured_amount}, the PSP "
                            f"{pi['status']} {received}")
        if payment.status is P.AUTHORISED and pi["status"] != "requires_capture" and not any(
                m.status is P.NEEDS_REVIEW for m in ours):
            problems.append(f"{payment.merchant_reference}: ours authorised, the PSP {pi['status']}")
        if pi["status"] == "canceled" and payment.status is not P.FAILED and not any(
                m.status is P.NEEDS_REVIEW for m in ours):
            problems.append(f"{payment.merchant_reference}: canceled at the PSP, ours {payment.status}")
        for m in ours:
            if m.failure_reason == NEVER_REACHED and (received or pi["status"] == "canceled") and not live:
                problems.append(f"{m.modification_reference}: failed as never reached, but the PSP moved")
    with pg.begin() as conn:
        statuses = dict(conn.execute(sa.text("SELECT kind || ' ' || status, count(*) FROM modifications "
                                             "GROUP BY kind, status")).all())
        paid = dict(conn.execute(sa.text("SELECT status, count(*) FROM payments GROUP BY status")).all())
    print(f"\ncapture chaos: asked {asked}, modifications {statuses}, payments {paid}, "
          f"kills {done.kills}")
    assert not problems, "\n".join(problems[:20])
