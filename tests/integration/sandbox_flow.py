"""recon against one of the sandbox's flavours, end to end: its App (real adapters on the sandbox's URL) and its
webhook application, with the webhooks the sandbox sent and signed caught by a receiver and handed to recon only
when a test says (``Flow.deliver``), so a test can drop some. Used by the dispute, refund and payout-line tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from psp_adapters.adyen.adapter import AdyenAdapter
from psp_adapters.protocol import PspAdapter, Secret
from psp_adapters.sandbox import SandboxServer
from psp_adapters.sandbox.webhooks import WebhookConfig
from psp_adapters.stripe.adapter import StripeAdapter
from recon.app import App
from recon.rows import NewPayment, PaymentStatus
from recon.webhooks.server import create_app
from tests.adapters.sandbox.webhook_receiver import Receiver, receiving
from tests.console import TestClient
from tests.integration.test_webhooks import work

P = PaymentStatus
KEY = "sk_test_disputes_e2e"
WHSEC = "whsec_disputes_e2e_0123456789abcdef"
HMAC_KEY = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
ADYEN_KEY = "AQE_disputes_e2e"
ACCOUNT = "ShopECOM"
REPORT_USER, REPORT_PASSWORD = "report@Company.Sandbox", "report-password"
TIMEOUT = httpx.Timeout(5.0)


class Flow:
    """recon (its App and webhook application) and one sandbox flavour, with the webhooks the sandbox sent caught
    by a receiver and handed to recon only when the test says (``deliver``), so a test can drop some."""

    def __init__(self, app: App, server: SandboxServer, receiver: Receiver, psp: str) -> None:
        self.app, self.server, self.receiver, self.psp = app, server, receiver, psp
        self.client = TestClient(create_app(app), base_url="http://127.0.0.1")
        self.handed = 0
        headers = {"Authorization": f"Bearer {KEY}"} if psp == "stripe" else {"X-API-Key": ADYEN_KEY}
        self.admin = httpx.Client(base_url=server.url, headers=headers, timeout=5)

    def deliver(self, *, drop: bool = False) -> list[str]:
        """Every webhook the sandbox sent since the last call, handed to recon (or dropped); their types."""
        sent = self.receiver.quiet(0.4)
        fresh, self.handed = sent[self.handed :], len(sent)
        types = []
        for d in fresh:
            doc = d.json()
            types.append(doc.get("type") or doc["notificationItems"][0]["NotificationRequestItem"]["eventCode"])
            if not drop:
                answer = self.client.post(
                    f"/webhooks/{self.psp}",
                    content=d.body,
                    headers={k: v for k, v in d.headers.items() if k.lower() in ("content-type", "stripe-signature")},
                )
                assert answer.status_code == 200, answer.text
        work(self.app)
        return types

    def charge(self, n: int, *, method: str = "pm_card_visa", first: int = 0) -> list[int]:
        """``n`` payments of 50.00 EUR charged through recon's adapter (``order-<first>``…), succeeded."""
        ids = self.app.payments.create(
            [
                NewPayment(
                    ACCOUNT,
                    f"order-{i}",
                    5000,
                    "EUR",
                    self.psp,
                    payment_method=method,
                    customer_reference="cus_disputes",
                )
                for i in range(first, first + n)
            ]
        )
        queue = self.app.payments_config.queue
        self.app.worker([queue], handlers=self.app.handlers(kinds=("charge",))).run(burst=True)
        self.deliver()
        for pid in ids:
            assert self.payment(pid).status is P.SUCCEEDED
        return ids

    def run(self, *kinds: str) -> None:
        """A worker on every queue those job kinds use, until none is left."""
        handlers = self.app.handlers(kinds=kinds)
        queues = sorted({self.app.payments_config.queue, self.app.reconcile_config.queue})
        self.app.worker(queues, handlers=handlers).run(burst=True)

    def payment(self, pid: int) -> Any:
        found = self.app.payments.get(pid)
        assert found is not None
        return found

    def post(self, path: str, body: dict[str, object] | None = None) -> dict[str, Any]:
        answer = self.admin.post(path, json=body or {})
        assert answer.status_code == 200, answer.text
        return answer.json()  # type: ignore[no-any-return]

    def dispute(self, pid: int, **body: object) -> str:
        """The sandbox's dispute of our payment: its id (Stripe's dp_…; Adyen's, whose dispute is the payment's)."""
        made = self.post(f"/_admin/payments/{self.payment(pid).psp_reference}/dispute", dict(body))
        return str(made.get("id") or made.get("pspReference"))

    def fetch(self) -> dict[str, Any]:
        today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        return self.app.fetch_disputes(self.psp, today - timedelta(days=1), today + timedelta(days=1)).to_dict()

    def close(self) -> None:
        self.client.close()
        self.admin.close()


def _adapter(psp: str, url: str) -> PspAdapter:
    if psp == "stripe":
        return StripeAdapter(url, api_key=Secret(KEY), timeout=TIMEOUT)
    return AdyenAdapter(
        url,
        api_key=Secret(ADYEN_KEY),
        merchant_account=ACCOUNT,
        report_base_url=url,
        report_username=REPORT_USER,
        report_password=Secret(REPORT_PASSWORD),
        report_timezone="UTC",
        lookback_days=1,
        timeout=TIMEOUT,
    )


@contextmanager
def open_flow(psp: str, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Flow]:
    """recon on ``db_url`` and the sandbox's ``psp`` flavour, its webhooks caught for ``Flow.deliver``."""
    monkeypatch.setenv("RECON_STRIPE_WEBHOOK_SECRET", WHSEC)
    monkeypatch.setenv("RECON_ADYEN_HMAC_KEY", HMAC_KEY)
    monkeypatch.delenv("RECON_CONFIG", raising=False)
    with receiving((200, b"[accepted]")) as receiver:  # what Adyen wants back; any 2xx does for Stripe
        secret = WHSEC if psp == "stripe" else HMAC_KEY
        hooks = WebhookConfig(
            url=receiver.url,
            secret=Secret(secret),
            backoff_seconds=0.05,
            events=frozenset({"*"}) if psp == "stripe" else None,
        )
        extra: dict[str, Any] = (
            {}
            if psp == "stripe"
            else {"report_username": REPORT_USER, "report_password": REPORT_PASSWORD, "report_timezone": "UTC"}
        )
        with SandboxServer(
            tmp_path / f"{psp}.db", flavor=psp, api_key=KEY if psp == "stripe" else ADYEN_KEY, webhooks=hooks, **extra
        ) as server:
            app = App(database_url=db_url, adapter_factory=lambda name: _adapter(name, server.url))
            flow = Flow(app, server, receiver, psp)
            yield flow
            flow.close()
            app.close()
            app.db.dispose()
