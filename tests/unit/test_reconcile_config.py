"""``[reconcile]``: per-PSP grace periods, with Stripe's search lag covered by default."""

from __future__ import annotations

from datetime import timedelta

from recon.reconcile.config import ReconcileConfig


def test_stripe_grace_covers_its_search_lag_unless_its_own_table_says_otherwise() -> None:
    # docs.stripe.com/search: "data is typically searchable in under a minute; during outages, up to an hour"
    config = ReconcileConfig.from_table({"grace_period": "2m"})
    assert config.for_psp("stripe").grace_period == timedelta(hours=1)
    assert config.for_psp("adyen").grace_period == timedelta(minutes=2)
    assert config.for_psp("stripe").schedule == config.for_psp("adyen").schedule

    longer = ReconcileConfig.from_table({"grace_period": "3h"})
    assert longer.for_psp("stripe").grace_period == timedelta(hours=3)

    own = ReconcileConfig.from_table({"grace_period": "2m", "psp": {"stripe": {"grace_period": "5s"}}})
    assert own.for_psp("stripe").grace_period == timedelta(seconds=5)  # an explicit choice wins (tests, chaos)

    schedule_only = ReconcileConfig.from_table({"psp": {"stripe": {"schedule": ["1m"]}}})
    assert schedule_only.for_psp("stripe").grace_period == timedelta(hours=1)
    assert schedule_only.for_psp("stripe").schedule == (timedelta(minutes=1),)
