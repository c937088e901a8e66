"""Handlers: the registry of job kind -> handler function that a worker runs.

A handler takes the ``Job`` and its ``Lease`` and returns an ``Outcome`` (None means ``Complete``); see
``recon.engine.outcome``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from recon.engine.lease import Lease
from recon.engine.outcome import Outcome
from recon.errors import UnknownJobKind
from recon.rows import Job

Handler = Callable[[Job, Lease], Outcome | None]


class Handlers:
    """Job kind -> handler. ``register`` can be used as a decorator."""

    def __init__(self) -> None:
        self._by_kind: dict[str, Handler] = {}

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
