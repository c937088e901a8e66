"""Reading jobs back in tests: every job of a filter, whatever its number (production code pages itself)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from recon.db.jobs_store import JobStore
from recon.rows import Job


def iter_all_jobs(store: JobStore, *, page: int = 500, **filters: Any) -> Iterable[Job]:
    """Every job matching ``filters`` (``JobStore.list_jobs``'s: state, queue, kind), paged through an id cursor."""
    after = 0
    while True:
        batch = store.list_jobs(after_id=after, limit=page, **filters)
        yield from batch
        if len(batch) < page:
            return
        after = batch[-1].id
