"""Adapter name -> factory. Only the composition root (``recon.cli``) imports this module.

A factory takes a settings mapping and returns a ready ``PspAdapter``. Keys it reads:

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
PSP's public host; keys never have a default and never live in code. Each adapter module is imported only
when its factory runs, so the registry works while an adapter is still being written.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from psp_adapters.http import DEFAULT_TIMEOUT, timeout_from_seconds
from psp_adapters.protocol import ChargeRequest, FieldProblem, PspAdapter, Secret

AdapterFactory = Callable[[Mapping[str, Any]], PspAdapter]

#: the sandbox server's default address (``psp_adapters.sandbox.server.SANDBOX_PORT_DEFAULT``)
SANDBOX_BASE_URL_DEFAULT = "http://127.0.0.1:8787"
_DEFAULT_BASE_URLS = {
    # the adapters' own defaults, repeated here so that reading settings imports no adapter
    "stripe": "https://api.stripe.com",
    "adyen": "https://checkout-test.adyen.com",
    "sandbox": SANDBOX_BASE_URL_DEFAULT,
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


def _stripe(settings: Mapping[str, Any]) -> PspAdapter:
    from psp_adapters.stripe.adapter import StripeAdapter

    return StripeAdapter(
        _text(settings, "base_url", required=True),
        api_key=_secret(settings, "api_key", required=True),
        api_version=_text(settings, "api_version") or None,  # None: the adapter's pinned API_VERSION
        timeout=_timeout(settings),
        transport=settings.get("transport"),
    )


def _adyen(settings: Mapping[str, Any]) -> PspAdapter:
    """The Adyen adapter. ``merchant_account`` is only the default (a payment may name its own); the report
    user's credentials (``report_api_key``, or ``report_username`` with ``report_password``) are required and
    never fall back to ``api_key``: the adapter's ValueError names them and their variables."""
    from psp_adapters.adyen.adapter import DEFAULT_REPORT_BASE_URL, AdyenAdapter
    from psp_adapters.adyen.charge import DEFAULT_RECURRING_PROCESSING_MODEL, DEFAULT_RETURN_URL
    from psp_adapters.adyen.wire import DEFAULT_API_VERSION

    return AdyenAdapter(
        _text(settings, "base_url", required=True),
        api_key=_secret(settings, "api_key", required=True),
        merchant_account=_text(settings, "merchant_account") or None,
        api_version=_text(settings, "api_version") or DEFAULT_API_VERSION,
        return_url=_text(settings, "return_url") or DEFAULT_RETURN_URL,
        recurring_processing_model=_text(settings, "recurring_processing_model") or DEFAULT_RECURRING_PROCESSING_MODEL,
        report_base_url=_text(settings, "report_base_url") or DEFAULT_REPORT_BASE_URL,
        report_api_key=_secret(settings, "report_api_key") or None,
        report_username=_text(settings, "report_username") or None,
        report_password=_secret(settings, "report_password") or None,
        report_timezone=_text(settings, "report_timezone") or "UTC",
        timeout=_timeout(settings),
        transport=settings.get("transport"),
    )


def _sandbox(settings: Mapping[str, Any]) -> PspAdapter:
    from psp_adapters.sandbox.adapter import SandboxAdapter

    return SandboxAdapter(
        _text(settings, "base_url", required=True),
        api_key=_secret(settings, "api_key") or None,
        timeout=_timeout(settings),
        transport=settings.get("transport"),
    )


_FACTORIES: dict[str, AdapterFactory] = {"adyen": _adyen, "sandbox": _sandbox, "stripe": _stripe}


def names() -> tuple[str, ...]:
    """The registered adapter names, sorted."""
    return tuple(sorted(_FACTORIES))


def get_factory(name: str) -> AdapterFactory:
    """The factory for ``name``. Raises LookupError naming the known adapters when there is none.

    A factory raises ValueError when a required setting is missing or malformed, and ImportError when
    its adapter module cannot be imported.
    """
    try:
        return _FACTORIES[name]
    except KeyError:
        raise LookupError(f"unknown PSP adapter {name!r}; known: {', '.join(names())}") from None


def check_charge(name: str, request: ChargeRequest) -> list[FieldProblem]:
    """What PSP ``name`` would refuse about ``request``, by its adapter's own rules (``check_charge`` in the
    adapter package; none: nothing to check). Needs no settings and makes no call. LookupError: unknown name."""
    get_factory(name)

    package = importlib.import_module(f"psp_adapters.{name}")
    rules = getattr(package, "check_charge", None)
    return list(rules(request)) if rules is not None else []


class MissingSetting(ValueError):
    """A required setting of an adapter is not set; ``key`` names it."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"setting {key!r} is required")


def settings_from_env(name: str, environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings mapping for adapter ``name`` from ``RECON_<NAME>_*`` variables in ``environ``.

    Reads BASE_URL, API_KEY, API_VERSION, MERCHANT_ACCOUNT, RETURN_URL, RECURRING_PROCESSING_MODEL,
    REPORT_BASE_URL, REPORT_API_KEY, REPORT_USERNAME, REPORT_PASSWORD, REPORT_TIMEZONE and the timeouts
    CONNECT_TIMEOUT, READ_TIMEOUT, WRITE_TIMEOUT, POOL_TIMEOUT (seconds). Keys and passwords become ``Secret``.
    Unset variables are left out (the factory then reports what is missing). Raises LookupError for an
    unknown name and ValueError for a timeout that is not a positive number.
    """
    get_factory(name)
    prefix = f"RECON_{name.upper()}_"
    settings: dict[str, Any] = {"base_url": environ.get(prefix + "BASE_URL") or _DEFAULT_BASE_URLS.get(name)}
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


def _text(settings: Mapping[str, Any], key: str, *, required: bool = False) -> str:
    value = settings.get(key)
    if value is None or value == "":
        if required:
            raise MissingSetting(key)
        return ""
    if not isinstance(value, str):
        raise ValueError(f"setting {key!r} must be a string")
    return value


def _secret(settings: Mapping[str, Any], key: str, *, required: bool = False) -> Secret:
    value = settings.get(key)
    if value is None or not value:
        if required:
            raise MissingSetting(key)
        return Secret("")
    if not isinstance(value, Secret):
        raise ValueError(f"setting {key!r} must be a Secret")  # a bare str would end up in reprs and logs
    return value


def _timeout(settings: Mapping[str, Any]) -> httpx.Timeout:
    value = settings.get("timeout")
    if value is None:
        return DEFAULT_TIMEOUT
    if not isinstance(value, httpx.Timeout):
        raise ValueError("setting 'timeout' must be an httpx.Timeout")
    return value
