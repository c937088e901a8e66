"""The SQL of the dead-letter set and of pruning (`recon jobs list/replay/prune`, the worker's pruner); only
``recon.db.dead_letter_store`` executes these. Placeholders as in ``recon.db.sql``."""

from __future__ import annotations

# Bandit: every "nosec B608" here marks an f-string that interpolates module constants only (column
# lists, state predicates); values always travel as bound parameters.
from recon.db.jobs_queries import FINISHED, JOB_COLUMNS
from recon.db.sql import Query

# integer microseconds and compares them as they are.
_TS = {"postgresql": "CAST(:{} AS timestamptz)", "sqlite": ":{}"}


def _job_filters(dialect: str) -> str:
    since = _TS[dialect].format("since")
    return f"""
              AND (CAST(:queue AS TEXT) IS NULL OR queue = :queue)
              AND (CAST(:kind AS TEXT) IS NULL OR kind = :kind)
              AND (CAST(:error_kind AS TEXT) IS NULL OR last_error_kind = :error_kind)
              AND ({since} IS NULL OR finished_at >= {since})"""


job_list_page_filtered = Query(
    "job_list_page_filtered",
    "Run by `recon jobs list`: one page after an id cursor, filtered by state, queue, kind, error kind and "
    "finished-since.",
    postgresql=f"""SELECT {JOB_COLUMNS} FROM jobs
            WHERE id > :after_id AND (CAST(:state AS TEXT) IS NULL OR state = :state)
              {_job_filters("postgresql")}
            ORDER BY id LIMIT :n""",  # nosec B608  # constant SQL, values bound
    sqlite=f"""SELECT {JOB_COLUMNS} FROM jobs
            WHERE id > :after_id AND (CAST(:state AS TEXT) IS NULL OR state = :state)
              {_job_filters("sqlite")}
            ORDER BY id LIMIT :n""",  # nosec B608  # constant SQL, values bound
)

# ``held``: an unfinished job holds the dead job's unique key, so replaying it would break the key's
# uniqueness (jobs_unique_key_unfinished); the store skips it.
_REPLAY_HELD = f"""EXISTS (SELECT 1 FROM jobs u WHERE u.unique_key = jobs.unique_key
                                 AND u.unique_key IS NOT NULL AND NOT u.{FINISHED})"""  # nosec B608

job_select_dead_for_replay = Query(
    "job_select_dead_for_replay",
    "Run by `recon jobs replay` (and its --dry-run): one batch of matching dead jobs after an id cursor, "
    "locked until the batch commits.",
    postgresql=f"""SELECT {JOB_COLUMNS}, {_REPLAY_HELD} AS held FROM jobs
            WHERE state = 'dead' AND id > :after_id {_job_filters("postgresql")}
            ORDER BY id LIMIT :n
            FOR UPDATE OF jobs""",  # nosec B608  # constant SQL, values bound
    # SQLite: the store runs this inside BEGIN IMMEDIATE, which holds the database's single write lock.
    sqlite=f"""SELECT {JOB_COLUMNS}, {_REPLAY_HELD} AS held FROM jobs
            WHERE state = 'dead' AND id > :after_id {_job_filters("sqlite")}
            ORDER BY id LIMIT :n""",  # nosec B608  # constant SQL, values bound
)

job_replay_dead = Query(
    "job_replay_dead",
    "Run by `recon jobs replay`: dead jobs become runnable now with :budget fresh attempts; attempts (the "
    "fencing token) is kept.",
    sql="""UPDATE jobs SET state = 'runnable', run_after = {now}, finished_at = NULL,
                cancel_requested = FALSE, max_attempts = attempts + :budget, free_attempts = attempts
            WHERE id IN :ids AND state = 'dead'
            RETURNING id, attempts, max_attempts""",
    expanding=("ids",),
)

job_replay_insert = Query(
    "job_replay_insert",
    "Run by `recon jobs replay`, in the replay's transaction: the replay's row in the job's history.",
    sql="""INSERT INTO job_replays (job_id, attempt, replayed_at, max_attempts_before, max_attempts_after,
                                    error_kind, replayed_by)
           VALUES (:job_id, :attempt, {now}, :max_attempts_before, :max_attempts_after, :error_kind,
                   :replayed_by)""",
)

job_replays_for = Query(
    "job_replays_for",
    "Run by `recon jobs show`: a job's replays, oldest first.",
    sql="""SELECT job_id, attempt, replayed_at, max_attempts_before, max_attempts_after, error_kind,
                  replayed_by
           FROM job_replays WHERE job_id = :id ORDER BY attempt""",
)

job_prune_finished = Query(
    "job_prune_finished",
    "Run by `recon jobs prune` and the worker's pruner: deletes one batch of jobs finished before the "
    "cutoff, with their history.",
    # Rows come from the jobs_finished_at partial index, locked with SKIP LOCKED (a job another transaction
    # holds, e.g. being replayed, waits for the next batch; its state is re-checked under the lock). "= ANY
    # (ARRAY(...))" makes both deletes primary-key lookups whatever the planner thinks the CTE holds.
    # job_replays rows go with their job through the foreign key's ON DELETE CASCADE.
    postgresql=f"""
        WITH batch AS (
            SELECT id FROM jobs
            WHERE {FINISHED} AND finished_at < {{now}} - {{secs:older_than}}
            ORDER BY finished_at LIMIT :n
            FOR UPDATE SKIP LOCKED
        ), gone AS (
            DELETE FROM jobs WHERE id = ANY(ARRAY(SELECT id FROM batch)) AND {FINISHED} RETURNING id
        ), history AS (
            DELETE FROM job_attempts WHERE job_id = ANY(ARRAY(SELECT id FROM gone)) RETURNING 1
        )
        SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM history)
    """,  # nosec B608  # constant SQL, values bound
)

job_select_prunable = Query(
    "job_select_prunable",
    "Run by pruning on SQLite, inside BEGIN IMMEDIATE: one batch of jobs finished before the cutoff.",
    sqlite=f"""SELECT id FROM jobs WHERE {FINISHED} AND finished_at < {{now}} - {{secs:older_than}}
               ORDER BY finished_at LIMIT :n""",  # nosec B608  # constant SQL, values bound
)

job_attempts_delete_for = Query(
    "job_attempts_delete_for",
    "Run by pruning on SQLite, in the batch's transaction: the attempt history of the pruned jobs.",
    sqlite="DELETE FROM job_attempts WHERE job_id IN (SELECT value FROM json_each(:ids))",
)

job_delete_finished = Query(
    "job_delete_finished",
    "Run by pruning on SQLite, in the batch's transaction: the pruned jobs (their replays cascade).",
    sqlite=f"DELETE FROM jobs WHERE id IN (SELECT value FROM json_each(:ids)) AND {FINISHED}",  # nosec B608
)

job_count_prunable = Query(
    "job_count_prunable",
    "Run by `recon jobs prune --dry-run`: finished jobs older than the cutoff, per state.",
    sql=f"""SELECT state, count(*) FROM jobs WHERE {FINISHED} AND finished_at < {{now}} - {{secs:older_than}}
            GROUP BY state ORDER BY state""",  # nosec B608  # constant SQL, values bound
)
