"""``recon sweep``'s refunds, captures and cancels (``recon.movement_rows``): every stale unfinished movement gets
its reconcile job (``<reconcile kind>:<id>``, recon.reconcile.movement), run with the payments' jobs, and the
sweep's summary counts each kind apart (``"refunds"``, ``"captures"``) with the payments' categories and the same
exit rule: a movement in review, dead or still failing makes the sweep exit 1. The authorisations a capture
has yet to take are the capture sweep's own (recon.reconcile.capture_sweep)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from recon.db.jobs_store import JobStore
from recon.db.movement_store import MovementStore
from recon.engine.client import Client
from recon.engine.jobs import JobSpec
from recon.movement_rows import Movement
from recon.reconcile.movement import MAX_ATTEMPTS
from recon.reconcile.sweep import CATEGORIES, SweepOptions, categorise

PAGE = 1000


@dataclass(slots=True)
class MovementSelection:
    movement_ids: list[int] = field(default_factory=list)
    job_ids: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.movement_ids)


def enqueue_movements(store: MovementStore[Any, Any], client: Client, options: SweepOptions, *,
                      queue: str) -> MovementSelection:
    """A reconcile job for every stale unfinished movement of ``store``'s kind (of ``options.psp``; at most
    ``options.limit``), enqueued a page at a time."""
    kind = store.kind
    selection = MovementSelection()
    page: list[Movement] = []

    def flush() -> None:
        specs = [JobSpec(kind.reconcile_kind, {kind.id_field: m.id}, queue=queue,
                         unique_key=kind.reconcile_key(m.id), max_attempts=MAX_ATTEMPTS) for m in page]
        selection.job_ids.extend(client.enqueue_many(specs))
        selection.movement_ids.extend(m.id for m in page)
        page.clear()

    for n, movement in enumerate(store.iter_stale(older_than=options.older_than, psp=options.psp), start=1):
        page.append(movement)
        if len(page) >= PAGE:
            flush()
        if options.limit is not None and n >= options.limit:
            break
    if page:
        flush()
    return selection


def summarise_movements(store: MovementStore[Any, Any], jobs: JobStore,
                        selection: MovementSelection) -> dict[str, Any]:
    """One kind's part of the sweep's summary: how many were checked, and each category's count."""
    counts: Counter[str] = Counter()
    by_job = {j.id: j for j in jobs.get_many(sorted(set(selection.job_ids)))}
    for movement_id, job_id in zip(selection.movement_ids, selection.job_ids, strict=True):
        movement = store.get(movement_id)
        if movement is not None:
            counts[categorise(movement.status, by_job.get(job_id))] += 1
    return {"checked": sum(counts.values()), **{c: counts[c] for c in CATEGORIES if c != "consistent"}}


def movements_exit_code(summary: dict[str, Any]) -> int:
    """1 when a movement the sweep checked is in review, dead or still failing, else 0."""
    return 1 if any(summary.get(c) for c in ("needs_review", "dead", "errors")) else 0
