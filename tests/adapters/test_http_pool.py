"""psp_adapters.http.make_client: the connection pool never bounds the calls in flight below a worker's threads."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from psp_adapters.http import ShardedTransport, make_client, timeout_from_seconds

#: more calls in flight than httpx's default pool (100 connections) lets out at once
IN_FLIGHT = 150


class _Held(BaseHTTPRequestHandler):
    """Answers only once IN_FLIGHT requests are being served at the same time (a slow PSP)."""

    protocol_version = "HTTP/1.1"
    barrier: threading.Barrier

    def do_GET(self) -> None:  # the stdlib's name
        try:
            self.barrier.wait()
            status = 200
        except threading.BrokenBarrierError:
            status = 503
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # the stdlib's signature
        return


@pytest.fixture
def held_server() -> Iterator[str]:
    handler = type("Held", (_Held,), {"barrier": threading.Barrier(IN_FLIGHT, timeout=20)})
    # the listen backlog is the class's request_queue_size, read by the constructor's listen(): set on the
    # instance afterwards it stayed 5, so of 150 connections made at once most waited for SYN retransmits (1, 3,
    # 7, 15, 31 s) on a loaded machine, past the barrier's 20 s: every call answered 503 in one CI run
    server_class = type("HeldServer", (ThreadingHTTPServer,), {"request_queue_size": IN_FLIGHT,
                                                               "daemon_threads": True})
    server = server_class(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_make_client__holds_more_calls_in_flight_than_httpx_default_pool(held_server: str) -> None:
    """150 threads call at once and the server answers none until all 150 are in: with httpx's default pool
    the 101st would wait for a connection until its pool timeout (PoolTimeout) and the barrier would break."""
    client = make_client(held_server, headers={}, timeout=timeout_from_seconds(pool=20.0, read=30.0))
    statuses: list[int | str] = []
    lock = threading.Lock()

    def call() -> None:
        try:
            result: int | str = client.get("/charge").status_code
        except httpx.HTTPError as exc:
            result = type(exc).__name__
        with lock:
            statuses.append(result)

    threads = [threading.Thread(target=call) for _ in range(IN_FLIGHT)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        client.close()
    assert statuses == [200] * IN_FLIGHT


def test_make_client__each_thread_keeps_to_one_of_sixteen_pools_so_no_pool_walks_more_than_its_share(
        held_server: str) -> None:
    """httpcore walks every connection of a pool (and, for each idle one, every other) at each request it starts
    and ends: the client splits its connections into SHARDS pools and each thread keeps to one, so 150 threads
    leave 9 or 10 connections in each of 16 pools (150 = 16 x 9 + 6), never 150 in one."""
    client = make_client(held_server, headers={}, timeout=timeout_from_seconds(pool=20.0, read=30.0))
    transport = client._transport  # the client's own transport: what this test is about
    assert isinstance(transport, ShardedTransport)
    statuses: list[int] = []
    lock = threading.Lock()

    def call() -> None:
        for _ in range(2):  # the second call reuses the thread's connection, in the thread's pool
            status = client.get("/charge").status_code
            with lock:
                statuses.append(status)

    threads = [threading.Thread(target=call) for _ in range(IN_FLIGHT)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        held = sorted(len(pool._pool.connections) for pool in transport._pools)
    finally:
        client.close()
    assert statuses == [200] * (2 * IN_FLIGHT)
    assert held == [9] * 10 + [10] * 6
