"""The audit trail on both databases: every person's write leaves a row, the sealer chains the rows and the
payment events, and `recon audit verify` names the first edited, deleted or inserted row (exit 1); export,
prune's retention floor, and PostgreSQL's INSERT-only grants."""

from __future__ import annotations

import csv
import io
import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from recon.app import App
from recon.audit import AuditConfig, Sealer, verify
from recon.clock import FixedClock
from recon.db.audit_store import AuditStore
from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.errors import ConfigError
from recon.rows import EventSource, NewPayment, PaymentStatus, Transition
from tests.cli import Runner
from tests.operators import PASSWORD


def write_some(db: Database, db_url: str, recon: Runner) -> list[int]:
    """Audit rows (a login, a failed one, a resume, a recheck refused for a viewer) and payment events."""
    app = App(db_url)
    try:
        app.operators.login("ann", PASSWORD, None, source="test")
        app.operators.login("ann", "not the password", None, source="test")
        app.actions.resume("sandbox", by="ann")
    finally:
        app.close()
        app.db.dispose()
    store = PaymentStore(db)
    ids = store.create([NewPayment("shop", f"order-{i}", 1000 + i, "EUR", "sandbox") for i in range(3)],
                       charge=False)
    with db.begin() as conn:
        for pid in ids:
            assert store.apply(conn, Transition(pid, PaymentStatus.CREATED, PaymentStatus.PROCESSING,
                                                EventSource.CHARGE, details={"psp": {"status": "sent"}}))
    return ids


def sql(db: Database, statement: str, **params: object) -> None:
    with db.begin() as conn:
        conn.execute(sa.text(statement), params)


def mismatch(db: Database) -> list[str | None]:
    return [c.mismatch for c in verify(AuditStore(db))]


def test_verify__catches_an_edited_a_deleted_and_an_inserted_row(db: Database, db_url: str, staff: object,
                                                                recon: Runner) -> None:
    write_some(db, db_url, recon)
    r = recon("audit", "seal", "--json", db_url=db_url)
    assert r.returncode == 0, r.stderr
    sealed = json.loads(r.stdout)["sealed"]
    assert sealed["audit"] == 3 and sealed["payment_events"] == 6  # a login, a failed one, a resume; 3 payments
    # created, then sent
    r = recon("audit", "verify", db_url=db_url)
    assert r.returncode == 0, r.stdout + r.stderr
    head = json.loads(recon("audit", "verify", "--json", db_url=db_url).stdout)["streams"][0]["head"]
    dotted = ".".join(head[i:i + 8] for i in range(0, 64, 8))  # printed in groups: no masking can touch it
    assert len(head) == 64 and f"head {dotted} (row 3)" in r.stdout

    sql(db, "UPDATE audit_log SET outcome = 'done' WHERE action = 'login.failed'")  # edited
    r = recon("audit", "verify", db_url=db_url)
    assert r.returncode == 1
    assert "MISMATCH: audit row 2: does not match its seal (an edited row)" in r.stdout
    sql(db, "UPDATE audit_log SET outcome = 'refused' WHERE action = 'login.failed'")  # put back: it matches again
    assert mismatch(db) == [None, None]

    sql(db, "DELETE FROM audit_log WHERE id = 1")  # deleted
    assert mismatch(db)[0] == "audit row 1: sealed but missing (a deleted row)"

    sql(db, "UPDATE payment_events SET details = :d WHERE id = 2", d=json.dumps({"psp": {"status": "other"}}))
    assert mismatch(db)[1] == "payment_events row 2: does not match its seal (an edited row)"


def test_verify__an_inserted_row_under_a_sealed_gap_and_a_deleted_seal(db: Database, db_url: str,
                                                                       staff: object, recon: Runner) -> None:
    now = datetime.now(UTC)
    sql(db, "INSERT INTO audit_log (id, at, actor, action, subject, outcome) VALUES (20, :at, 'x', 'a', 's', 'done')",
        at=db.to_db(now - timedelta(minutes=5)))
    store = AuditStore(db)
    result = Sealer(store, gap_grace=timedelta(minutes=2)).run_once()
    assert (result.sealed["audit"], result.gaps["audit"]) == (1, 19)  # ids 1..19 never committed
    assert mismatch(db) == [None, None]
    sql(db, "INSERT INTO audit_log (id, at, actor, action, subject, outcome) VALUES (9, :at, 'x', 'a', 's', 'done')",
        at=db.to_db(now))
    assert mismatch(db)[0] == "audit row 9: sealed as an id that never committed (an inserted row)"
    sql(db, "DELETE FROM audit_log WHERE id = 9")
    assert mismatch(db) == [None, None]
    sql(db, "DELETE FROM audit_seals WHERE stream = 'audit' AND row_id = 3")
    found = mismatch(db)[0]
    assert found is not None and found.startswith("audit seal 4: its chain hash does not follow")


def test_sealer__waits_for_a_missing_id_until_the_grace_is_over(db: Database, staff: object) -> None:
    clock = FixedClock(datetime(2026, 12, 5, 12, 0, tzinfo=UTC))
    db.clock = clock
    sql(db, "INSERT INTO audit_log (id, at, actor, action, subject, outcome) VALUES (8, :at, 'x', 'a', 's', 'done')",
        at=db.to_db(clock.now()))
    sealer = Sealer(AuditStore(db), gap_grace=timedelta(minutes=2))
    first = sealer.run_once()
    assert (first.sealed["audit"], first.waiting["audit"]) == (0, 1)  # ids 1 to 7 may still commit
    clock.advance(timedelta(minutes=3))
    second = sealer.run_once()
    assert (second.sealed["audit"], second.gaps["audit"], second.waiting["audit"]) == (1, 7, None)


def test_export__csv_and_json_of_a_period(db: Database, db_url: str, staff: object, recon: Runner,
                                          tmp_path: object) -> None:
    write_some(db, db_url, recon)
    r = recon("audit", "export", "--since", "1h", "--format", "csv", db_url=db_url)
    assert r.returncode == 0, r.stderr
    rows = list(csv.reader(io.StringIO(r.stdout)))
    assert rows[0] == ["id", "at", "actor", "action", "subject", "outcome", "evidence"]
    assert [row[3] for row in rows[1:]][-3:] == ["login.succeeded", "login.failed", "psp.resume"]
    doc = json.loads(recon("audit", "export", "--since", "1h", "--format", "json", db_url=db_url).stdout)
    assert [a["action"] for a in doc["audit"]][-1] == "psp.resume" and doc["audit"][-1]["actor"] == "ann"
    path = tmp_path / "audit.csv"  # type: ignore[operator]
    r = recon("audit", "export", "--since", "1h", "--output", str(path), db_url=db_url)
    written = path.read_text(encoding="utf-8")  # type: ignore[attr-defined]
    shown = recon("audit", "export", "--since", "1h", db_url=db_url).stdout
    assert r.returncode == 0 and written.replace("\r\n", "\n") == shown.replace("\r\n", "\n")
    r = recon("audit", "export", "--since", "1h", "--until", "2h", db_url=db_url)
    assert r.returncode == 2 and "--since must be before --until" in r.stderr


def test_prune__never_younger_than_the_retention(db: Database, db_url: str, staff: object, recon: Runner) -> None:
    write_some(db, db_url, recon)
    old = datetime.now(UTC) - timedelta(days=500)
    sql(db, "UPDATE audit_log SET at = :at WHERE id <= 2", at=db.to_db(old))
    assert recon("audit", "seal", db_url=db_url).returncode == 0
    r = recon("audit", "prune", "--older-than", "30d", "--by", "root", db_url=db_url)
    assert r.returncode == 2 and "kept at least [audit] retention (400d)" in r.stderr
    r = recon("audit", "prune", "--older-than", "450d", "--by", "ann", db_url=db_url)
    assert r.returncode == 2 and "has the role operator" in r.stderr
    r = recon("audit", "prune", "--older-than", "450d", "--by", "root", db_url=db_url)
    assert r.returncode == 0, r.stderr
    with db.begin() as conn:
        assert conn.execute(sa.text("SELECT min(id) FROM audit_log")).scalar_one() == 3
    checks = verify(AuditStore(db))
    assert checks[0].mismatch is None and not checks[0].from_start  # the first seal left is the anchor


@pytest.mark.parametrize("value", ["364d", "30d", "1h"])
def test_config__retention_below_a_year_is_refused(value: str) -> None:
    with pytest.raises(ConfigError, match="retention: must be at least 365d"):
        AuditConfig.load({"retention": value})
    assert AuditConfig.load({"retention": "365d"}).retention == timedelta(days=365)
    assert AuditConfig.load(None).retention == timedelta(days=400)


def test_postgresql__audit_tables_are_insert_only_for_recons_role(db: Database, db_url: str) -> None:
    """docs/operations.md's grants: recon's role may INSERT and SELECT audit_log and audit_seals, never UPDATE or
    DELETE them."""
    if not db.is_postgresql:
        pytest.skip("grants are PostgreSQL's")
    role = f"recon_app_{uuid.uuid4().hex[:8]}"
    with db.begin() as conn:
        conn.execute(sa.text(f"CREATE ROLE {role} NOLOGIN"))
        conn.execute(sa.text(f"GRANT SELECT, INSERT ON audit_log, audit_seals TO {role}"))
        conn.execute(sa.text(f"GRANT USAGE ON SEQUENCE audit_log_id_seq TO {role}"))
        conn.execute(sa.text(f"REVOKE UPDATE, DELETE, TRUNCATE ON audit_log, audit_seals FROM {role}"))
    try:
        with db.begin() as conn:
            conn.execute(sa.text(f"SET LOCAL ROLE {role}"))
            conn.execute(sa.text("INSERT INTO audit_log (at, actor, action, subject, outcome) "
                                 "VALUES (now(), 'ann', 'x', 'y', 'done')"))
        for statement in ("UPDATE audit_log SET outcome = 'edited'", "DELETE FROM audit_log",
                          "DELETE FROM audit_seals", "UPDATE audit_seals SET chain_hash = ''"):
            with pytest.raises(Exception, match="permission denied"), db.begin() as conn:
                conn.execute(sa.text(f"SET LOCAL ROLE {role}"))
                conn.execute(sa.text(statement))
    finally:
        with db.begin() as conn:
            conn.execute(sa.text(f"DROP OWNED BY {role}"))
            conn.execute(sa.text(f"DROP ROLE {role}"))
