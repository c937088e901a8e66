"""The chaos suite runs two tests at a time (``pytest -n 2 -m chaos``): each test on the shared server holds it
(tests/chaos/server_lock.py), alone when it restarts the server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.chaos.server_lock import holding
from tests.conftest import PG_URL


@pytest.fixture(autouse=True)
def _shared_server(request: pytest.FixtureRequest) -> Iterator[None]:
    """Held from before the test's function-scoped fixtures (its ``pg``) until after its processes stopped (their
    finalizers run first). The failover tests, which never touch the shared server, take nothing."""
    if "pg_migrated" not in request.fixturenames:
        yield
        return
    with holding(PG_URL, alone=request.node.get_closest_marker("restarts_postgresql") is not None):
        yield
