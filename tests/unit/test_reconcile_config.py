"""``[reconcile]``: per-PSP grace periods and windows, from each PSP's adapter unless its own table says
otherwise (Stripe's search lag covered, Adyen's daily report listed a day at a time)."""

from __future__ import annotations

from datetime import timedelta

from psp_adapters.adyen.adapter import AdyenAdapter
from psp_adapters.sandbox.adapter import SandboxAdapter
from psp_adapters.stripe.adapter import StripeAdapter
from recon.reconcile.config import ReconcileConfig

ADAPTERS = {"adyen": AdyenAdapter, "sandbox": SandboxAdapter, "stripe": StripeAdapter}


def test_the_adapters_declare_what_their_psp_documents() -> None:
    # docs.stripe.com/search: "data is typically searchable in under a minute; during outages, up to an hour"
    assert StripeAdapter.search_lag == timedelta(hours=1)
    # Adyen lists payments through its daily Payment accounting report: one file a day
    assert AdyenAdapter.listing_window == timedelta(days=1)
    assert (AdyenAdapter.search_lag, StripeAdapter.listing_window) == (timedelta(0), None)
    assert (SandboxAdapter.search_lag, SandboxAdapter.listing_window) == (timedelta(0), None)


def test_stripe_grace_covers_its_search_lag_unless_its_own_table_says_otherwise() -> None:
    config = ReconcileConfig.from_table({"grace_period": "2m"}, adapters=ADAPTERS)
    assert config.for_psp("stripe").grace_period == timedelta(hours=1)
    assert config.for_psp("adyen").grace_period == timedelta(minutes=2)
    assert config.for_psp("stripe").schedule == config.for_psp("adyen").schedule

    longer = ReconcileConfig.from_table({"grace_period": "3h"}, adapters=ADAPTERS)
    assert longer.for_psp("stripe").grace_period == timedelta(hours=3)

    own = ReconcileConfig.from_table({"grace_period": "2m", "psp": {"stripe": {"grace_period": "5s"}}},
                                     adapters=ADAPTERS)
    assert own.for_psp("stripe").grace_period == timedelta(seconds=5)  # an explicit choice wins (tests, chaos)

    schedule_only = ReconcileConfig.from_table({"psp": {"stripe": {"schedule": ["1m"]}}}, adapters=ADAPTERS)
    assert schedule_only.for_psp("stripe").grace_period == timedelta(hours=1)
    assert schedule_only.for_psp("stripe").schedule == (timedelta(minutes=1),)


def test_adyen_windows_are_a_day_unless_its_own_table_says_otherwise() -> None:
    config = ReconcileConfig.from_table({"window": "2h"}, adapters=ADAPTERS)
    assert (config.for_psp("adyen").window, config.for_psp("stripe").window) == (timedelta(days=1), timedelta(hours=2))
    own = ReconcileConfig.from_table({"psp": {"adyen": {"window": "6h"}}}, adapters=ADAPTERS)
    assert own.for_psp("adyen").window == timedelta(hours=6)
