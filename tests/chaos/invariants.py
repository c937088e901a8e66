"""The invariants the chaos suite checks at the end of a run, against the database and the sandbox's own
ledger. Each check returns the offending rows (empty = holds), so a failure shows exactly what broke."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import httpx
import sqlalchemy as sa

from recon.db.database import Database

FINAL = {"succeeded", "failed", "needs_review"}


@dataclass
class Report:
    counts: dict[str, int] = field(default_factory=dict)
    violations: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(self.violations.values())

    def render(self) -> str:
        lines = [f"{k}: {v}" for k, v in self.counts.items()]
        for name, rows in self.violations.items():
            lines.append(f"{'OK  ' if not rows else 'FAIL'} {name}" + (f" ({len(rows)})" if rows else ""))
            lines.extend(f"      {row}" for row in rows[:20])
        return "\n".join(lines)


def check(db: Database, sandbox_url: str) -> Report:
    report = Report()
    with db.begin() as conn:
        payments = [dict(r._mapping) for r in conn.execute(sa.text(
            "SELECT id, merchant_reference, idempotency_key, status, amount, currency, psp_reference FROM payments"))]
        events = [dict(r._mapping) for r in conn.execute(sa.text(
            "SELECT payment_id, from_status, to_status, source, job_id, attempt FROM payment_events ORDER BY id"))]
        jobs = [dict(r._mapping) for r in conn.execute(sa.text(
            "SELECT id, kind, state, attempts, lease_until FROM jobs"))]
        attempts = [dict(r._mapping) for r in conn.execute(sa.text(
            "SELECT job_id, attempt, outcome FROM job_attempts ORDER BY job_id, attempt"))]
        now = conn.execute(sa.text("SELECT now()")).scalar_one()
    psp_payments = _sandbox_payments(sandbox_url)
    charges = httpx.get(f"{sandbox_url}/_admin/charges", timeout=10).json()

    by_status: dict[str, int] = defaultdict(int)
    for p in payments:
        by_status[p["status"]] += 1
    report.counts = {"payments": len(payments), **{f"  {k}": v for k, v in sorted(by_status.items())},
                     "payment events": len(events), "jobs": len(jobs), "attempt rows": len(attempts),
                     "sandbox charges": charges["charges"], "sandbox keys": charges["keys"]}
    v = report.violations
    v["every payment is final or needs_review"] = [p for p in payments if p["status"] not in FINAL]
    v["each idempotency key charged at most once"] = [
        (k, n) for k, n in charges["per_key"].items() if n > 1]
    ours = {p["idempotency_key"]: p for p in payments}
    refs = {p["merchant_reference"]: p for p in payments}
    v["every PSP charge maps to exactly one payment"] = [
        k for k in charges["per_key"] if k not in ours] + [
        ref for ref, n in _count(p["merchant_reference"] for p in psp_payments).items() if n > 1 or ref not in refs]
    v["local status equals the PSP's for every final payment"] = _status_mismatches(payments, psp_payments)
    v["every status change has its audit event"] = _broken_trails(payments, events)
    v["no job left leased with an expired lease"] = [
        j for j in jobs if j["state"] == "leased" and j["lease_until"] is not None and j["lease_until"] < now]
    v["attempt histories complete"] = _incomplete_histories(jobs, attempts)
    return report


def _sandbox_payments(url: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cursor = None
    while True:
        params = {"since": "2000-01-01T00:00:00+00:00", "until": "2100-01-01T00:00:00+00:00", "limit": 1000}
        if cursor:
            params["cursor"] = cursor
        page = httpx.get(f"{url}/v1/settlements", params=params, timeout=10).json()
        out.extend(page["data"])
        cursor = page.get("next_cursor")
        if not page.get("has_more"):
            return out


def _count(items: Any) -> dict[Any, int]:
    counts: dict[Any, int] = defaultdict(int)
    for item in items:
        counts[item] += 1
    return counts


def _status_mismatches(payments: list[dict[str, Any]], psp: list[dict[str, Any]]) -> list[Any]:
    """Final local status vs the PSP's settled status (the listing holds final PSP payments)."""
    psp_by_ref = {p["merchant_reference"]: p for p in psp}
    bad = []
    for p in payments:
        theirs = psp_by_ref.get(p["merchant_reference"])
        if p["status"] == "succeeded" and (theirs is None or theirs["status"] != "succeeded"):
            bad.append((p["merchant_reference"], p["status"], theirs and theirs["status"]))
        elif p["status"] == "failed" and theirs is not None and theirs["status"] == "succeeded":
            bad.append((p["merchant_reference"], p["status"], theirs["status"]))
    return bad


def _broken_trails(payments: list[dict[str, Any]], events: list[dict[str, Any]]) -> list[Any]:
    """Each payment's events chain from None -> created -> ... -> its current status, each change's
    ``from`` equal to the previous ``to``."""
    by_payment: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        by_payment[e["payment_id"]].append(e)
    bad = []
    for p in payments:
        chain = by_payment.get(p["id"], [])
        previous = None
        for e in chain:
            if e["from_status"] != previous:
                bad.append((p["merchant_reference"], "event from", e["from_status"], "after", previous))
                break
            previous = e["to_status"]
        else:
            if previous != p["status"]:
                bad.append((p["merchant_reference"], "status", p["status"], "last event", previous))
    return bad


def _incomplete_histories(jobs: list[dict[str, Any]], attempts: list[dict[str, Any]]) -> list[Any]:
    """One history row per claim: attempts 1..n, where the last is missing only while the job is leased."""
    rows: dict[int, list[int]] = defaultdict(list)
    for a in attempts:
        rows[a["job_id"]].append(a["attempt"])
    bad = []
    for j in jobs:
        expected = list(range(1, j["attempts"] + (0 if j["state"] == "leased" else 1)))
        if rows.get(j["id"], []) != expected:
            bad.append((j["id"], j["kind"], j["state"], j["attempts"], rows.get(j["id"], [])))
    return bad
