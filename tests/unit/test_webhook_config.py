"""``[webhooks]`` settings (recon.webhooks.config.WebhookConfig.load): defaults, and every bad value refused
with the key it names."""

from __future__ import annotations

from datetime import timedelta

import pytest

from recon.errors import ConfigError
from recon.webhooks.config import WebhookConfig


def test_defaults() -> None:
    config = WebhookConfig.load(None, {})
    assert (config.stripe_path, config.adyen_path, config.queue) == ("/webhooks/stripe", "/webhooks/adyen",
                                                                      "webhooks")
    assert config.tolerance == timedelta(minutes=5)
    assert config.commit_wait == timedelta(milliseconds=2)
    assert config.stripe_secrets == () and config.adyen_hmac_keys == ()


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
    ({"stripe_path": "webhooks"}, r"^recon.toml: webhooks.stripe_path: must be a URL path"),
    ({"adyen_path": "/webhooks/stripe"}, r"^recon.toml: webhooks: stripe_path and adyen_path must differ"),
    ({"queue": " "}, r"^recon.toml: webhooks.queue: must be a non-empty string"),
    ({"comit_wait": "1ms"}, r"^recon.toml: webhooks\. ?.*comit_wait.*commit_wait"),
])
def test_bad_values_name_their_key(table: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        WebhookConfig.load(table, {}, source="recon.toml")
