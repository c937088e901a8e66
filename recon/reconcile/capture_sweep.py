"""``recon sweep``'s authorisations (its captures and cancels are every movement's: recon.reconcile.movement_sweep):

- every authorised payment of a PSP authorised longer ago than ``authorisation_validity`` less
  ``authorisation_warning`` (``[psp.NAME]``, recon.payments.capture_config) is flagged ``authorisation_expiring``
  (listed, exit 1: capture or cancel it); one past its validity gets its reconcile job with ``"expiry": true``
  (recon.reconcile.handler): the PSP's word that it ended (Stripe: canceled, reason automatic; Adyen: the
  report's Expired) ends the payment failed, visibly, never silently.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

from recon.db.modification_store import ModificationStore
from recon.engine.client import Client
from recon.engine.jobs import JobSpec
from recon.payments.capture_config import CaptureConfig
from recon.reconcile.handler import FALLBACK_MAX_ATTEMPTS, RECONCILE_KIND, reconcile_key
from recon.reconcile.movement_sweep import movements_exit_code

#: the review reason the sweep gives an authorisation about to expire
EXPIRING = "authorisation_expiring"


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
    """The captures' exit rule (``movements_exit_code``), and 1 while an authorisation is expiring or expired."""
    flagged = authorisations.get("expiring") or authorisations.get("expired_checked")
    return 1 if flagged else movements_exit_code(summary)
