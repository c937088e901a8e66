"""DeadLetterStore: the dead-letter set (filtered listings, replays and their history) and pruning of finished
jobs. ``JobStore.dead_letters`` is one; `recon jobs list/show/replay/prune` and the worker's pruner use it. The
only code that executes ``recon.db.dead_letter_queries``."""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

from recon.db import dead_letter_queries as dq
from recon.db.database import Database
from recon.db.jobs_queries import job_from_row
from recon.db.sql import Query
from recon.redact import redact_row
from recon.rows import Job, JobFilter, PruneCount, ReplayBatch, ReplayRecord


class DeadLetterStore:
    """Dead jobs and finished ones: list, replay, prune."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def _q(self, query: Query) -> sa.TextClause:
        return query.for_dialect(self.db.dialect)

    def _job(self, r: Any) -> Job:
        return job_from_row(self.db, r)

    def list_jobs_filtered(self, *, filters: JobFilter, state: str | None = None, after_id: int = 0,
                           limit: int = 100) -> list[Job]:
        """One page of jobs after the id cursor ``after_id``, oldest first."""
        with self.db.begin() as conn:
            rows = conn.execute(self._q(dq.job_list_page_filtered),
                                {"state": state, **self._filter_params(filters), "after_id": after_id,
                                 "n": limit}).all()
        return [self._job(r) for r in rows]

    def replay_dead(self, *, filters: JobFilter, after_id: int, limit: int, budget: int,
                    taken_keys: frozenset[str] = frozenset(), replayed_by: str | None = None,
                    dry_run: bool = False) -> ReplayBatch:
        """Replay one batch, in one transaction: up to ``limit`` dead jobs matching ``filters`` after the id
        cursor become runnable now with ``budget`` fresh attempts, and each gets a ``job_replays`` row.

        ``attempts`` (the fencing token) is kept: ``max_attempts`` becomes attempts + budget, so the next
        claim is attempt attempts + 1 and the history stays keyed by claim. ``cancel_requested`` is cleared
        (a cancel that arrived while the job ran would otherwise keep it from ever being claimed).
        A job whose unique key is held by an unfinished job, or in ``taken_keys`` (replayed earlier in this
        run), stays dead and is reported as skipped: two unfinished jobs may not share a key.
        With ``dry_run``, the same selection runs and nothing changes.

        The rows are locked (FOR UPDATE on PostgreSQL, BEGIN IMMEDIATE on SQLite) from selection to commit.
        Hazard: a producer that enqueues a job with the same unique key between the selection and the commit
        makes the batch fail (StoreError, nothing written); run the replay again.
        """
        with self.db.begin() as conn:
            now = self.db.now_param()
            rows = conn.execute(self._q(dq.job_select_dead_for_replay),
                                {**self._filter_params(filters), "after_id": after_id, "n": limit}).all()
            jobs = [self._job(r) for r in rows]
            keys = set(taken_keys)
            picked: list[Job] = []
            skipped: list[int] = []
            for job, row in zip(jobs, rows, strict=True):
                if job.unique_key is not None and (row._mapping["held"] or job.unique_key in keys):
                    skipped.append(job.id)
                    continue
                if job.unique_key is not None:
                    keys.add(job.unique_key)
                picked.append(job)
            last_id = jobs[-1].id if jobs else after_id
            if dry_run or not picked:
                return ReplayBatch(jobs=jobs, replayed=[j.id for j in picked], skipped=skipped,
                                   last_id=last_id, keys=frozenset(keys))
            done = conn.execute(self._q(dq.job_replay_dead),
                                {"ids": [j.id for j in picked], "budget": budget, "now": now}).all()
            before = {j.id: j for j in picked}
            history = [redact_row({"job_id": int(job_id), "attempt": int(attempts), "max_attempts_after": int(most),
                                   "max_attempts_before": before[int(job_id)].max_attempts,
                                   "error_kind": before[int(job_id)].last_error_kind, "replayed_by": replayed_by,
                                   "now": now}) for job_id, attempts, most in done]  # the storage boundary
            if history:
                conn.execute(self._q(dq.job_replay_insert), history)
        return ReplayBatch(jobs=jobs, replayed=sorted(int(job_id) for job_id, _, _ in done), skipped=skipped,
                           last_id=last_id, keys=frozenset(keys))

    def replays(self, job_id: int) -> list[ReplayRecord]:
        """A job's replays, oldest first."""
        with self.db.begin() as conn:
            rows = conn.execute(self._q(dq.job_replays_for), {"id": job_id}).all()
        at = self.db.from_db
        return [ReplayRecord(job_id=int(m["job_id"]), attempt=int(m["attempt"]),
                             replayed_at=at(m["replayed_at"]),  # type: ignore[arg-type]
                             max_attempts_before=int(m["max_attempts_before"]),
                             max_attempts_after=int(m["max_attempts_after"]), error_kind=m["error_kind"],
                             replayed_by=m["replayed_by"]) for m in (r._mapping for r in rows)]

    def prune_finished(self, *, older_than: float, limit: int) -> PruneCount:
        """Delete up to ``limit`` jobs that finished (succeeded, dead, canceled) more than ``older_than``
        seconds ago, with their attempt history and replays, in one short transaction.

        Unfinished jobs are never touched: the state is part of the selection and re-checked by the delete.
        PostgreSQL takes the batch with FOR UPDATE SKIP LOCKED from the jobs_finished_at index, so running
        workers (and other pruners) are neither blocked nor blocking; SQLite runs it inside BEGIN IMMEDIATE.
        A batch shorter than ``limit`` does not prove that nothing is left (locked rows were skipped).
        """
        params = {"older_than": older_than, "n": limit, "now": self.db.now_param()}
        with self.db.begin() as conn:
            if self.db.is_postgresql:
                jobs, attempts = conn.execute(self._q(dq.job_prune_finished), params).one()
                return PruneCount(jobs=int(jobs), attempts=int(attempts))
            ids = [int(job_id) for (job_id,) in conn.execute(self._q(dq.job_select_prunable), params)]
            if not ids:
                return PruneCount()
            payload = json.dumps(ids)
            attempts = conn.execute(self._q(dq.job_attempts_delete_for), {"ids": payload}).rowcount
            jobs = conn.execute(self._q(dq.job_delete_finished), {"ids": payload}).rowcount
        return PruneCount(jobs=jobs, attempts=attempts)

    def count_prunable(self, *, older_than: float) -> dict[str, int]:
        """How many finished jobs ``prune_finished`` would delete, per state."""
        with self.db.begin() as conn:
            rows = conn.execute(self._q(dq.job_count_prunable),
                                {"older_than": older_than, "now": self.db.now_param()}).all()
        return {state: int(n) for state, n in rows}

    def _filter_params(self, filters: JobFilter) -> dict[str, Any]:
        return {"queue": filters.queue, "kind": filters.kind, "error_kind": filters.error_kind,
                "since": self.db.to_db(filters.finished_since)}
