"""Serving an ASGI application (the console, the webhook endpoints) with uvicorn on one bound socket, under
recon's signal handling and logging: ``recon console`` and ``recon serve`` run it the same way."""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Callable, Iterator
from typing import Any


def serve(asgi_app: Any, *, host: str, port: int, on_ready_func: Callable[[str], None] | None = None) -> None:
    """Serve ``asgi_app`` on ``host:port`` until SIGINT or SIGTERM (the requests in flight finish first).
    ``on_ready_func`` gets the base URL once the socket is bound (port 0: the one chosen)."""
    import uvicorn

    from recon.params import install_signal_handlers

    class Server(uvicorn.Server):
        """uvicorn's server under recon's signal handling (recon.params): the first SIGINT or SIGTERM lets
        the requests in flight finish and ``run`` return (exit 0), a second exits at once. uvicorn's own
        handlers would raise the signal again after shutting down, killing the process by it."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family)
    bound = sock.getsockname()[1]
    url = f"http://{f'[{host}]' if family == socket.AF_INET6 else host}:{bound}/"
    # log_config=None: uvicorn's loggers go through recon's handler (redacted, --log-format); no access log
    # (the writes are audited in the database), no Server header, no trust in X-Forwarded-* headers
    config = uvicorn.Config(asgi_app, log_config=None, access_log=False, lifespan="off", server_header=False,
                            proxy_headers=False)
    if logging.getLogger().level > logging.DEBUG:
        logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    if on_ready_func is not None:
        on_ready_func(url)
    server = Server(config)
    install_signal_handlers(lambda: setattr(server, "should_exit", True))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
