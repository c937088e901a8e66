"""Review queue settings: ``[review]`` and ``[review.sla]`` in the config file.

```toml
[review]
high_amount = "1000"     # severity high at or over this amount, in the payment currency's major units
medium_amount = "100"    # severity medium at or over this (at most high_amount)
high_age = "3d"          # ... or when in review longer than this
medium_age = "1d"        # (at most high_age)
bulk_max = 500           # a bulk resolve takes at most this many payments (1 to 5000)

[review.sla]             # the due-by of each kind of review reason: in review since + this
default = "2d"           # every kind not named
amount_mismatch = "1d"
```

Amounts compare in each currency's own major unit, with no exchange rate: 1000 means 1,000.00 EUR and 1,000 JPY
alike (name the currencies you care about by their own thresholds in a later version; today one pair of
numbers). Severity and due-by are derived when read, never stored, so a change here applies to the whole queue
at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from recon.config import unknown
from recon.durations import parse_duration
from recon.errors import ConfigError, UsageError
from recon.payments.money import MINOR_UNITS
from recon.review_rows import QueueRules, ReviewKind, Severity

HIGH_AMOUNT_DEFAULT = Decimal(1000)
MEDIUM_AMOUNT_DEFAULT = Decimal(100)
HIGH_AGE_DEFAULT = timedelta(days=3)
MEDIUM_AGE_DEFAULT = timedelta(days=1)
SLA_DEFAULT = timedelta(days=2)
#: amount_mismatch and status_mismatch are money already moved the wrong way: a day
SLA_DEFAULTS = {ReviewKind.AMOUNT_MISMATCH: timedelta(days=1), ReviewKind.STATUS_MISMATCH: timedelta(days=1),
                ReviewKind.PSP_REVERSED: timedelta(days=1)}
BULK_MAX_DEFAULT = 500
BULK_MAX_LIMIT = 5000
AMOUNT_MAX = Decimal(10) ** 15
#: ten-thousandths of a major unit: one integer scale for every ISO-4217 exponent (0 to 4)
SCALE = 10_000
_KEYS = {"high_amount", "medium_amount", "high_age", "medium_age", "bulk_max", "sla"}


@dataclass(frozen=True, slots=True)
class ReviewConfig:
    high_amount: Decimal = HIGH_AMOUNT_DEFAULT
    medium_amount: Decimal = MEDIUM_AMOUNT_DEFAULT
    high_age: timedelta = HIGH_AGE_DEFAULT
    medium_age: timedelta = MEDIUM_AGE_DEFAULT
    bulk_max: int = BULK_MAX_DEFAULT
    sla: dict[str, timedelta] = field(default_factory=lambda: {
        k.value: SLA_DEFAULTS.get(k, SLA_DEFAULT) for k in ReviewKind})

    def rules(self, now: datetime) -> QueueRules:
        """The rules at ``now``, as the queue's SQL compares them."""
        by_exponent: dict[int, list[str]] = {}
        for code, exponent in sorted(MINOR_UNITS.items()):
            by_exponent.setdefault(exponent, []).append(code)
        return QueueRules(high_scaled=int(self.high_amount * SCALE), medium_scaled=int(self.medium_amount * SCALE),
                          high_since=now - self.high_age, medium_since=now - self.medium_age,
                          exponent_0=tuple(by_exponent.get(0, ())), exponent_3=tuple(by_exponent.get(3, ())),
                          exponent_4=tuple(by_exponent.get(4, ())),
                          due_cutoffs={k: now - d for k, d in self.sla.items()})

    def severity(self, amount: int, currency: str, since: datetime, now: datetime) -> Severity:
        """An item's severity: as the queue's SQL computes it (recon.db.review_queries)."""
        scaled = amount * 10 ** (4 - MINOR_UNITS.get(currency.upper(), 2))
        age = now - since
        if scaled >= self.high_amount * SCALE or age > self.high_age:
            return Severity.HIGH
        if scaled >= self.medium_amount * SCALE or age > self.medium_age:
            return Severity.MEDIUM
        return Severity.LOW

    def due(self, kind: ReviewKind, since: datetime) -> datetime:
        return since + self.sla[kind.value]

    @classmethod
    def load(cls, table: Mapping[str, Any] | None, *, source: str = "config") -> ReviewConfig:
        """``[review]`` checked: known keys, amounts and durations within bounds. ConfigError names the key."""
        table = dict(table or {})
        where = f"{source}: review"
        for key in table:
            if key not in _KEYS:
                raise unknown("key", key, _KEYS, f"{where}.")
        high, medium = _amount(table, "high_amount", HIGH_AMOUNT_DEFAULT, where), \
            _amount(table, "medium_amount", MEDIUM_AMOUNT_DEFAULT, where)
        if medium > high:
            raise ConfigError(f"{where}.medium_amount: must not be over high_amount ({high})")
        high_age, medium_age = _duration(table, "high_age", HIGH_AGE_DEFAULT, where), \
            _duration(table, "medium_age", MEDIUM_AGE_DEFAULT, where)
        if medium_age > high_age:
            raise ConfigError(f"{where}.medium_age: must not be over high_age")
        bulk = table.get("bulk_max", BULK_MAX_DEFAULT)
        if isinstance(bulk, bool) or not isinstance(bulk, int) or not 1 <= bulk <= BULK_MAX_LIMIT:
            raise ConfigError(f"{where}.bulk_max: expected a whole number from 1 to {BULK_MAX_LIMIT}, got {bulk!r}")
        return cls(high_amount=high, medium_amount=medium, high_age=high_age, medium_age=medium_age, bulk_max=bulk,
                   sla=_sla(table.get("sla"), f"{where}.sla"))


def _sla(table: Any, where: str) -> dict[str, timedelta]:
    if table is None:
        table = {}
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: expected a table of durations per reason kind")
    known = {k.value for k in ReviewKind} | {"default"}
    for key in table:
        if key not in known:
            raise unknown("reason kind", key, known, f"{where}.")
    default = _duration(table, "default", SLA_DEFAULT, where)
    return {k.value: _duration(table, k.value, SLA_DEFAULTS.get(k, default) if "default" not in table else default,
                               where) for k in ReviewKind}


def _amount(table: Mapping[str, Any], key: str, default: Decimal, where: str) -> Decimal:
    if key not in table:
        return default
    value = table[key]
    try:
        amount = Decimal(str(value)) if not isinstance(value, bool | float) else Decimal("NaN")
    except InvalidOperation:
        amount = Decimal("NaN")
    if not amount.is_finite() or amount < 0 or amount > AMOUNT_MAX or amount != amount.quantize(Decimal("0.0001")):
        raise ConfigError(f'{where}.{key}: expected an amount in major units such as "1000" or "99.50" '
                          f"(0 to 10^15, at most 4 decimals), got {value!r}")
    return amount


def _duration(table: Mapping[str, Any], key: str, default: timedelta, where: str) -> timedelta:
    if key not in table:
        return default
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, str):
        raise ConfigError(f'{where}.{key}: expected a duration such as "1d", got {value!r}')
    try:
        duration = parse_duration(value)
    except UsageError as exc:
        raise ConfigError(f"{where}.{key}: {str(exc).removeprefix('duration: ')}") from None
    if duration <= timedelta(0) or duration > timedelta(days=3650):
        raise ConfigError(f"{where}.{key}: must be over 0 and at most 3650d, got {value!r}")
    return duration
