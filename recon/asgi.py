"""Serving an ASGI application (the console, the webhook endpoints) with uvicorn on one bound socket, under
recon's signal handling and logging: ``recon console`` and ``recon serve`` run it the same way."""

from __future__ import annotations

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
                                 proxy_headers=False))

