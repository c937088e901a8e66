"""Webhook intake settings: ``[webhooks]`` in the config file, secrets only from the environment.

```toml
[webhooks]
stripe_path = "/webhooks/stripe"      # where Stripe posts (the endpoint URL you register with Stripe)
adyen_path = "/webhooks/adyen"
max_body_bytes = 262144              # bodies over this are refused (413) before they are read further
tolerance = "5m"                     # Stripe-Signature timestamps further from now are refused
queue = "webhooks"                   # the queue of the webhook jobs
commit_wait = "2ms"                  # PostgreSQL: how long a request may wait for others to share its commit
```

Secrets: ``RECON_STRIPE_WEBHOOK_SECRET`` (the endpoint's ``whsec_…``; several, comma-separated, while rolling
a secret), ``RECON_ADYEN_HMAC_KEY`` (hex; several, comma-separated, while rotating), and optionally
``RECON_ADYEN_WEBHOOK_USERNAME`` / ``RECON_ADYEN_WEBHOOK_PASSWORD`` (basic auth Adyen sends, when set up).
A PSP without its secret has no endpoint: its path answers 404, never an unverified 200.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from psp_adapters.protocol import Secret
from recon.db.webhook_store import WEBHOOK_QUEUE
from recon.durations import parse_duration
from recon.errors import ConfigError, UsageError

STRIPE_SECRET_VARIABLE = "RECON_STRIPE_WEBHOOK_SECRET"  # nosec B105  # a variable's name, not a secret
ADYEN_KEY_VARIABLE = "RECON_ADYEN_HMAC_KEY"
ADYEN_USERNAME_VARIABLE = "RECON_ADYEN_WEBHOOK_USERNAME"
ADYEN_PASSWORD_VARIABLE = "RECON_ADYEN_WEBHOOK_PASSWORD"  # nosec B105  # a variable's name, not a secret
MAX_BODY_DEFAULT = 256 * 1024
MAX_BODY_LIMIT = 16 * 1024 * 1024
TOLERANCE_DEFAULT = timedelta(minutes=5)
QUEUE_DEFAULT = WEBHOOK_QUEUE
#: the group commit's gathering time (recon.webhooks.intake.GroupWriter): 2 ms cost a quarter of the CPU per
#: event at 2,300 requests/s (docs/benchmarks.md), at most 2 ms more per answer
COMMIT_WAIT_DEFAULT = timedelta(milliseconds=2)
COMMIT_WAIT_MAX = timedelta(seconds=1)
PATH_DEFAULTS = {"stripe_path": "/webhooks/stripe", "adyen_path": "/webhooks/adyen"}
_KEYS = {"stripe_path", "adyen_path", "max_body_bytes", "tolerance", "queue", "commit_wait"}


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    stripe_path: str = PATH_DEFAULTS["stripe_path"]
    adyen_path: str = PATH_DEFAULTS["adyen_path"]
    max_body_bytes: int = MAX_BODY_DEFAULT
    tolerance: timedelta = TOLERANCE_DEFAULT
    queue: str = QUEUE_DEFAULT
    commit_wait: timedelta = COMMIT_WAIT_DEFAULT
    stripe_secrets: tuple[Secret, ...] = ()
    adyen_hmac_keys: tuple[Secret, ...] = ()
    adyen_username: str | None = None
    adyen_password: Secret | None = field(default=None, repr=False)

    @classmethod
    def load(cls, table: Mapping[str, Any] | None, env: Mapping[str, str], *, source: str = "config") -> WebhookConfig:
        table = dict(table or {})
        where = f"{source}: webhooks"
        from recon.config import unknown

        for key in table:
            if key not in _KEYS:
                raise unknown("key", key, _KEYS, f"{where}.")
        paths = {}
        for key in ("stripe_path", "adyen_path"):
            value = table.get(key, PATH_DEFAULTS[key])
            if not isinstance(value, str) or not value.startswith("/") or len(value) > 200 or " " in value:
                raise ConfigError(f"{where}.{key}: must be a URL path starting with '/' (got {value!r})")
            paths[key] = value
        if paths["stripe_path"] == paths["adyen_path"]:
            raise ConfigError(f"{where}: stripe_path and adyen_path must differ")
        size = table.get("max_body_bytes", MAX_BODY_DEFAULT)
        if isinstance(size, bool) or not isinstance(size, int) or not 1024 <= size <= MAX_BODY_LIMIT:
            raise ConfigError(f"{where}.max_body_bytes: must be an integer between 1024 and {MAX_BODY_LIMIT}")
        try:
            tolerance = parse_duration(str(table["tolerance"])) if "tolerance" in table else TOLERANCE_DEFAULT
        except UsageError as exc:
            raise ConfigError(f"{where}.tolerance: {exc}") from None
        if not timedelta(seconds=1) <= tolerance <= timedelta(days=1):
            raise ConfigError(f"{where}.tolerance: must be between 1s and 1d")
        try:
            commit_wait = parse_duration(str(table["commit_wait"])) if "commit_wait" in table \
                else COMMIT_WAIT_DEFAULT
        except UsageError as exc:
            raise ConfigError(f"{where}.commit_wait: {exc}") from None
        if not commit_wait <= COMMIT_WAIT_MAX:
            raise ConfigError(f"{where}.commit_wait: must be between 0 and 1s (got {table['commit_wait']!r})")
        queue = table.get("queue", QUEUE_DEFAULT)
        if not isinstance(queue, str) or not queue.strip():
            raise ConfigError(f"{where}.queue: must be a non-empty string")
        keys = _split(env.get(ADYEN_KEY_VARIABLE))
        for i, key in enumerate(keys):
            try:
                bytes.fromhex(key)
            except ValueError:
                raise ConfigError(f"{ADYEN_KEY_VARIABLE}: key #{i + 1} is not hexadecimal") from None
        username = (env.get(ADYEN_USERNAME_VARIABLE) or "").strip() or None
        password = env.get(ADYEN_PASSWORD_VARIABLE) or None
        if bool(username) != bool(password):
            raise ConfigError(f"{ADYEN_USERNAME_VARIABLE} and {ADYEN_PASSWORD_VARIABLE}: set both or neither")
        return cls(stripe_path=paths["stripe_path"], adyen_path=paths["adyen_path"], max_body_bytes=size,
                   tolerance=tolerance, queue=queue.strip(), commit_wait=commit_wait,
                   stripe_secrets=tuple(Secret(s) for s in _split(env.get(STRIPE_SECRET_VARIABLE))),
                   adyen_hmac_keys=tuple(Secret(k) for k in keys), adyen_username=username,
                   adyen_password=Secret(password) if password else None)


def _split(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]
