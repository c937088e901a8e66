"""SweepRunStore: one row per ``recon sweep``, so ``recon stats`` and the console show the last sweeps. The only
code that executes ``sweep_queries``."""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

from recon.db import sweep_queries as sq
from recon.db.database import Database, json_from_db
from recon.redact import redact_row, redact_value


class SweepRunStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    def start(self, *, operator: str, options: dict[str, Any]) -> int:
        row = redact_row({"operator": operator, "options": options})  # the storage boundary (recon.redact)
        with self.db.begin() as conn:
            return int(conn.execute(self._q(sq.sweep_run_start), {
                "operator": row["operator"], "options": json.dumps(row["options"]),
                "now": self.db.now_param()}).scalar_one())

    def finish(self, run_id: int, *, outcome: str, exit_code: int | None, summary: dict[str, Any] | None) -> None:
        summary = redact_value(summary)  # the storage boundary (recon.redact)
        with self.db.begin() as conn:
            conn.execute(self._q(sq.sweep_run_finish), {
                "id": run_id, "outcome": outcome, "exit_code": exit_code,
                "summary": json.dumps(summary) if summary is not None else None, "now": self.db.now_param()})

    def latest(self, n: int = 5) -> list[dict[str, Any]]:
        """The last ``n`` sweeps, newest first, as JSON-ready documents."""
        with self.db.begin() as conn:
            rows = conn.execute(self._q(sq.sweep_run_latest), {"n": n}).all()
        out = []
        for m in (r._mapping for r in rows):
            started, finished = self.db.from_db(m["started_at"]), self.db.from_db(m["finished_at"])
            out.append({"id": int(m["id"]), "started_at": started.isoformat() if started else None,
                        "finished_at": finished.isoformat() if finished else None, "operator": m["operator"],
                        "options": json_from_db(m["options"]), "outcome": m["outcome"], "exit_code": m["exit_code"],
                        "summary": json_from_db(m["summary"])})
        return out

    def _q(self, query: Any) -> sa.TextClause:
        return query.for_dialect(self.db.dialect)  # type: ignore[no-any-return]
