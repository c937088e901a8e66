"""Console settings: ``[console]`` in the config file.

```toml
[console]
idle_timeout = "15m"        # a session without a request for this long ends (1m to 15m)
absolute_timeout = "12h"    # a session ends this long after its login, however busy (idle_timeout to 24h)
token_operator = "console-token"  # the operator RECON_CONSOLE_TOKEN acts as (automation, bootstrap)
token_role = "viewer"       # that operator's role: viewer, operator, approver or admin
totals_ttl = "10s"          # a filter's totals and the overview kept this long per process (0s to 60s; 0s: never)
```

The defaults are PCI DSS v4.0.1's: requirement 8.2.8 asks for re-authentication after at most 15 idle minutes,
so no setting goes past it (a setting never turns a guarantee off); 12 hours bounds a working day's session.
The server enforces both (``recon.console.session``); the cookie's Max-Age only tells the browser the same.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from recon.config import unknown
from recon.durations import parse_duration
from recon.errors import ConfigError, UsageError
from recon.operator_rows import Role

IDLE_TIMEOUT_DEFAULT = timedelta(minutes=15)
IDLE_TIMEOUT_MIN = timedelta(minutes=1)
#: PCI DSS v4.0.1 requirement 8.2.8
IDLE_TIMEOUT_MAX = timedelta(minutes=15)
ABSOLUTE_TIMEOUT_DEFAULT = timedelta(hours=12)
ABSOLUTE_TIMEOUT_MAX = timedelta(hours=24)
#: last_seen_at is written at most this often per session (and at most every tenth of the idle timeout)
TOUCH_INTERVAL_MAX = timedelta(minutes=1)
TOKEN_OPERATOR_DEFAULT = "console-token"  # nosec B105  # an operator's name, not a secret
TOKEN_ROLE_DEFAULT = Role.VIEWER
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,99}")
TOTALS_TTL_DEFAULT = timedelta(seconds=10)
TOTALS_TTL_MAX = timedelta(seconds=60)
_KEYS = {"idle_timeout", "absolute_timeout", "token_operator", "token_role", "totals_ttl"}


@dataclass(frozen=True, slots=True)
class ConsoleConfig:
    idle_timeout: timedelta = IDLE_TIMEOUT_DEFAULT
    absolute_timeout: timedelta = ABSOLUTE_TIMEOUT_DEFAULT
    token_operator: str = TOKEN_OPERATOR_DEFAULT
    token_role: Role = TOKEN_ROLE_DEFAULT
    totals_ttl: timedelta = TOTALS_TTL_DEFAULT  #: recon.console.totals

    @property
    def touch_interval(self) -> timedelta:
        """How old a session's last_seen_at must be before a request writes it again: a busy session costs one
        write a minute, and the idle timeout may end a session up to this much early, never late."""
        return min(TOUCH_INTERVAL_MAX, self.idle_timeout / 10)

    @classmethod
    def load(cls, table: Mapping[str, Any] | None, *, source: str = "config") -> ConsoleConfig:
        """``[console]`` checked: known keys, durations within their bounds. Raises ConfigError naming the key."""
        table = dict(table or {})
        where = f"{source}: console"

        for key in table:
            if key not in _KEYS:
                raise unknown("key", key, _KEYS, f"{where}.")
        idle = _duration(table, "idle_timeout", IDLE_TIMEOUT_DEFAULT, where)
        if not IDLE_TIMEOUT_MIN <= idle <= IDLE_TIMEOUT_MAX:
            raise ConfigError(f"{where}.idle_timeout: must be between 1m and 15m (PCI DSS 8.2.8), "
                              f"got {table['idle_timeout']!r}")
        absolute = _duration(table, "absolute_timeout", ABSOLUTE_TIMEOUT_DEFAULT, where)
        if not idle <= absolute <= ABSOLUTE_TIMEOUT_MAX:
            raise ConfigError(f"{where}.absolute_timeout: must be between the idle timeout ({_text(idle)}) and 24h, "
                              f"got {table['absolute_timeout']!r}")
        token_operator = table.get("token_operator", TOKEN_OPERATOR_DEFAULT)
        if not isinstance(token_operator, str) or not _NAME.fullmatch(token_operator):
            raise ConfigError(f"{where}.token_operator: an operator name (letters, digits, . _ @ -), got "
                              f"{token_operator!r}")
        role = table.get("token_role", str(TOKEN_ROLE_DEFAULT))
        if role not in {r.value for r in Role}:
            raise unknown("role", str(role), [r.value for r in Role], f"{where}.token_role: ")
        ttl = _duration(table, "totals_ttl", TOTALS_TTL_DEFAULT, where)
        if not timedelta(0) <= ttl <= TOTALS_TTL_MAX:
            raise ConfigError(f"{where}.totals_ttl: must be between 0s and 60s, got {table['totals_ttl']!r}")
        return cls(idle_timeout=idle, absolute_timeout=absolute, token_operator=token_operator,
                   token_role=Role(role), totals_ttl=ttl)


def _duration(table: Mapping[str, Any], key: str, default: timedelta, where: str) -> timedelta:
    if key not in table:
        return default
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConfigError(f'{where}.{key}: expected a duration such as "15m", got {value!r}')
    try:
        return parse_duration(str(value))
    except UsageError as exc:
        raise ConfigError(f"{where}.{key}: {str(exc).removeprefix('duration: ')}") from None


def _text(duration: timedelta) -> str:
    """15 minutes -> "15m", 12 hours -> "12h" (whole units as people type them)."""
    seconds = int(duration.total_seconds())
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
