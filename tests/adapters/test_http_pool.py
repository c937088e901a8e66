"""psp_adapters.http.make_client: the connection pool never bounds the calls in flight below a worker's threads."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from psp_adapters.http import make_client, timeout_from_seconds

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
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.request_queue_size = IN_FLIGHT
    server.daemon_threads = True
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
