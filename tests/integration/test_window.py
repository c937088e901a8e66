"""The reconcile window job against listings that are wrong, on both databases (issue 22, items 1 to 4).

The PSP is Stripe's API as recon's real Stripe adapter reads it, or Adyen's Payment accounting reports as its
real Adyen adapter reads them, served by respx: every PaymentIntent is Stripe's canonical object
(fixtures3.json), every report row the documented layout. Expected outcomes are docs/design.md's window table:

- a PSP reference listed twice (whatever each copy says) is ambiguous: its reconcile job now, never a heal;
- another PSP reference than ours listed under our reference: a note naming both, its reconcile job now;
- a payment of another merchant account is not ours, whatever reference it carries: not listed;
- a listing that never ends (the same page again) is a protocol error: the window job is dead (kind
  protocol), every payment of it gets its reconcile job in the same finish, and `recon sweep` and `recon
  worker --burst` return.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
import respx

from psp_adapters.adyen import AdyenAdapter
from psp_adapters.protocol import PspAdapter, Secret
from psp_adapters.stripe import StripeAdapter
from recon import Client, JobStore, Settings
from recon.clock import SystemClock
from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.engine.handlers import Handlers
from recon.reconcile import sweep as sw
from recon.reconcile.handler import ReconcileHandler
from recon.reconcile.window import WINDOW_KIND, WindowHandler
from recon.rows import EventSource, JobState, NewPayment, PaymentStatus, Transition
from tests.adapters.stripe_oracle import canonical, listing
from tests.adapters.test_adyen import csv_report
from tests.cli import Runner
from tests.integration.payment_flow import reconcile_config
from tests.integration.test_bulk_sweep import burst

STRIPE = "https://stripe.test"
REPORTS = "https://reports.adyen.test"
KEY = "sk_test_window_listing"
P = PaymentStatus


@pytest.fixture
def psp() -> Iterator[respx.MockRouter]:
    with respx.mock(assert_all_called=False, assert_all_mocked=True) as router:
        yield router


def intent(pi: str, ref: str, status: str = "succeeded", **changes: Any) -> dict[str, Any]:
    received = 1000 if status == "succeeded" else 0
    return canonical("payment_intent", **{"id": pi, "status": status, "amount": 1000, "amount_received": received,
                                          "currency": "eur", "metadata": {"merchant_reference": ref},
                                          "last_payment_error": None, **changes})


def pending(db: Database, ref: str, psp_reference: str | None, *, psp: str = "stripe",
            account: str = "default") -> int:
    """A payment of ours left pending by its charge (with the PSP reference the charge's answer gave)."""
    store = PaymentStore(db)
    [pid] = store.create([NewPayment(account, ref, 1000, "EUR", psp)], charge=False)
    with db.begin() as conn:
        assert store.apply(conn, Transition(pid, P.CREATED, P.PENDING, EventSource.CHARGE,
                                            psp_reference=psp_reference))
    return pid


def sweep_bulk(db: Database, adapter: PspAdapter, psp: str) -> None:
    """`recon sweep --mode bulk` in-process: window jobs for the PSP's stale payments, run with their fall-backs
    until nothing is claimable (a snoozed reconcile job stays)."""
    rc = reconcile_config(schedule=(3600,), grace=3600)
    ledger = PaymentStore(db)
    handlers = Handlers()
    handlers.register("reconcile", ReconcileHandler(ledger, lambda _n: adapter, config=rc, clock=SystemClock()))
    handlers.register(WINDOW_KIND, WindowHandler(ledger, lambda _n: adapter, config=rc))
    sw.enqueue(ledger, Client(JobStore(db), Settings()), sw.SweepOptions(older_than=timedelta(0)),
               queue="reconcile", bulk_psps={psp}, config=rc)
    burst(db, handlers)


def reconcile_job_states(db: Database) -> dict[int, JobState]:
    return {j.payload["payment_id"]: j.state for j in JobStore(db).list_jobs(kind="reconcile")}


def test_window__a_psp_reference_listed_twice_is_ambiguous_never_decided_by_a_copy(
        db: Database, psp: respx.MockRouter) -> None:
    """Issue 22, item 4: listed once succeeded and once canceled, the payment was decided by the last copy."""
    twice, once = pending(db, "order-1", "pi_1"), pending(db, "order-2", "pi_2")
    psp.get(f"{STRIPE}/v1/payment_intents").mock(side_effect=[
        httpx.Response(200, json=listing("/v1/payment_intents", [intent("pi_2", "order-2"), intent("pi_1", "order-1")],
                                         has_more=True)),
        httpx.Response(200, json=listing("/v1/payment_intents", [
            intent("pi_1", "order-1", "canceled", cancellation_reason="abandoned")]))])
    own = psp.get(f"{STRIPE}/v1/payment_intents/pi_1").mock(  # its own job asks about it: still processing
        return_value=httpx.Response(200, json=intent("pi_1", "order-1", "processing")))
    with StripeAdapter(STRIPE, api_key=Secret(KEY)) as adapter:
        sweep_bulk(db, adapter, "stripe")
    ledger = PaymentStore(db)
    assert [(p.status, p.psp_reference) for p in ledger.get_many([twice, once])] == [
        (P.PENDING, "pi_1"), (P.SUCCEEDED, "pi_2")]
    assert own.call_count == 1 and reconcile_job_states(db) == {twice: JobState.PENDING}  # asked now, snoozed
    assert [e.source for e in ledger.events(twice)] == ["manual", "charge"]  # nothing healed from either copy


def test_window__another_psp_reference_under_our_reference_is_a_note_and_our_reconcile_job(
        db: Database, psp: respx.MockRouter) -> None:
    """Issue 22, item 1, for listings: ours holds pi_A; the listing has pi_A nowhere but a succeeded pi_B carrying
    our reference (and, for another payment, pi_C besides its own): never healed from, kept as evidence naming
    both, resolved by the payment's own job asking about ours."""
    lone, both = pending(db, "order-1", "pi_A"), pending(db, "order-2", "pi_C")
    psp.get(f"{STRIPE}/v1/payment_intents").mock(return_value=httpx.Response(200, json=listing(
        "/v1/payment_intents", [intent("pi_B", "order-1"), intent("pi_C", "order-2"), intent("pi_D", "order-2")])))
    own = psp.get(url__regex=rf"^{STRIPE}/v1/payment_intents/pi_[AC]$").mock(
        side_effect=lambda request: httpx.Response(200, json=intent(request.url.path.rsplit("/", 1)[1], "x",
                                                                    "processing")))
    with StripeAdapter(STRIPE, api_key=Secret(KEY)) as adapter:
        sweep_bulk(db, adapter, "stripe")
    ledger = PaymentStore(db)
    assert [(p.status, p.psp_reference) for p in ledger.get_many([lone, both])] == [
        (P.PENDING, "pi_A"), (P.PENDING, "pi_C")]
    for pid, ours, theirs in ((lone, "pi_A", ["pi_B"]), (both, "pi_C", ["pi_D"])):
        [note] = [e for e in ledger.events(pid) if (e.details or {}).get("psp_reference_conflict")]
        assert (note.source, note.from_status, note.to_status) == ("reconcile", "pending", "pending")
        assert note.details is not None and note.details["psp_reference_conflict"] == {"ours": ours, "theirs": theirs}
        assert [d["psp_reference"] for d in note.details["listed"]] == theirs
    assert sorted(str(c.request.url.path) for c in own.calls) == ["/v1/payment_intents/pi_A",
                                                                   "/v1/payment_intents/pi_C"]
    assert reconcile_job_states(db) == {lone: JobState.PENDING, both: JobState.PENDING}


def test_window__a_payment_of_another_merchant_account_is_not_ours(db: Database, psp: respx.MockRouter) -> None:
    """Issue 22, item 2, for listings: ours is order-1 in AcmeShopUS. The adapter also reads its default account
    (AcmeShopEU), whose report has another shop's order-1, authorised: not listed for us, never a heal."""
    ours = pending(db, "order-1", None, psp="adyen", account="AcmeShopUS")
    eu = csv_report({"Merchant Account": "AcmeShopEU", "Psp Reference": "EUPSP1", "Merchant Reference": "order-1",
                     "Booking Date": "2024-05-02 09:00:00", "TimeZone": "UTC", "Record Type": "Authorised"})
    psp.get(url__startswith=f"{REPORTS}/reports/download/MerchantAccount/AcmeShopEU/").mock(return_value=eu)
    us = psp.get(url__startswith=f"{REPORTS}/reports/download/MerchantAccount/AcmeShopUS/").mock(
        return_value=httpx.Response(404))
    now = PaymentStore(db).get(ours).created_at  # type: ignore[union-attr]  # the reports' day: today
    with AdyenAdapter("https://checkout.adyen.test", api_key=Secret("AQE_test"), merchant_account="AcmeShopEU",
                      report_base_url=REPORTS, report_api_key=Secret("AQE_report"), lookback_days=0,
                      now_func=lambda: now) as adapter:
        sweep_bulk(db, adapter, "adyen")
    payment = PaymentStore(db).get(ours)
    assert payment is not None and (payment.status, payment.psp_reference) == (P.PENDING, None)
    assert us.called and reconcile_job_states(db) == {ours: JobState.PENDING}  # its own job: US's reports


# --- a listing that never ends (issue 22, item 3) --------------------------------------------------------------


def endless(psp: respx.MockRouter, refs: list[tuple[str, str]]) -> respx.Route:
    """Stripe's list answering has_more: true with the same page; after 50 requests (so that a recon without the
    guard fails this test instead of hanging it) the last page."""
    page = [intent(pi, ref) for pi, ref in refs]

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=listing("/v1/payment_intents", page, has_more=route.call_count < 50))

    route = psp.get(f"{STRIPE}/v1/payment_intents").mock(side_effect=answer)
    for pi, ref in refs:  # what each payment's own job reads
        psp.get(f"{STRIPE}/v1/payment_intents/{pi}").mock(return_value=httpx.Response(200, json=intent(pi, ref)))
    return route


@pytest.mark.parametrize("how", ["sweep", "worker"])
def test_window__a_listing_that_repeats_its_page_ends_the_job_and_hands_the_payments_on(
        db: Database, db_url: str, psp: respx.MockRouter, recon: Runner, how: str) -> None:
    ids = [pending(db, f"order-{n}", f"pi_{n}") for n in range(3)]
    listed = endless(psp, [(f"pi_{n}", f"order-{n}") for n in range(3)])
    env = {**os.environ, "RECON_STRIPE_BASE_URL": STRIPE, "RECON_STRIPE_API_KEY": KEY}
    if how == "sweep":
        run = recon("sweep", "--older-than", "0", "--mode", "bulk", "--psp", "stripe", "--json", db_url=db_url,
                    log_level="ERROR", env=env)
        assert run.returncode == 0, run.stderr
        assert json.loads(run.stdout)["healed_succeeded"] == 3
    else:
        queued = recon("sweep", "--older-than", "0", "--mode", "bulk", "--psp", "stripe", "--enqueue-only",
                       db_url=db_url, log_level="ERROR", env=env)
        assert queued.returncode == 0, queued.stderr
        run = recon("worker", "--burst", "--queues", "reconcile", db_url=db_url, log_level="ERROR", env=env)
        assert run.returncode == 0, run.stderr
    assert listed.call_count == 2  # the second page repeats the first's cursor: no third request
    [window] = JobStore(db).list_jobs(kind=WINDOW_KIND)
    assert (window.state, window.last_error_kind) == (JobState.DEAD, "protocol")
    assert "repeated" in (window.last_error or "") and "3 payments handed to their reconcile jobs" in (
        window.last_error or "")
    ledger = PaymentStore(db)
    assert {p.status for p in ledger.get_many(ids)} == {P.SUCCEEDED}  # each by its own job, not the listing
    reconcile = {j.payload["payment_id"]: j for j in JobStore(db).list_jobs(kind="reconcile")}
    assert set(reconcile) == set(ids) and {j.state for j in reconcile.values()} == {JobState.SUCCEEDED}
    for pid in ids:
        heal = ledger.events(pid)[-1]
        assert (heal.to_status, heal.job_id) == ("succeeded", reconcile[pid].id)
        assert heal.details is not None and "listing" not in heal.details
