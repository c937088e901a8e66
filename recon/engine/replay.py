"""Replaying the dead-letter set: ``recon jobs replay`` and the console's dead-letter page run this one loop.

Batch after batch along the id cursor, each its own transaction (``DeadLetterStore.replay_dead``), until the
matches or ``limit`` run out. A dry run lists what would move and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from recon.db.jobs_store import JobStore
from recon.rows import Job, JobFilter


@dataclass(slots=True)
class ReplayRun:
    """What one replay did: the replayed job ids, the jobs themselves on a dry run (a real run keeps only ids:
    it may move millions), the ids left dead because an unfinished job holds their unique key."""

    dry_run: bool
    budget: int
    replayed: list[int] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    batches: int = 0


def job_filter(store: JobStore, *, queue: str | None = None, kind: str | None = None, error_kind: str | None = None,
               since: timedelta | datetime | None = None) -> JobFilter:
    """The filter of a listing or a replay. ``since`` as a duration counts back from the database clock (the
    clock ``finished_at`` was set by)."""
    if isinstance(since, timedelta):
        since = store.db_now() - since
    return JobFilter(queue=queue, kind=kind, error_kind=error_kind, finished_since=since)


def replay(store: JobStore, filters: JobFilter, *, budget: int, operator: str, limit: int | None = None,
           batch: int = 500, dry_run: bool = False) -> ReplayRun:
    """Move the dead jobs matching ``filters`` (at most ``limit``) back to runnable now with ``budget`` fresh
    attempts each, recorded as replayed by ``operator``; with ``dry_run``, only list them."""
    run = ReplayRun(dry_run=dry_run, budget=budget)
    after, keys = 0, frozenset[str]()
    while limit is None or len(run.replayed) < limit:
        want = batch if limit is None else min(batch, limit - len(run.replayed))
        b = store.dead_letters.replay_dead(filters=filters, after_id=after, limit=want, budget=budget,
                                           taken_keys=keys, replayed_by=operator, dry_run=dry_run)
        run.batches += 1 if b.jobs else 0
        if dry_run:
            picked = set(b.replayed)
            run.jobs.extend(j for j in b.jobs if j.id in picked)
        run.replayed.extend(b.replayed)
        run.skipped.extend(b.skipped)
        if len(b.jobs) < want:
            break
        after, keys = b.last_id, b.keys
    return run
