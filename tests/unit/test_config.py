from __future__ import annotations

from pathlib import Path

import pytest

from psp_adapters import registry
from recon.audit import AuditConfig
from recon.close.config import CloseConfig
from recon.config import Settings, load_settings
from recon.console.config import ConsoleConfig
from recon.errors import ConfigError
from recon.four_eyes import FourEyesConfig
from recon.payments.config import PaymentsConfig
from recon.webhooks.config import WebhookConfig

REPO = Path(__file__).resolve().parents[2]


def test_config__repository_file_mirrors_the_builtin_defaults() -> None:
    loaded = load_settings(REPO / "config" / "recon.toml", environ={})
    defaults = Settings()
    assert loaded.database_url == defaults.database_url
    assert loaded.engine == defaults.engine
    assert dict(loaded.queues) == dict(defaults.queues)
    assert dict(loaded.retry) == dict(defaults.retry)
    assert PaymentsConfig.from_table(loaded.extra["payments"]) == PaymentsConfig()
    factories = registry.webhook_factories()
    assert WebhookConfig.load(loaded.extra["webhooks"], {}, factories=factories) == \
        WebhookConfig.load(None, {}, factories=factories)
    assert CloseConfig.from_table(loaded.extra["close"]) == CloseConfig()
    assert ConsoleConfig.load(loaded.extra["console"]) == ConsoleConfig()
    assert AuditConfig.load(loaded.extra["audit"]) == AuditConfig()
    assert FourEyesConfig.load(loaded.extra["four_eyes"]) == FourEyesConfig()


def test_config__env_overrides_file(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text('[engine]\nlease_ttl_seconds = 60\n[database]\nurl = "sqlite:///a.db"\n')
    s = load_settings(path, environ={"RECON_DATABASE_URL": "sqlite:///b.db", "RECON_ENGINE_CONCURRENCY": "3"})
    assert (s.database_url, s.engine.lease_ttl_seconds, s.engine.concurrency) == ("sqlite:///b.db", 60.0, 3)


def test_config__queue_and_retry_tables(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text("[queues.charges]\nmax_depth = 1000\nconcurrency = 4\n[retry.network]\nmax_attempts = 3\n")
    s = load_settings(path, environ={})
    assert s.queue("charges").max_depth == 1000 and s.retry["network"].max_attempts == 3
    assert s.retry["network"].cap_seconds == Settings().retry["network"].cap_seconds


@pytest.mark.parametrize(("body", "message"), [
    ("[engine]\nlease_ttl = 5\n", r"r.toml: engine.lease_ttl: unknown key"),
    ("[engine]\nlease_ttl_seconds = 'x'\n", r"engine.lease_ttl_seconds: expected float, got 'x'"),
    ("[engine]\nlease_ttl_seconds = -1\n", r"engine.lease_ttl_seconds: must be > 0"),
    ("[engine]\nheartbeat_interval_seconds = 40\n", r"heartbeat_interval_seconds: must be shorter"),
    ("[queues.q]\nmax_depth = -1\n", r"queues.q.max_depth: must be >= 0"),
    ("[retry.network]\nbase_seconds = 10\ncap_seconds = 1\n", r"retry.network: need 0 < base_seconds <= cap"),
    ("[engine\n", r"r.toml: invalid TOML: .*line 1"),
    ("[database]\nport = 5\n", r"database.port: unknown key"),
])
def test_config__bad_file_names_the_key(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "r.toml"
    path.write_text(body)
    with pytest.raises(ConfigError, match=message):
        load_settings(path, environ={})


def test_config__missing_file_and_bad_env(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_settings(tmp_path / "nope.toml", environ={})
    with pytest.raises(ConfigError, match="RECON_ENGINE_CONCURRENCY: expected int, got 'many'"):
        load_settings(None, environ={"RECON_ENGINE_CONCURRENCY": "many"})


def test_config__prefetch_must_not_be_negative(tmp_path: Path) -> None:
    path = tmp_path / "recon.toml"
    path.write_text("[engine]\nprefetch = -1\n")
    with pytest.raises(ConfigError, match=r"engine\.prefetch: must be >= 0"):
        load_settings(path, environ={})


@pytest.mark.parametrize(("body", "message"), [
    ("[engine]\nlease_ttl_seconds = inf\n", r"engine.lease_ttl_seconds: must be a finite number"),
    ("[engine]\nlease_ttl_seconds = nan\n", r"engine.lease_ttl_seconds: must be a finite number"),
    ("[engine]\nlease_ttl_seconds = 259200000\n", r"engine.lease_ttl_seconds: at most 86400 seconds"),
    ("[engine]\nconcurrency = 100000\n", r"engine.concurrency: at most 1024"),
    ("[retry.network]\ncap_seconds = 1e12\n", r"retry.network.cap_seconds: at most 604800 seconds"),
    ("[queues.charges]\nmax_depth = 9223372036854775807\n", r"queues.charges.max_depth: at most"),
    ("[engin]\nconcurrency = 2\n", r"r.toml: \[engin: unknown section; did you mean 'engine'\?"),
    ("[engine]\nconcurency = 2\n", r"engine.concurency: unknown key; did you mean 'concurrency'\?"),
    ("[retry.netwrok]\nmax_attempts = 2\n", r"retry.netwrok: unknown retry kind; did you mean 'network'\?"),
    ("[retry.validation]\nmax_attempts = 2\n", r"retry.validation: unknown retry kind"),
])
def test_config__out_of_range_numbers_and_typos_name_the_key(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "r.toml"
    path.write_text(body)
    with pytest.raises(ConfigError, match=message):
        load_settings(path, environ={})


@pytest.mark.parametrize(("environ", "message"), [
    ({"RECON_ENGINE_LEASE_TTL_SECONDS": "inf"}, r"RECON_ENGINE_LEASE_TTL_SECONDS: must be a finite number"),
    ({"RECON_ENGINE_LEASE_TTL_SECONDS": "nan"}, r"RECON_ENGINE_LEASE_TTL_SECONDS: must be a finite number"),
    ({"RECON_ENGINE_LEASE_TTL_SECONDS": "1e9"}, r"engine.lease_ttl_seconds: at most 86400 seconds"),
    ({"RECON_ENGINE_LEASE_TTL": "60"}, r"RECON_ENGINE_LEASE_TTL: unknown variable; did you mean "
                                       r"'RECON_ENGINE_LEASE_TTL_SECONDS'\?"),
    ({"RECON_DATABASE_URL": ""}, r"RECON_DATABASE_URL: is empty"),
])
def test_config__bad_environment_names_the_variable(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(None, environ=environ)


def test_config__a_file_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_bytes(b"[engine]\n# caf\xe9\nconcurrency = 2\n")
    with pytest.raises(ConfigError, match=r"r.toml: not valid UTF-8 \(byte 0xe9"):
        load_settings(path, environ={})


def test_config__repr_never_shows_the_database_password() -> None:
    settings = Settings(database_url="postgresql+psycopg://recon:s3cr3t-pw@db.internal:5432/recon")
    assert "s3cr3t-pw" not in repr(settings)
    assert "postgresql+psycopg://recon:***@db.internal:5432/recon" in repr(settings)


def test_config__every_documented_engine_key_has_its_variable() -> None:
    s = load_settings(None, environ={"RECON_ENGINE_PREFETCH": "4", "RECON_ENGINE_PRUNE_OLDER_THAN": "7d",
                                     "RECON_ENGINE_DRAIN_TIMEOUT_SECONDS": "5"})
    assert (s.engine.prefetch, s.engine.prune_older_than, s.engine.drain_timeout_seconds) == (4, "7d", 5.0)


@pytest.mark.parametrize(("body", "where"), [
    ('[webhooks]\nqueue = "wh-4242424242424242"\n', "webhooks.queue"),
    ('[queues."q 4242 4242 4242 4242"]\nmax_depth = 10\n', "queues"),
    ('[schedule.s]\nkind = "sweep"\npayload = {note = ["x", "4242-4242-4242-4242"]}\n', "schedule.s.payload.note"),
    ('[psp.adyen]\nmerchant_account = "Shop4242424242424242"\n', "psp.adyen.merchant_account"),
])
def test_config__a_name_or_text_holding_a_card_number_is_refused_unrepeated(tmp_path: Path, body: str,
                                                                            where: str) -> None:
    path = tmp_path / "recon.toml"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_settings(path, environ={})
    assert str(info.value).startswith(f"{path}: {where}: ") and "card number" in str(info.value)
    assert "4242" not in str(info.value)


def test_config__numbers_and_a_database_url_are_not_card_numbers(tmp_path: Path) -> None:
    path = tmp_path / "recon.toml"
    path.write_text('[database]\nurl = "sqlite:///x-1234567890123.db"\n[queues.q]\nmax_depth = 424242424242\n',
                    encoding="utf-8")
    assert load_settings(path, environ={}).queue("q").max_depth == 424242424242


@pytest.mark.parametrize(("table", "message"), [
    ({"window_day": 3}, "did you mean 'window_days'"),
    ({"bank_fee_tolerance": 100_001}, "close.bank_fee_tolerance: must be an integer from 0 to 100000"),
    ({"psp": {"adyen": {"window_days": 99}}}, "close.psp.adyen.window_days"),
    ({"psp": {"adyen": {"queue": "x"}}}, "close.psp.adyen.queue: unknown key"),
    ({"queue": "a b"}, "close.queue"),
])
def test_close_config__refuses_what_it_does_not_know_or_bound(table: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        CloseConfig.from_table(table, source="recon.toml")


def test_close_config__a_psp_table_overrides_the_defaults_for_that_psp() -> None:
    config = CloseConfig.from_table({"window_days": 2, "psp": {"adyen": {"window_days": 5}}})
    assert (config.rules_for("adyen").window_days, config.rules_for("stripe").window_days) == (5, 2)
