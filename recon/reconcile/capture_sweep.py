"""``recon sweep``'s captures, cancels and authorisations:

- every stale unfinished capture or cancel gets its reconcile job (``reconcile_modification:<id>``,
  recon.reconcile.modification), run with the payments' jobs; the summary counts them apart (``"captures"``)
  with the payments' categories and the same exit rule (in review, dead or still failing: exit 1);
- every authorised payment of a PSP authorised longer ago than ``authorisation_validity`` less
  ``authorisation_warning`` (``[psp.NAME]``, recon.payments.capture_config) is flagged ``authorisation_expiring``
  (listed, exit 1: capture or cancel it); one past its validity gets its reconcile job with ``"expiry": true``
  (recon.reconcile.handler): the PSP's word that it ended (Stripe: canceled, reason automatic; Adyen: the
  report's Expired) ends the payment failed, visibly, never silently.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from recon.db.jobs_store import JobStore
from recon.db.modification_store import ModificationStore
from recon.engine.client import Client
from recon.engine.jobs import JobSpec
from recon.modification_rows import Modification
from recon.payments.capture_config import CaptureConfig
from recon.reconcile.handler import FALLBACK_MAX_ATTEMPTS, RECONCILE_KIND, reconcile_key
from recon.reconcile.modification import MAX_ATTEMPTS, MODIFICATION_RECONCILE_KIND, modification_reconcile_key
from recon.reconcile.sweep import CATEGORIES, SweepOptions
from recon.rows import Job, JobState, PaymentStatus

#: the review reason the sweep gives an authorisation about to expire
EXPIRING = "authorisation_expiring"


@dataclass(slots=True)
class ModificationSelection:
    modification_ids: list[int] = field(default_factory=list)
    job_ids: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.modification_ids)


def enqueue_modifications(store: ModificationStore, client: Client, options: SweepOptions, *,
                          queue: str) -> ModificationSelection:
    """A reconcile job for every stale unfinished capture or cancel (of ``options.psp``; at most ``limit``)."""
    selection = ModificationSelection()
    found: list[Modification] = []
    for n, mod in enumerate(store.iter_stale(older_than=options.older_than, psp=options.psp), start=1):
        found.append(mod)
        if options.limit is not None and n >= options.limit:
            break
    for start in range(0, len(found), 1000):
        page = found[start:start + 1000]
        specs = [JobSpec(MODIFICATION_RECONCILE_KIND, {"modification_id": m.id}, queue=queue,
                         unique_key=modification_reconcile_key(m.id), max_attempts=MAX_ATTEMPTS) for m in page]
        selection.job_ids.extend(client.enqueue_many(specs))
        selection.modification_ids.extend(m.id for m in page)
    return selection


def categorise(mod: Modification, job: Job | None) -> str:
    """What the sweep did for one capture or cancel, judged after the run (the payments' categories)."""
    if mod.status is PaymentStatus.SUCCEEDED:
        return "healed_succeeded"
    if mod.status is PaymentStatus.FAILED:
        return "healed_failed"
    if mod.status is PaymentStatus.NEEDS_REVIEW:
        return "needs_review"
    if job is not None and job.state is JobState.DEAD:
        return "dead"
    if job is not None and job.state is JobState.RETRYABLE:
        return "errors"
    return "still_pending"


def summarise_modifications(store: ModificationStore, jobs: JobStore,
                            selection: ModificationSelection) -> dict[str, Any]:
    counts: Counter[str] = Counter()
    by_job = {j.id: j for j in jobs.get_many(sorted(set(selection.job_ids)))}
    for mid, job_id in zip(selection.modification_ids, selection.job_ids, strict=True):
        mod = store.get(mid)
        if mod is not None:
            counts[categorise(mod, by_job.get(job_id))] += 1
    return {"checked": sum(counts.values()), **{c: counts[c] for c in CATEGORIES if c != "consistent"}}


def check_authorisations(store: ModificationStore, client: Client, config: CaptureConfig, psps: Collection[str], *,
                         now: datetime, queue: str) -> dict[str, Any]:
    """The authorised payments of ``psps`` expiring within their PSP's warning window (flagged, listed), and
    those past their validity (a reconcile job each, ``expiry``: the PSP's word ends them)."""
    expiring: list[dict[str, Any]] = []
    expired: list[dict[str, Any]] = []
    for psp in sorted(psps):
        settings = config.for_psp(psp)
        warn_from = now - (settings.authorisation_validity - settings.authorisation_warning)
        for row in store.iter_authorised_before(psp=psp, cutoff=warn_from):
            expires_at = row["authorised_at"] + settings.authorisation_validity
            item = {"payment": row["merchant_reference"], "psp": psp, "amount": row["amount"],
                    "currency": row["currency"], "expires_at": expires_at.isoformat(),
                    "reason": f"{EXPIRING}: authorised {row['authorised_at'].isoformat()}, the PSP releases it at "
                              f"{expires_at.isoformat()} unless captured"}
            (expired if expires_at <= now else expiring).append({**item, "id": row["id"]})
    specs = [JobSpec(RECONCILE_KIND, {"payment_id": e["id"], "expiry": True}, queue=queue,
                     unique_key=reconcile_key(e["id"]), max_attempts=FALLBACK_MAX_ATTEMPTS) for e in expired]
    jobs = client.enqueue_many(specs) if specs else []
    return {"expiring": len(expiring), "expired_checked": len(expired), "job_ids": jobs,
            "payments": [{k: v for k, v in e.items() if k != "id"} for e in expiring + expired]}


def captures_exit_code(summary: dict[str, Any], authorisations: dict[str, Any]) -> int:
    flagged = authorisations.get("expiring") or authorisations.get("expired_checked")
    return 1 if flagged or any(summary.get(c) for c in ("needs_review", "dead", "errors")) else 0
