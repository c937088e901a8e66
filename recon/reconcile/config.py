"""Reconciliation settings, from the ``[reconcile]`` table of the config file.

```toml
[reconcile]
schedule = ["5m", "15m", "1h", "6h", "1d", "1d", "1d"]   # how long to wait while the PSP says pending
grace_period = "30m"          # a payment the PSP never saw becomes failed only this long after its last send
settlement_window = "2d"      # the report calls a missing settlement "expected" inside this window
queue = "reconcile"
window = "1h"                 # bulk sweeps: one window job per PSP and this much of send time
window_slack = "2m"           # each window's listing reaches this far past its end (send -> PSP's created)
window_max_payments = 2000    # a window job holds at most this many payments (its payload, its finish)

[reconcile.psp.stripe]        # per-PSP overrides of schedule, grace_period and window
schedule = ["1m", "5m", "30m"]
```

Each PSP's adapter declares its own defaults (``PspAdapter.search_lag``, ``listing_window``), which apply where
the PSP's own table does not say: the grace period is at least the PSP's search lag (Stripe's search, which
finds a PaymentIntent by our reference after a lost answer, can lag an hour: a Stripe payment is called "never
reached the PSP" only after an hour), and the window is the PSP's listing window (Adyen's listing is the
daily report file: a day, or an hour's window would download the same file 24 times).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from psp_adapters.protocol import PspAdapter
from recon.durations import parse_duration
from recon.errors import ConfigError, UsageError

SCHEDULE_DEFAULT = ("5m", "15m", "1h", "6h", "1d", "1d", "1d")
GRACE_PERIOD_DEFAULT = "30m"
SETTLEMENT_WINDOW_DEFAULT = "2d"
QUEUE_DEFAULT = "reconcile"
WINDOW_DEFAULT = "1h"
WINDOW_SLACK_DEFAULT = "2m"
WINDOW_MAX_PAYMENTS_DEFAULT = 2000
WINDOW_MAX_PAYMENTS_LIMIT = 10_000


@dataclass(frozen=True, slots=True)
class PspSchedule:
    schedule: tuple[timedelta, ...]
    grace_period: timedelta
    window: timedelta = timedelta(hours=1)  #: a bulk sweep's window of send time per window job


@dataclass(frozen=True, slots=True)
class ReconcileConfig:
    default: PspSchedule
    settlement_window: timedelta
    queue: str = QUEUE_DEFAULT
    per_psp: Mapping[str, PspSchedule] = field(default_factory=dict)
    window_slack: timedelta = timedelta(minutes=2)
    window_max_payments: int = WINDOW_MAX_PAYMENTS_DEFAULT

    def for_psp(self, psp: str) -> PspSchedule:
        return self.per_psp.get(psp, self.default)

    @classmethod
    def from_table(cls, table: Mapping[str, Any] | None, *, source: str = "config",
                   adapters: Mapping[str, type[PspAdapter]] | None = None) -> ReconcileConfig:
        """``[reconcile]``, each PSP of ``adapters`` (name -> adapter class: ``psp_adapters.registry``) starting
        from its adapter's ``search_lag`` and ``listing_window`` (module docstring)."""
        table = dict(table or {})
        where = f"{source}: reconcile"
        per_psp_tables = table.pop("psp", {})
        unknown = set(table) - {"schedule", "grace_period", "settlement_window", "queue", "window", "window_slack",
                                "window_max_payments"}
        if unknown:
            raise ConfigError(f"{where}.{sorted(unknown)[0]}: unknown key")
        default = _schedule(table, where, PspSchedule(_durations(SCHEDULE_DEFAULT, where),
                                                      parse_duration(GRACE_PERIOD_DEFAULT),
                                                      parse_duration(WINDOW_DEFAULT)))
        if not isinstance(per_psp_tables, dict):
            raise ConfigError(f"{where}.psp: must be a table")
        per_psp = {name: PspSchedule(default.schedule, max(default.grace_period, adapter.search_lag),
                                     adapter.listing_window or default.window)
                   for name, adapter in sorted((adapters or {}).items())}
        for name, sub in per_psp_tables.items():
            if not isinstance(sub, dict) or set(sub) - {"schedule", "grace_period", "window"}:
                raise ConfigError(f"{where}.psp.{name}: only schedule, grace_period and window may be set")
            base = per_psp.get(name, default)
            per_psp[name] = _schedule(sub, f"{where}.psp.{name}", base)
        window = _duration(table.get("settlement_window", SETTLEMENT_WINDOW_DEFAULT), f"{where}.settlement_window")
        queue = table.get("queue", QUEUE_DEFAULT)
        if not isinstance(queue, str) or not queue:
            raise ConfigError(f"{where}.queue: must be a non-empty string")
        slack = _duration(table.get("window_slack", WINDOW_SLACK_DEFAULT), f"{where}.window_slack")
        most = table.get("window_max_payments", WINDOW_MAX_PAYMENTS_DEFAULT)
        if isinstance(most, bool) or not isinstance(most, int) or not 1 <= most <= WINDOW_MAX_PAYMENTS_LIMIT:
            raise ConfigError(f"{where}.window_max_payments: must be an integer from 1 to {WINDOW_MAX_PAYMENTS_LIMIT}")
        return cls(default=default, settlement_window=window, queue=queue, per_psp=per_psp, window_slack=slack,
                   window_max_payments=most)


def _schedule(table: Mapping[str, Any], where: str, base: PspSchedule) -> PspSchedule:
    schedule = base.schedule
    if "schedule" in table:
        raw = table["schedule"]
        if not isinstance(raw, list) or not raw:
            raise ConfigError(f"{where}.schedule: must be a non-empty list of durations")
        schedule = _durations(raw, f"{where}.schedule")
    grace = _duration(table["grace_period"], f"{where}.grace_period") if "grace_period" in table else base.grace_period
    window = _duration(table["window"], f"{where}.window") if "window" in table else base.window
    if window <= timedelta(0) or window > timedelta(days=7):
        raise ConfigError(f"{where}.window: must be more than 0 and at most 7 days")
    return PspSchedule(schedule=schedule, grace_period=grace, window=window)


def _durations(values: Any, where: str) -> tuple[timedelta, ...]:
    return tuple(_duration(v, f"{where}[{i}]") for i, v in enumerate(values))


def _duration(value: Any, where: str) -> timedelta:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return timedelta(seconds=value)
    try:
        return parse_duration(str(value), what=where)
    except UsageError as exc:
        raise ConfigError(str(exc)) from None
