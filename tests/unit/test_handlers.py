"""recon.engine.handlers: a handler that declares its kind and queue is registered by them."""

from __future__ import annotations

from typing import ClassVar

import pytest

from recon.engine.handlers import Handlers
from recon.engine.lease import Lease
from recon.rows import Job


class Declared:
    kind: ClassVar[str] = "ship"

    def __init__(self, queue: str | None) -> None:
        self.queue = queue

    def __call__(self, job: Job, lease: Lease) -> None:
        return None


class Other(Declared):
    kind: ClassVar[str] = "bill"


def test_handlers__add_registers_by_the_declared_kind_and_lists_each_queue_once_in_order() -> None:
    handlers = Handlers()
    ship, bill = Declared("outbound"), Other("outbound")
    handlers.add(ship)
    handlers.add(bill)
    handlers.add(type("Nightly", (Declared,), {"kind": "nightly"})(None))  # a schedule's queue: none declared
    assert handlers.kinds() == ["bill", "nightly", "ship"]
    assert handlers.get("ship") is ship and handlers.get("bill") is bill
    assert handlers.queues() == ["outbound"]


def test_handlers__a_kind_is_added_once() -> None:
    handlers = Handlers()
    handlers.add(Declared("a"))
    with pytest.raises(ValueError, match="'ship' is already registered"):
        handlers.add(Declared("b"))
