"""PSP name -> its package. Only the composition roots (``recon.app``, ``recon.demo``) import this module.

Adding a PSP is one folder, ``psp_adapters/<name>/``, whose ``__init__`` exports ``PSP``, a
``psp_adapters.protocol.PspPackage`` (its adapter class and factory, default base URL, charge rules, webhook
receiver), and one line in ``PACKAGES``. A package is imported when recon first needs it, so a PSP being
written breaks nothing until it is used.

A factory (``get_factory``) takes a settings mapping and returns a ready ``PspAdapter``. Keys it reads:

- ``base_url`` (str): the PSP's API root; ``report_base_url`` (str, Adyen only): the report host
- ``api_key`` (``Secret``): required for stripe and adyen
- Stripe: ``api_version`` (str, the ``Stripe-Version`` sent; default the adapter's pinned version)
- Adyen: ``api_version`` (str, the Checkout version: "v72", the default, or "v71"), ``merchant_account`` (str,
  the default account; a payment may name its own), ``return_url`` (str),
  ``recurring_processing_model`` (str), ``report_timezone`` (IANA name, the zone of report rows without a
  ``TimeZone`` column), and the report user's credentials: ``report_api_key`` (``Secret``) or
  ``report_username`` (str) with ``report_password`` (``Secret``)
- ``timeout`` (``httpx.Timeout``, optional; all four phases set) and ``transport`` (tests only)

``settings_from_env`` builds that mapping from ``RECON_<NAME>_*`` variables. Base URLs may default to the
PSP's public host; keys never have a default and never live in code.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from psp_adapters.http import DEFAULT_TIMEOUT, timeout_from_seconds
from psp_adapters.protocol import ChargeRequest, FieldProblem, PspAdapter, PspPackage, Secret, WebhookFactory
from psp_adapters.settings import MissingSetting

AdapterFactory = Callable[[Mapping[str, Any]], PspAdapter]

#: the registered PSPs: name -> the package whose ``PSP`` describes it
PACKAGES: dict[str, str] = {
    "adyen": "psp_adapters.adyen",
    "sandbox": "psp_adapters.sandbox",
    "stripe": "psp_adapters.stripe",
}
_TIMEOUT_PHASES = ("connect", "read", "write", "pool")
#: settings read from RECON_<NAME>_<KEY> (and, for PLAIN_KEYS, from the config file's [psp.NAME] table)
PLAIN_KEYS = ("base_url", "api_version", "merchant_account", "return_url", "recurring_processing_model",
              "report_base_url", "report_username", "report_timezone")
#: credentials: from the environment only, never from a file
SECRET_KEYS = ("api_key", "report_api_key", "report_password")
#: per-phase timeouts in seconds, in the file (``read_timeout = 10``) or the environment (``RECON_X_READ_TIMEOUT``)
TIMEOUT_KEYS = tuple(f"{phase}_timeout" for phase in _TIMEOUT_PHASES)
#: the longest timeout accepted for a phase
TIMEOUT_MAX_SECONDS = 600.0

__all__ = ["PACKAGES", "AdapterFactory", "MissingSetting", "adapter_class", "check_charge", "get_factory", "names",
           "package", "settings_from_env", "settings_from_table", "webhook_factories", "webhook_secrets"]


def names() -> tuple[str, ...]:
    """The registered PSP names, sorted."""
    return tuple(sorted(PACKAGES))


def package(name: str) -> PspPackage:
    """What PSP ``name``'s package registers. Raises LookupError naming the known PSPs when there is none, and
    ImportError when its package cannot be imported or exports no ``PSP``."""
    try:
        path = PACKAGES[name]
    except KeyError:
        raise LookupError(f"unknown PSP adapter {name!r}; known: {', '.join(names())}") from None
    found = getattr(importlib.import_module(path), "PSP", None)
    if not isinstance(found, PspPackage):
        raise ImportError(f"{path} exports no PSP (a psp_adapters.protocol.PspPackage)")
    return found


def get_factory(name: str) -> AdapterFactory:
    """The factory for ``name``. Raises LookupError naming the known adapters when there is none.

    A factory raises ValueError when a required setting is missing (``MissingSetting``) or malformed, and
    ImportError when its adapter module cannot be imported.
    """
    return package(name).create


def adapter_class(name: str) -> type[PspAdapter]:
    """PSP ``name``'s adapter class: its ClassVars (``search_lag``, ``listing_window``, …) need no settings."""
    return package(name).adapter


def check_charge(name: str, request: ChargeRequest) -> list[FieldProblem]:
    """What PSP ``name`` would refuse about ``request``, by its adapter's own rules (``PspPackage.check_charge``;
    none: nothing to check). Needs no settings and makes no call. LookupError: unknown name."""
    rules = package(name).check_charge
    return list(rules(request)) if rules is not None else []


def webhook_factories() -> dict[str, WebhookFactory]:
    """Each registered PSP that has webhooks, with its receiver's factory."""
    return {name: p.webhook for name in names() if (p := package(name)).webhook is not None}


def webhook_secrets(name: str) -> tuple[str, ...]:
    """The environment variables PSP ``name``'s webhook secrets come from (the first turns its endpoint on)."""
    return package(name).webhook_secrets


def settings_from_env(name: str, environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings mapping for adapter ``name`` from ``RECON_<NAME>_*`` variables in ``environ``.

    Reads BASE_URL, API_KEY, API_VERSION, MERCHANT_ACCOUNT, RETURN_URL, RECURRING_PROCESSING_MODEL,
    REPORT_BASE_URL, REPORT_API_KEY, REPORT_USERNAME, REPORT_PASSWORD, REPORT_TIMEZONE and the timeouts
    CONNECT_TIMEOUT, READ_TIMEOUT, WRITE_TIMEOUT, POOL_TIMEOUT (seconds). Keys and passwords become ``Secret``.
    Unset variables are left out (the factory then reports what is missing). Raises LookupError for an
    unknown name and ValueError for a timeout that is not a positive number.
    """
    default = package(name).base_url
    prefix = f"RECON_{name.upper()}_"
    settings: dict[str, Any] = {"base_url": environ.get(prefix + "BASE_URL") or default}
    for key in PLAIN_KEYS:
        value = environ.get(prefix + key.upper())
        if value:
            settings[key] = value
    for key in SECRET_KEYS:
        value = environ.get(prefix + key.upper())
        if value:
            settings[key] = Secret(value)
    seconds = {phase: _seconds(environ, prefix + f"{phase.upper()}_TIMEOUT") for phase in _TIMEOUT_PHASES}
    given = {phase: value for phase, value in seconds.items() if value is not None}
    if given:
        settings["timeout"] = timeout_from_seconds(**given)
    return settings


def settings_from_table(table: Mapping[str, Any], *, base: httpx.Timeout | None = None) -> dict[str, Any]:
    """The settings of a config file's ``[psp.NAME]`` table: plain keys as they are, ``*_timeout`` keys (seconds)
    folded into ``timeout`` over ``base``. Raises ValueError naming a bad timeout."""
    out = {k: v for k, v in table.items() if k not in TIMEOUT_KEYS}
    given: dict[str, float] = {}
    for key in TIMEOUT_KEYS:
        if key in table:
            value = table[key]
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= TIMEOUT_MAX_SECONDS:
                raise ValueError(f"{key}: must be a number of seconds in (0, {TIMEOUT_MAX_SECONDS:g}], got {value!r}")
            given[key.removesuffix("_timeout")] = float(value)
    if given:
        start = base or DEFAULT_TIMEOUT
        phases = {phase: getattr(start, phase) for phase in _TIMEOUT_PHASES}
        out["timeout"] = timeout_from_seconds(**{**phases, **given})
    return out


def _seconds(environ: Mapping[str, str], variable: str) -> float | None:
    raw = environ.get(variable)
    if raw is None or not raw.strip():
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{variable} must be a number of seconds, got {raw!r}") from None
    if not 0 < value <= TIMEOUT_MAX_SECONDS:  # also false for nan
        raise ValueError(f"{variable} must be a number of seconds in (0, {TIMEOUT_MAX_SECONDS:g}], got {raw!r}")
    return value
