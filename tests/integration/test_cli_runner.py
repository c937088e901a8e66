"""tests/cli.py: the in-process runner gives what ``python -m recon`` gives, and leaves the process as it was."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy

import recon.cli as recon_cli
from tests import cli
from tests.cli import Runner


@pytest.fixture
def sqlite_url(tmp_path: Path, recon: Runner) -> str:
    url = f"sqlite:///{tmp_path / 'recon.db'}"
    assert recon("db", "upgrade", db_url=url).returncode == 0
    return url


@pytest.mark.parametrize("args", [
    ("jobs", "list", "--json"),  # 0, a JSON document on stdout
    ("jobs", "show", "999999"),  # 2, one line on stderr
    ("jobs", "list", "--state", "lost"),  # 2, click's usage error, named after the command
    ("no-such-command",),
])
def test_runner__in_process_gives_what_a_process_gives(sqlite_url: str, recon: Runner, args: tuple[str, ...]) -> None:
    inside = recon(*args, db_url=sqlite_url, log_level="WARNING")
    outside = recon(*args, db_url=sqlite_url, log_level="WARNING", subprocess=True)
    assert (inside.returncode, inside.stdout, inside.stderr) == (outside.returncode, outside.stdout, outside.stderr)
    assert inside.args == outside.args == ("--database-url", sqlite_url, "--log-level", "WARNING", *args)


def test_runner__puts_back_environment_cwd_logging_signals_and_threads(sqlite_url: str, tmp_path: Path,
                                                                       recon: Runner) -> None:
    root = logging.getLogger()
    before = (dict(os.environ), os.getcwd(), list(root.handlers), root.level,
              logging.getLogger("alembic").level, logging.getLogger("httpx").level,
              signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM), set(threading.enumerate()))
    env = {"PATH": os.environ.get("PATH", ""), "RECON_DATABASE_URL": sqlite_url, "RECON_TEST_ONLY": "1"}
    r = recon("--log-level", "DEBUG", "worker", "--burst", "--concurrency", "2", env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "INFO recon.engine.worker: worker " in r.stderr  # the run's log lines were captured
    after = (dict(os.environ), os.getcwd(), list(root.handlers), root.level,
             logging.getLogger("alembic").level, logging.getLogger("httpx").level,
             signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM), set(threading.enumerate()))
    assert after == before


def test_runner__env_is_the_whole_environment_of_the_call(sqlite_url: str, recon: Runner) -> None:
    assert "RECON_DATABASE_URL" not in os.environ
    r = recon("jobs", "list", "--json", env={**os.environ, "RECON_DATABASE_URL": sqlite_url})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["jobs"] == []
    assert "RECON_DATABASE_URL" not in os.environ


def test_runner__disposes_of_the_database_pool_the_command_made(sqlite_url: str, recon: Runner,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A command's App closes its pool as it ends (``App.close``); in-process, the runner disposes of every
    engine the call made all the same, in case one was not closed (it finds them by wrapping
    ``sqlalchemy.create_engine``, which ``recon.db.database.connect`` calls)."""
    disposed: list[str] = []
    dispose = sqlalchemy.Engine.dispose

    def recording(engine: sqlalchemy.Engine, close: bool = True) -> None:
        disposed.append(engine.url.render_as_string(hide_password=False))
        dispose(engine, close)

    monkeypatch.setattr(sqlalchemy.Engine, "dispose", recording)
    assert recon("jobs", "list", db_url=sqlite_url).returncode == 0
    assert disposed and set(disposed) == {sqlite_url}


def test_runner__sys_exit_with_a_message_is_status_1_and_the_message_on_stderr(
        monkeypatch: pytest.MonkeyPatch, recon: Runner) -> None:
    def main(argv: list[str]) -> None:
        print("partial output")
        sys.exit("recon: gave up")

    monkeypatch.setattr(recon_cli, "main", main)
    r = recon("anything")
    assert (r.returncode, r.stdout, r.stderr) == (1, "partial output\n", "recon: gave up\n")


def test_runner__a_thread_the_command_leaves_running_fails_the_call(monkeypatch: pytest.MonkeyPatch,
                                                                    recon: Runner) -> None:
    stop = threading.Event()

    def main(argv: list[str]) -> None:
        threading.Thread(target=stop.wait, name="left-behind", daemon=True).start()
        sys.exit(0)

    monkeypatch.setattr(recon_cli, "main", main)
    started = time.monotonic()
    try:
        with pytest.raises(AssertionError, match=r"threads still running .*: left-behind"):
            recon("anything", timeout=0.2)
    finally:
        stop.set()
    assert time.monotonic() - started < 5


def test_runner__subprocess_env_puts_the_repository_on_pythonpath() -> None:
    env = cli.python_env({"PYTHONPATH": "/elsewhere"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(cli.REPO), "/elsewhere"]
