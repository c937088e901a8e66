"""``[payments]``: the charge jobs' queue, a bounded name (recon.payments.config)."""

from __future__ import annotations

import pytest

from recon.errors import ConfigError
from recon.payments.config import PaymentsConfig


def test_payments_config__the_charge_queue_defaults_to_charges_and_may_be_renamed() -> None:
    assert PaymentsConfig.from_table(None).queue == "charges"
    assert PaymentsConfig.from_table({"queue": "payments-eu"}).queue == "payments-eu"


@pytest.mark.parametrize(("table", "message"), [
    ({"queue": ""}, "payments.queue: must be a queue name of 1 to 100 characters"),
    ({"queue": " charges"}, "payments.queue: must be a queue name"),
    ({"queue": "q" * 101}, "payments.queue: must be a queue name of 1 to 100 characters"),
    ({"queue": 7}, "payments.queue: must be a queue name"),
    ({"queues": "charges"}, "payments.queues: unknown key; did you mean 'queue'?"),
])
def test_payments_config__a_bad_queue_names_the_key(table: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match="^recon.toml: " + message.replace("?", r"\?")):
        PaymentsConfig.from_table(table, source="recon.toml")
