"""The ``recon`` command line: the composition root that wires configuration, database, engine and handlers.

Exit codes (DESIGN §6): 0 done and consistent; 1 done, with items that need review; 2 bad usage, input or
configuration; 3 the run failed. ``--json`` prints one JSON document on stdout; diagnostics go to stderr.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

import click

from psp_adapters.protocol import PspAdapter
from recon.config import EngineConfig, Settings, load_settings
from recon.db.database import Database, connect, upgrade
from recon.db.ledger import LedgerStore
from recon.db.store import JobFilter, JobStore, make_listener
from recon.durations import parse_duration
from recon.engine.client import Client
from recon.engine.jobs import JobState
from recon.engine.retry import RetryPolicy
from recon.engine.watcher import Watcher
from recon.engine.worker import Handlers, Worker
from recon.errors import ConfigError, ReconError, UsageError
from recon.payments.model import Payment, PaymentStatus
from recon.reconcile.config import ReconcileConfig

EXIT_OK, EXIT_REVIEW, EXIT_USAGE, EXIT_FAILED = 0, 1, 2, 3
log = logging.getLogger("recon")


class Duration(click.ParamType):
    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> timedelta:
        if isinstance(value, timedelta):
            return value
        try:
            return parse_duration(str(value), what=f"--{param.name.replace('_', '-')}" if param and param.name else "duration")
        except UsageError as exc:
            self.fail(str(exc).split(": ", 1)[-1], param, ctx)


# --- dead letters and pruning: --since ----------------------------------------------------------------------


class Since(click.ParamType):
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
        self._metrics: Any = None
        self._guard: Any = None  # psp controls (issue 5)

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            settings = load_settings(self._config_path)
            if self._database_url:
                settings = replace(settings, database_url=self._database_url)
            self._settings = settings
        return self._settings

    @property
    def db(self) -> Database:
        if self._db is None:
            self._db = connect(self.settings.database_url, pool_size=self.settings.engine.concurrency + 4)
        return self._db

    @property
    def store(self) -> JobStore:
        return JobStore(self.db)

    def client(self) -> Client:
        return Client(self.store, self.settings)

    @property
    def ledger(self) -> LedgerStore:
        return LedgerStore(self.db)

    @property
    def reconcile_config(self) -> ReconcileConfig:
        return ReconcileConfig.from_table(self.settings.extra.get("reconcile"), source=self.settings.source)

    def psp_names(self) -> tuple[str, ...]:
        from psp_adapters import registry

        return registry.names()

    def adapter(self, name: str) -> PspAdapter:
        """The adapter for PSP ``name``: ``[psp.NAME]`` in the config file (base_url, merchant_account,
        timeouts) over ``RECON_NAME_*`` variables. Keys come only from the environment."""
        if name in self._adapters:
            return self._adapters[name]
        from psp_adapters import registry

        if name not in registry.names():
            raise ConfigError(f"unknown PSP {name!r} (known: {', '.join(registry.names())})")
        settings = registry.settings_from_env(name, os.environ)
        table = dict(self.settings.extra.get("psp", {}).get(name, {}))
        for key in ("api_key", "report_api_key"):
            if key in table:
                raise ConfigError(f"{self.settings.source}: psp.{name}.{key}: keys come from the environment "
                                  f"(RECON_{name.upper()}_{key.upper()}), never from a file")
        settings.update(table)
        try:
            adapter = registry.get_factory(name)(settings)
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"PSP {name!r}: {exc}") from None
        from recon.payments.instrumented import instrument

        adapter = instrument(adapter, recorder=self.metrics)  # PSP latency and 429s (recon.metrics)
        self._adapters[name] = adapter
        return adapter

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
            handlers.register("charge", ChargeHandler(self.ledger, self.adapter, guard=self.guard))
        if "reconcile" in kinds:
            handlers.register("reconcile", ReconcileHandler(self.ledger, self.adapter, config=self.reconcile_config,
                                                            clock=SystemClock(), guard=self.guard))
        for ref in extra:
            _merge_handlers(handlers, _import_ref(ref))
        return handlers


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


# --- db -----------------------------------------------------------------------------------------------------


@cli.group()
def db() -> None:
    """Database schema."""


@db.command("upgrade")
@pass_app
def db_upgrade(app: App) -> None:
    """Apply migrations (idempotent)."""
    upgrade(app.db)
    click.echo(f"database at {app.db.url.render_as_string(hide_password=True)} is up to date")


# --- worker and watcher --------------------------------------------------------------------------------------


@cli.command()
@click.option("--queues", help="Comma-separated queues to work (default: default,charges,reconcile).")
@click.option("--concurrency", type=click.IntRange(1, 512), help="Handler threads in this process.")
@click.option("--burst", is_flag=True, help="Exit when no claimable work is left.")
@click.option("--lease-ttl", type=Duration(), help="Lease TTL, e.g. 30s.")
@click.option("--heartbeat", type=Duration(), help="Heartbeat interval (default: from config).")
@click.option("--drain-timeout", type=Duration(), help="On SIGTERM, how long running jobs may finish.")
@click.option("--poll-interval", type=Duration(), help="Idle polling interval.")
@click.option("--handlers", "handler_refs", multiple=True, metavar="MODULE:ATTR",
              help="Import extra job handlers (a recon.Handlers object); repeatable.")
@click.option("--metrics-port", type=click.IntRange(1, 65535),
              help="Serve the whole pool's Prometheus metrics on 127.0.0.1:PORT (read from the database).")
@pass_app
def worker(app: App, queues: str | None, concurrency: int | None, burst: bool, lease_ttl: timedelta | None,
           heartbeat: timedelta | None, drain_timeout: timedelta | None, poll_interval: timedelta | None,
           handler_refs: tuple[str, ...], metrics_port: int | None) -> None:
    """Claim and run jobs until SIGTERM/SIGINT (or, with --burst, until the queues are empty)."""
    engine = app.settings.engine
    changes: dict[str, Any] = {}
    if concurrency:
        changes["concurrency"] = concurrency
    if lease_ttl is not None:
        changes["lease_ttl_seconds"] = lease_ttl.total_seconds()
        if heartbeat is None and engine.heartbeat_interval_seconds >= lease_ttl.total_seconds():
            changes["heartbeat_interval_seconds"] = lease_ttl.total_seconds() / 3
    if heartbeat is not None:
        changes["heartbeat_interval_seconds"] = heartbeat.total_seconds()
    if drain_timeout is not None:
        changes["drain_timeout_seconds"] = drain_timeout.total_seconds()
    if poll_interval is not None:
        changes["poll_interval_seconds"] = poll_interval.total_seconds()
    engine = replace(engine, **changes)
    engine.validate("options")
    default_queues = ",".join([engine.default_queue, "charges", app.reconcile_config.queue])
    queue_list = [q.strip() for q in (queues or default_queues).split(",") if q.strip()]
    if not queue_list:
        raise UsageError("--queues: no queue named")
    w = Worker(app.store, app.handlers(handler_refs), config=engine, policy=RetryPolicy(app.settings.retry),
               queues=queue_list, queue_caps={q: app.settings.queue(q).concurrency for q in queue_list},
               classify_func=_classify_func(), wakeup_func=make_listener(app.db), observer=app.metrics)
    from recon.db.database import UNSAFE_DISABLE_FENCING

    if UNSAFE_DISABLE_FENCING:
        log.critical("RECON_CHAOS_DISABLE_FENCING=1: fencing is OFF (the chaos suite's planted bug); "
                     "stale workers WILL overwrite results. Never run like this outside tests/chaos.")
    _install_signal_handlers(w.request_stop)
    stop_pruner = _start_pruner(app.store, engine)  # dead letters and pruning
    metrics_server = _serve_metrics(app, metrics_port)
    try:
        stats = w.run(burst=burst)
    finally:
        stop_pruner()
        if metrics_server is not None:
            metrics_server.close()
    click.echo(json.dumps({"worker": w.worker_id, **stats.to_dict()}), err=True)


def _serve_metrics(app: App, port: int | None) -> Any:
    """The pool's metrics endpoint (recon.metrics.serve), or None without --metrics-port."""
    if port is None:
        return None
    from recon.metrics import serve

    return serve(app.db, port=port)


def _classify_func() -> Callable[[BaseException], Any]:
    from recon.classify import classify

    return classify


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


@cli.command()
@click.option("--interval", type=Duration(), help="Default: engine.watcher_interval_seconds.")
@click.option("--once", is_flag=True, help="Run one pass, print what it did, and exit.")
@click.option("--json", "as_json", is_flag=True)
@pass_app
def watch(app: App, interval: timedelta | None, once: bool, as_json: bool) -> None:
    """The stuck watcher alone: expired leases back to the queue (or dead at max attempts)."""
    watcher = Watcher(app.store)
    if once:
        r = watcher.run_once()
        doc = {"retryable": r.retryable, "dead": r.dead, "canceled": r.canceled}
        click.echo(json.dumps(doc) if as_json else
                   f"rescued {r.total} expired leases: {len(r.retryable)} retryable, {len(r.dead)} dead, "
                   f"{len(r.canceled)} canceled")
        return
    stop = threading.Event()
    _install_signal_handlers(stop.set)
    seconds = interval.total_seconds() if interval else app.settings.engine.watcher_interval_seconds
    watcher.run_forever(stop, interval=seconds)


# --- jobs ---------------------------------------------------------------------------------------------------


@cli.group()
def jobs() -> None:
    """Inspect and manage jobs."""


@jobs.command("list")
@click.option("--state", type=click.Choice([s.value for s in JobState]))
@click.option("--queue")
@click.option("--kind")
@click.option("--error-kind", help="Only jobs whose last error is of this kind (e.g. validation, bug).")
@click.option("--since", type=Since(), metavar="DUR|ISO",
              help="Only jobs finished since: a duration back from now (2h) or an ISO date/datetime.")
@click.option("--limit", type=click.IntRange(1), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@pass_app
def jobs_list(app: App, state: str | None, queue: str | None, kind: str | None, error_kind: str | None,
              since: timedelta | datetime | None, limit: int, as_json: bool) -> None:
    """List jobs, oldest first. The dead-letter set: --state dead."""
    filters = _job_filter(app, queue=queue, kind=kind, error_kind=error_kind, since=since)
    found: list[Any] = []
    while len(found) < limit:
        want = min(limit - len(found), 500)
        after = found[-1].id if found else 0
        page = app.store.list_jobs_filtered(filters=filters, state=state, after_id=after, limit=want)
        found.extend(page)
        if len(page) < want:
            break
    if as_json:
        click.echo(json.dumps({"jobs": [j.to_dict() for j in found]}))
        return
    from recon.render import jobs_table

    jobs_table(found)


@jobs.command("show")
@click.argument("job_id", type=int)
@click.option("--json", "as_json", is_flag=True)
@pass_app
def jobs_show(app: App, job_id: int, as_json: bool) -> None:
    """One job with its attempt history."""
    client = app.client()
    job, attempts = client.get(job_id), client.attempts(job_id)
    replays = app.store.replays(job_id)  # dead-letter replays, between the attempts they followed
    if as_json:
        click.echo(json.dumps({"job": job.to_dict(), "attempts": [a.to_dict() for a in attempts],
                               "replays": [r.to_dict() for r in replays]}))
        return
    from recon.render import job_detail

    job_detail(job, attempts, replays)


@jobs.command("retry")
@click.argument("job_id", type=int)
@pass_app
def jobs_retry(app: App, job_id: int) -> None:
    """Make a dead, canceled or waiting job runnable now."""
    app.client().retry(job_id)
    click.echo(f"job {job_id} is runnable")


@jobs.command("cancel")
@click.argument("job_id", type=int)
@pass_app
def jobs_cancel(app: App, job_id: int) -> None:
    """Cancel a job: at once if it is not running, else through its next heartbeat."""
    result = app.client().cancel(job_id)
    click.echo(f"job {job_id} canceled" if result == "canceled"
               else f"job {job_id} is running: cancel requested, its worker is told at the next heartbeat")


# --- dead letters and pruning: jobs replay, jobs prune ------------------------------------------------------

REPLAY_BATCH_DEFAULT = 500


@jobs.command("replay")
@click.option("--queue")
@click.option("--kind")
@click.option("--error-kind", help="Only jobs that died of this error kind (e.g. psp_unavailable, bug).")
@click.option("--since", type=Since(), metavar="DUR|ISO",
              help="Only jobs that died since: a duration back from now (2h) or an ISO date/datetime.")
@click.option("--limit", type=click.IntRange(1), help="At most this many jobs (default: every match).")
@click.option("--attempts", "budget", type=click.IntRange(1),
              help="Fresh attempts per job (default: engine.default_max_attempts).")
@click.option("--batch", type=click.IntRange(1, 10_000), default=REPLAY_BATCH_DEFAULT, show_default=True,
              help="Jobs per transaction.")
@click.option("--dry-run", is_flag=True, help="List the jobs that would be replayed; change nothing.")
@click.option("--json", "as_json", is_flag=True)
@pass_app
def jobs_replay(app: App, queue: str | None, kind: str | None, error_kind: str | None,
                since: timedelta | datetime | None, limit: int | None, budget: int | None, batch: int,
                dry_run: bool, as_json: bool) -> None:
    """Move dead jobs (the dead-letter set) back to runnable now, with fresh attempts.

    Attempts are kept (they are the fencing token): max_attempts becomes attempts + --attempts. Each replay
    is recorded in the job's history (recon jobs show). A job whose unique key an unfinished job holds
    stays dead and is reported as skipped. Batches commit one by one; running it again continues.
    """
    from recon.render import replay_summary

    filters = _job_filter(app, queue=queue, kind=kind, error_kind=error_kind, since=since)
    budget = budget or app.settings.engine.default_max_attempts
    run = _replay(app.store, filters, limit=limit, budget=budget, batch=batch, dry_run=dry_run)
    if as_json:
        doc: dict[str, Any] = {"dry_run": dry_run, "attempts_added": budget, "batches": run["batches"],
                               "skipped": run["skipped"]}
        if dry_run:
            doc |= {"would_replay": len(run["replayed"]), "jobs": [j.to_dict() for j in run["jobs"]]}
        else:
            doc |= {"replayed": len(run["replayed"]), "job_ids": run["replayed"]}
        click.echo(json.dumps(doc))
        return
    replay_summary(run["jobs"], replayed=run["replayed"], skipped=run["skipped"], budget=budget,
                   dry_run=dry_run)


def _job_filter(app: App, *, queue: str | None, kind: str | None, error_kind: str | None,
                since: timedelta | datetime | None) -> JobFilter:
    """``--since`` as a duration counts back from the database clock (the clock finished_at was set by)."""
    if isinstance(since, timedelta):
        since = app.store.db_now() - since
    return JobFilter(queue=queue, kind=kind, error_kind=error_kind, finished_since=since)


def _replay(store: JobStore, filters: JobFilter, *, limit: int | None, budget: int, batch: int,
            dry_run: bool) -> dict[str, Any]:
    """Replay batch after batch along the id cursor until the matches (or ``limit``) run out."""
    run: dict[str, Any] = {"jobs": [], "replayed": [], "skipped": [], "batches": 0}
    after, keys, operator = 0, frozenset[str](), _operator()
    while limit is None or len(run["replayed"]) < limit:
        want = batch if limit is None else min(batch, limit - len(run["replayed"]))
        b = store.replay_dead(filters=filters, after_id=after, limit=want, budget=budget, taken_keys=keys,
                              replayed_by=operator, dry_run=dry_run)
        run["batches"] += 1 if b.jobs else 0
        if dry_run:  # the listing; a real run keeps only ids (it may move millions)
            picked = set(b.replayed)
            run["jobs"].extend(j for j in b.jobs if j.id in picked)
        run["replayed"].extend(b.replayed)
        run["skipped"].extend(b.skipped)
        if len(b.jobs) < want:
            break
        after, keys = b.last_id, b.keys
    return run


def _operator() -> str:
    """Who replays, for the job's history: user@host."""
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except (OSError, KeyError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


@jobs.command("prune")
@click.option("--older-than", type=Duration(), required=True,
              help="Delete jobs that finished (succeeded, dead, canceled) longer ago than this (7d; 0: all).")
@click.option("--batch", type=click.IntRange(1, 100_000), default=1000, show_default=True,
              help="Jobs per transaction.")
@click.option("--dry-run", is_flag=True, help="Count what would be deleted; delete nothing.")
@click.option("--json", "as_json", is_flag=True)
@pass_app
def jobs_prune(app: App, older_than: timedelta, batch: int, dry_run: bool, as_json: bool) -> None:
    """Delete finished jobs older than --older-than with their attempt history, a batch per transaction.

    Unfinished jobs are never touched; it is safe while workers run. Ctrl-C stops between batches.
    """
    from recon.engine.pruner import Pruner
    from recon.render import prune_summary

    doc: dict[str, Any] = {"dry_run": dry_run, "older_than_seconds": older_than.total_seconds()}
    if dry_run:
        by_state = app.store.count_prunable(older_than=older_than.total_seconds())
        doc |= {"would_delete": sum(by_state.values()), "by_state": by_state}
    else:
        stop = threading.Event()
        _install_signal_handlers(stop.set)
        result = Pruner(app.store, older_than=older_than, batch=batch).run_once(stop)
        doc |= {"deleted": result.jobs, "attempts_deleted": result.attempts, "batches": result.batches,
                "seconds": round(result.seconds, 3), "interrupted": stop.is_set()}
    if as_json:
        click.echo(json.dumps(doc))
    else:
        prune_summary(doc)


def _start_pruner(store: JobStore, engine: EngineConfig) -> Callable[[], None]:
    """With engine.prune_older_than set, prune in a daemon thread next to the pool; returns its stop."""
    from recon.engine.pruner import Pruner

    age = engine.prune_after
    if age is None:
        return lambda: None
    stop = threading.Event()
    pruner = Pruner(store, older_than=age, batch=engine.prune_batch_size)
    thread = threading.Thread(target=pruner.run_forever, args=(stop,), name="recon-pruner", daemon=True,
                              kwargs={"interval": engine.prune_interval_seconds})
    thread.start()
    log.info("pruner: finished jobs older than %s are deleted every %ss", age, engine.prune_interval_seconds)

    def halt() -> None:
        stop.set()
        thread.join(timeout=5)  # stops between batches; a batch in flight at exit rolls back

    return halt


# --- end of dead letters and pruning ------------------------------------------------------------------------


# --- payments -----------------------------------------------------------------------------------------------


@cli.group()
def payments() -> None:
    """Import, show and list payments."""


@payments.command("import")
@click.argument("path", metavar="FILE.csv", type=click.Path(exists=True, dir_okay=False))
@click.option("--merchant-account", default="default", show_default=True,
              help="For rows that name no merchant_account.")
@click.option("--no-charge", is_flag=True, help="Record the payments only; queue no charge jobs.")
@click.option("--json", "as_json", is_flag=True)
@pass_app
def payments_import(app: App, path: str, merchant_account: str, no_charge: bool, as_json: bool) -> None:
    """Import payments from a CSV file, all or nothing: with any bad row, nothing is imported.

    Columns: merchant_reference, amount (decimal, e.g. 12.34), currency (ISO-4217), psp; optional
    created_at (ISO-8601, no offset means UTC) and merchant_account.
    """
    from recon.payments.importer import ImportRejected, read_payments

    if not merchant_account.strip():
        raise UsageError("--merchant-account: must not be empty")
    try:
        new = read_payments(path, psp_names=app.psp_names(), merchant_account=merchant_account.strip(),
                            existing_func=app.ledger.existing_references)
    except ImportRejected as exc:
        for line in exc.lines():  # the first problem first, then the others and a count
            click.echo(f"recon: {line}", err=True)
        sys.exit(EXIT_USAGE)  # not ctx.exit: main() runs click with standalone_mode=False
    ids = app.ledger.create(new, charge=not no_charge)
    queued = 0 if no_charge else len(ids)
    if as_json:
        click.echo(json.dumps({"file": path, "imported": len(ids), "charge_jobs_queued": queued}))
    else:
        click.echo(f"imported {len(ids)} payments ({queued} charge jobs queued)")


@payments.command("show")
@click.argument("reference", metavar="REF")
@click.option("--json", "as_json", is_flag=True)
@pass_app
def payments_show(app: App, reference: str, as_json: bool) -> None:
    """One payment, by merchant reference, with its event history."""
    payment = app.ledger.by_reference(reference)
    if payment is None:
        raise UsageError(f"payment {reference} not found")
    events = app.ledger.events(payment.id)
    if as_json:
        click.echo(json.dumps({"payment": _payment_doc(payment), "events": [e.to_dict() for e in events]}))
        return
    from recon.render import payment_detail

    payment_detail(payment, events)


@payments.command("list")
@click.option("--status", type=click.Choice([s.value for s in PaymentStatus]))
@click.option("--psp")
@click.option("--limit", type=click.IntRange(1), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@pass_app
def payments_list(app: App, status: str | None, psp: str | None, limit: int, as_json: bool) -> None:
    """List payments, oldest first."""
    from itertools import islice

    found = list(islice(app.ledger.iter_payments(status=status, psp=psp, page=min(limit, 500)), limit))
    if as_json:
        click.echo(json.dumps({"payments": [_payment_doc(p) for p in found]}))
        return
    from recon.render import payments_table

    payments_table(found)


def _payment_doc(payment: Payment) -> dict[str, Any]:
    from recon.payments.money import format_amount

    return {**payment.to_dict(), "amount_formatted": format_amount(payment.amount, payment.currency)}


# --- stats --------------------------------------------------------------------------------------------------


@cli.command()
@click.option("--window", type=Duration(), default="1h", show_default=True,
              help="Window for attempt outcome counts (retries, deaths, lease expirations).")
@click.option("--live-window", type=Duration(), default="30s", show_default=True,
              help="A worker not seen for this long is not live (utilisation counts live workers only).")
@click.option("--json", "as_json", is_flag=True)
@pass_app
def stats(app: App, window: timedelta, live_window: timedelta, as_json: bool) -> None:
    """Queue depth, oldest runnable age, retries, deaths, lease expirations, durations, workers, PSPs and
    money at risk."""
    from recon.metrics import stats_extension
    from recon.render import pool_tables, stats_document, stats_table

    raw = app.store.stats(window=window)
    doc = stats_document(raw, window=window)
    doc.update(stats_extension(app.store.pool_snapshot(workers_within=None),
                               app.store.attempt_stats(since=raw["now"] - window), app.ledger.money_at_risk(),
                               window=window, live_window=live_window.total_seconds()))
    # --- psp controls (issue 5): pause, cool-down and breaker per PSP, next to the PSP latency section -----
    from recon.payments.guard import status_document

    doc["psp_controls"] = status_document(app.control_store, app.guard_config, app.psp_names())["psps"]
    # --- end of psp controls ------------------------------------------------------------------------------
    if as_json:
        click.echo(json.dumps(doc))
    else:
        stats_table(doc)
        pool_tables(doc)
        from recon.render import psp_controls_table  # psp controls (issue 5)

        psp_controls_table(doc["psp_controls"])


# --- sweep --------------------------------------------------------------------------------------------------


@cli.command()
@click.option("--older-than", type=Duration(), default="15m", show_default=True,
              help="Payments not updated for this long are stale.")
@click.option("--psp", help="Only this PSP.")
@click.option("--limit", type=click.IntRange(1), help="At most this many payments.")
@click.option("--dry-run", is_flag=True, help="Show what would be checked; enqueue nothing.")
@click.option("--enqueue-only", is_flag=True, help="Enqueue the reconcile jobs and leave them to the workers.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False),
              help="Write every checked payment with its outcome (CSV, or JSON for *.json).")
@click.option("--concurrency", type=click.IntRange(1, 512), help="Reconcile jobs in flight (default: config).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def sweep(ctx: click.Context, older_than: timedelta, psp: str | None, limit: int | None, dry_run: bool,
          enqueue_only: bool, report_path: str | None, concurrency: int | None, as_json: bool) -> None:
    """Reconcile stale unfinished payments with their PSP and print what happened."""
    from recon.reconcile import sweep as sw

    app: App = ctx.obj
    if psp is not None and psp not in app.psp_names():
        raise UsageError(f"--psp: unknown PSP {psp!r} (known: {', '.join(app.psp_names())})")
    options = sw.SweepOptions(older_than=older_than, psp=psp, limit=limit)
    if dry_run:
        from recon.render import sweep_dry_run

        candidates = list(sw.iter_candidates(app.ledger, options))
        if as_json:
            click.echo(json.dumps({"dry_run": True, "would_check": len(candidates),
                                   "payments": [p.to_dict() for p in candidates]}))
        else:
            sweep_dry_run(candidates)
        return
    rc = app.reconcile_config
    selection = sw.enqueue(app.ledger, app.client(), options, queue=rc.queue)
    if not enqueue_only and len(selection):
        _run_reconcile_worker(app, len(selection), concurrency=concurrency, show_progress=not as_json)
    writer = sw.ReportWriter(report_path) if report_path else None
    summary = sw.summarise(app.ledger, app.store, selection, on_item=writer.item if writer else None)
    if writer:
        writer.close(summary)
    doc = {"enqueue_only": enqueue_only, **summary.to_dict()}
    if as_json:
        click.echo(json.dumps(doc))
    else:
        from recon.render import sweep_summary

        sweep_summary(doc)
    ctx.exit(summary.exit_code)


def _run_reconcile_worker(app: App, total: int, *, concurrency: int | None, show_progress: bool) -> None:
    engine = app.settings.engine
    if concurrency:
        engine = replace(engine, concurrency=concurrency)
    queue = app.reconcile_config.queue
    worker = Worker(app.store, app.handlers(kinds=("reconcile",)), config=engine,
                    policy=RetryPolicy(app.settings.retry), queues=[queue],
                    queue_caps={queue: app.settings.queue(queue).concurrency},
                    classify_func=_classify_func(), wakeup_func=None, observer=app.metrics)
    _install_signal_handlers(worker.request_stop)
    from recon.render import progress_while

    progress_while(lambda: worker.run(burst=True), lambda: sum(worker.stats.outcomes.values()), total=total,
                   label="reconciling", enabled=show_progress)


# --- report -------------------------------------------------------------------------------------------------


@cli.command()
@click.option("--psp", required=True, help="The PSP whose settlement listing is matched.")
@click.option("--since", required=True,
              help="Period start, inclusive: 2026-11-01 or an ISO datetime (UTC if no offset).")
@click.option("--until", required=True, help="Period end, exclusive; same forms as --since.")
@click.option("--format", "fmt", type=click.Choice(["csv", "json"]), default="csv", show_default=True)
@click.option("--output", type=click.Path(dir_okay=False),
              help="Write the report here (replaced only when complete), not stdout; totals go to stderr.")
@click.pass_context
def report(ctx: click.Context, psp: str, since: str, until: str, fmt: str, output: str | None) -> None:
    """Match the PSP's settlement listing for [SINCE, UNTIL) against our payments. Never heals.

    One row per item: matched, expected, missing_locally, missing_at_psp, amount_mismatch, currency_mismatch,
    status_mismatch, duplicate_at_psp (amounts in minor units). Failed payments the PSP does not list are
    consistent and not itemised. Exit 0: all matched or expected; 1: discrepancies; 2: bad usage; 3: the PSP
    listing (or the database) failed.
    """
    from psp_adapters.errors import PspError
    from recon.reconcile import settlement as st

    app: App = ctx.obj
    start, end = st.parse_bound(since, option="--since"), st.parse_bound(until, option="--until")
    if start >= end:
        raise UsageError(f"--since {since!r} must be before --until {until!r}")
    if output and not os.path.isdir(os.path.dirname(os.path.abspath(output))):
        raise UsageError(f"--output {output!r}: the directory does not exist")
    adapter = app.adapter(psp)
    try:
        result = _write_report(app, adapter, psp=psp, since=start, until=end, fmt=fmt, output=output)
    except PspError as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        click.echo(f"recon: report: the {psp} settlement listing failed: {type(exc).__name__}: {first}",
                   err=True)
        # sys.exit, not ctx.exit: main() runs click with standalone_mode=False, where ctx.exit's code is
        # returned by cli.main() and dropped (main then exits 0)
        sys.exit(EXIT_FAILED)
    if output:
        for line in st.summary_lines(result, psp=psp, since=start, until=end):
            click.echo(line, err=True)
    sys.exit(EXIT_OK if result.consistent else EXIT_REVIEW)


def _write_report(app: App, adapter: PspAdapter, *, psp: str, since: Any, until: Any, fmt: str,
                  output: str | None) -> Any:
    """Run the report into stdout, or into a temporary file renamed over ``output`` once complete."""
    import tempfile
    from typing import TextIO

    from recon.db.report_store import ReportStore
    from recon.reconcile import settlement as st

    tmp: str | None = None
    out: TextIO
    if output:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(output)), prefix=".recon-report-")
        out = os.fdopen(fd, "w", encoding="utf-8", newline="")
    else:
        out = sys.stdout
    try:
        writer = st.JsonWriter(out, psp=psp, since=since, until=until) if fmt == "json" else st.CsvWriter(out)
        result = st.run_report(ReportStore(app.db), adapter, writer, psp=psp, since=since, until=until,
                               settlement_window=app.reconcile_config.settlement_window)
        out.flush()
    except BaseException:
        if tmp:
            out.close()
            os.unlink(tmp)
        raise
    if tmp and output:
        out.close()
        umask = os.umask(0o022)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; the report gets the mode any new file would
        os.replace(tmp, output)
    return result


# --- demo ---------------------------------------------------------------------------------------------------


@cli.command()
@click.option("--payments", "count", type=click.IntRange(10, 5000), default=300, show_default=True)
@click.option("--dir", "directory", type=click.Path(file_okay=False),
              help="Keep the demo's database and sandbox state here (default: a temporary directory).")
@click.pass_context
def demo(ctx: click.Context, count: int, directory: str | None) -> None:
    """End to end on SQLite and the PSP sandbox with faults on: charge, lose answers, heal, prove no double charge."""
    from recon.demo import run_demo

    ctx.exit(run_demo(payments=count, directory=directory, say=click.echo))


# --- psp controls (issue 5): recon psp pause | resume | status ----------------------------------------------


@cli.group()
def psp() -> None:
    """Per-PSP controls: pause and resume traffic; see cool-downs and circuit breakers."""


def _known_psp(app: App, name: str) -> None:
    if name not in app.psp_names():
        raise UsageError(f"unknown PSP {name!r} (known: {', '.join(app.psp_names())})")


def _operator() -> str:
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


@psp.command("pause")
@click.argument("name")
@click.option("--reason", help="Why; shown by `recon psp status`.")
@click.option("--by", "by", help="Who pauses (default: USER@HOST).")
@pass_app
def psp_pause(app: App, name: str, reason: str | None, by: str | None) -> None:
    """Stop all traffic to PSP NAME without stopping workers: its jobs wait (snoozed, no attempt spent)
    until `recon psp resume NAME`. Running workers see it within a quarter of a second."""
    from recon.payments import guard

    _known_psp(app, name)
    who = by or _operator()
    guard.pause(app.control_store, name, by=who, reason=reason)
    click.echo(f"psp {name} paused by {who}" + (f": {reason}" if reason else ""))


@psp.command("resume")
@click.argument("name")
@pass_app
def psp_resume(app: App, name: str) -> None:
    """Let traffic to PSP NAME flow again; the jobs the pause put to sleep are due at once."""
    from recon.payments import guard

    _known_psp(app, name)
    was_paused, woken = guard.resume(app.control_store, name)
    click.echo(f"psp {name} resumed; {woken} waiting jobs are due now" if was_paused
               else f"psp {name} was not paused")


@psp.command("status")
@click.option("--json", "as_json", is_flag=True)
@pass_app
def psp_status(app: App, as_json: bool) -> None:
    """Pause, 429 cool-down, circuit breaker and rate limit of every PSP."""
    from recon.payments import guard

    doc = guard.status_document(app.control_store, app.guard_config, app.psp_names())
    if as_json:
        click.echo(json.dumps(doc))
        return
    from recon.render import psp_controls_table

    psp_controls_table(doc["psps"], at=doc["at"])


# --- end of psp controls -------------------------------------------------------------------------------------


# --- the PSP sandbox ----------------------------------------------------------------------------------------


def _sandbox_fault_options(func: Callable[..., Any]) -> Callable[..., Any]:
    from psp_adapters.sandbox.faults import FAULT_FLAGS

    for flag in reversed(FAULT_FLAGS):
        func = click.option(flag.flag, type=flag.type, default=None, help=flag.help)(func)
    return func


@cli.command("psp-sandbox")
@click.option("--port", type=click.IntRange(0, 65535), default=8787, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="Loopback only, unless you mean it.")
@click.option("--state-file", type=click.Path(dir_okay=False), default="psp-sandbox.db", show_default=True,
              help="SQLite file holding the sandbox's payments; survives restarts.")
@click.option("--api-key", envvar="RECON_SANDBOX_API_KEY", help="Require this Bearer key (default: none).")
@_sandbox_fault_options
def psp_sandbox(port: int, host: str, state_file: str, api_key: str | None, **faults: Any) -> None:
    """The local PSP simulator, with fault injection (also changeable at run time: POST /_admin/faults)."""
    from psp_adapters.sandbox.faults import Faults
    from psp_adapters.sandbox.server import serve_forever

    try:
        parsed = Faults.from_options(**faults)
    except ValueError as exc:
        raise UsageError(f"psp-sandbox: {exc}") from None
    stop = threading.Event()
    _install_signal_handlers(stop.set)
    serve_forever(state_file, host=host, port=port, faults=parsed, api_key=api_key, stop=stop,
                  on_ready_func=lambda url: click.echo(f"PSP sandbox listening on {url} (state in {state_file})"))


# --- entry point --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> NoReturn:
    try:
        # standalone_mode=False: click returns ctx.exit(n)'s code instead of exiting, and lets our errors through
        rc = cli.main(args=argv, prog_name="recon", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(EXIT_FAILED)
    except click.ClickException as exc:
        exc.show()
        sys.exit(EXIT_USAGE)
    except (ConfigError, UsageError) as exc:
        click.echo(f"recon: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    except ReconError as exc:
        click.echo(f"recon: {exc}", err=True)
        sys.exit(_exit_code_for(exc))
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    sys.exit(rc if isinstance(rc, int) else EXIT_OK)


def _exit_code_for(exc: ReconError) -> int:
    from recon.errors import InvalidJobState, JobNotFound, QueueFull, UnknownJobKind

    return EXIT_USAGE if isinstance(exc, JobNotFound | InvalidJobState | UnknownJobKind | QueueFull) else EXIT_FAILED

