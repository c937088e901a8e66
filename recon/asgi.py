"""Serving an ASGI application (the console, the webhook endpoints) with uvicorn on one bound socket, under
recon's signal handling and logging: ``recon console`` and ``recon serve`` run it the same way."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from recon.params import freeze_heap, install_signal_handlers


def serve(asgi_app: Any, *, host: str, port: int, on_ready_func: Callable[[str], None] | None = None) -> None:
    """Serve ``asgi_app`` on ``host:port`` until SIGINT or SIGTERM (the requests in flight finish first).
    ``on_ready_func`` gets the base URL once the socket is bound (port 0: the one chosen)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family)
    bound = sock.getsockname()[1]
    url = f"http://{f'[{host}]' if family == socket.AF_INET6 else host}:{bound}/"
    if logging.getLogger().level > logging.DEBUG:
        logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    if on_ready_func is not None:
        on_ready_func(url)
    server = _server(asgi_app)
    install_signal_handlers(lambda: setattr(server, "should_exit", True))
    freeze_heap()
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()


@contextlib.contextmanager
def background(asgi_app: Any, *, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serve ``asgi_app`` in a thread of this process for the ``with`` block (the demo's webhook endpoint);
    yields the base URL. No signal handling: the block's end stops the server and joins its thread.
    RuntimeError when it has not started within 15 s."""
    sock = socket.create_server((host, port))
    server = _server(asgi_app)
    logging.getLogger("uvicorn.error").setLevel(max(logging.WARNING, logging.getLogger().level))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="recon-asgi", daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        if not server.started:
            raise RuntimeError(f"the ASGI server on {host}:{sock.getsockname()[1]} did not start")
        yield f"http://{host}:{sock.getsockname()[1]}/"
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()


def _server(asgi_app: Any) -> Any:
    """A uvicorn server that leaves signals to recon (recon.params): the first SIGINT or SIGTERM lets the
    requests in flight finish and ``run`` return (exit 0), a second exits at once; uvicorn's own handlers would
    raise the signal again after shutting down, killing the process by it. uvicorn's loggers go through recon's
    handler (redacted, --log-format); no access log (the writes are audited in the database), no Server header,
    no trust in X-Forwarded-* headers."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return Server(uvicorn.Config(asgi_app, log_config=None, access_log=False, lifespan="off", server_header=False,
                                 proxy_headers=False, http=_one_write_protocol()))


class OneWrite:
    """A transport that sends an HTTP answer's head with its body in one ``write`` of the transport underneath:
    uvicorn writes the status line and headers, then the body, as two writes, each a ``send`` system call on
    the socket and a wake-up of the client. A write that ends a head (``\\r\\n\\r\\n``) is held and goes out
    with the next write; if none comes in the same turn of the event loop (a head without a body, a stream
    whose first chunk is not ready), at the end of that turn (``call_soon``). The order of the bytes is kept;
    ``close``, ``write_eof`` and ``writelines`` send what is held first; ``abort`` drops it with the
    connection. Anything else is the transport's own. Measured: docs/benchmarks.md, issue 29 (webhook intake
    headroom)."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held + data)
        elif data[-4:] == b"\r\n\r\n":  # a head: held for its body
            self._held = bytes(data)
            self._loop.call_soon(self.flush)
        else:
            self._transport.write(data)

    def flush(self) -> None:
        """Write what is held, now; nothing once the transport is closing."""
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def writelines(self, lines: Any) -> None:
        self.flush()
        self._transport.writelines(lines)

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + len(self._held or b"")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _one_write_protocol() -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (httptools where installed), on a ``OneWrite`` transport."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    class OneWriteHTTP(AutoHTTPProtocol):  # type: ignore[valid-type,misc]
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(OneWrite(transport, asyncio.get_running_loop()))  # type: ignore[arg-type]

    return OneWriteHTTP

