"""RetryPolicy: pure backoff arithmetic, shared by the worker and every tool that reschedules.

delay = random(0, min(cap, base * 2^(attempt-1)))  (full jitter, per error kind)

unless the outside world said how long to wait (Retry-After), which wins, bounded by the kind's cap.
The policy says *when*; whether an error is worth retrying at all is ``recon.classify``'s decision.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

from recon.config import BackoffConfig


@dataclass(frozen=True, slots=True)
class RetryDecision:
    """``delay`` seconds until the next attempt, or ``dead`` when the budget is spent."""

    dead: bool
    delay: float = 0.0


class RetryPolicy:
    """Backoff per error kind. Jitter comes from an injected ``random.Random`` so tests are exact."""

    def __init__(self, backoff: Mapping[str, BackoffConfig], *, rng: random.Random | None = None) -> None:
        if "default" not in backoff:
            raise ValueError("RetryPolicy needs a 'default' backoff")
        self._backoff = dict(backoff)
        self._rng = rng or random.Random()  # nosec B311  # jitter and simulation, not security

    def backoff_for(self, error_kind: str) -> BackoffConfig:
        return self._backoff.get(error_kind, self._backoff["default"])

    def delay(self, error_kind: str, attempt: int, *, retry_after: float | None = None) -> float:
        """Seconds to wait before attempt ``attempt + 1``; never negative, never above the kind's cap."""
        cfg = self.backoff_for(error_kind)
        if retry_after is not None and retry_after >= 0:
            return min(float(retry_after), cfg.cap_seconds)
        exponent = min(max(attempt - 1, 0), 62)  # 2**62 * base overflows nothing that min() cannot handle
        ceiling = min(cfg.cap_seconds, cfg.base_seconds * (2 ** exponent))
        return self._rng.uniform(0.0, ceiling)

    def decide(self, error_kind: str, *, attempt: int, max_attempts: int, free_attempts: int = 0,
               retry_after: float | None = None) -> RetryDecision:
        """Dead when ``attempt`` reached the job's ``max_attempts``, or when the attempts that spent the
        budget (``attempt - free_attempts``: snoozes, releases and replays are free) reached the kind's
        ``max_attempts``; else retry after ``delay``."""
        if attempt >= max_attempts or attempt - free_attempts >= self.backoff_for(error_kind).max_attempts:
            return RetryDecision(dead=True)
        return RetryDecision(dead=False, delay=self.delay(error_kind, attempt, retry_after=retry_after))
