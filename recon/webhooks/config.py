"""Webhook intake settings: ``[webhooks]`` in the config file, a ``[webhooks.NAME]`` table per PSP, secrets only
from the environment.

```toml
[webhooks]
max_body_bytes = 262144              # bodies over this are refused (413) before they are read further
tolerance = "5m"                     # signed timestamps (Stripe-Signature's) further from now are refused
queue = "webhooks"                   # the queue of the webhook jobs
commit_wait = "2ms"                  # PostgreSQL: how long a request may wait for others to share its commit

[webhooks.stripe]
path = "/webhooks/stripe"            # where the PSP posts (the endpoint URL you register); default /webhooks/NAME
```

Every registered PSP with webhooks (``psp_adapters.protocol.PspPackage.webhook``) has an endpoint; its
receiver is built from its secrets in the environment (Stripe: ``RECON_STRIPE_WEBHOOK_SECRET``; Adyen:
``RECON_ADYEN_HMAC_KEY`` and optionally ``RECON_ADYEN_WEBHOOK_USERNAME``/``_PASSWORD``; docs/psps.md). A PSP
without its secret has no receiver: its path answers 404, never an unverified 200.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from psp_adapters.protocol import WebhookFactory, WebhookReceiver
from recon.config import unknown
from recon.db.webhook_store import WEBHOOK_QUEUE
from recon.durations import parse_duration
from recon.errors import ConfigError, UsageError

MAX_BODY_DEFAULT = 256 * 1024
MAX_BODY_LIMIT = 16 * 1024 * 1024
TOLERANCE_DEFAULT = timedelta(minutes=5)
QUEUE_DEFAULT = WEBHOOK_QUEUE
#: the group commit's gathering time (recon.webhooks.intake.GroupWriter): under load it saves CPU per event
#: (docs/benchmarks.md, webhooks) for at most this much more per answer
COMMIT_WAIT_DEFAULT = timedelta(milliseconds=2)
COMMIT_WAIT_MAX = timedelta(seconds=1)
_KEYS = {"max_body_bytes", "tolerance", "queue", "commit_wait"}
_PSP_KEYS = {"path"}


def default_path(psp: str) -> str:
    return f"/webhooks/{psp}"


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    max_body_bytes: int = MAX_BODY_DEFAULT
    tolerance: timedelta = TOLERANCE_DEFAULT
    queue: str = QUEUE_DEFAULT
    commit_wait: timedelta = COMMIT_WAIT_DEFAULT
    #: each PSP with webhooks -> its endpoint's path
    paths: Mapping[str, str] = field(default_factory=dict)
    #: the PSPs whose secrets are set -> their receivers (they hold the secrets: never in a repr)
    receivers: Mapping[str, WebhookReceiver] = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, table: Mapping[str, Any] | None, env: Mapping[str, str], *, source: str = "config",
             factories: Mapping[str, WebhookFactory] | None = None) -> WebhookConfig:
        """``[webhooks]`` (``table``) for the PSPs of ``factories`` (``psp_adapters.registry.webhook_factories()``;
        none: limits only), their receivers built from ``env``. ConfigError names the key or variable."""
        table = dict(table or {})
        factories = dict(factories or {})
        where = f"{source}: webhooks"
        psp_tables = {k: v for k, v in table.items() if k in factories or isinstance(v, dict)}
        for key in table:
            if key not in _KEYS and key not in psp_tables:
                raise _unknown_key(key, factories, where)
        tolerance = _duration(table, "tolerance", TOLERANCE_DEFAULT, where)
        if not timedelta(seconds=1) <= tolerance <= timedelta(days=1):
            raise ConfigError(f"{where}.tolerance: must be between 1s and 1d")
        commit_wait = _duration(table, "commit_wait", COMMIT_WAIT_DEFAULT, where)
        if not commit_wait <= COMMIT_WAIT_MAX:
            raise ConfigError(f"{where}.commit_wait: must be between 0 and 1s (got {table['commit_wait']!r})")
        return cls(max_body_bytes=_max_body(table, where), tolerance=tolerance, queue=_queue(table, where),
                   commit_wait=commit_wait, paths=_paths(psp_tables, factories, where),
                   receivers=_receivers(factories, env, tolerance))


def check(table: Mapping[str, Any] | None, *, source: str = "config", psps: Collection[str]) -> None:
    """``WebhookConfig.load``'s checks of the file alone, ``psps`` being the PSPs that may have a table: what
    every command checks at start (no PSP package is imported, no secret read; ``load`` does both)."""
    WebhookConfig.load(table, {}, source=source, factories=dict.fromkeys(psps, _no_receiver))


def _no_receiver(environ: Mapping[str, str], *, tolerance: float) -> WebhookReceiver | None:
    return None


def _unknown_key(key: str, factories: Mapping[str, WebhookFactory], where: str) -> ConfigError:
    psp = key.removesuffix("_path")
    if key.endswith("_path") and psp in factories:  # the keys of before [webhooks.NAME]
        return ConfigError(f"{where}.{key}: now [webhooks.{psp}] path")
    return unknown("key", key, _KEYS | set(factories), f"{where}.")


def _paths(tables: Mapping[str, Any], factories: Mapping[str, WebhookFactory], where: str) -> dict[str, str]:
    """Each PSP's path: ``[webhooks.NAME] path``, else /webhooks/NAME; every path its own."""
    for psp, sub in tables.items():
        if psp not in factories:
            raise unknown("PSP with webhooks", psp, factories, f"{where}.")
        if not isinstance(sub, dict):
            raise ConfigError(f"{where}.{psp}: must be a table")
        for key in sub:
            if key not in _PSP_KEYS:
                raise unknown("key", key, _PSP_KEYS, f"{where}.{psp}.")
    paths: dict[str, str] = {}
    for psp in sorted(factories):
        value = tables.get(psp, {}).get("path", default_path(psp))
        if not isinstance(value, str) or not value.startswith("/") or len(value) > 200 or " " in value:
            raise ConfigError(f"{where}.{psp}.path: must be a URL path starting with '/' (got {value!r})")
        same = [other for other, path in paths.items() if path == value]
        if same:
            raise ConfigError(f"{where}: {same[0]} and {psp} have the same path {value!r}; each PSP needs its own")
        paths[psp] = value
    return paths


def _receivers(factories: Mapping[str, WebhookFactory], env: Mapping[str, str],
               tolerance: timedelta) -> dict[str, WebhookReceiver]:
    """The receivers of the PSPs whose secrets are set; a variable set wrong fails (ConfigError naming it)."""
    receivers: dict[str, WebhookReceiver] = {}
    for psp, factory in sorted(factories.items()):
        try:
            receiver = factory(env, tolerance=tolerance.total_seconds())
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if receiver is not None:
            receivers[psp] = receiver
    return receivers


def _max_body(table: Mapping[str, Any], where: str) -> int:
    size = table.get("max_body_bytes", MAX_BODY_DEFAULT)
    if isinstance(size, bool) or not isinstance(size, int) or not 1024 <= size <= MAX_BODY_LIMIT:
        raise ConfigError(f"{where}.max_body_bytes: must be an integer between 1024 and {MAX_BODY_LIMIT}")
    return size


def _queue(table: Mapping[str, Any], where: str) -> str:
    queue = table.get("queue", QUEUE_DEFAULT)
    if not isinstance(queue, str) or not queue.strip():
        raise ConfigError(f"{where}.queue: must be a non-empty string")
    return queue.strip()


def _duration(table: Mapping[str, Any], key: str, default: timedelta, where: str) -> timedelta:
    if key not in table:
        return default
    try:
        return parse_duration(str(table[key]))
    except UsageError as exc:
        raise ConfigError(f"{where}.{key}: {exc}") from None
