"""A tiny webhook endpoint for the sandbox's webhook tests: http.server on 127.0.0.1 in a thread.

It records every POST (path, headers, raw body) and answers each with the next scripted ``(status, body)``, or
``default`` once the script is used up. ``wait_for(n)`` blocks until ``n`` deliveries arrived.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Delivery:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float  #: time.monotonic() on arrival

    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    def __init__(self, default: tuple[int, bytes] = (200, b"")) -> None:
        self.default = default
        self.script: deque[tuple[int, bytes]] = deque()
        self.deliveries: list[Delivery] = []
        self._cond = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._cond:
                    status, answer = receiver.script.popleft() if receiver.script else receiver.default
                    receiver.deliveries.append(Delivery(self.path, dict(self.headers.items()), body, time.monotonic()))
                    receiver._cond.notify_all()
                self.send_response(status)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05})

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_port}/hooks"

    def wait_for(self, n: int, timeout: float = 5.0) -> list[Delivery]:
        """The first ``n`` deliveries, once they arrived; AssertionError after ``timeout`` seconds."""
        with self._cond:
            arrived = self._cond.wait_for(lambda: len(self.deliveries) >= n, timeout)
            assert arrived, f"{len(self.deliveries)} of {n} webhook deliveries arrived within {timeout} s"
            return list(self.deliveries[:n])

    def quiet(self, seconds: float = 0.3) -> list[Delivery]:
        """Everything delivered once nothing more arrives for ``seconds``."""
        with self._cond:
            while True:
                count = len(self.deliveries)
                if not self._cond.wait_for(lambda n=count: len(self.deliveries) > n, seconds):
                    return list(self.deliveries)


@contextmanager
def receiving(default: tuple[int, bytes] = (200, b"")) -> Iterator[Receiver]:
    receiver = Receiver(default)
    receiver._thread.start()
    try:
        yield receiver
    finally:
        receiver._httpd.shutdown()
        receiver._httpd.server_close()
        receiver._thread.join()
