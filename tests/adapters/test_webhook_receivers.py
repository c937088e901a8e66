"""The webhook extension point: every registered PSP's receiver satisfies ``WebhookReceiver`` and its factory
turns its endpoint on only with its secret; Stripe's and Adyen's receivers verify what the official SDKs sign
(stripe-python's ``WebhookSignature``, the Adyen library's ``generate_notification_sig``); the news a receiver
parses is stored as a word and read back as the same news (``news_kind``/``news_from``)."""

from __future__ import annotations

import base64
import json
import secrets
import time

import pytest
import stripe
from Adyen import util as adyen_util

from psp_adapters import registry
from psp_adapters.errors import WebhookRejected
from psp_adapters.protocol import (
    ActionRequired,
    Failed,
    NotFound,
    PaymentOutcome,
    Pending,
    Reversed,
    Succeeded,
    Unknown,
    WebhookReceiver,
    news_from,
    news_kind,
)
from tests.adapters.stripe_oracle import canonical

REASONS = {"no_signature", "bad_signature", "stale_timestamp", "malformed", "unauthorized"}


@pytest.mark.parametrize("name", sorted(registry.webhook_factories()))
def test_receiver__each_psp_with_webhooks_has_an_endpoint_only_with_its_secret(name: str) -> None:
    factory = registry.webhook_factories()[name]
    assert factory({}, tolerance=300) is None
    variable = registry.webhook_secrets(name)[0]
    secret = secrets.token_hex(32)  # a Stripe whsec_ or an Adyen hex key alike
    receiver = factory({variable: secret}, tolerance=300)
    assert isinstance(receiver, WebhookReceiver)
    assert receiver.name == name and receiver.accepted.status == 200
    assert secret not in repr(receiver)
    with pytest.raises(WebhookRejected) as info:
        receiver.verify({}, b'{"id": "evt_1"}', now=time.time())
    assert info.value.reason in REASONS


def test_registry__psps_with_webhooks_and_their_variables() -> None:
    assert sorted(registry.webhook_factories()) == ["adyen", "stripe"]
    assert registry.webhook_secrets("stripe") == ("RECON_STRIPE_WEBHOOK_SECRET",)
    assert registry.webhook_secrets("adyen")[0] == "RECON_ADYEN_HMAC_KEY"


def test_stripe_receiver__verifies_what_stripe_python_signs_and_answers_received() -> None:
    secret = "whsec_" + secrets.token_hex(16)
    receiver = registry.webhook_factories()["stripe"]({"RECON_STRIPE_WEBHOOK_SECRET": secret}, tolerance=300)
    assert receiver is not None
    body = json.dumps(canonical("event", id="evt_r1", type="payment_intent.succeeded", created=int(time.time()),
                                data={"object": canonical("payment_intent", id="pi_r1", status="succeeded",
                                                          amount=1000, amount_received=1000, currency="eur")}))
    now = int(time.time())
    header = stripe.WebhookSignature.generate_signature_header(body, secret, timestamp=now)
    [event] = receiver.verify({"stripe-signature": header}, body.encode(), now=now)
    assert (event.psp, event.event_id, event.event_type) == ("stripe", "evt_r1", "payment_intent.succeeded")
    assert isinstance(event.news, Succeeded) and event.news.psp_reference == "pi_r1"
    assert json.loads(receiver.accepted.body) == {"received": True}
    with pytest.raises(WebhookRejected, match="outside the tolerance") as info:
        receiver.verify({"stripe-signature": header}, body.encode(), now=now + 301)
    assert info.value.reason == "stale_timestamp"


def test_adyen_receiver__verifies_what_adyens_library_signs_checks_basic_auth_and_answers_accepted() -> None:
    key = secrets.token_hex(32)
    env = {"RECON_ADYEN_HMAC_KEY": key, "RECON_ADYEN_WEBHOOK_USERNAME": "adyen",
           "RECON_ADYEN_WEBHOOK_PASSWORD": "s3cret-pass"}
    receiver = registry.webhook_factories()["adyen"](env, tolerance=300)
    assert receiver is not None
    item = {"eventCode": "AUTHORISATION", "success": "true", "pspReference": "8515208516304269",
            "merchantAccountCode": "ShopECOM", "merchantReference": "order-1",
            "amount": {"value": 1000, "currency": "EUR"}, "eventDate": "2026-12-01T10:00:00+01:00"}
    item["additionalData"] = {"hmacSignature": adyen_util.generate_notification_sig(item, key).decode()}
    body = json.dumps({"live": "false", "notificationItems": [{"NotificationRequestItem": item}]}).encode()
    with pytest.raises(WebhookRejected) as info:
        receiver.verify({}, body, now=time.time())
    assert info.value.reason == "unauthorized"
    auth = "Basic " + base64.b64encode(b"adyen:s3cret-pass").decode()
    [event] = receiver.verify({"authorization": auth}, body, now=time.time())
    assert (event.psp, event.merchant_account) == ("adyen", "ShopECOM")
    assert isinstance(event.news, Succeeded) and event.news.psp_reference == "8515208516304269"
    assert receiver.accepted.body == b"[accepted]"  # docs.adyen.com: the body Adyen expects once stored


COMMON = {"psp_reference": "pi_1", "merchant_reference": "order-1", "amount": 1000, "currency": "EUR",
          "raw_status": "s"}


@pytest.mark.parametrize(("news", "word"), [
    (Succeeded(**COMMON), "succeeded"), (Pending(**COMMON), "pending"), (ActionRequired(**COMMON), "action_required"),
    (Failed(**COMMON, reason="card_declined"), "failed"), (Unknown(**COMMON), "unknown"),
    (Reversed(**COMMON, kind="refund", reason="requested_by_customer"), "refund"),
    (Reversed(**COMMON, kind="dispute", reason="fraudulent"), "dispute"),
])
def test_news__stored_as_a_word_and_read_back_as_the_same_news(news: PaymentOutcome | Reversed, word: str) -> None:
    assert news_kind(news) == word
    assert news_from(word, **COMMON, reason=getattr(news, "reason", None)) == news


def test_news__not_found_and_a_word_of_no_news_read_back_as_unknown() -> None:
    assert news_kind(NotFound(**COMMON)) == "unknown"
    assert news_from("chargeback_reversed", **COMMON, reason=None) == Unknown(**COMMON)
