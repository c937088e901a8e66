"""The ``recon`` command line: the composition root that wires configuration, database, engine and handlers.

Exit codes (DESIGN §6): 0 done and consistent; 1 done, with items that need review; 2 bad usage, input or
configuration; 3 the run failed. ``--json`` prints one JSON document on stdout; diagnostics go to stderr.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

import click

from psp_adapters.protocol import PspAdapter
from recon.config import Settings, load_settings
from recon.db.database import Database, connect
from recon.db.jobs_store import JobStore
from recon.db.payment_store import PaymentStore
from recon.durations import parse_duration
from recon.engine.client import Client
from recon.engine.handlers import Handlers
from recon.errors import ConfigError, ReconError, UsageError
from recon.reconcile.config import ReconcileConfig

EXIT_OK, EXIT_REVIEW, EXIT_USAGE, EXIT_FAILED = 0, 1, 2, 3
log = logging.getLogger("recon")


#: a row id or a count that fits the database's signed 64-bit integers
INT64_MAX = 2**63 - 1
JOB_ID = click.IntRange(1, INT64_MAX)
#: --limit of listings and sweeps: at most this many rows
LIMIT = click.IntRange(1, 10_000_000)


class Duration(click.ParamType[timedelta, Any]):
    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> timedelta:
        if isinstance(value, timedelta):
            return value
        try:
            what = f"--{param.name.replace('_', '-')}" if param and param.name else "duration"
            return parse_duration(str(value), what=what)
        except UsageError as exc:
            self.fail(str(exc).split(": ", 1)[-1], param, ctx)


# --- dead letters and pruning: --since ----------------------------------------------------------------------


class Since(click.ParamType[timedelta | datetime, Any]):
    """``--since``: a duration back from now (``2h``, ``7d``) or an ISO date / datetime (UTC if no offset)."""

    name = "since"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> timedelta | datetime:
        if isinstance(value, timedelta | datetime):
            return value
        raw = str(value).strip()
        try:
            return parse_duration(raw)
        except UsageError:
            pass
        try:
            parsed = datetime.fromisoformat(raw)
        except ValueError:
            self.fail(f"{value!r} is neither a duration (2h, 7d) nor an ISO date or datetime (2026-11-01, "
                      "2026-11-01T12:00:00Z)", param, ctx)
        return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).astimezone(UTC)


# --- end of dead letters and pruning: --since ---------------------------------------------------------------


class App:
    """What every command needs, built lazily from the global options."""

    def __init__(self, database_url: str | None, config_path: str | None) -> None:
        self._database_url = database_url
        self._config_path = config_path
        self._settings: Settings | None = None
        self._db: Database | None = None
        self._adapters: dict[str, PspAdapter] = {}
        self._adapter_lock = threading.Lock()
        self._metrics: Any = None
        self._guard: Any = None
        #: False only for `recon db upgrade`, which brings an old schema up to date
        self.check_schema = True

    @property
    def settings(self) -> Settings:
        """The settings, every section checked at once (a typo in [psp.*] fails every command, not the one
        that happens to read it)."""
        if self._settings is None:
            if self._database_url is not None and not self._database_url.strip():
                raise UsageError("--database-url: is empty; leave it out for the default or name a database")
            settings = load_settings(self._config_path)
            if self._database_url:
                settings = replace(settings, database_url=self._database_url)
            _check_psp_tables(settings)
            ReconcileConfig.from_table(settings.extra.get("reconcile"), source=settings.source)
            self._settings = settings
        return self._settings

    @property
    def db(self) -> Database:
        """The database, its schema checked once: a command never works on a schema it does not know."""
        if self._db is None:
            db = connect(self.settings.database_url, pool_size=self.settings.engine.concurrency + 4)
            if self.check_schema:
                _require_current_schema(db)
            self._db = db
        return self._db

    @property
    def store(self) -> JobStore:
        return JobStore(self.db)

    def client(self) -> Client:
        return Client(self.store, self.settings)

    @property
    def ledger(self) -> PaymentStore:
        return PaymentStore(self.db)

    @property
    def reconcile_config(self) -> ReconcileConfig:
        return ReconcileConfig.from_table(self.settings.extra.get("reconcile"), source=self.settings.source)

    def psp_names(self) -> tuple[str, ...]:
        from psp_adapters import registry

        return registry.names()

    def adapter(self, name: str) -> PspAdapter:
        """The adapter for PSP ``name``: ``[psp.NAME]`` in the config file (base_url, merchant_account,
        timeouts) over ``RECON_NAME_*`` variables. Keys come only from the environment. Handler threads call
        this concurrently: one adapter (one connection pool) per PSP per process."""
        with self._adapter_lock:
            if name not in self._adapters:
                self._adapters[name] = self._build_adapter(name)
            return self._adapters[name]

    def _build_adapter(self, name: str) -> PspAdapter:
        from psp_adapters import registry

        if name not in registry.names():
            raise ConfigError(f"unknown PSP {name!r} (known: {', '.join(registry.names())})")
        try:
            settings = registry.settings_from_env(name, os.environ)
        except ValueError as exc:
            raise ConfigError(f"PSP {name!r}: {exc}") from None
        table = self.psp_table(name)
        for key in registry.SECRET_KEYS:
            if key in table:
                raise ConfigError(f"{self.settings.source}: psp.{name}.{key}: keys come from the environment "
                                  f"(RECON_{name.upper()}_{key.upper()}), never from a file")
        try:
            settings.update(registry.settings_from_table(table, base=settings.get("timeout")))
        except ValueError as exc:
            raise ConfigError(f"{self.settings.source}: psp.{name}: {exc}") from None
        try:
            adapter = registry.get_factory(name)(settings)
        except registry.MissingSetting as exc:
            raise ConfigError(_missing_setting(name, exc.key, secret=exc.key in registry.SECRET_KEYS)) from None
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"PSP {name!r}: {exc}") from None
        from recon.payments.instrumented import instrument

        return instrument(adapter, recorder=self.metrics)  # PSP latency and 429s (recon.metrics)

    def psp_table(self, name: str) -> dict[str, Any]:
        """``[psp.NAME]`` of the config file (adapter settings and guard limits), empty when absent."""
        table = self.settings.extra.get("psp", {}).get(name, {})
        return dict(table) if isinstance(table, dict) else {}

    def require_psps(self, names: Iterable[str]) -> None:
        """Before a command does any work: every PSP in ``names`` can be called as configured (its adapter
        builds: keys, accounts, report credentials, base URL). Raises ConfigError naming the setting."""
        for name in sorted(set(names)):
            self.adapter(name)

    def account_defaults(self) -> dict[str, str]:
        """Each PSP's configured default merchant account (``[psp.NAME] merchant_account`` over
        ``RECON_NAME_MERCHANT_ACCOUNT``), for rows of an import that name none."""
        out = {}
        for name in self.psp_names():
            value = self.psp_table(name).get("merchant_account") or os.environ.get(
                f"RECON_{name.upper()}_MERCHANT_ACCOUNT")
            if isinstance(value, str) and value.strip():
                out[name] = value.strip()
        return out

    @property
    def metrics(self) -> Any:
        """This process's counts (recon.metrics.ProcessMetrics): worker observer and adapters' recorder."""
        if self._metrics is None:
            from recon.metrics import ProcessMetrics

            self._metrics = ProcessMetrics()
        return self._metrics

    # --- psp controls (issue 5): the guard both PSP-calling handlers share -------------------------------

    @property
    def guard_config(self) -> Any:
        from recon.payments.psp_limits import GuardConfig

        return GuardConfig.from_table(self.settings.extra.get("psp"), source=self.settings.source)

    @property
    def control_store(self) -> Any:
        from recon.db.control_store import ControlStore

        return ControlStore(self.db)

    @property
    def guard(self) -> Any:
        """This process's PspGuard (recon.payments.guard): pause, cool-down, breaker and rate limit per PSP."""
        if self._guard is None:
            from recon.payments.guard import PspGuard

            self._guard = PspGuard(self.control_store, self.guard_config)
        return self._guard

    # --- end of psp controls ---------------------------------------------------------------------------

    def close(self) -> None:
        for adapter in self._adapters.values():
            adapter.close()
        self._adapters.clear()

    def handlers(self, extra: tuple[str, ...] = (), *, kinds: tuple[str, ...] = ("charge", "reconcile")) -> Handlers:
        """The payment handlers (charge, reconcile) plus any ``--handlers MODULE:ATTR``."""
        from recon.clock import SystemClock
        from recon.payments.charge import ChargeHandler
        from recon.reconcile.handler import ReconcileHandler

        handlers = Handlers()
        if "charge" in kinds:
            handlers.register("charge", ChargeHandler(self.ledger, self.adapter, guard=self.guard, clock=SystemClock()))
        if "reconcile" in kinds:
            handlers.register("reconcile", ReconcileHandler(self.ledger, self.adapter, config=self.reconcile_config,
                                                            clock=SystemClock(), guard=self.guard))
        for ref in extra:
            _merge_handlers(handlers, _import_ref(ref))
        return handlers


def _check_psp_tables(settings: Settings) -> None:
    """``[psp.NAME]``: a registered PSP, and only adapter settings (registry) or guard limits (psp_limits)."""
    from psp_adapters import registry
    from recon.config import unknown
    from recon.payments.psp_limits import GUARD_KEYS, GuardConfig

    tables = settings.extra.get("psp", {})
    if not isinstance(tables, dict):
        raise ConfigError(f"{settings.source}: psp: must be a table of [psp.NAME] tables")
    known = set(registry.PLAIN_KEYS) | set(registry.SECRET_KEYS) | set(registry.TIMEOUT_KEYS) | GUARD_KEYS
    for name, table in tables.items():
        if name not in registry.names():
            raise unknown("PSP", name, registry.names(), f"{settings.source}: psp.")
        if not isinstance(table, dict):
            raise ConfigError(f"{settings.source}: psp.{name}: must be a table")
        for key in table:
            if key not in known:
                raise unknown("key", key, known, f"{settings.source}: psp.{name}.")
    GuardConfig.from_table(tables, source=settings.source)


def _require_current_schema(db: Database) -> None:
    from recon.db.database import schema_revisions

    current, head = schema_revisions(db)
    if current != head:
        have = f"at revision {current}" if current else "empty (no recon tables)"
        raise ConfigError(f"the database schema is {have}; this recon needs revision {head}: run `recon db upgrade`")


def _missing_setting(name: str, key: str, *, secret: bool) -> str:
    variable = f"RECON_{name.upper()}_{key.upper()}"
    where = f"the environment variable {variable}" if secret else f"[psp.{name}] {key} in the config file or {variable}"
    return f"PSP {name!r}: {key} is not set; set {where}"


def _import_ref(ref: str) -> Handlers:
    module_name, _, attr = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
        obj = getattr(module, attr or "handlers")
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"--handlers {ref!r}: cannot import ({exc})") from None
    if not isinstance(obj, Handlers):
        raise ConfigError(f"--handlers {ref!r}: is a {type(obj).__name__}, not recon.Handlers")
    return obj


def _merge_handlers(into: Handlers, other: Handlers) -> None:
    for kind in other.kinds():
        into.register(kind, other.get(kind))


pass_app = click.make_pass_decorator(App)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--database-url", envvar="RECON_DATABASE_URL", help="Default: sqlite:///recon.db")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), envvar="RECON_CONFIG",
              help="A TOML file like config/recon.toml.")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              envvar="RECON_LOG_FORMAT", help="json: one JSON object per line (ts, level, logger, message, "
              "job_id, kind, attempt, worker, payment_reference); secrets are redacted in both.")
@click.pass_context
def cli(ctx: click.Context, database_url: str | None, config_path: str | None, log_level: str,
        log_format: str) -> None:
    """recon: payments kept honest between our database and the PSPs."""
    from recon.logs import configure

    configure(level=log_level.upper(), fmt=log_format, stream=sys.stderr)
    logging.getLogger("alembic").setLevel(max(logging.WARNING, logging.getLogger().level))
    # one INFO line per HTTP request from httpx drowns what recon says; its warnings still show
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
    ctx.obj = App(database_url, config_path)
    ctx.call_on_close(ctx.obj.close)


def _classify_func() -> Callable[[BaseException], Any]:
    from recon.classify import classify

    return classify


def check_output_path(path: str, *, option: str) -> None:
    """Before any work: ``path`` can be written (its directory exists and is writable; it is not a directory).
    Raises UsageError naming ``option``."""
    target = os.path.abspath(path)
    directory = os.path.dirname(target)
    if os.path.isdir(target):
        raise UsageError(f"{option} {path!r}: is a directory")
    if not os.path.isdir(directory):
        raise UsageError(f"{option} {path!r}: the directory {directory} does not exist")
    if not os.access(directory, os.W_OK):
        raise UsageError(f"{option} {path!r}: the directory {directory} is not writable")
    if os.path.exists(target) and not os.access(target, os.W_OK):
        raise UsageError(f"{option} {path!r}: the file is not writable")


def operator_name() -> str:
    """Who runs this command, for the records it leaves (replays, PSP pauses): user@host."""
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except (OSError, KeyError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def _install_signal_handlers(stop: Callable[[], None]) -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    received = {"n": 0}

    def handle(signum: int, _frame: Any) -> None:
        received["n"] += 1
        if received["n"] > 1:  # a second signal: exit now; leases expire and the watcher recovers the jobs
            os._exit(128 + signum)
        log.warning("signal %s: draining (send it again to exit at once)", signal.Signals(signum).name)
        stop()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


# the subcommands register themselves on `cli` when imported
from recon.commands import engine, jobs, payments, psp, reconcile  # noqa: E402, F401

# --- entry point --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> NoReturn:
    try:
        # standalone_mode=False: click returns ctx.exit(n)'s code instead of exiting, and lets our errors through
        rc = cli.main(args=argv, prog_name="recon", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(EXIT_FAILED)
    except click.UsageError as exc:  # one line, naming the command: "recon report: Invalid value for '--since' …"
        where = exc.ctx.command_path if exc.ctx is not None else "recon"
        click.echo(f"{where}: {exc.format_message()}", err=True)
        sys.exit(EXIT_USAGE)
    except click.ClickException as exc:
        click.echo(f"recon: {exc.format_message()}", err=True)
        sys.exit(EXIT_USAGE)
    except (ConfigError, UsageError) as exc:
        click.echo(f"recon: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    except ReconError as exc:
        click.echo(f"recon: {exc}", err=True)
        sys.exit(_exit_code_for(exc))
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except Exception as exc:  # a bug or an environment failure: exit 3, never 1 (1 means "items need review")
        _unexpected(exc, argv)
    sys.exit(rc if isinstance(rc, int) else EXIT_OK)


def _unexpected(exc: Exception, argv: list[str] | None) -> NoReturn:
    """One line on stderr (the traceback only at --log-level debug), then exit 3."""
    from recon.redact import redact

    words = [a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")]
    command = next((w for w in words if w in cli.commands), "recon")
    log.debug("unexpected error", exc_info=exc)
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    click.echo(redact(f"recon: {command} failed unexpectedly: {type(exc).__name__}: {first} "
                      "(rerun with --log-level debug for the traceback)"), err=True)
    sys.exit(EXIT_FAILED)


def _exit_code_for(exc: ReconError) -> int:
    from recon.errors import InvalidJobState, JobNotFound, QueueFull, UnknownJobKind

    return EXIT_USAGE if isinstance(exc, JobNotFound | InvalidJobState | UnknownJobKind | QueueFull) else EXIT_FAILED

