"""Typed settings: built-in defaults, then a TOML file (``--config`` or ``RECON_CONFIG``), then environment
variables, then command-line flags.

``config/recon.toml`` in the repository mirrors the defaults below. Every problem is a ``ConfigError`` whose
message names the file, the key and what is wrong, in one line, suggesting the nearest valid key for a typo.

What is enforced:
- sections: ``database``, ``engine``, ``queues.NAME``, ``retry.KIND``, ``reconcile``, ``payments``,
  ``webhooks``, ``schedule.NAME``, ``psp.NAME``, ``console``, ``bank``, ``review``, ``close``, ``audit``,
  ``four_eyes``, ``operators`` (the last twelve are checked by their readers: ``recon.reconcile.config``,
  ``recon.payments.config``, ``recon.webhooks.config``, ``recon.scheduler``, the composition root,
  ``recon.console.config``, ``recon.bank.config``, ``recon.review_config``, ``recon.close.config``,
  ``recon.audit``, ``recon.four_eyes`` and ``recon.totp_key``); anything else is an error;
- keys: only the known keys of each section; retry kinds: only those of ``RETRY_KINDS``;
- numbers: of the declared type, finite, positive where they must be, and at most ``MAXIMA`` (seconds or count);
- no name or text holds a card number (``recon.redact``): a queue, schedule or account would be stored and
  printed under it; a card number is refused wherever it comes from, never stored;
- the environment: ``RECON_DATABASE_URL``, ``RECON_CONFIG`` and ``RECON_ENGINE_<KEY>`` for every ``[engine]`` key
  (type-checked like the file); an unknown ``RECON_ENGINE_*`` variable is an error. PSP settings have their own
  variables, ``RECON_<PSP>_<KEY>`` (``psp_adapters.registry``); queues, retry and reconcile are set in the file.
"""

from __future__ import annotations

import difflib
import math
import os
import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from recon.durations import parse_duration
from recon.errors import ConfigError, UsageError
from recon.redact import has_card_number

DATABASE_URL_DEFAULT = "sqlite:///recon.db"
LEASE_TTL_SECONDS_DEFAULT = 30.0
HEARTBEAT_INTERVAL_SECONDS_DEFAULT = 10.0
WATCHER_INTERVAL_SECONDS_DEFAULT = 5.0
POLL_INTERVAL_SECONDS_DEFAULT = 0.5
CLAIM_BATCH_SIZE_DEFAULT = 50
FINISH_BATCH_SIZE_DEFAULT = 200
CONCURRENCY_DEFAULT = 8
PREFETCH_DEFAULT = 0
#: the worker sizes itself (recon.engine.sizing) between concurrency and max_concurrency threads
AUTOSIZE_DEFAULT = True
MAX_CONCURRENCY_DEFAULT = 256
MAX_PREFETCH_DEFAULT = 256
DRAIN_TIMEOUT_SECONDS_DEFAULT = 30.0
MAX_ATTEMPTS_DEFAULT = 10
QUEUE_DEFAULT = "default"
#: pruning of finished jobs by the worker: off ("" or "0"), or a duration ("7d") or seconds ("604800")
PRUNE_OLDER_THAN_DEFAULT = ""
PRUNE_INTERVAL_SECONDS_DEFAULT = 300.0
PRUNE_BATCH_SIZE_DEFAULT = 1000
#: keys that take a duration: a string ("7d") or a number of seconds
_DURATION_KEYS = {"prune_older_than"}
DAY = 86400.0
#: the largest value each number may take (seconds for ``*_seconds``, else a count); documented in the README
MAXIMA: Mapping[str, float] = {
    "lease_ttl_seconds": DAY, "heartbeat_interval_seconds": DAY, "watcher_interval_seconds": DAY,
    "poll_interval_seconds": 3600.0, "drain_timeout_seconds": DAY, "prune_interval_seconds": 7 * DAY,
    "claim_batch_size": 10_000, "finish_batch_size": 10_000, "concurrency": 1024, "prefetch": 10_000,
    "max_concurrency": 1024, "max_prefetch": 10_000,
    "default_max_attempts": 10_000, "prune_batch_size": 100_000,
    "max_depth": 1_000_000_000_000, "base_seconds": 7 * DAY, "cap_seconds": 7 * DAY, "max_attempts": 10_000,
}


@dataclass(frozen=True, slots=True)
class EngineConfig:
    lease_ttl_seconds: float = LEASE_TTL_SECONDS_DEFAULT
    heartbeat_interval_seconds: float = HEARTBEAT_INTERVAL_SECONDS_DEFAULT
    watcher_interval_seconds: float = WATCHER_INTERVAL_SECONDS_DEFAULT
    poll_interval_seconds: float = POLL_INTERVAL_SECONDS_DEFAULT
    claim_batch_size: int = CLAIM_BATCH_SIZE_DEFAULT
    finish_batch_size: int = FINISH_BATCH_SIZE_DEFAULT
    concurrency: int = CONCURRENCY_DEFAULT
    #: jobs a worker process may claim beyond its free handler threads, waiting in the process (leased and
    #: heartbeated) for a thread: for short jobs, so that the next claim overlaps the current batch
    prefetch: int = PREFETCH_DEFAULT
    #: the worker sizes itself (recon.engine.sizing): ``concurrency`` is then its least and first thread count,
    #: ``max_concurrency`` its most (at least ``concurrency``), ``claim_batch_size`` its largest claim and
    #: ``max_prefetch`` its most prefetched jobs (``prefetch`` is not used); off: ``concurrency``,
    #: ``claim_batch_size`` and ``prefetch`` as set
    autosize: bool = AUTOSIZE_DEFAULT
    max_concurrency: int = MAX_CONCURRENCY_DEFAULT
    max_prefetch: int = MAX_PREFETCH_DEFAULT
    drain_timeout_seconds: float = DRAIN_TIMEOUT_SECONDS_DEFAULT
    default_max_attempts: int = MAX_ATTEMPTS_DEFAULT
    default_queue: str = QUEUE_DEFAULT
    prune_older_than: str = PRUNE_OLDER_THAN_DEFAULT
    prune_interval_seconds: float = PRUNE_INTERVAL_SECONDS_DEFAULT
    prune_batch_size: int = PRUNE_BATCH_SIZE_DEFAULT

    def validate(self, where: str = "engine") -> None:
        _check_bounds(self, where)
        for name in ("lease_ttl_seconds", "watcher_interval_seconds", "poll_interval_seconds",
                     "heartbeat_interval_seconds"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{where}.{name}: must be > 0, got {getattr(self, name)}")
        for name in ("claim_batch_size", "finish_batch_size", "concurrency", "default_max_attempts"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{where}.{name}: must be >= 1, got {getattr(self, name)}")
        if self.prefetch < 0:
            raise ConfigError(f"{where}.prefetch: must be >= 0, got {self.prefetch}")
        if self.max_prefetch < 0:
            raise ConfigError(f"{where}.max_prefetch: must be >= 0, got {self.max_prefetch}")
        if self.max_concurrency < 1:
            raise ConfigError(f"{where}.max_concurrency: must be >= 1, got {self.max_concurrency}")
        if self.drain_timeout_seconds < 0:
            raise ConfigError(f"{where}.drain_timeout_seconds: must be >= 0")
        if self.heartbeat_interval_seconds >= self.lease_ttl_seconds:
            raise ConfigError(
                f"{where}.heartbeat_interval_seconds: must be shorter than lease_ttl_seconds "
                f"({self.heartbeat_interval_seconds} >= {self.lease_ttl_seconds})"
            )
        if not self.default_queue:
            raise ConfigError(f"{where}.default_queue: must not be empty")
        self._validate_prune(where)

    @property
    def prune_after(self) -> timedelta | None:
        """How old a finished job must be for the worker's pruner to delete it; None: pruning is off."""
        return _prune_age(self.prune_older_than, what="engine.prune_older_than")

    def _validate_prune(self, where: str) -> None:
        try:
            _prune_age(self.prune_older_than, what=f"{where}.prune_older_than")
        except UsageError as exc:
            raise ConfigError(str(exc)) from None
        if self.prune_interval_seconds <= 0:
            raise ConfigError(f"{where}.prune_interval_seconds: must be > 0, "
                              f"got {self.prune_interval_seconds}")
        if self.prune_batch_size < 1:
            raise ConfigError(f"{where}.prune_batch_size: must be >= 1, got {self.prune_batch_size}")


def _prune_age(raw: str, *, what: str) -> timedelta | None:
    age = parse_duration(raw, what=what) if raw.strip() else timedelta(0)
    return age if age > timedelta(0) else None


@dataclass(frozen=True, slots=True)
class QueueConfig:
    max_depth: int = 0  #: 0 = unbounded
    concurrency: int = 0  #: per worker process; 0 = only the pool's limit

    def validate(self, where: str) -> None:
        _check_bounds(self, where)
        for name in ("max_depth", "concurrency"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{where}.{name}: must be >= 0, got {getattr(self, name)}")


@dataclass(frozen=True, slots=True)
class BackoffConfig:
    base_seconds: float = 1.0
    cap_seconds: float = 600.0
    max_attempts: int = MAX_ATTEMPTS_DEFAULT

    def validate(self, where: str) -> None:
        _check_bounds(self, where)
        if self.base_seconds <= 0 or self.cap_seconds < self.base_seconds:
            raise ConfigError(f"{where}: need 0 < base_seconds <= cap_seconds")
        if self.max_attempts < 1:
            raise ConfigError(f"{where}.max_attempts: must be >= 1")


def _check_bounds(config: Any, where: str) -> None:
    """Every number of ``config`` is finite and at most its MAXIMA entry."""
    for f in fields(config):
        value = getattr(config, f.name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if not math.isfinite(value):
            raise ConfigError(f"{where}.{f.name}: must be a finite number, got {value}")
        limit = MAXIMA.get(f.name)
        if limit is not None and value > limit:
            unit = " seconds" if f.name.endswith("_seconds") else ""
            raise ConfigError(f"{where}.{f.name}: at most {limit:g}{unit}, got {value:g}")


def _retry_defaults() -> dict[str, BackoffConfig]:
    b = BackoffConfig
    return {
        "default": b(1.0, 600.0, 10),
        "network": b(1.0, 300.0, 10),
        "unknown_outcome": b(2.0, 600.0, 12),
        "rate_limited": b(1.0, 300.0, 20),
        "psp_busy": b(1.0, 120.0, 10),
        "psp_unavailable": b(2.0, 600.0, 12),
        "conflict": b(0.5, 10.0, 10),
        "protocol": b(5.0, 60.0, 3),
        "db_transient": b(0.05, 2.0, 5),
        "bug": b(1.0, 600.0, 10),
    }


#: the error kinds that retry (``recon.classify.ErrorKind``'s retryable values) and ``default``
RETRY_KINDS = frozenset(_retry_defaults())


@dataclass(frozen=True, slots=True)
class Settings:
    database_url: str = DATABASE_URL_DEFAULT
    engine: EngineConfig = field(default_factory=EngineConfig)
    queues: Mapping[str, QueueConfig] = field(default_factory=lambda: {"default": QueueConfig()})
    retry: Mapping[str, BackoffConfig] = field(default_factory=_retry_defaults)
    #: free-form per-section tables that other parts of recon read (e.g. [psp.stripe])
    extra: Mapping[str, Any] = field(default_factory=dict)
    source: str = "<defaults>"

    def queue(self, name: str) -> QueueConfig:
        found = self.queues.get(name)  # not .get(name, QueueConfig()): that built a default on every enqueue
        return found if found is not None else QueueConfig()

    def __repr__(self) -> str:
        return (f"Settings(database_url={mask_url(self.database_url)!r}, engine={self.engine!r}, "
                f"queues={dict(self.queues)!r}, retry={dict(self.retry)!r}, source={self.source!r})")

    def validate(self) -> Settings:
        self.engine.validate()
        for name, q in self.queues.items():
            q.validate(f"queues.{name}")
        for kind, b in self.retry.items():
            b.validate(f"retry.{kind}")
        if "default" not in self.retry:
            raise ConfigError("retry.default: the default backoff must be configured")
        return self


_KNOWN_SECTIONS = {"database", "engine", "queues", "retry"}
#: sections other parts of recon read and check (``Settings.extra``)
_EXTRA_SECTIONS = {"reconcile", "payments", "psp", "webhooks", "schedule", "console", "bank", "review", "close",
                   "audit", "four_eyes", "operators"}


def mask_url(url: str) -> str:
    """``url`` with its password masked (``postgresql://user:***@host/db``)."""
    head, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return url
    return f"{head}://{userinfo.split(':', 1)[0]}:***@{host}"


def unknown(kind: str, name: str, known: Collection[str], where: str) -> ConfigError:
    """The error for an unknown key (or section, kind): names it and suggests the nearest known one."""
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(sorted(known))})"
    return ConfigError(f"{where}{name}: unknown {kind}{hint}")


def load_settings(path: str | os.PathLike[str] | None = None, *, environ: Mapping[str, str] | None = None) -> Settings:
    """Defaults <- TOML file <- environment. Raises ConfigError naming the file and key on any problem."""
    environ = os.environ if environ is None else environ
    path = path or environ.get("RECON_CONFIG") or None
    settings = Settings()
    if path is not None:
        settings = _apply_file(settings, Path(path))
    settings = _apply_env(settings, environ)
    return settings.validate()


def _apply_file(settings: Settings, path: Path) -> Settings:
    try:
        with path.open("rb") as fh:
            doc = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a config file") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not valid UTF-8 (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); "
                          "save the file as UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    src = str(path)
    _refuse_card_numbers(doc, f"{src}: ")
    for section in doc:
        if section not in _KNOWN_SECTIONS | _EXTRA_SECTIONS:
            raise unknown("section", section, _KNOWN_SECTIONS | _EXTRA_SECTIONS, f"{src}: [")
    extra = {k: v for k, v in doc.items() if k not in _KNOWN_SECTIONS}
    db = doc.get("database", {})
    _check_table(db, f"{src}: database")
    for key in db:
        if key != "url":
            raise unknown("key", key, {"url"}, f"{src}: database.")
    url = db.get("url", settings.database_url)
    if not isinstance(url, str):
        raise ConfigError(f"{src}: database.url must be a string")
    engine = _dataclass_from(EngineConfig, doc.get("engine", {}), settings.engine, f"{src}: engine")
    queues = dict(settings.queues)
    for name, table in _table(doc, "queues", src).items():
        queues[name] = _dataclass_from(QueueConfig, table, queues.get(name, QueueConfig()), f"{src}: queues.{name}")
    retry = dict(settings.retry)
    for kind, table in _table(doc, "retry", src).items():
        if kind not in RETRY_KINDS:
            raise unknown("retry kind", kind, RETRY_KINDS, f"{src}: retry.")
        retry[kind] = _dataclass_from(BackoffConfig, table, retry.get(kind, retry["default"]), f"{src}: retry.{kind}")
    return replace(settings, database_url=url, engine=engine, queues=queues, retry=retry, extra=extra, source=src)


def _refuse_card_numbers(value: object, where: str) -> None:
    """ConfigError naming the key when a table's key or a string in ``value`` holds a card number (the value is
    not repeated)."""
    if isinstance(value, dict):
        for key, sub in value.items():
            path = f"{where}{key}" if where.endswith(": ") else f"{where}.{key}"
            if has_card_number(key):
                raise ConfigError(f"{where.rstrip('. ')}: a name holds a card number; recon stores none")
            _refuse_card_numbers(sub, path)
    elif isinstance(value, list):
        for item in value:
            _refuse_card_numbers(item, where)
    elif isinstance(value, str) and has_card_number(value):
        raise ConfigError(f"{where}: holds a card number; recon stores none")


def _table(doc: Mapping[str, Any], key: str, src: str) -> Mapping[str, Any]:
    value = doc.get(key, {})
    _check_table(value, f"{src}: {key}")
    for name, sub in value.items():
        _check_table(sub, f"{src}: {key}.{name}")
    return value  # type: ignore[no-any-return]


def _check_table(value: object, where: str) -> None:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: must be a table")


def _dataclass_from(cls: type[Any], table: Mapping[str, Any], base: Any, where: str) -> Any:
    _check_table(table, where)
    known = {f.name: f for f in fields(cls)}
    changes: dict[str, Any] = {}
    for key, value in table.items():
        if key not in known:
            raise unknown("key", key, known, f"{where}.")
        changes[key] = _coerce(value, type(getattr(base, key)), f"{where}.{key}")
    return replace(base, **changes)


def _coerce(value: Any, typ: type, where: str) -> Any:
    if typ is bool and isinstance(value, bool):
        return value
    if typ is float and isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ConfigError(f"{where}: must be a finite number, got {value}")
        return float(value)
    if typ is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if typ is str and where.rsplit(".", 1)[-1] in _DURATION_KEYS and isinstance(value, int | float) \
            and not isinstance(value, bool):
        return str(value)  # seconds
    if typ is str and isinstance(value, str):
        return value
    raise ConfigError(f"{where}: expected {typ.__name__}, got {value!r}")


def _apply_env(settings: Settings, environ: Mapping[str, str]) -> Settings:
    url = environ.get("RECON_DATABASE_URL")
    if url is not None:
        if not url.strip():
            raise ConfigError("RECON_DATABASE_URL: is empty; unset it or name a database")
        settings = replace(settings, database_url=url)
    engine_vars = {f"RECON_ENGINE_{f.name.upper()}" for f in fields(EngineConfig)}
    for var in environ:
        if var.startswith("RECON_ENGINE_") and var not in engine_vars:
            raise unknown("variable", var, engine_vars, "")
    changes: dict[str, Any] = {}
    for f in fields(EngineConfig):
        var = f"RECON_ENGINE_{f.name.upper()}"
        if var in environ:
            typ = type(getattr(settings.engine, f.name))
            changes[f.name] = _parse_env(environ[var], typ, var)
    if changes:
        settings = replace(settings, engine=replace(settings.engine, **changes))
    return settings


def _parse_env(raw: str, typ: type, var: str) -> Any:
    value: Any
    if typ is bool:
        word = raw.strip().lower()
        if word not in ("true", "false", "1", "0"):
            raise ConfigError(f"{var}: expected true or false, got {raw!r}")
        return word in ("true", "1")
    try:
        value = typ(raw.strip()) if typ is not str else raw
    except ValueError:
        raise ConfigError(f"{var}: expected {typ.__name__}, got {raw!r}") from None
    if typ is float and not math.isfinite(value):
        raise ConfigError(f"{var}: must be a finite number, got {raw!r}")
    return value
