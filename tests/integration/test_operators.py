"""`recon operators` and the operator checks of every write command, on both databases: the bootstrap admin,
roles, disabled operators, passwords from stdin only, the console login's lockout, every change audited."""

from __future__ import annotations

import io
import json
import threading
from datetime import UTC, datetime, timedelta

import pyotp
import pytest
import sqlalchemy as sa

from recon.clock import FixedClock
from recon.db.database import Database
from recon.db.operator_store import OperatorStore
from recon.errors import NotAllowed
from recon.operator_rows import Role
from recon.operators import Operators
from recon.totp_key import TotpKey
from tests.cli import Runner
from tests.operators import PASSWORD, STAFF

NEW_PASSWORD = "a different long passphrase"


def audit_rows(db: Database) -> list[tuple[str, str, str, str]]:
    with db.begin() as conn:
        return [tuple(r) for r in conn.execute(sa.text(
            "SELECT actor, action, subject, outcome FROM audit_log ORDER BY id"))]


def test_operators__bootstrap_roles_and_audit(db: Database, db_url: str, recon: Runner,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    ops = Operators(db)
    with pytest.raises(Exception, match="first operator must be an admin"):
        ops.add("ann", role=Role.OPERATOR, password=PASSWORD, by=None, bootstrap_actor="me@host")
    ops.add("root", role=Role.ADMIN, password=PASSWORD, by=None, bootstrap_actor="me@host")
    with pytest.raises(NotAllowed, match="names who acts"):
        ops.add("ann", role=Role.OPERATOR, password=PASSWORD, by=None, bootstrap_actor="me@host")
    ops.add("ann", role=Role.OPERATOR, password=PASSWORD, by="root", bootstrap_actor="me@host")
    with pytest.raises(NotAllowed, match="has the role operator"):
        ops.add("eve", role=Role.ADMIN, password=PASSWORD, by="ann", bootstrap_actor="me@host")
    with pytest.raises(Exception, match="at least 12 characters"):
        ops.add("eve", role=Role.VIEWER, password="short", by="root", bootstrap_actor="me@host")
    with pytest.raises(Exception, match="letters, digits"):
        ops.add("eve 4242424242424242", role=Role.VIEWER, password=PASSWORD, by="root", bootstrap_actor="me@host")
    assert audit_rows(db) == [("bootstrap:me@host", "operator.add", "root", "done"),
                              ("root", "operator.add", "ann", "done")]
    listed = json.loads(recon("operators", "list", "--json", db_url=db_url).stdout)["operators"]
    assert [(o["name"], o["role"], o["enabled"]) for o in listed] == [("ann", "operator", True),
                                                                     ("root", "admin", True)]
    assert "argon" not in json.dumps(listed) and PASSWORD not in json.dumps(listed)
    with db.begin() as conn:
        stored = conn.execute(sa.text("SELECT password_hash FROM operators WHERE name = 'ann'")).scalar_one()
    assert stored.startswith("$argon2id$v=19$m=65536,t=3,p=4$") and PASSWORD not in stored  # RFC 9106's second


def test_operators_cli__password_from_stdin_disable_and_reset(db: Database, db_url: str, recon: Runner,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              totp_key: TotpKey) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    r = recon("operators", "add", "root", "--role", "admin", "--password-stdin", db_url=db_url)
    assert r.returncode == 0, r.stderr
    assert PASSWORD not in r.stdout + r.stderr
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    r = recon("operators", "add", "bob", "--role", "approver", "--password-stdin", "--totp", "--by", "root",
              db_url=db_url)
    assert r.returncode == 0, r.stderr
    key = r.stdout.strip().rsplit(" ", 1)[-1]
    assert len(key) == 32 and "shown this once" in r.stdout
    assert key not in recon("operators", "list", db_url=db_url).stdout
    r = recon("operators", "disable", "bob", "--by", "bob", db_url=db_url)
    assert r.returncode == 2 and "has the role approver" in r.stderr
    r = recon("operators", "disable", "bob", "--by", "root", db_url=db_url)
    assert r.returncode == 0 and "disabled" in r.stdout
    r = recon("review", "recheck", "nope", "--by", "bob", db_url=db_url)
    assert r.returncode == 2 and "operator 'bob' is disabled" in r.stderr
    monkeypatch.setattr("sys.stdin", io.StringIO(NEW_PASSWORD + "\n"))
    r = recon("operators", "reset-password", "bob", "--password-stdin", "--by", "root", db_url=db_url)
    assert r.returncode == 0, r.stderr
    assert [a[1:] for a in audit_rows(db)] == [("operator.add", "root", "done"), ("operator.add", "bob", "done"),
                                               ("operator.disable", "bob", "done"),
                                               ("operator.reset_password", "bob", "done")]
    r = recon("operators", "add", "x", "--role", "viewer", "--password", PASSWORD, db_url=db_url)
    assert r.returncode == 2  # no such option: a password is never an argument


def test_login__lockout_after_ten_failures_for_thirty_minutes_audited(db: Database, staff: dict[str, Role]) -> None:
    clock = FixedClock(datetime(2026, 12, 5, 10, 0, tzinfo=UTC))
    db.clock = clock
    ops = Operators(db)
    assert ops.login("ann", PASSWORD, None, source="t").operator is not None
    for _ in range(9):
        assert ops.login("ann", "wrong password!", None, source="t").message == "wrong operator name, password or code"
    assert ops.login("ann", PASSWORD, None, source="t").operator is not None  # the failures are forgotten
    for _ in range(10):
        result = ops.login("ann", "wrong password!", None, source="t")
    assert "locked for 30 minutes" in result.message
    assert ops.login("ann", PASSWORD, None, source="t").operator is None  # locked: the right password too
    clock.advance(timedelta(minutes=29))
    assert ops.login("ann", PASSWORD, None, source="t").operator is None
    clock.advance(timedelta(minutes=31))
    assert ops.login("ann", PASSWORD, None, source="t").operator is not None
    actions = [a[1] for a in audit_rows(db)]
    assert actions.count("login.locked") == 1 and actions.count("login.succeeded") == 3
    assert actions.count("login.failed") == 9 + 10 + 2
    assert ops.login("nobody", PASSWORD, None, source="t").message == "wrong operator name, password or code"
    assert audit_rows(db)[-1] == ("unknown:nobody", "login.failed", "nobody", "refused")


def test_login__totp_code_required_when_enrolled(db: Database, staff: dict[str, Role], totp_key: TotpKey) -> None:
    ops = Operators(db)
    secret = ops.reset_password("bob", password=PASSWORD, by="root", totp=True)
    assert secret
    assert ops.login("bob", PASSWORD, None, source="t").operator is None
    assert ops.login("bob", PASSWORD, "000000" if pyotp.TOTP(secret).now() != "000000" else "111111",
                     source="t").operator is None
    assert ops.login("bob", PASSWORD, pyotp.TOTP(secret).now(), source="t").operator is not None


def why_refused(db: Database) -> str:
    with db.begin() as conn:
        evidence = conn.execute(sa.text("SELECT evidence FROM audit_log WHERE action = 'login.failed' "
                                        "ORDER BY id DESC LIMIT 1")).scalar_one()
    return str((json.loads(evidence) if isinstance(evidence, str) else evidence)["why"])


def test_login__a_totp_code_is_used_once(db: Database, staff: dict[str, Role], totp_key: TotpKey) -> None:
    at = datetime(2026, 12, 5, 9, 0, 10, tzinfo=UTC)
    db.clock = FixedClock(at)
    ops = Operators(db)
    secret = ops.reset_password("bob", password=PASSWORD, by="root", totp=True)
    assert secret
    totp = pyotp.TOTP(secret)
    assert ops.login("bob", PASSWORD, totp.at(at), source="t").operator is not None
    again = ops.login("bob", PASSWORD, totp.at(at), source="t")  # the same code, within its window
    assert again.operator is None and again.message == "wrong operator name, password or code"
    assert why_refused(db) == "TOTP code already used"
    earlier = ops.login("bob", PASSWORD, totp.at(at, counter_offset=-1), source="t")  # valid by the drift window
    assert earlier.operator is None and why_refused(db) == "TOTP code already used"
    assert ops.login("bob", PASSWORD, totp.at(at, counter_offset=1), source="t").operator is not None  # the next
    db.clock = FixedClock(at + timedelta(seconds=30))  # the next step has begun: its code was used already
    assert ops.login("bob", PASSWORD, totp.at(at, counter_offset=1), source="t").operator is None
    db.clock = FixedClock(at + timedelta(seconds=60))
    assert ops.login("bob", PASSWORD, totp.at(at + timedelta(seconds=60)), source="t").operator is not None
    with db.begin() as conn:
        step = conn.execute(sa.text("SELECT totp_last_step FROM operators WHERE name = 'bob'")).scalar_one()
    assert step == int(at.timestamp()) // 30 + 2
    fresh = ops.reset_password("bob", password=PASSWORD, by="root", totp=True)  # a new secret: steps start over
    assert fresh and fresh != secret
    with db.begin() as conn:
        assert conn.execute(sa.text("SELECT totp_last_step FROM operators WHERE name = 'bob'")).scalar_one() is None
    assert ops.login("bob", PASSWORD, pyotp.TOTP(fresh).at(at + timedelta(seconds=60)), source="t").operator


def test_login__two_logins_with_one_totp_code_one_wins(db: Database, staff: dict[str, Role],
                                                        totp_key: TotpKey) -> None:
    at = datetime(2026, 12, 5, 9, 0, 10, tzinfo=UTC)
    db.clock = FixedClock(at)
    secret = Operators(db).reset_password("bob", password=PASSWORD, by="root", totp=True)
    assert secret
    code = pyotp.TOTP(secret).at(at)
    barrier = threading.Barrier(2)
    results: list[bool] = []

    def login() -> None:
        ops = Operators(db)
        barrier.wait()
        results.append(ops.login("bob", PASSWORD, code, source="t").operator is not None)

    threads = [threading.Thread(target=login) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False, True]


def test_authorize__roles_are_a_ladder(db: Database, staff: dict[str, Role]) -> None:
    ops = Operators(db)
    for name, role in STAFF.items():
        for needed in Role:
            if role.allows(needed):
                assert ops.authorize(name, needed, action="x").name == name
            else:
                with pytest.raises(NotAllowed):
                    ops.authorize(name, needed, action="x")
    assert Role.ADMIN.allows(Role.APPROVER) and not Role.OPERATOR.allows(Role.APPROVER)
    with pytest.raises(NotAllowed, match="not an operator"):
        ops.authorize("mallory", Role.VIEWER, action="x")
    OperatorStore(db)  # the store alone changes nothing
