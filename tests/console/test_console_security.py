"""The console's safety: CSRF on every write, the access token, the Host check, the headers, the operator
name, and `recon console` refusing a non-loopback bind without a token; the server started for real."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from recon.clock import FixedClock
from recon.console.security import is_loopback
from recon.db import schema
from recon.db.close_store import CloseStore
from recon.db.database import Database
from recon.db.jobs_store import JobStore
from recon.db.payout_store import PayoutStore
from recon.payout_rows import ExceptionKind, Finding, NewPayout, PayoutStatus
from tests.cli import Runner, python_env
from tests.console import BASE_URL, TestClient, console, csrf_token, make_dead, refusal
from tests.integration.payment_flow import create
from tests.operators import PASSWORD, add_staff

TOKEN = "correct-horse-battery-staple-42"


def paused(recon: Runner, db_url: str) -> dict[str, bool]:
    r = recon("psp", "status", "--json", db_url=db_url)
    assert r.returncode == 0, r.stderr
    return {p["psp"]: p["paused"] for p in json.loads(r.stdout)["psps"]}


def test_csrf__a_post_without_a_valid_token_is_refused_and_changes_nothing(db: Database, db_url: str,
                                                                           recon: Runner) -> None:
    dead = make_dead(JobStore(db), queue="charges")
    with console(db_url) as client:
        good = csrf_token(client)
        forged = "0" * 32 + "." + "0" * 64  # the right shape, not signed by this process
        for fields in ({}, {"csrf": ""}, {"csrf": good + "x"}, {"csrf": forged}):
            r = client.post("/psps/stripe/pause", data={"operator": "ann", "confirm": "1", "reason": "x", **fields})
            assert r.status_code == 403, fields
            assert "CSRF" in r.text
        client.cookies.set("recon_csrf", forged)  # a planted cookie with a matching field: still not ours
        assert client.post("/psps/stripe/pause", data={"operator": "ann", "confirm": "1", "reason": "x", "csrf": forged}
                           ).status_code == 403
        client.cookies.delete("recon_csrf")  # the session's token needs its session cookie only
        client.cookies.delete("recon_session")
        assert client.post("/dead/replay", data={"confirm": "1", "csrf": good}).status_code == 401  # no cookie
        operator_log_in(client, "root")
        good = csrf_token(client)
        r = client.post("/dead/replay", data={"confirm": "1", "operator": "ann", "csrf": good},
                        headers={"Origin": "https://evil.example"})
        assert r.status_code == 403 and "another site" in r.text
        r = client.post("/dead/replay", data={"confirm": "1", "operator": "ann", "csrf": good},
                        headers={"Sec-Fetch-Site": "cross-site"})
        assert r.status_code == 403
    assert not any(paused(recon, db_url).values())
    shown = json.loads(recon("jobs", "show", str(dead), "--json", db_url=db_url).stdout)
    assert shown["job"]["state"] == "dead" and shown["replays"] == []


def operator_log_in(client: TestClient, name: str) -> None:
    csrf = csrf_token(client, "/login")
    r = client.post("/login", data={"operator": name, "password": PASSWORD, "csrf": csrf}, follow_redirects=False)
    assert r.status_code == 303, r.text[-500:]


def token_operator_config(tmp_path: Path) -> str:
    """[console] giving the token's operator the role operator (default: viewer)."""
    path = tmp_path / "console.toml"
    path.write_text('[console]\ntoken_role = "operator"\n', encoding="utf-8")
    return str(path)


def pending(recon: Runner, db_url: str) -> list[tuple[str, str, str]]:
    r = recon("approvals", "list", "--json", db_url=db_url)
    return [(a["action"], a["requested_by"], a["payload"].get("reason")) for a in json.loads(r.stdout)["approvals"]]


def log_in(client: TestClient) -> None:
    csrf = csrf_token(client, "/login")
    assert client.post("/login", data={"token": TOKEN, "csrf": csrf}, follow_redirects=False).status_code == 303


def log_out(client: TestClient) -> None:
    assert client.post("/logout", data={"csrf": csrf_token(client)}, follow_redirects=False).status_code == 303


def test_csrf__bound_to_the_session_a_token_of_another_session_the_login_page_or_before_logout_is_refused(
        db_url: str, recon: Runner, tmp_path: Path) -> None:
    with console(db_url, token=TOKEN, config_path=token_operator_config(tmp_path)) as alice:
        bob = TestClient(alice.app, base_url=BASE_URL)
        login_page = csrf_token(bob, "/login")  # the pair (cookie = field) the login page gives anyone
        log_in(alice)
        log_in(bob)
        before_logout = csrf_token(bob)
        log_out(bob)
        log_in(bob)
        tries = {"another session's": csrf_token(alice), "the login page's": login_page,
                 "from before logout": before_logout, "missing": "", "forged": "0" * 32 + "." + "0" * 64,
                 "forged, session-shaped": "0" * 64}
        for what, token in tries.items():
            bob.cookies.delete("recon_csrf")
            if token:
                bob.cookies.set("recon_csrf", token)  # planted beside the field: the double-submit attacker's pair
            r = bob.post("/psps/stripe/pause", data={"operator": "mallory", "confirm": "1", "reason": what,
                                                     "csrf": token})
            assert r.status_code == 403 and "CSRF" in r.text, what
        assert not any(paused(recon, db_url).values())
        r = bob.post("/psps/stripe/pause", data={"operator": "bob", "confirm": "1", "reason": "incident 9",
                                                 "csrf": csrf_token(bob)})
        assert r.status_code == 200 and "pause of stripe requested by console-token" in r.text
    assert pending(recon, db_url) == [("psp.pause", "console-token", "incident 9")]


def test_csrf__a_form_older_than_a_session_may_live_is_refused_without_sessions_too(db_url: str,
                                                                                   recon: Runner) -> None:
    clock = FixedClock(datetime(2026, 12, 1, 9, 0, tzinfo=UTC))
    add_staff(db_url)
    with console(db_url, clock=clock, login=None) as client:  # not logged in: the login form's pre-session pair
        old = csrf_token(client, "/login")
        clock.advance(timedelta(hours=12))
        form = {"operator": "ann", "password": PASSWORD}
        r = client.post("/login", data={**form, "csrf": old}, follow_redirects=False)
        assert r.status_code == 403 and "reload the page" in r.text
        fresh = csrf_token(client, "/login")
        assert fresh != old
        assert client.post("/login", data={**form, "csrf": fresh}, follow_redirects=False).status_code == 303


def test_csrf__a_bearer_client_uses_the_pre_session_pair(db_url: str, recon: Runner, tmp_path: Path) -> None:
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    with console(db_url, token=TOKEN, headers=bearer, config_path=token_operator_config(tmp_path)) as client:
        csrf = csrf_token(client)
        r = client.post("/psps/stripe/pause", data={"confirm": "1", "reason": "x", "csrf": csrf})
        assert r.status_code == 200
        client.cookies.delete("recon_csrf")
        assert client.post("/psps/stripe/resume", data={"csrf": csrf}).status_code == 403
    assert pending(recon, db_url) == [("psp.pause", "console-token", "x")]
    with console(db_url, token=TOKEN, headers=bearer) as viewer:  # the token's role back to viewer: refused
        r = viewer.post("/psps/stripe/pause", data={"reason": "y", "csrf": csrf_token(viewer)}, follow_redirects=False)
        assert "console-token has the role viewer" in refusal(viewer, r, to="/psps?", form="stripe")


def test_operator__the_signed_in_one_acts_whatever_the_form_says(db_url: str, recon: Runner) -> None:
    with console(db_url, login="ann") as client:
        csrf = csrf_token(client)
        r = client.post("/psps/stripe/pause", data={"operator": "root", "confirm": "1", "reason": " ", "csrf": csrf},
                        follow_redirects=False)
        assert refusal(client, r, to="/psps?", form="stripe") == "not paused: reason is required"
        r = client.post("/psps/stripe/pause", data={"operator": "root", "confirm": "1", "reason": "x", "csrf": csrf})
        assert r.status_code == 200 and "requested by ann" in r.text
    assert pending(recon, db_url) == [("psp.pause", "ann", "x")]
    assert not any(paused(recon, db_url).values())


def test_token__every_request_needs_it_bearer_or_login_cookie(db_url: str) -> None:
    with console(db_url, token=TOKEN) as client:
        r = client.get("/")
        assert r.status_code == 401 and 'action="/login"' in r.text
        assert client.get("/psps", headers={"Authorization": "Bearer wrong-token-wrong-token"}).status_code == 401
        assert client.get("/psps", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        assert client.post("/psps/stripe/pause", data={}).status_code == 401  # before any CSRF check
        csrf = csrf_token(client, "/login")
        r = client.post("/login", data={"token": "wrong-token-wrong-token", "csrf": csrf}, follow_redirects=False)
        assert refusal(client, r, to="/login?", form="token") == "wrong access token"
        assert "wrong-token" not in r.headers["location"]  # the token typed is never carried back
        assert client.post("/login", data={"token": TOKEN}, follow_redirects=False).status_code == 403  # no csrf
        r = client.post("/login", data={"token": TOKEN, "csrf": csrf}, follow_redirects=False)
        assert r.status_code == 303
        cookie = r.headers["set-cookie"]
        assert "recon_session=" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert TOKEN not in cookie  # the cookie holds a random session id, not the token
        page = client.get("/")
        assert page.status_code == 200 and TOKEN not in page.text
        r = client.post("/logout", data={"csrf": csrf_token(client)}, follow_redirects=False)
        assert r.status_code == 303
        client.cookies.delete("recon_session")
        assert client.get("/").status_code == 401


def test_host__without_a_token_only_loopback_host_names_are_served(db_url: str) -> None:
    with console(db_url) as client:
        for host in ("127.0.0.1:8470", "localhost:8470", "[::1]:8470", "127.0.0.2"):
            assert client.get("/psps", headers={"Host": host}).status_code == 200, host
        r = client.get("/psps", headers={"Host": "evil.example:8470"})  # DNS rebinding
        assert r.status_code == 400 and "loopback" in r.text
    with console(db_url, token=TOKEN) as client:
        assert client.get("/psps", headers={"Host": "recon.internal", "Authorization": f"Bearer {TOKEN}"}
                          ).status_code == 200


def test_headers__every_response_has_them_and_only_the_consoles_own_script_is_allowed(db_url: str) -> None:
    with console(db_url) as client:
        for path in ("/", "/nowhere", "/payments/none"):
            r = client.get(path)
            csp = r.headers["content-security-policy"]
            assert "default-src 'self'" in csp and "unsafe-inline" not in csp
            allowed = re.search(r"script-src 'sha256-([A-Za-z0-9+/=]{44})';", csp)
            assert allowed  # one script, by its hash
            assert "frame-ancestors 'none'" in csp
            assert (r.headers["x-frame-options"], r.headers["referrer-policy"],
                    r.headers["x-content-type-options"]) == ("DENY", "same-origin", "nosniff")
            scripts = re.findall(r"<script>(.*?)</script>", r.text, re.S)
            assert r.text.count("<script") == len(scripts) == 1
            assert base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode() == allowed.group(1)
        cookie = client.get("/").headers.get("set-cookie") or ""
    assert cookie == "" or ("HttpOnly" in cookie and "SameSite=Strict" in cookie)


def test_loopback__names_and_addresses() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LOCALHOST"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "192.168.1.2", "example.com", ""))


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "::"])
def test_command__a_non_loopback_bind_without_a_token_exits_2_before_binding(db_url: str, recon: Runner,
                                                                              host: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RECON_CONSOLE_TOKEN"}
    r = recon("console", "--host", host, "--port", "1", db_url=db_url, env=env)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [r.stderr.strip()]
    assert r.stderr.startswith(f"recon console: --host {host} is not a loopback address: set RECON_CONSOLE_TOKEN")
    short = recon("console", "--host", host, db_url=db_url, env={**env, "RECON_CONSOLE_TOKEN": "short"})
    assert short.returncode == 2 and "at least 16 characters" in short.stderr and "short" not in short.stdout


def test_command__serves_until_sigterm_and_exits_0(db_url: str) -> None:
    env = {k: v for k, v in python_env().items() if k != "RECON_CONSOLE_TOKEN"}
    with subprocess.Popen([sys.executable, "-m", "recon", "--database-url", db_url, "console", "--port", "0"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            found = re.fullmatch(r"console on (http://127\.0\.0\.1:\d+/)\n", line)
            assert found, line
            r = httpx.get(found.group(1) + "psps", timeout=5)  # the socket is bound before the line is printed
            assert r.status_code == 401 and 'action="/login"' in r.text
            proc.terminate()
            assert proc.wait(timeout=10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()


def everything(db: Database) -> dict[str, list[str]]:
    """Every row of every table recon's schema has, as text."""
    with db.begin() as conn:
        return {name: sorted(map(str, conn.execute(sa.select(table)).all()))
                for name, table in schema.metadata.tables.items()}


def test_get__no_page_changes_anything_every_write_is_post_only_and_every_cookie_has_its_flags(
        db: Database, db_url: str) -> None:
    dead = make_dead(JobStore(db), queue="charges")
    create(db, 1, charge=False, prefix="order")
    payouts = PayoutStore(db)
    payout = payouts.store(NewPayout("stripe", "", "po_1", 100, "EUR", PayoutStatus.PAID, date(2026, 11, 2), None,
                                     None, ())).payout_id
    [exception] = CloseStore(db).record_close([], [Finding(ExceptionKind.BANK_MISSING, payout, None, "none")],
                                              payout_ids=[payout], entry_ids=[])
    params = {"ref": "order-0", "job_id": str(dead), "name": "stripe", "pid": str(payout), "eid": str(exception.id),
              "id": "1"}
    before = everything(db)
    cookies: list[str] = []
    for token in (None, TOKEN):
        headers = {"Authorization": f"Bearer {TOKEN}"} if token else {}
        with console(db_url, token=token, headers=headers) as client:
            before = everything(db)  # after the login (a session, its audit row) and the token's operator
            pages = {route.path for route in client.app.routes if "GET" in route.methods}
            for route in client.app.routes:
                path = re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: params[m[1]], route.path)
                r = client.get(path, follow_redirects=False)
                cookies += r.headers.get_list("set-cookie")
                if route.path not in pages:  # a write's path read by GET: refused, or another page's 404
                    assert r.status_code in (404, 405), path
                else:
                    assert r.status_code in (200, 303), path
            assert everything(db) == before
    assert cookies and all({"HttpOnly", "SameSite=Strict", "Path=/"} <= {p.strip() for p in c.split(";")}
                           for c in cookies), cookies
