"""Operators in the console: a login by name and password (and TOTP code), the lockout after 10 failures,
a disabled operator's session dying at its next request, roles refused on POST, every login audited."""

from __future__ import annotations

from pathlib import Path

import pyotp
import pytest
import sqlalchemy as sa

from recon.app import App
from recon.db.database import Database
from recon.operators import SEED_UNREADABLE, Operators
from recon.totp_key import ENV_VARIABLE, TotpKey, write_new_key
from tests.console import TestClient, console, csrf_token, refusal
from tests.operators import PASSWORD


def try_login(client: TestClient, name: str, password: str, code: str = "") -> int:
    """303 when the login opened a session (a redirect to the overview); 401 when it was refused, which is a
    redirect to the form saying why (``refusal``: POST -> redirect -> GET, the name kept, nothing else)."""
    r = client.post("/login", data={"operator": name, "password": password, "totp": code,
                                    "csrf": csrf_token(client, "/login")}, follow_redirects=False)
    if r.status_code == 303 and r.headers["location"] == "/":
        return 303
    said = refusal(client, r, to="/login?", form="login")
    assert said and password not in r.headers["location"] and f'value="{name}"' in client.get(
        r.headers["location"]).text
    return 401


def audit_actions(db: Database) -> list[tuple[str, str]]:
    with db.begin() as conn:
        return [tuple(r) for r in conn.execute(sa.text("SELECT actor, action FROM audit_log ORDER BY id"))]


def test_login__by_name_and_password_lockout_after_ten_failures(db: Database, db_url: str, staff: object) -> None:
    with console(db_url, login=None) as client:
        assert client.get("/").status_code == 401
        assert try_login(client, "ann", "not the password") == 401
        assert try_login(client, "nobody", PASSWORD) == 401
        for _ in range(9):
            assert try_login(client, "ann", "not the password") == 401
        r = client.post("/login", data={"operator": "ann", "password": PASSWORD,
                                        "csrf": csrf_token(client, "/login")}, follow_redirects=False)
        assert "locked for 30 minutes" in refusal(client, r, to="/login?", form="login")  # the password not tried
        client.get(r.headers["location"])  # a reload of the refusal: a GET, no failure counted
        assert client.get("/").status_code == 401
        assert try_login(client, "bob", PASSWORD) == 303
        page = client.get("/")
        assert page.status_code == 200 and "bob (approver)" in page.text
    actions = audit_actions(db)
    assert actions.count(("ann", "login.failed")) == 11 and actions.count(("ann", "login.locked")) == 1
    assert ("unknown:nobody", "login.failed") in actions and actions[-1] == ("bob", "login.succeeded")


def test_login__totp_code_when_enrolled(db: Database, db_url: str, staff: object, totp_key: TotpKey) -> None:
    secret = Operators(db).reset_password("amy", password=PASSWORD, by="root", totp=True)
    assert secret
    with console(db_url, login=None) as client:
        assert try_login(client, "amy", PASSWORD) == 401
        assert try_login(client, "amy", PASSWORD, pyotp.TOTP(secret).now()) == 303


def test_login__a_seed_the_key_cannot_open_says_the_second_factor_cannot_be_checked(
        db: Database, db_url: str, staff: object, totp_key: TotpKey, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    secret = Operators(db).reset_password("amy", password=PASSWORD, by="root", totp=True)
    assert secret
    monkeypatch.setenv(ENV_VARIABLE, write_new_key(tmp_path / "other.key").path)  # the wrong key
    with console(db_url, login=None) as client:
        r = client.post("/login", data={"operator": "amy", "password": PASSWORD, "totp": pyotp.TOTP(secret).now(),
                                        "csrf": csrf_token(client, "/login")}, follow_redirects=False)
        said = refusal(client, r, to="/login?", form="login")
        assert SEED_UNREADABLE in said and secret not in said and secret not in r.headers["location"]
        assert client.get("/").status_code == 401
    assert audit_actions(db)[-1] == ("amy", "login.failed")


def test_disable__the_operators_session_dies_at_its_next_request(db: Database, db_url: str, staff: object) -> None:
    with console(db_url, login="ann") as client:
        assert client.get("/review").status_code == 200
        Operators(db).disable("ann", by="root")
        r = client.get("/review")
        assert r.status_code == 401 and 'action="/login"' in r.text
        assert try_login(client, "ann", PASSWORD) == 401  # nor can they log in again


def test_logout__kills_the_session_on_the_server(db_url: str, staff: object) -> None:
    with console(db_url, login="ann") as client:
        sid = client.cookies.get("recon_session")
        assert client.post("/logout", data={"csrf": csrf_token(client)}, follow_redirects=False).status_code == 303
        client.cookies.set("recon_session", sid)  # the old cookie, replayed
        assert client.get("/").status_code == 401


def test_roles__a_viewer_reads_but_every_write_is_refused(db_url: str, staff: object) -> None:
    app = App(db_url)
    try:
        with console(db_url, login="vic") as client:
            assert client.get("/psps").status_code == 200 and client.get("/approvals").status_code == 200
            csrf = csrf_token(client)
            for path, form, page, name in (("/psps/stripe/pause", {"reason": "x"}, "/psps?", "stripe"),
                                           ("/psps/stripe/resume", {}, "/psps?", "stripe"),
                                           ("/dead/replay", {}, "/dead/preview?", "replay"),
                                           ("/approvals/1", {"verdict": "approve"}, "/approvals?", "approval")):
                r = client.post(path, data={**form, "csrf": csrf}, follow_redirects=False)
                assert "vic has the role viewer" in refusal(client, r, to=page, form=name), path
        assert app.four_eyes.in_state() == []
    finally:
        app.close()
        app.db.dispose()
