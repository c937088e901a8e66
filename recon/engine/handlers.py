"""Handlers: the registry of job kind -> handler function that a worker runs.

A handler takes the ``Job`` and its ``Lease`` and returns an ``Outcome`` (None means ``Complete``); see
``recon.engine.outcome``. A handler object that declares its job ``kind`` and ``queue`` (a ``JobHandler``:
recon's own) is registered by them with ``add``; a plain function with ``register``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from recon.engine.lease import Lease
from recon.engine.outcome import Outcome
from recon.errors import UnknownJobKind
from recon.rows import Job

Handler = Callable[[Job, Lease], Outcome | None]


class JobHandler(Protocol):
    """A handler that says which jobs it runs: ``kind``, and ``queue``, where those jobs are enqueued (None: where
    their producer puts them, e.g. a schedule's queue). A worker started without a queue list works its
    handlers' queues."""

    @property
    def kind(self) -> str: ...

    @property
    def queue(self) -> str | None: ...

    def __call__(self, job: Job, lease: Lease, /) -> Outcome | None: ...


class Handlers:
    """Job kind -> handler. ``register`` can be used as a decorator."""

    def __init__(self) -> None:
        self._by_kind: dict[str, Handler] = {}
        self._queues: dict[str, str] = {}

    def add(self, handler: JobHandler) -> None:
        """Register ``handler`` for its own ``kind``, and remember its ``queue``."""
        self.register(handler.kind, handler)
        if handler.queue is not None:
            self._queues.setdefault(handler.queue, handler.kind)

    def queues(self) -> list[str]:
        """The queues the added handlers declare, each once, in the order they were added."""
        return list(self._queues)

    def register(self, kind: str, func: Handler | None = None) -> Any:
        def add(f: Handler) -> Handler:
            if kind in self._by_kind:
                raise ValueError(f"a handler for job kind {kind!r} is already registered")
            self._by_kind[kind] = f
            return f
        return add(func) if func is not None else add

    def get(self, kind: str) -> Handler:
        try:
            return self._by_kind[kind]
        except KeyError:
            raise UnknownJobKind(f"no handler registered for job kind {kind!r}") from None

    def __contains__(self, kind: object) -> bool:
        return kind in self._by_kind

    def kinds(self) -> list[str]:
        return sorted(self._by_kind)
