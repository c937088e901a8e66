"""ScheduleStore: the claimed slots of the periodic jobs. The only code that executes ``schedule_queries``."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from recon.db import schedule_queries as sq
from recon.db.database import Database
from recon.db.jobs_store import JobStore
from recon.redact import redact_row
from recon.rows import EnqueueRow
from recon.schedule_rows import ClaimedSlot, SlotJob


class ScheduleStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    def claim(self, schedule: str, slot_at: datetime, *, scheduler: str, job: SlotJob | None,
              max_depth: int = 0) -> int | bool | None:
        """Claim ``schedule``'s slot at ``slot_at`` and queue ``job`` with it, in one transaction. Returns the
        job id (None when recorded as skipped), or False when another scheduler had claimed it already."""
        with self.db.begin() as conn:
            params = {**redact_row({"schedule": schedule, "scheduler": scheduler}),  # the storage boundary
                      "slot_at": self.db.to_db(slot_at), "now": self.db.now_param()}
            if conn.execute(self._q(sq.slot_claim), params).first() is None:
                return False
            if job is None:
                return None
            row = EnqueueRow(queue=job.queue, kind=job.kind, payload_json=json.dumps(job.payload), priority=0,
                             run_at=None, delay=0.0, max_attempts=job.max_attempts,
                             unique_key=f"schedule:{schedule}:{slot_at.isoformat()}", tenant=None)
            [job_id] = JobStore(self.db).enqueue([row], max_depth={job.queue: max_depth}, conn=conn)
            conn.execute(self._q(sq.slot_set_job), {**params, "job_id": job_id})
            return job_id

    def latest(self) -> dict[str, ClaimedSlot]:
        """Each schedule's latest claimed slot, with its job's state."""
        with self.db.begin() as conn:
            rows = conn.execute(self._q(sq.slot_latest)).all()
        t = self.db.from_db
        out = {}
        for m in (r._mapping for r in rows):
            error = f"{m['last_error_kind']}: {m['last_error']}" if m["last_error_kind"] else None
            out[m["schedule"]] = ClaimedSlot(schedule=m["schedule"], slot_at=t(m["slot_at"]),  # type: ignore[arg-type]
                                             enqueued_at=t(m["enqueued_at"]), job_id=m["job_id"],  # type: ignore[arg-type]
                                             scheduler=m["scheduler"], job_state=m["state"], job_error=error,
                                             job_finished_at=t(m["finished_at"]))
        return out

    def _q(self, query: Any) -> sa.TextClause:
        return query.for_dialect(self.db.dialect)  # type: ignore[no-any-return]
