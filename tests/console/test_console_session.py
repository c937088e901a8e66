"""Console sessions are the server's: a login opens one (a new id each time, never one the browser brought),
logout ends it for good, and the server ends it after 15 idle minutes or 12 hours, whatever the browser keeps.
The database holds only a SHA-256 of each session id; ended sessions are pruned at the next login; a busy
session costs at most one write a minute. On both databases, through the console's HTTP surface."""

from __future__ import annotations

import hashlib
import re
import secrets
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from recon.clock import FixedClock
from recon.console.config import ConsoleConfig
from recon.console.session import SessionState, state_of
from recon.console_rows import ConsoleSession
from recon.db.database import Database
from recon.errors import ConfigError
from recon.redact import redact
from tests.cli import Runner
from tests.console import BASE_URL, TestClient, console, csrf_token

TOKEN = "correct-horse-battery-staple-42"
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
#: a cheap page that needs a session
PAGE = "/psps"


def log_in(client: TestClient, **headers: str) -> str:
    """Log in through the form; returns the session cookie the console set."""
    csrf = csrf_token(client, "/login")
    r = client.post("/login", data={"token": TOKEN, "csrf": csrf}, follow_redirects=False, headers=headers)
    assert r.status_code == 303, r.text[-500:]
    [sid] = [c.split(";")[0].partition("=")[2] for c in r.headers.get_list("set-cookie")
             if c.startswith("recon_session=")]
    assert sid
    return sid


def replay(client: TestClient, sid: str) -> None:
    """The client's cookie jar holds ``sid`` as its only session cookie, as a copied cookie would be sent."""
    client.cookies.delete("recon_session")
    client.cookies.set("recon_session", sid, domain="127.0.0.1")


def rows(db: Database) -> list[dict[str, Any]]:
    with db.begin() as conn:
        return [dict(r._mapping) for r in conn.exec_driver_sql("SELECT * FROM console_sessions ORDER BY id")]


def cleared(set_cookie: str) -> bool:
    """``set_cookie`` removes the session cookie from the browser."""
    return set_cookie.startswith("recon_session=") and "Max-Age=0" in set_cookie


def test_logout__ends_the_session_on_the_server_and_its_cookie_is_refused_after(db: Database, db_url: str) -> None:
    with console(db_url, token=TOKEN) as client:
        sid = log_in(client)
        assert client.get(PAGE).status_code == 200
        r = client.post("/logout", data={"csrf": csrf_token(client)}, follow_redirects=False)
        assert (r.status_code, r.headers["location"]) == (303, "/login")
        assert any(cleared(c) for c in r.headers.get_list("set-cookie"))
        replay(client, sid)  # the cookie copied before logout, sent again
        r = client.get(PAGE)
        assert r.status_code == 401 and 'action="/login"' in r.text
        assert client.post("/logout", data={"csrf": csrf_token(client)}, follow_redirects=False).status_code == 401
    with console(db_url, token=TOKEN) as client:  # another process (a restart, a second host) refuses it too
        replay(client, sid)
        assert client.get(PAGE).status_code == 401
    [row] = rows(db)
    assert row["revoked_at"] is not None


def test_login__a_new_session_id_each_time_never_one_the_browser_brought(db_url: str) -> None:
    with console(db_url, token=TOKEN) as client:
        planted = "A" * 43  # fixed in the victim's browser by someone who hopes to share the session
        replay(client, planted)
        first = log_in(client)
        second = log_in(client)  # logging in again replaces the live session
        assert len({planted, first, second}) == 3
        for old in (planted, first):
            replay(client, old)
            assert client.get(PAGE).status_code == 401, old
        replay(client, second)
        assert client.get(PAGE).status_code == 200


def test_session__the_database_holds_a_hash_of_its_id_never_the_id_nor_the_token(db: Database, db_url: str) -> None:
    with console(db_url, token=TOKEN) as client:
        sid = log_in(client)
    [row] = rows(db)
    stored = " ".join(str(v) for v in row.values())
    assert sid not in stored and TOKEN not in stored
    assert bytes(row["sid_hash"]) == hashlib.sha256(sid.encode()).digest()
    assert re.fullmatch(r"access-token/[a-z2-7]{26}", row["principal"])
    assert redact(row["principal"]) == row["principal"]  # stored through the redaction boundary, unchanged
    assert row["revoked_at"] is None and row["operator_id"] is not None  # the token's own operator
    assert len(sid) >= 43  # 256 random bits, URL-safe base64


def test_idle__fifteen_minutes_without_a_request_end_the_session(db_url: str) -> None:
    clock = FixedClock(T0)
    with console(db_url, token=TOKEN, clock=clock) as client:
        log_in(client)
        for _ in range(8):  # a request every 14 minutes for nearly two hours: still in
            clock.advance(timedelta(minutes=14))
            assert client.get(PAGE).status_code == 200
        clock.advance(timedelta(minutes=15))
        r = client.get(PAGE)
        assert r.status_code == 401 and "idle for 15 minutes" in r.text
        assert any(cleared(c) for c in r.headers.get_list("set-cookie"))


def test_absolute__twelve_hours_after_login_the_session_ends_however_busy(db_url: str) -> None:
    clock = FixedClock(T0)
    with console(db_url, token=TOKEN, clock=clock) as client:
        log_in(client)
        for _ in range(71):  # busy every 10 minutes until 11:50 after login
            clock.advance(timedelta(minutes=10))
            assert client.get(PAGE).status_code == 200
        clock.advance(timedelta(minutes=10))
        r = client.get(PAGE)
        assert r.status_code == 401 and "12 hours" in r.text


def test_last_seen__written_at_most_once_a_minute(db: Database, db_url: str) -> None:
    clock = FixedClock(T0)
    with console(db_url, token=TOKEN, clock=clock) as client:
        log_in(client)
        seen = []
        for step in (0, 30, 29, 1, 1, 59):  # seconds between requests
            clock.advance(step)
            assert client.get(PAGE).status_code == 200
            seen.append(db.from_db(rows(db)[0]["last_seen_at"]))
    at = [T0 + timedelta(seconds=s) for s in (0, 0, 0, 60, 60, 120)]
    assert seen == at


def test_prune__a_login_deletes_the_sessions_that_have_ended(db: Database, db_url: str) -> None:
    clock = FixedClock(T0)
    with console(db_url, token=TOKEN, clock=clock) as busy:
        idle, gone, last = (TestClient(busy.app, base_url=BASE_URL) for _ in range(3))
        log_in(busy)
        log_in(idle)
        log_in(gone)
        gone.post("/logout", data={"csrf": csrf_token(gone)})
        for _ in range(73):  # busy past its 12 hours; idle was left alone all along
            clock.advance(timedelta(minutes=10))
            busy.get(PAGE)
        assert len(rows(db)) == 3
        sid = log_in(last)
    assert [bytes(r["sid_hash"]) for r in rows(db)] == [hashlib.sha256(sid.encode()).digest()]


def attributes(response: Any) -> set[str]:
    """The attributes of the session cookie ``response`` sets, lower case (``httponly``, ``path=/``, ...)."""
    [cookie] = [c for c in response.headers.get_list("set-cookie") if c.startswith("recon_session=")]
    return {part.strip().lower() for part in cookie.split(";")[1:]}


def test_cookie__httponly_samesite_strict_path_root_secure_over_tls_or_off_loopback(db_url: str) -> None:
    always = {"httponly", "samesite=strict", "path=/"}
    with console(db_url, token=TOKEN) as client:
        csrf = csrf_token(client, "/login")
        plain = client.post("/login", data={"token": TOKEN, "csrf": csrf}, follow_redirects=False)
        assert always <= attributes(plain) and "secure" not in attributes(plain)  # http://127.0.0.1
        for headers in ({"Host": "recon.example.com"}, {"X-Forwarded-Proto": "https"}):
            r = client.post("/login", data={"token": TOKEN, "csrf": csrf}, follow_redirects=False,
                            headers={**headers, "Cookie": f"recon_csrf={csrf}"})
            assert r.status_code == 303 and always | {"secure"} <= attributes(r), headers
        # plain HTTP to a non-loopback name: the browser keeps no Secure cookie, and the refusal says so
        browser = TestClient(client.app, base_url="http://recon.example.com")
        csrf = csrf_token(browser, "/login")
        browser.cookies.clear()  # a browser keeps no Secure cookie from plain HTTP
        r = browser.post("/login", data={"token": TOKEN, "csrf": csrf})
        assert r.status_code == 403 and "reach it over HTTPS" in r.text
        tls = TestClient(client.app, base_url="https://127.0.0.1:8470")
        csrf = csrf_token(tls, "/login")
        r = tls.post("/login", data={"token": TOKEN, "csrf": csrf}, follow_redirects=False)
        assert always | {"secure"} <= attributes(r)


def test_token_changed__sessions_opened_with_the_old_token_end(db_url: str) -> None:
    with console(db_url, token=TOKEN) as client:
        sid = log_in(client)
    with console(db_url, token="another-token-after-a-leak-99") as client:
        replay(client, sid)
        r = client.get(PAGE)
        assert r.status_code == 401 and "access token" in r.text


def test_config__timeouts_from_the_console_section(db_url: str, tmp_path: Path) -> None:
    config = tmp_path / "recon.toml"
    config.write_text('[console]\nidle_timeout = "5m"\nabsolute_timeout = "1h"\n')
    clock = FixedClock(T0)
    with console(db_url, token=TOKEN, clock=clock, config_path=str(config)) as client:
        log_in(client)
        clock.advance(timedelta(minutes=4, seconds=59))
        assert client.get(PAGE).status_code == 200
        clock.advance(timedelta(minutes=5))
        r = client.get(PAGE)
        assert r.status_code == 401 and "idle for 5 minutes" in r.text


@pytest.mark.parametrize(("body", "message"), [
    ('idle_timeout = "16m"', r"console.idle_timeout: must be between 1m and 15m \(PCI DSS 8.2.8\), got '16m'"),
    ('idle_timeout = "30s"', r"console.idle_timeout: must be between 1m and 15m"),
    ('absolute_timeout = "25h"', r"console.absolute_timeout: must be between the idle timeout \(15m\) and 24h"),
    ('absolute_timeout = "10m"', r"console.absolute_timeout: must be between the idle timeout \(15m\) and 24h"),
    ('idle_timeout = "soon"', r"console.idle_timeout: 'soon' is not a duration"),
    ("idle_timeout = true", r"console.idle_timeout: expected a duration such as \"15m\", got True"),
    ('idle_timout = "5m"', r"console.idle_timout: unknown key; did you mean 'idle_timeout'\?"),
    ('idle = "5m"', r"console.idle: unknown key \(known: absolute_timeout, idle_timeout, token_operator, "
                    r"token_role, totals_ttl\)"),
])
def test_config__bad_console_settings_fail_every_command_naming_the_key(tmp_path: Path, recon: Runner, db_url: str,
                                                                        body: str, message: str) -> None:
    config = tmp_path / "recon.toml"
    config.write_text(f"[console]\n{body}\n")
    from recon.app import App

    with pytest.raises(ConfigError, match=message):
        App(db_url, str(config)).settings  # noqa: B018
    r = recon("--config", str(config), "stats", db_url=db_url)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "console." in r.stderr


def row(*, login: timedelta, seen: timedelta, revoked: bool = False, principal: str = "access-token/a",
        absolute: timedelta = timedelta(hours=12)) -> ConsoleSession:
    """A session read at T0 that logged in ``login`` ago and was last seen ``seen`` ago."""
    return ConsoleSession(id=1, principal=principal, operator_id=None, created_at=T0 - login, last_seen_at=T0 - seen,
                          expires_at=T0 - login + absolute, revoked_at=T0 if revoked else None, checked_at=T0)


M, H = timedelta(minutes=1), timedelta(hours=1)


@pytest.mark.parametrize(("session", "config", "state"), [
    # the table of recon/console/session.py's docstring, line by line, with the edges of each deadline
    (None, ConsoleConfig(), SessionState.UNKNOWN),
    (row(login=M, seen=M, revoked=True), ConsoleConfig(), SessionState.REVOKED),
    (row(login=20 * H, seen=20 * H, revoked=True, principal="access-token/b"), ConsoleConfig(), SessionState.REVOKED),
    (row(login=M, seen=M, principal="access-token/b"), ConsoleConfig(), SessionState.FOREIGN),
    (row(login=13 * H, seen=M, principal="access-token/b"), ConsoleConfig(), SessionState.FOREIGN),
    (row(login=12 * H, seen=M), ConsoleConfig(), SessionState.EXPIRED),
    (row(login=12 * H - timedelta(seconds=1), seen=M), ConsoleConfig(), SessionState.LIVE),
    (row(login=13 * H, seen=13 * H), ConsoleConfig(), SessionState.EXPIRED),
    (row(login=2 * H, seen=M), ConsoleConfig(absolute_timeout=2 * H), SessionState.EXPIRED),  # lowered since login
    (row(login=2 * H, seen=M, absolute=H), ConsoleConfig(), SessionState.EXPIRED),  # the deadline stored at login
    (row(login=H, seen=15 * M), ConsoleConfig(), SessionState.IDLE),
    (row(login=H, seen=15 * M - timedelta(seconds=1)), ConsoleConfig(), SessionState.LIVE),
    (row(login=H, seen=5 * M), ConsoleConfig(idle_timeout=5 * M), SessionState.IDLE),
    (row(login=0 * M, seen=0 * M), ConsoleConfig(), SessionState.LIVE),
])
def test_state_of__the_table(session: ConsoleSession | None, config: ConsoleConfig, state: SessionState) -> None:
    assert state_of(session, principals=("access-token/a",), config=config) is state


def test_config__the_shipped_file_states_the_defaults() -> None:
    shipped = tomllib.loads((Path(__file__).parents[2] / "config" / "recon.toml").read_text())["console"]
    assert shipped == {"idle_timeout": "15m", "absolute_timeout": "12h", "token_operator": "console-token",
                       "token_role": "viewer", "totals_ttl": "10s"}
    assert ConsoleConfig.load(shipped) == ConsoleConfig() == \
        ConsoleConfig(idle_timeout=timedelta(minutes=15), absolute_timeout=timedelta(hours=12))
    assert ConsoleConfig().touch_interval == timedelta(minutes=1)
    assert ConsoleConfig(idle_timeout=timedelta(minutes=2)).touch_interval == timedelta(seconds=12)


def test_principal__a_form_no_redaction_pattern_matches_whatever_the_token() -> None:
    from recon.console.session import token_principal

    for token in ["4242424242424242-4242424242424242", "token: sk_live_abcdefghijklmnop", *(
            secrets.token_urlsafe(24) for _ in range(8))]:
        principal = token_principal(token)
        assert re.fullmatch(r"access-token/[a-z2-7]{26}", principal) and redact(principal) == principal
        assert token_principal(token) == principal != token_principal(token + "x")
