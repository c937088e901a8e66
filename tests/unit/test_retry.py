from __future__ import annotations

import random

import pytest

from recon.config import BackoffConfig
from recon.engine.retry import RetryPolicy

BACKOFF = {"default": BackoffConfig(1.0, 60.0, 5), "fast": BackoffConfig(0.1, 1.0, 3)}


def test_retry_policy__full_jitter_within_exponential_ceiling() -> None:
    policy = RetryPolicy(BACKOFF, rng=random.Random(1))
    for attempt, ceiling in [(1, 1), (2, 2), (3, 4), (4, 8), (6, 32), (7, 60), (30, 60)]:
        delays = [policy.delay("default", attempt) for _ in range(200)]
        assert all(0 <= d <= ceiling for d in delays)
        assert max(delays) > ceiling * 0.8  # the whole range is used, not just the low end


def test_retry_policy__jitter_is_deterministic_with_seeded_rng() -> None:
    a = RetryPolicy(BACKOFF, rng=random.Random(42))
    b = RetryPolicy(BACKOFF, rng=random.Random(42))
    assert [a.delay("default", n) for n in range(1, 8)] == [b.delay("default", n) for n in range(1, 8)]


def test_retry_policy__retry_after_wins_bounded_by_cap() -> None:
    policy = RetryPolicy(BACKOFF, rng=random.Random(1))
    assert policy.delay("default", 1, retry_after=30) == 30
    assert policy.delay("default", 1, retry_after=3600) == 60
    assert policy.delay("fast", 1, retry_after=0) == 0


def test_retry_policy__dead_at_job_or_kind_budget() -> None:
    policy = RetryPolicy(BACKOFF, rng=random.Random(1))
    assert not policy.decide("default", attempt=4, max_attempts=10).dead
    assert policy.decide("default", attempt=5, max_attempts=10).dead  # the kind's budget
    assert policy.decide("default", attempt=2, max_attempts=2).dead  # the job's budget
    assert policy.decide("fast", attempt=3, max_attempts=10).dead
    assert policy.decide("unknown-kind", attempt=5, max_attempts=10).dead  # falls back to default


def test_retry_policy__needs_a_default() -> None:
    with pytest.raises(ValueError, match="default"):
        RetryPolicy({"fast": BackoffConfig()})


def test_retry_policy__free_attempts_do_not_spend_the_kind_budget() -> None:
    policy = RetryPolicy(BACKOFF, rng=random.Random(1))
    # twenty snoozes (free), then the first real failure of a kind whose budget is 3
    assert not policy.decide("fast", attempt=21, max_attempts=40, free_attempts=20).dead
    assert policy.decide("fast", attempt=23, max_attempts=40, free_attempts=20).dead
    assert policy.decide("fast", attempt=40, max_attempts=40, free_attempts=39).dead  # the job's own budget
