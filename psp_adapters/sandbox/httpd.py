"""The sandbox's HTTP plumbing: a thread per keep-alive connection around the dispatcher (``api._SandboxApp``),
bodies bounded, hangs that a stop interrupts, and every connection closed by ``close_connections``."""

from __future__ import annotations

import logging
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from psp_adapters.sandbox.api import MAX_BODY_BYTES, _SandboxApp, _Stopping
from psp_adapters.sandbox.core import Request, Response

logger = logging.getLogger("psp_adapters.sandbox.server")


class _Handler(BaseHTTPRequestHandler):
    """HTTP/1.1 keep-alive plumbing around ``_SandboxApp``."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes; Nagle would hold the body for the peer's ACK
    timeout = 60  # an idle keep-alive connection is closed after this long
    server_version = "recon-psp-sandbox/1"
    sys_version = ""
    server: HttpServer

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.untrack(self.connection)

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _serve(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        url = urlsplit(self.path)
        app = self.server.app
        if not 0 <= length <= MAX_BODY_BYTES:
            self.close_connection = True  # the unread body would be taken for the next request
            return self._send(app.error(url.path, "bad_request", "bad or too large Content-Length"))
        body = self.rfile.read(length) if length else b""
        request = Request(self.command, url.path, parse_qs(url.query), self.headers, body)
        try:
            response = app.handle(request)
        except _Stopping:
            response = app.error(url.path, "service_unavailable", "shutting down")
        except Exception:
            logger.exception("sandbox: unhandled error on %s %s", self.command, url.path)
            response = app.error(url.path, "internal_error")
        if response.hold_seconds and self.server.stopping.wait(response.hold_seconds):
            self.close_connection = True  # stopping during a hang: the client never gets an answer
            return None
        self._send(response)
        return None

    def _send(self, response: Response) -> None:
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        for name, value in response.headers:
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(response.body)

    def log_message(self, format: str, *args: object) -> None:
        logger.debug("sandbox: %s " + format, self.address_string(), *args)


class HttpServer(ThreadingHTTPServer):
    """A thread per connection; ``stop`` joins them all (none is a daemon), after unblocking idle ones."""

    daemon_threads = False
    block_on_close = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], app: _SandboxApp, stopping: threading.Event) -> None:
        self.app = app
        self.stopping = stopping
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def track(self, conn: socket.socket) -> None:
        with self._connections_lock:
            if self.stopping.is_set():
                _shutdown(conn)
            self._connections.add(conn)

    def untrack(self, conn: socket.socket) -> None:
        with self._connections_lock:
            self._connections.discard(conn)

    def close_connections(self) -> None:
        with self._connections_lock:
            for conn in self._connections:
                _shutdown(conn)

    def handle_error(self, request: object, client_address: object) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            return  # the client went away (e.g. it timed out during an injected hang)
        logger.error("sandbox: error serving %s", client_address, exc_info=exc)


def _shutdown(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def own_origins(host: str, port: int) -> frozenset[str]:
    """The origins a browser would name for pages served by this sandbox: its host, and on loopback the other
    loopback names (an admin page opened as ``localhost`` is still the sandbox's own)."""
    hosts = {host}
    if host in _LOOPBACK:
        hosts |= _LOOPBACK
    return frozenset(f"http://{name}:{port}" for name in hosts)


_LOOPBACK = frozenset({"127.0.0.1", "localhost", "[::1]"})
