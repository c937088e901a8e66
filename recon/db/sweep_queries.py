"""Every SQL statement about ``sweep_runs`` (migration 0008); only ``recon.db.sweep_store`` executes these."""

from __future__ import annotations

from recon.db.sql import Query

sweep_run_start = Query(
    "sweep_run_start",
    "Run by `recon sweep` before it enqueues anything: who runs it, with which options.",
    postgresql="""INSERT INTO sweep_runs (started_at, operator, options, outcome)
                  VALUES ({now}, :operator, CAST(:options AS jsonb), 'running') RETURNING id""",
    sqlite="""INSERT INTO sweep_runs (started_at, operator, options, outcome)
              VALUES (:now, :operator, :options, 'running') RETURNING id""",
)

sweep_run_finish = Query(
    "sweep_run_finish",
    "Run by `recon sweep` at its end: the outcome (finished, failed), exit code and summary.",
    postgresql="""UPDATE sweep_runs SET finished_at = {now}, outcome = :outcome, exit_code = :exit_code,
                                        summary = CAST(:summary AS jsonb)
                  WHERE id = :id""",
    sqlite="""UPDATE sweep_runs SET finished_at = :now, outcome = :outcome, exit_code = :exit_code,
                                    summary = :summary
              WHERE id = :id""",
)

sweep_run_latest = Query(
    "sweep_run_latest",
    "Run by `recon stats` and the console's overview: the last sweeps, newest first (index sweep_runs_started).",
    sql="""SELECT id, started_at, finished_at, operator, options, outcome, exit_code, summary
           FROM sweep_runs ORDER BY started_at DESC, id DESC LIMIT :n""",
)
