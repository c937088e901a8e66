"""The invariants the chaos suite checks at the end of a run, against the database and the sandbox's own
ledger. Each check returns the offending rows (empty = holds), so a failure shows exactly what broke.

The PSP's truth is read the same way whatever wire the sandbox speaks: its charges per idempotency key from
``GET /_admin/charges`` (every flavour), and its payments as ``{"merchant_reference", "psp_reference",
"status"}`` (status "succeeded", "failed", "canceled" or "pending") from what the flavour itself serves
(``psp_payments_of``): the native settlement listing, Stripe's PaymentIntents search, Adyen's Payment accounting
report. recon may re-key a payment (``KEY-gN``, ``recon.payments.charge``): charges are counted per payment
across all of its key generations."""

from __future__ import annotations

import csv
import io
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import sqlalchemy as sa

from recon.db.database import Database
from tests.chaos.harness import (
    ADYEN_REPORT_PASSWORD,
    ADYEN_REPORT_TIMEZONE,
    ADYEN_REPORT_USERNAME,
    MERCHANT_ACCOUNT,
    PSP_API_KEYS,
)

FINAL = {"succeeded", "failed", "needs_review"}
#: a key generation's suffix (``recon.rows.Payment.charge_key``)
_GENERATION = re.compile(r"-g[0-9]+$")


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


def check(db: Database, sandbox_url: str, psp: str = "sandbox") -> Report:
    """The invariants after a run whose payments went to ``psp`` (recon's adapter: sandbox, stripe, adyen)."""
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
    psp_payments = psp_payments_of(sandbox_url, psp, [p["merchant_reference"] for p in payments])
    charges = httpx.get(f"{sandbox_url}/_admin/charges", timeout=10).json()

    by_status: dict[str, int] = defaultdict(int)
    for p in payments:
        by_status[p["status"]] += 1
    report.counts = {"payments": len(payments), **{f"  {k}": v for k, v in sorted(by_status.items())},
                     "payment events": len(events), "jobs": len(jobs), "attempt rows": len(attempts),
                     "sandbox charges": charges["charges"], "sandbox keys": charges["keys"],
                     "PSP payments read": len(psp_payments)}
    v = report.violations
    v["every payment is final or needs_review"] = [p for p in payments if p["status"] not in FINAL]
    ours = {p["idempotency_key"]: p for p in payments}
    families, strangers = _key_families(charges["per_key"], ours)
    v["each idempotency key charged at most once"] = [
        next(iter(keys.items())) if len(keys) == 1 else (key, keys)
        for key, keys in families.items() if sum(keys.values()) > 1] + [
        (k, charges["per_key"][k]) for k in strangers if charges["per_key"][k] > 1]
    refs = {p["merchant_reference"]: p for p in payments}
    v["every PSP charge maps to exactly one payment"] = strangers + [
        ref for ref, n in _count(p["merchant_reference"] for p in psp_payments).items() if n > 1 or ref not in refs] + (
        [("charges without an idempotency key", charges["without_key"])] if charges.get("without_key") else [])
    v["local status equals the PSP's for every final payment"] = _status_mismatches(payments, psp_payments)
    v["every status change has its audit event"] = _broken_trails(payments, events)
    v["no job left leased with an expired lease"] = [
        j for j in jobs if j["state"] == "leased" and j["lease_until"] is not None and j["lease_until"] < now]
    v["attempt histories complete"] = _incomplete_histories(jobs, attempts)
    return report


def psp_payments_of(url: str, psp: str, references: Iterable[str]) -> list[dict[str, Any]]:
    """The PSP's payments, one dict each (``merchant_reference``, ``psp_reference``, ``status``), as its
    flavour serves them: the native sandbox lists its final payments; Stripe is searched for each of our
    ``references`` (only by metadata, as Stripe allows; a charge under a reference not ours shows up in the
    per-key counts); Adyen's Payment accounting reports of today and yesterday are read whole."""
    if psp == "stripe":
        return _stripe_payments(url, references)
    if psp == "adyen":
        return _adyen_payments(url)
    return _sandbox_payments(url)


def _sandbox_payments(url: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, str | int] = {"since": "2000-01-01T00:00:00+00:00", "until": "2100-01-01T00:00:00+00:00",
                                        "limit": 1000}
        if cursor:
            params["cursor"] = cursor
        page = httpx.get(f"{url}/v1/settlements", params=params, timeout=10,
                         headers={"Authorization": f"Bearer {PSP_API_KEYS['sandbox']}"}).json()
        out.extend(page["data"])
        cursor = page.get("next_cursor")
        if not page.get("has_more"):
            return out


def _stripe_payments(url: str, references: Iterable[str]) -> list[dict[str, Any]]:
    """Every PaymentIntent carrying one of our references (``GET /v1/payment_intents/search``, every page)."""
    out: list[dict[str, Any]] = []
    headers = {"Authorization": f"Bearer {PSP_API_KEYS['stripe']}"}
    with httpx.Client(base_url=url, headers=headers, timeout=10) as client:
        for ref in sorted(set(references)):
            page: str | None = None
            while True:
                params = {"query": f"metadata['merchant_reference']:'{ref}'", "limit": "100"}
                if page is not None:
                    params["page"] = page
                response = client.get("/v1/payment_intents/search", params=params)
                response.raise_for_status()
                doc = response.json()
                out.extend({"merchant_reference": i["metadata"].get("merchant_reference"), "psp_reference": i["id"],
                            "status": _stripe_status(i)} for i in doc["data"])
                page = doc.get("next_page")
                if not doc.get("has_more") or page is None:
                    break
    return out


def _stripe_status(intent: dict[str, Any]) -> str:
    """A PaymentIntent's status in the sandbox's words: a declined (or unauthenticated) attempt leaves the
    intent in requires_payment_method with its last_payment_error; processing is still pending."""
    status = intent["status"]
    if status == "succeeded" or status == "canceled":
        return str(status)
    if status == "requires_payment_method" and intent.get("last_payment_error"):
        return "failed"
    return "pending"


#: the Payment accounting report's record types (psp_adapters.sandbox.adyen_report) -> a final status
_ADYEN_RECORD_STATUS = {"Settled": "succeeded", "Refused": "failed", "Cancelled": "canceled"}


def _adyen_payments(url: str) -> list[dict[str, Any]]:
    """Every payment in the reports of our merchant account for yesterday and today (the report zone's days):
    the status of its latest final journal row, "pending" while it has none (Received only)."""
    today = datetime.now(ZoneInfo(ADYEN_REPORT_TIMEZONE)).date()
    found: dict[str, dict[str, Any]] = {}
    auth = (ADYEN_REPORT_USERNAME, ADYEN_REPORT_PASSWORD)
    with httpx.Client(base_url=url, auth=auth, timeout=10) as client:
        for day in (today - timedelta(days=1), today):
            path = f"/reports/download/MerchantAccount/{MERCHANT_ACCOUNT}/" \
                   f"payments_accounting_report_{day:%Y_%m_%d}.csv"
            response = client.get(path)
            if response.status_code == 404:  # no payment of this account yet
                continue
            response.raise_for_status()
            for row in csv.DictReader(io.StringIO(response.text)):  # in booking order
                payment = found.setdefault(row["Psp Reference"], {
                    "merchant_reference": row["Merchant Reference"], "psp_reference": row["Psp Reference"],
                    "status": "pending"})
                if row["Record Type"] in _ADYEN_RECORD_STATUS:
                    payment["status"] = _ADYEN_RECORD_STATUS[row["Record Type"]]
    return list(found.values())


def _key_families(per_key: dict[str, int], ours: dict[str, Any]) -> tuple[dict[str, dict[str, int]], list[str]]:
    """The PSP's charges per key grouped by our payment (its key ``K`` and its generations ``K-gN``), and the
    charged keys that belong to no payment of ours."""
    families: dict[str, dict[str, int]] = defaultdict(dict)
    strangers: list[str] = []
    for key, n in per_key.items():
        base = key if key in ours else _GENERATION.sub("", key)
        if base in ours:
            families[base][key] = n
        else:
            strangers.append(key)
    return families, strangers


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
