"""`recon db upgrade`, `recon worker`, `recon watch`, `recon stats`: running and watching the engine."""

from __future__ import annotations

import json
import logging
import threading
from datetime import timedelta
from typing import TYPE_CHECKING

import click

from recon.app import App
from recon.engine.periodic import Periodic
from recon.engine.watcher import Watcher
from recon.errors import UsageError
from recon.overview import stats_document
from recon.params import Duration, freeze_heap, install_signal_handlers, say
from recon.redact import has_card_number
from recon.render.stats import (
    operators_line,
    payouts_lines,
    pool_tables,
    psp_controls_table,
    review_lines,
    stats_table,
)

if TYPE_CHECKING:
    from recon.metrics import MetricsServer

log = logging.getLogger("recon")


@click.group()
def db() -> None:
    """Database schema."""


@db.command("upgrade")
@click.pass_obj
def db_upgrade(app: App) -> None:
    """Apply migrations (idempotent)."""
    database = app.upgrade()
    say(f"database at {database.url.render_as_string(hide_password=True)} is up to date")


@click.command()
@click.option("--queues", help="Comma-separated queues to work (default: default,charges,reconcile,webhooks).")
@click.option("--concurrency", type=click.IntRange(1, 512),
              help="Handler threads in this process (with [engine] autosize, the default: the least).")
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
@click.pass_obj
def worker(app: App, queues: str | None, concurrency: int | None, prefetch: int | None, burst: bool,
           lease_ttl: timedelta | None,
           heartbeat: timedelta | None, drain_timeout: timedelta | None, poll_interval: timedelta | None,
           handler_refs: tuple[str, ...], metrics_port: int | None) -> None:
    """Claim and run jobs until SIGTERM/SIGINT (or, with --burst, until the queues are empty)."""
    engine = app.engine_config(concurrency=concurrency, prefetch=prefetch, lease_ttl=lease_ttl, heartbeat=heartbeat,
                               drain_timeout=drain_timeout, poll_interval=poll_interval)
    handlers = app.handlers(handler_refs)
    # without --queues: the default queue (the schedules' jobs) and every queue a handler declares
    default_queues = ",".join(dict.fromkeys([engine.default_queue, *handlers.queues()]))
    queue_list = [q.strip() for q in (queues or default_queues).split(",") if q.strip()]
    if not queue_list:
        raise UsageError("--queues: no queue named")
    if any(has_card_number(q) for q in queue_list):  # it would be stored (workers.queues) and printed
        raise UsageError("--queues: a queue name holds a card number; recon stores none")
    if {app.payments_config.queue, app.reconcile_config.queue} & set(queue_list):
        # before any work: a worker never claims a payment job for a PSP it cannot call
        app.require_psps(set(app.psp_names()) & app.payments.psps_unfinished())
    for schedule in app.schedules:  # before any work: every slot's job can be run by this pool's handlers
        if schedule.kind not in handlers.kinds():
            raise UsageError(f"schedule.{schedule.name}: kind {schedule.kind!r} has no handler in this worker "
                             f"(known: {', '.join(sorted(handlers.kinds()))}; add it with --handlers)")
    w = app.worker(queue_list, handlers=handlers, engine=engine, wakeups=True)
    install_signal_handlers(w.request_stop)
    metrics_server = _serve_metrics(app, metrics_port)
    freeze_heap()
    try:
        stats = w.run(burst=burst)
    finally:
        if metrics_server is not None:
            metrics_server.close()
    click.echo(json.dumps({"worker": w.worker_id, **stats.to_dict()}), err=True)


def _serve_metrics(app: App, port: int | None) -> MetricsServer | None:
    """The pool's metrics endpoint (recon.metrics.serve), or None without --metrics-port."""
    if port is None:
        return None
    from recon.metrics import serve

    return serve(app.db, port=port, review_config=app.review_config)


@click.command()
@click.option("--interval", type=Duration(), help="Default: engine.watcher_interval_seconds.")
@click.option("--once", is_flag=True, help="Run one pass, print what it did, and exit.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def watch(app: App, interval: timedelta | None, once: bool, as_json: bool) -> None:
    """The stuck watcher alone: expired leases back to the queue (or dead at max attempts)."""
    watcher = Watcher(app.jobs)
    if once:
        r = watcher.run_once()
        doc = {"retryable": r.retryable, "dead": r.dead, "canceled": r.canceled}
        if as_json:
            click.echo(json.dumps(doc))
        else:
            say(f"rescued {r.total} expired leases: {len(r.retryable)} retryable, {len(r.dead)} dead, "
                f"{len(r.canceled)} canceled")
        return
    stop = threading.Event()
    install_signal_handlers(stop.set)
    seconds = interval.total_seconds() if interval else app.settings.engine.watcher_interval_seconds
    Periodic("watcher", watcher.run_once, interval=seconds).run(stop)


@click.command()
@click.option("--window", type=Duration(), default="1h", show_default=True,
              help="Window for attempt outcome counts (retries, deaths, lease expirations).")
@click.option("--live-window", type=Duration(), default="30s", show_default=True,
              help="A worker not seen for this long is not live (utilisation counts live workers only).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def stats(app: App, window: timedelta, live_window: timedelta, as_json: bool) -> None:
    """Queue depth, oldest runnable age, retries, deaths, lease expirations, durations, workers, PSPs and
    money at risk."""
    doc = stats_document(app, window=window, live_window=live_window)
    if as_json:
        click.echo(json.dumps(doc))
    else:
        stats_table(doc)
        pool_tables(doc)
        psp_controls_table(doc["psp_controls"])
        review_lines(doc)
        payouts_lines(doc)
        operators_line(doc)
