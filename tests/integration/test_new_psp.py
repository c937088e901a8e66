"""Adding a PSP is one package and one line in the registry, with no edit in recon/ (issue 23).

This module is the whole of a throwaway PSP, "acme": its adapter (``AcmeAdapter``: charges, lookups, an
in-memory ledger), its webhook receiver (``AcmeWebhook``: an HMAC of the body in a header, a JSON event), and the
``PSP`` record its package would export. The test adds the one registry line (``registry.PACKAGES``, pointing at
this module) and drives recon's own command line and webhook endpoint: an import charges through the adapter,
a sweep reconciles what the charge left pending, a webhook heals another payment, each with the PSP's evidence in
the audit trail.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import threading
from collections.abc import Collection, Iterator, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import pytest

from psp_adapters import registry
from psp_adapters import settings as s
from psp_adapters.errors import PspRejectedError, WebhookRejected
from psp_adapters.protocol import (
    ChargeRequest,
    NotFound,
    PaymentOutcome,
    PaymentPage,
    Pending,
    PspPackage,
    PspRef,
    SettlementLine,
    Succeeded,
    WebhookAnswer,
    WebhookEvent,
)
from recon.app import App
from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.rows import PaymentStatus
from recon.webhooks.server import create_app
from tests.cli import Runner
from tests.console import TestClient

SECRET_VARIABLE = "RECON_ACME_WEBHOOK_SECRET"  # nosec B105  # a variable's name
SIGNATURE_HEADER = "x-acme-signature"

#: the PSP's books: merchant reference -> (its reference, amount, currency); a charge of a reference ending in
#: "-now" settles at once, any other answers pending and has settled by the time anyone asks again
_LEDGER: dict[str, tuple[str, int, str]] = {}
_LOCK = threading.Lock()


class AcmeAdapter:
    name: ClassVar[str] = "acme"
    idempotency_retention: ClassVar[timedelta | None] = None
    lists_payments: ClassVar[bool] = False
    search_lag: ClassVar[timedelta] = timedelta(0)
    listing_window: ClassVar[timedelta | None] = None

    def create_payment(self, request: ChargeRequest, *, idempotency_key: str) -> PaymentOutcome:
        with _LOCK:
            ref, amount, currency = _LEDGER.setdefault(
                request.merchant_reference, (f"acme_{request.merchant_reference}", request.amount, request.currency))
        outcome = Succeeded if request.merchant_reference.endswith("-now") else Pending
        return outcome(psp_reference=ref, amount=amount, currency=currency, raw_status=outcome.__name__.lower(),
                       merchant_reference=request.merchant_reference)

    def fetch_payment(self, ref: PspRef) -> PaymentOutcome:
        with _LOCK:
            found = _LEDGER.get(ref.merchant_reference or "")
        if found is None:
            return NotFound(merchant_reference=ref.merchant_reference)
        return Succeeded(psp_reference=found[0], amount=found[1], currency=found[2], raw_status="settled",
                         merchant_reference=ref.merchant_reference)

    def iter_settlements(self, since: datetime, until: datetime, *,
                         merchant_accounts: Collection[str] = ()) -> Iterator[SettlementLine]:
        return iter(())

    def iter_payments(self, since: datetime, until: datetime, *,
                      merchant_accounts: Collection[str] = ()) -> Iterator[PaymentPage]:
        raise PspRejectedError("acme lists no payments", psp="acme")

    def close(self) -> None:
        pass


class AcmeWebhook:
    name: ClassVar[str] = "acme"
    accepted: ClassVar[WebhookAnswer] = WebhookAnswer(b"ok", "text/plain")

    def __init__(self, secret: str) -> None:
        self._secret = secret.encode()

    def verify(self, headers: Mapping[str, str], body: bytes, *, now: float) -> list[WebhookEvent]:
        expected = hmac.new(self._secret, body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, headers.get(SIGNATURE_HEADER) or ""):
            raise WebhookRejected("bad_signature", f"{SIGNATURE_HEADER} does not match")
        doc = json.loads(body)
        news = Succeeded(psp_reference=doc["reference"], amount=doc["amount"], currency=doc["currency"],
                         raw_status=doc["type"], merchant_reference=doc["merchant_reference"])
        return [WebhookEvent(psp="acme", event_id=doc["id"], event_type=doc["type"], occurred_at=None, news=news,
                             body=doc)]


def receiver(environ: Mapping[str, str], *, tolerance: float) -> AcmeWebhook | None:
    secret = environ.get(SECRET_VARIABLE)
    return AcmeWebhook(secret) if secret else None


def create(settings: Mapping[str, Any]) -> AcmeAdapter:
    s.text(settings, "base_url", required=True)
    return AcmeAdapter()


PSP = PspPackage(adapter=AcmeAdapter, create=create, base_url="https://api.acme.invalid", webhook=receiver,
                 webhook_secrets=(SECRET_VARIABLE,))


@pytest.fixture
def acme(monkeypatch: pytest.MonkeyPatch) -> str:
    """The one registry line, and the PSP's webhook secret in the environment."""
    monkeypatch.setitem(registry.PACKAGES, "acme", __name__)
    secret = secrets.token_hex(16)
    monkeypatch.setenv(SECRET_VARIABLE, secret)
    _LEDGER.clear()
    return secret


def test_new_psp__charged_reconciled_and_healed_by_its_webhook_with_no_edit_in_recon(
        acme: str, db: Database, db_url: str, tmp_path: Path, recon: Runner) -> None:
    assert "acme" not in Path(registry.__file__).read_text(encoding="utf-8")  # the registry line is the test's
    payments = tmp_path / "payments.csv"
    payments.write_text("merchant_reference,amount,currency,psp\norder-1-now,10.00,EUR,acme\n"
                        "order-2,20.00,EUR,acme\norder-3,30.00,EUR,acme\n", encoding="utf-8")
    r = recon("payments", "import", str(payments), db_url=db_url)
    assert r.returncode == 0, r.stderr
    r = recon("worker", "--burst", "--queues", "charges", db_url=db_url)
    assert r.returncode == 0, r.stderr
    ledger = PaymentStore(db)
    by_ref = {p.merchant_reference: p for p in ledger.iter_payments()}
    assert {ref: p.status for ref, p in by_ref.items()} == {
        "order-1-now": PaymentStatus.SUCCEEDED, "order-2": PaymentStatus.PENDING, "order-3": PaymentStatus.PENDING}

    # the webhook: POST /webhooks/acme, verified by acme's receiver, stored, answered as acme expects, applied
    body = json.dumps({"id": "evt_3", "type": "payment.settled", "reference": "acme_order-3",
                       "merchant_reference": "order-3", "amount": 3000, "currency": "EUR"}).encode()
    app = App(database_url=db_url)
    try:
        with TestClient(create_app(app), base_url="http://127.0.0.1") as client:
            forged = client.post("/webhooks/acme", content=body, headers={SIGNATURE_HEADER: "0" * 64})
            signed = hmac.new(acme.encode(), body, hashlib.sha256).hexdigest()
            answer = client.post("/webhooks/acme", content=body, headers={SIGNATURE_HEADER: signed})
        assert (forged.status_code, answer.status_code, answer.text) == (400, 200, "ok")
        app.worker([app.webhook_config.queue]).run(burst=True)
    finally:
        app.close()
    assert ledger.get(by_ref["order-3"].id).status is PaymentStatus.SUCCEEDED  # type: ignore[union-attr]
    [healed] = [e for e in ledger.events(by_ref["order-3"].id) if e.to_status == "succeeded"]
    assert healed.source == "webhook" and (healed.details or {})["webhook"]["event_id"] == "evt_3"

    # the sweep: order-2's reconcile job asks acme, which has settled it since
    r = recon("sweep", "--older-than", "0s", "--json", db_url=db_url)
    assert r.returncode == 0, r.stderr
    assert ledger.get(by_ref["order-2"].id).status is PaymentStatus.SUCCEEDED  # type: ignore[union-attr]
    [healed] = [e for e in ledger.events(by_ref["order-2"].id) if e.to_status == "succeeded"]
    assert (healed.source, (healed.details or {})["psp_status"]) == ("reconcile", "settled")
