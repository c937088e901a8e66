"""The webhook endpoints: verify, store, answer. Nothing else happens in the request.

``POST {path}`` for every PSP with webhooks (recon.webhooks.config: ``[webhooks.NAME] path``, default
``/webhooks/NAME``); the intake names no PSP. A request is read up to ``max_body_bytes`` (a larger one is refused
with 413 before the rest is read, ``Content-Length`` first), verified by its PSP's receiver
(``psp_adapters.protocol.WebhookReceiver``: psp_adapters/<name>/webhook.py), and its events are stored with one
job each in one transaction (recon.db.webhook_store). The answer goes out after that commit and before any PSP
call: the receiver's ``accepted`` (Stripe 200 ``{"received": true}``, Adyen ``[accepted]``); a redelivery gets
the same answer and stores nothing. A rejected request (no or bad signature, stale timestamp, wrong basic auth,
malformed body) gets 400 (401 for ``unauthorized``), stores nothing, is counted in ``recon_webhooks_total`` and
logged in one line without the payload. A PSP whose secret is not configured has no receiver: 404. The database
unavailable (no primary reachable: a failover) or the queue full: 503, so the PSP delivers again later (both
PSPs retry non-2xx answers); never a 2xx for an event no commit holds.

On PostgreSQL, for a queue without ``max_depth`` (the default), the requests' events go through a group
commit (``GroupWriter``): one task on the event loop, with an asyncio connection of its own, takes every
request waiting, stores all their events and jobs in one autocommit statement (``WebhookStore.intake_batch``:
one round trip, one commit) and answers each request once that commit holds its events. With a
``max_depth``, and on SQLite, each request is its own transaction (``WebhookStore.intake``: the advisory
lock and the depth count that make QueueFull exact), run in the thread pool.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from functools import partial

from prometheus_client.core import CounterMetricFamily, Metric
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from psp_adapters.errors import WebhookRejected
from psp_adapters.protocol import WebhookEvent
from recon.db.webhook_store import WebhookStore
from recon.errors import DatabaseUnavailable, QueueFull, ReconError
from recon.webhook_rows import StoredEvent as Stored
from recon.webhooks.config import WebhookConfig

log = logging.getLogger(__name__)


class WebhookCounts:
    """Requests per PSP and outcome (accepted, duplicate, ignored, rejected reasons, too_large, unavailable),
    this process's: the Prometheus collector of ``recon serve``'s ``/metrics``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter[tuple[str, str]] = Counter()

    def add(self, psp: str, outcome: str, n: int = 1) -> None:
        with self._lock:
            self.counts[(psp, outcome)] += n

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily("recon_webhooks", "Webhook events and requests by PSP and outcome: accepted "
                                     "(stored), duplicate, ignored (no payment news), and requests refused: "
                                     "no_signature, bad_signature, stale_timestamp, unauthorized, malformed, "
                                     "too_large, unavailable.", labels=["psp", "outcome"])
        with self._lock:
            items = sorted(self.counts.items())
        for (psp, outcome), n in items:
            family.add_metric([psp, outcome], float(n))
        yield family


class Intake:
    def __init__(self, store: WebhookStore, config: WebhookConfig, *, max_attempts: int, max_depth: int = 0,
                 counts: WebhookCounts | None = None, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.config = config
        self.max_attempts = max_attempts
        self.max_depth = max_depth
        self.counts = counts or WebhookCounts()
        self.clock = clock
        #: each receiver's answer, built once: a Response is sent without being changed
        self._accepted = {psp: Response(r.accepted.body, status_code=r.accepted.status,
                                        media_type=r.accepted.media_type) for psp, r in config.receivers.items()}
        #: the group commit, on PostgreSQL for a queue without max_depth (module docstring)
        self.writer = GroupWriter(store, queue=config.queue, max_attempts=max_attempts,
                                  commit_wait=config.commit_wait.total_seconds()) \
            if store.db.is_postgresql and not max_depth else None

    def close(self) -> None:
        """Stop the group-commit writer once the requests waiting for it are answered."""
        if self.writer is not None:
            self.writer.close()

    def routes(self) -> list[Route]:
        return [Route(path, endpoint, methods=["POST"]) for path, endpoint in self.endpoints().items()]

    def endpoints(self) -> dict[str, Callable[[Request], Awaitable[Response]]]:
        """Each webhook path with its ``POST`` endpoint."""
        return {path: partial(self.receive, psp) for psp, path in self.config.paths.items()}

    async def receive(self, psp: str, request: Request) -> Response:
        """One request to PSP ``psp``'s endpoint: verified by its receiver, its events stored, then answered."""
        receiver = self.config.receivers.get(psp)
        if receiver is None:
            return PlainTextResponse(f"no {psp} webhook secret is configured\n", status_code=404)
        body = await self._body(request, psp)
        if body is None:
            return _too_large()
        try:
            events = receiver.verify(request.headers, body, now=self.clock())
        except WebhookRejected as exc:
            return self._rejected(psp, exc)
        failed = await self._store(psp, events)
        return failed or self._accepted[psp]

    # --- plumbing -------------------------------------------------------------------------------------

    async def _body(self, request: Request, psp: str) -> bytes | None:
        """The raw body, or None (counted) when it is over the limit: refused before it is all read."""
        limit = self.config.max_body_bytes
        length = request.headers.get("content-length")
        if length is not None and (not (length.isascii() and length.isdigit()) or int(length) > limit):
            self.counts.add(psp, "too_large")
            log.warning("webhook %s refused: body of %s bytes over the limit of %s", psp, length, limit)
            return None
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                self.counts.add(psp, "too_large")
                log.warning("webhook %s refused: body over the limit of %s bytes", psp, limit)
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    def _rejected(self, psp: str, exc: WebhookRejected) -> Response:
        self.counts.add(psp, exc.reason)
        log.warning("webhook %s refused: %s: %s", psp, exc.reason, exc)
        if exc.reason == "unauthorized":
            return PlainTextResponse("unauthorized\n", status_code=401,
                                     headers={"WWW-Authenticate": 'Basic realm="recon webhooks"'})
        return PlainTextResponse(f"{exc.reason}\n", status_code=400)

    async def _store(self, psp: str, events: Sequence[WebhookEvent]) -> Response | None:
        """Store the events that carry news (or a report); None on success, else the 503 to answer."""
        wanted = [e for e in events if e.news is not None or e.report]
        ignored = len(events) - len(wanted)
        if ignored:
            self.counts.add(psp, "ignored", ignored)
        if not wanted:
            return None
        try:
            if self.writer is not None:
                results = await self.writer.submit(wanted)
            else:
                results = await run_in_threadpool(self.store.intake, wanted, queue=self.config.queue,
                                                  max_attempts=self.max_attempts, max_depth=self.max_depth)
        except (QueueFull, ReconError) as exc:
            self.counts.add(psp, "unavailable")
            # while the database is unavailable every request fails: its Outage logs that once, not per request
            (log.debug if isinstance(exc, DatabaseUnavailable) else log.warning)(
                "webhook %s not stored (the PSP will deliver it again): %s", psp, type(exc).__name__)
            return PlainTextResponse("unavailable, deliver again later\n", status_code=503,
                                     headers={"Retry-After": "30"})
        stored = sum(1 for r in results if r.stored)
        self.counts.add(psp, "accepted", stored)
        if len(results) - stored:
            self.counts.add(psp, "duplicate", len(results) - stored)
        return None


class GroupWriter:
    """Group commit of webhook requests on PostgreSQL, on the server's event loop: requests queue their events
    and one writer task stores everything waiting in one statement (``WebhookStore.intake_batch``) on an
    asyncio psycopg connection of its own, then answers each request; a request is answered only after the
    commit that holds its events. While one statement runs the next requests queue up, so the batch grows
    with the load (up to ``max_batch`` requests). Before it writes, the writer lets requests gather until the
    oldest waiting one has waited ``commit_wait`` (no wait once ``max_batch`` are waiting, or when the oldest
    has waited that long already, behind the previous statement): each request waits at most that long for
    company, and a busy server commits several requests at once rather than one or two. Under load, the default
    wait cost markedly less CPU per event across the server, PostgreSQL and the worker (docs/benchmarks.md,
    webhooks); with 0 an idle server writes each request at once. A failed
    statement fails every request of its batch (503: the PSPs deliver again) and stores nothing of it; the
    connection (``WebhookStore.async_session``, recon.db.libpq) is dropped when its server is gone or no
    longer takes writes, and opened again, through the URL's host list, for a later batch: while no primary
    answers, every request is answered 503, never 2xx. No thread: a writer thread fought the event loop
    for the GIL (the 5 ms switch interval), which held a batch's answer back by milliseconds. Unlike recon's
    other sessions (recon.db.database.PG_SESSION_OPTIONS) this connection keeps PostgreSQL's cached generic
    plan: its one statement inserts rows and joins its own CTEs, with no scan whose plan depends on a table's
    size, and planning it afresh cost PostgreSQL CPU for every batch (docs/benchmarks.md)."""

    def __init__(self, store: WebhookStore, *, queue: str, max_attempts: int, max_batch: int = 256,
                 commit_wait: float = 0.0) -> None:
        self.store = store
        self.queue = queue
        self.max_attempts = max_attempts
        self.max_batch = max_batch
        self.commit_wait = commit_wait
        #: each waiting request: its events, its answer, when it arrived (the loop's clock)
        self._waiting: deque[tuple[Sequence[WebhookEvent], asyncio.Future[list[Stored]], float]] = deque()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: batches written and requests in them (figures for the benchmark and tests)
        self.batches = 0
        self.requests = 0

    async def submit(self, events: Sequence[WebhookEvent]) -> list[Stored]:
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._task is None or self._task.done():
            self._loop, self._wake = loop, asyncio.Event()  # a new loop (tests): a new task
            self._waiting = deque()
            self._task = loop.create_task(self._run(), name="webhook-writer")
        future: asyncio.Future[list[Stored]] = loop.create_future()
        waiting = self._waiting
        waiting.append((events, future, loop.time()))
        if len(waiting) == 1 or len(waiting) >= self.max_batch:  # the writer idles or gathers until then
            assert self._wake is not None  # nosec B101  # set above
            self._wake.set()
        return await future

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        assert self._wake is not None  # nosec B101  # set by submit
        loop = asyncio.get_running_loop()
        session = self.store.async_session()  # its connection, across failures (recon.db.libpq)
        try:
            while True:
                if not self._waiting:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                gather = self._waiting[0][2] + self.commit_wait - loop.time()
                if gather > 0 and len(self._waiting) < self.max_batch:  # until the wait is over or the batch full
                    self._wake.clear()
                    timer = loop.call_later(gather, self._wake.set)
                    await self._wake.wait()
                    timer.cancel()
                batch = [self._waiting.popleft() for _ in range(min(self.max_batch, len(self._waiting)))]
                try:
                    results: list[list[Stored]] | BaseException = await self.store.intake_batch(
                        [events for events, _, _ in batch], queue=self.queue, max_attempts=self.max_attempts,
                        session=session)
                except Exception as exc:  # every request of the batch gets it (ReconError: 503)
                    results = exc
                self.batches += 1
                self.requests += len(batch)
                for i, (_, future, _) in enumerate(batch):
                    if future.done():  # the request was cancelled (client gone)
                        continue
                    if isinstance(results, BaseException):
                        future.set_exception(results)
                    else:
                        future.set_result(results[i])
        finally:
            await session.close()


def _too_large() -> Response:
    return PlainTextResponse("request body too large\n", status_code=413)
