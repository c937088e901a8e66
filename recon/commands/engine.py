"""`recon db upgrade`, `recon worker`, `recon watch`, `recon stats`: running and watching the engine."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import click

from recon.cli import (  # the composition root's shared pieces
    App,
    Duration,
    _classify_func,
    _install_signal_handlers,
    cli,
    log,
    pass_app,
)
from recon.config import EngineConfig
from recon.db.database import upgrade
from recon.db.jobs_store import JobStore, make_listener
from recon.db.pool_store import PoolStore
from recon.engine.retry import RetryPolicy
from recon.engine.watcher import Watcher
from recon.engine.worker import Worker
from recon.errors import UsageError

# --- db -----------------------------------------------------------------------------------------------------


@cli.group()
def db() -> None:
    """Database schema."""


@db.command("upgrade")
@pass_app
def db_upgrade(app: App) -> None:
    """Apply migrations (idempotent)."""
    app.check_schema = False
    upgrade(app.db)
    click.echo(f"database at {app.db.url.render_as_string(hide_password=True)} is up to date")


# --- worker and watcher --------------------------------------------------------------------------------------


@cli.command()
@click.option("--queues", help="Comma-separated queues to work (default: default,charges,reconcile).")
@click.option("--concurrency", type=click.IntRange(1, 512), help="Handler threads in this process.")
@click.option("--prefetch", type=click.IntRange(0, 4096),
              help="Jobs claimed beyond the free threads (short jobs: e.g. the concurrency; default 0).")
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
def worker(app: App, queues: str | None, concurrency: int | None, prefetch: int | None, burst: bool,
           lease_ttl: timedelta | None,
           heartbeat: timedelta | None, drain_timeout: timedelta | None, poll_interval: timedelta | None,
           handler_refs: tuple[str, ...], metrics_port: int | None) -> None:
    """Claim and run jobs until SIGTERM/SIGINT (or, with --burst, until the queues are empty)."""
    engine = app.settings.engine
    changes: dict[str, Any] = {}
    if concurrency:
        changes["concurrency"] = concurrency
    if prefetch is not None:
        changes["prefetch"] = prefetch
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
    if {"charges", app.reconcile_config.queue} & set(queue_list):
        # before any work: a worker never claims a payment job for a PSP it cannot call
        app.require_psps(set(app.psp_names()) & app.ledger.psps_unfinished())
    w = Worker(app.store, app.handlers(handler_refs), config=engine, policy=RetryPolicy(app.settings.retry),
               queues=queue_list, queue_caps={q: app.settings.queue(q).concurrency for q in queue_list},
               classify_func=_classify_func(), wakeup_func=make_listener(app.db), observer=app.metrics)
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
    pool = PoolStore(app.db)
    doc.update(stats_extension(pool.pool_snapshot(workers_within=None),
                               pool.attempt_stats(since=raw["now"] - window), app.ledger.money_at_risk(),
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
