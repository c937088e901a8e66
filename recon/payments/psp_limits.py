"""PspLimits and GuardConfig: the PSP guard's settings (``recon.payments.guard``), per PSP.

Configuration, per PSP in the ``[psp.NAME]`` table of the config file (next to the adapter's settings)::

    [psp.stripe]
    rate_limit = 80                # requests/s to this PSP from all workers together; absent or 0: no limit
    rate_burst = 8                 # tokens the shared bucket holds (default: rate_limit / 10, at least 1)
    rate_wait_seconds = 1.0        # how long a call may wait for a token before its job snoozes
    breaker_failures = 5           # consecutive transient failures that open the circuit breaker
    breaker_open_seconds = 30.0    # open this long before one half-open probe may go
    cooldown_default_seconds = 1.0 # the PSP-wide cool-down after a 429 without Retry-After
    cooldown_max_seconds = 60.0    # the bound on a Retry-After
    pause_snooze_seconds = 60.0    # how long a paused PSP's jobs sleep before they look again

Other keys of ``[psp.NAME]`` (base_url, merchant_account, timeouts) belong to the adapter: ignored here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from recon.errors import ConfigError

RATE_WAIT_SECONDS_DEFAULT = 1.0
BREAKER_FAILURES_DEFAULT = 5
BREAKER_OPEN_SECONDS_DEFAULT = 30.0
COOLDOWN_DEFAULT_SECONDS_DEFAULT = 1.0
COOLDOWN_MAX_SECONDS_DEFAULT = 60.0
PAUSE_SNOOZE_SECONDS_DEFAULT = 60.0
#: tokens per admission statement: this many seconds' worth of the rate
BATCH_SECONDS = 0.05
#: permits per admission statement for a PSP without a rate limit
UNLIMITED_BATCH = 20


@dataclass(frozen=True, slots=True)
class PspLimits:
    """One PSP's guard settings; see the module docstring."""

    rate_limit: float | None = None
    rate_burst: float | None = None
    rate_wait_seconds: float = RATE_WAIT_SECONDS_DEFAULT
    breaker_failures: int = BREAKER_FAILURES_DEFAULT
    breaker_open_seconds: float = BREAKER_OPEN_SECONDS_DEFAULT
    cooldown_default_seconds: float = COOLDOWN_DEFAULT_SECONDS_DEFAULT
    cooldown_max_seconds: float = COOLDOWN_MAX_SECONDS_DEFAULT
    pause_snooze_seconds: float = PAUSE_SNOOZE_SECONDS_DEFAULT

    @property
    def capacity(self) -> float:
        """Tokens the shared bucket holds: the largest burst all workers together may send."""
        if self.rate_limit is None:
            return 0.0
        burst = self.rate_burst if self.rate_burst is not None else self.rate_limit / 10
        return max(burst, 1.0, float(self.batch))

    @property
    def batch(self) -> int:
        """Tokens (or, unlimited, permits) one admission statement takes."""
        if self.rate_limit is None:
            return UNLIMITED_BATCH
        burst = self.rate_burst if self.rate_burst is not None else self.rate_limit / 10
        return max(1, min(math.floor(max(burst, 1.0)), math.ceil(self.rate_limit * BATCH_SECONDS)))

    def validate(self, where: str) -> None:
        if self.rate_limit is not None and not self.rate_limit > 0:
            raise ConfigError(f"{where}.rate_limit: must be > 0 requests/s (or 0 / absent: no limit)")
        if self.rate_burst is not None and not self.rate_burst >= 1:
            raise ConfigError(f"{where}.rate_burst: must be >= 1, got {self.rate_burst}")
        if self.breaker_failures < 1:
            raise ConfigError(f"{where}.breaker_failures: must be >= 1, got {self.breaker_failures}")
        for name in ("breaker_open_seconds", "cooldown_max_seconds", "pause_snooze_seconds"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{where}.{name}: must be > 0, got {getattr(self, name)}")
        for name in ("rate_wait_seconds", "cooldown_default_seconds"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"{where}.{name}: must be >= 0, got {getattr(self, name)}")


#: the keys of ``[psp.NAME]`` that are the guard's
GUARD_KEYS = frozenset(f.name for f in fields(PspLimits))


@dataclass(frozen=True, slots=True)
class GuardConfig:
    per_psp: Mapping[str, PspLimits]
    default: PspLimits = PspLimits()

    def for_psp(self, psp: str) -> PspLimits:
        return self.per_psp.get(psp, self.default)

    @classmethod
    def from_table(cls, table: Mapping[str, Any] | None, *, source: str = "config") -> GuardConfig:
        """The guard's keys of every ``[psp.NAME]`` table; other keys there belong to the adapter."""
        per_psp: dict[str, PspLimits] = {}
        for name, sub in (table or {}).items():
            if not isinstance(sub, Mapping):
                raise ConfigError(f"{source}: psp.{name}: must be a table")
            per_psp[name] = _limits(sub, f"{source}: psp.{name}")
        return cls(per_psp=per_psp)


def _limits(table: Mapping[str, Any], where: str) -> PspLimits:
    changes: dict[str, Any] = {}
    for f in fields(PspLimits):
        if f.name not in table:
            continue
        value = table[f.name]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}.{f.name}: expected a number, got {value!r}")
        if f.name == "breaker_failures" and not isinstance(value, int):
            raise ConfigError(f"{where}.{f.name}: expected an integer, got {value!r}")
        changes[f.name] = None if f.name == "rate_limit" and value == 0 else value
    limits = replace(PspLimits(), **changes)
    limits.validate(where)
    return limits
