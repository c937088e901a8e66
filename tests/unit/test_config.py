from __future__ import annotations

from pathlib import Path

import pytest

from recon.config import Settings, load_settings
from recon.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_config__repository_file_mirrors_the_builtin_defaults() -> None:
    loaded = load_settings(REPO / "config" / "recon.toml", environ={})
    defaults = Settings()
    assert loaded.database_url == defaults.database_url
    assert loaded.engine == defaults.engine
    assert dict(loaded.queues) == dict(defaults.queues)
    assert dict(loaded.retry) == dict(defaults.retry)


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
    ("[database]\nport = 5\n", r"unknown key database.port"),
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
