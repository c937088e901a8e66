"""CaptureConfig: how each PSP's payments take their money, and how long an authorisation lasts, per PSP.

Configuration, in the ``[psp.NAME]`` table of the config file (next to the adapter's settings)::

    [psp.stripe]
    capture = "manual"              # "automatic" (default): the charge takes the money; "manual": it only
                                    # authorises, `recon capture` takes it and `recon cancel` releases it
    authorisation_validity = "7d"   # how long the PSP holds an uncaptured authorisation (default: the adapter's:
                                    # Stripe 7d, Adyen 28d; at most 60d)
    authorisation_warning = "1d"    # `recon sweep` and `recon stats` flag authorisations expiring within this
                                    # (default 1d; less than the validity)

A payment's own mode (the payments CSV's optional ``capture`` column) wins over its PSP's. Other keys of
``[psp.NAME]`` belong to the adapter or the guard (``recon.payments.psp_limits``): ignored here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from recon.durations import parse_duration
from recon.errors import ConfigError, UsageError
from recon.rows import CAPTURE_MODES

#: when the adapter names none (an authorisation it never holds)
AUTHORISATION_VALIDITY_DEFAULT = timedelta(days=7)
AUTHORISATION_WARNING_DEFAULT = timedelta(days=1)
#: the longest validity recon accepts (card schemes hold authorisations for at most about a month)
AUTHORISATION_VALIDITY_MAX = timedelta(days=60)
#: the keys of ``[psp.NAME]`` that are this module's
CAPTURE_KEYS = frozenset({"capture", "authorisation_validity", "authorisation_warning"})


@dataclass(frozen=True, slots=True)
class PspCapture:
    """One PSP's capture settings; see the module docstring."""

    capture: str = "automatic"
    authorisation_validity: timedelta = AUTHORISATION_VALIDITY_DEFAULT
    authorisation_warning: timedelta = AUTHORISATION_WARNING_DEFAULT


@dataclass(frozen=True, slots=True)
class CaptureConfig:
    per_psp: Mapping[str, PspCapture]

    def for_psp(self, psp: str) -> PspCapture:
        return self.per_psp.get(psp, PspCapture())

    @classmethod
    def from_table(cls, table: Mapping[str, Any] | None, *, validity: Mapping[str, timedelta | None],
                   source: str = "config") -> CaptureConfig:
        """The capture keys of every ``[psp.NAME]`` table; ``validity``: each PSP adapter's own
        ``authorisation_validity`` (its default). Raises ConfigError naming the file and the key."""
        per_psp: dict[str, PspCapture] = {}
        tables = dict(table or {})
        for name in sorted(set(tables) | set(validity)):
            sub = tables.get(name, {})
            if not isinstance(sub, Mapping):
                raise ConfigError(f"{source}: psp.{name}: must be a table")
            per_psp[name] = _capture(sub, f"{source}: psp.{name}",
                                     validity.get(name) or AUTHORISATION_VALIDITY_DEFAULT)
        return cls(per_psp=per_psp)


def _capture(table: Mapping[str, Any], where: str, default_validity: timedelta) -> PspCapture:
    mode = table.get("capture", "automatic")
    if mode not in CAPTURE_MODES:
        raise ConfigError(f"{where}.capture: expected one of {', '.join(CAPTURE_MODES)}, got {mode!r}")
    validity = _duration(table, "authorisation_validity", default_validity, where, AUTHORISATION_VALIDITY_MAX)
    warning = _duration(table, "authorisation_warning", min(AUTHORISATION_WARNING_DEFAULT, validity / 2), where,
                        validity)
    if warning >= validity:
        raise ConfigError(f"{where}.authorisation_warning: must be shorter than authorisation_validity "
                          f"({validity}), got {table.get('authorisation_warning')!r}")
    return PspCapture(capture=str(mode), authorisation_validity=validity, authorisation_warning=warning)


def _duration(table: Mapping[str, Any], key: str, default: timedelta, where: str, most: timedelta) -> timedelta:
    if key not in table:
        return default
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, str):
        raise ConfigError(f'{where}.{key}: expected a duration such as "7d", got {value!r}')
    try:
        duration = parse_duration(value)
    except UsageError as exc:
        raise ConfigError(f"{where}.{key}: {str(exc).removeprefix('duration: ')}") from None
    if duration <= timedelta(0) or duration > most:
        raise ConfigError(f"{where}.{key}: must be over 0 and at most {most.days}d, got {value!r}")
    return duration
