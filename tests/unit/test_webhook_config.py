"""``[webhooks]`` settings (recon.webhooks.config.WebhookConfig.load): defaults, a ``[webhooks.NAME]`` table per
registered PSP with webhooks, receivers built from the environment's secrets, and every bad value refused with
the key or variable it names."""

from __future__ import annotations

import secrets
from datetime import timedelta

import pytest

from psp_adapters import registry
from psp_adapters.adyen.webhook import AdyenWebhook
from psp_adapters.stripe.webhook import StripeWebhook
from recon.errors import ConfigError
from recon.webhooks import config as webhooks
from recon.webhooks.config import WebhookConfig

FACTORIES = registry.webhook_factories()


def test_defaults() -> None:
    config = WebhookConfig.load(None, {}, factories=FACTORIES)
    assert dict(config.paths) == {"adyen": "/webhooks/adyen", "stripe": "/webhooks/stripe"}  # sandbox: no webhooks
    assert config.queue == "webhooks"
    assert config.tolerance == timedelta(minutes=5)
    assert config.commit_wait == timedelta(milliseconds=2)
    assert dict(config.receivers) == {}  # no secret in the environment: no receiver, each path answers 404


def test_receivers__from_the_environment_only_and_never_in_a_repr() -> None:
    key, whsec = secrets.token_hex(32), "whsec_" + secrets.token_hex(16)
    env = {"RECON_STRIPE_WEBHOOK_SECRET": f" {whsec}, ", "RECON_ADYEN_HMAC_KEY": key,
           "RECON_ADYEN_WEBHOOK_USERNAME": "adyen", "RECON_ADYEN_WEBHOOK_PASSWORD": "s3cret-pass"}
    config = WebhookConfig.load({"stripe": {"path": "/in/stripe"}}, env, factories=FACTORIES)
    assert dict(config.paths) == {"adyen": "/webhooks/adyen", "stripe": "/in/stripe"}
    assert isinstance(config.receivers["stripe"], StripeWebhook) and isinstance(config.receivers["adyen"], AdyenWebhook)
    shown = repr(config) + repr(dict(config.receivers))
    assert whsec not in shown and key not in shown and "s3cret-pass" not in shown


@pytest.mark.parametrize(("value", "expected"), [
    ("0", timedelta(0)), ("1ms", timedelta(milliseconds=1)), ("500ms", timedelta(milliseconds=500)),
    ("1s", timedelta(seconds=1)), (0, timedelta(0)),
])
def test_commit_wait__durations(value: object, expected: timedelta) -> None:
    assert WebhookConfig.load({"commit_wait": value}, {}).commit_wait == expected


@pytest.mark.parametrize(("table", "message"), [
    ({"commit_wait": "soon"}, r"^recon.toml: webhooks.commit_wait: .*'soon' is not a duration"),
    ({"commit_wait": "2s"}, r"^recon.toml: webhooks.commit_wait: must be between 0 and 1s \(got '2s'\)"),
    ({"commit_wait": "-1ms"}, r"^recon.toml: webhooks.commit_wait: .*is not a duration"),
    ({"tolerance": "0s"}, r"^recon.toml: webhooks.tolerance: must be between 1s and 1d"),
    ({"max_body_bytes": 10}, r"^recon.toml: webhooks.max_body_bytes: must be an integer between 1024"),
    ({"stripe": {"path": "webhooks"}}, r"^recon.toml: webhooks.stripe.path: must be a URL path"),
    ({"adyen": {"path": "/webhooks/stripe"}},
     r"^recon.toml: webhooks: adyen and stripe have the same path '/webhooks/stripe'; each PSP needs its own"),
    ({"stripe": {"paht": "/x"}}, r"^recon.toml: webhooks.stripe.paht: unknown key; did you mean 'path'\?"),
    ({"strpe": {"path": "/x"}}, r"^recon.toml: webhooks.strpe: unknown PSP with webhooks; did you mean 'stripe'\?"),
    ({"sandbox": {"path": "/x"}}, r"^recon.toml: webhooks.sandbox: unknown PSP with webhooks"),
    ({"stripe_path": "/x"}, r"^recon.toml: webhooks.stripe_path: now \[webhooks.stripe\] path"),
    ({"queue": " "}, r"^recon.toml: webhooks.queue: must be a non-empty string"),
    ({"comit_wait": "1ms"}, r"^recon.toml: webhooks\. ?.*comit_wait.*commit_wait"),
])
def test_bad_values_name_their_key(table: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        WebhookConfig.load(table, {}, source="recon.toml", factories=FACTORIES)


@pytest.mark.parametrize(("env", "message"), [
    ({"RECON_ADYEN_HMAC_KEY": "not-hex"}, r"^RECON_ADYEN_HMAC_KEY: HMAC key #1 is not a hexadecimal string$"),
    ({"RECON_ADYEN_HMAC_KEY": "00ff", "RECON_ADYEN_WEBHOOK_USERNAME": "adyen"},
     r"^RECON_ADYEN_WEBHOOK_USERNAME and RECON_ADYEN_WEBHOOK_PASSWORD: set both or neither$"),
])
def test_a_secret_set_wrong_names_its_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        WebhookConfig.load(None, env, factories=FACTORIES)


def test_check__the_file_alone_for_every_command_with_the_psp_names() -> None:
    webhooks.check({"stripe": {"path": "/in"}}, source="recon.toml", psps=registry.names())
    with pytest.raises(ConfigError, match=r"^recon.toml: webhooks.paypal: unknown PSP with webhooks"):
        webhooks.check({"paypal": {"path": "/in"}}, source="recon.toml", psps=registry.names())
