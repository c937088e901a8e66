"""Every SQL statement about ``schedule_slots`` (migration 0010); only ``recon.db.schedule_store`` executes these."""

from __future__ import annotations

from recon.db.sql import Query

slot_claim = Query(
    "slot_claim",
    "Run by every worker's scheduler for a due slot: the first insert wins (primary key schedule, slot_at); the "
    "winner queues the slot's job in the same transaction. No row returned: another scheduler had it.",
    sql="""INSERT INTO schedule_slots (schedule, slot_at, enqueued_at, job_id, scheduler)
           VALUES (:schedule, :slot_at, {now}, NULL, :scheduler)
           ON CONFLICT (schedule, slot_at) DO NOTHING
           RETURNING schedule""",
)

slot_set_job = Query(
    "slot_set_job",
    "Run right after a won claim, in its transaction: the job the slot queued.",
    sql="UPDATE schedule_slots SET job_id = :job_id WHERE schedule = :schedule AND slot_at = :slot_at",
)

slot_latest = Query(
    "slot_latest",
    "Run by the scheduler and `recon schedule list`: each schedule's latest claimed slot, with its job's state "
    "and last error (the primary key's order gives the latest per schedule).",
    sql="""SELECT s.schedule, s.slot_at, s.enqueued_at, s.job_id, s.scheduler, j.state, j.last_error_kind,
                  j.last_error, j.finished_at
           FROM schedule_slots s
           LEFT JOIN jobs j ON j.id = s.job_id
           WHERE s.slot_at = (SELECT max(slot_at) FROM schedule_slots m WHERE m.schedule = s.schedule)""",
)
