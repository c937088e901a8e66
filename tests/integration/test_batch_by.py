"""`--by` of the batch commands (`recon payments import`, `recon bank import`, `recon refunds import`, `recon
sweep`; recon.actions ``batch_actor``), through the real command line on both databases: an enabled operator
with the operator role acts and is audited; a viewer, a disabled operator or a name that is no operator is
refused (exit 2) before anything is written; without --by the command acts as the system, audited as
``system:cli``, so schedules and scripts keep working."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable
from datetime import date
from pathlib import Path

import pytest
import sqlalchemy as sa

from recon.bank.formats import registry
from recon.bank.formats.protocol import EntryToWrite, StatementToWrite
from recon.db.database import Database
from recon.operators import Operators
from tests.cli import Runner
from tests.integration.test_refunds_cli import succeeded

IBAN = "NL91ABNA0417164300"


def audit_rows(db: Database, action: str) -> list[tuple[str, str, str, dict[str, object]]]:
    with db.begin() as conn:
        rows = conn.execute(
            sa.text("SELECT actor, subject, outcome, evidence FROM audit_log WHERE action = :a ORDER BY id"),
            {"a": action},
        ).all()
    return [(r[0], r[1], r[2], json.loads(r[3]) if isinstance(r[3], str) else r[3]) for r in rows]


def count(db: Database, table: str) -> int:
    with db.begin() as conn:
        return int(conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())  # nosec B608


def payments_file(tmp_path: Path, db: Database, n: int) -> tuple[list[str], str]:
    path = tmp_path / f"payments-{n}.csv"
    path.write_text(f"merchant_reference,amount,currency,psp\nby-{n},1.00,EUR,sandbox\n", encoding="utf-8")
    return ["payments", "import", str(path), "--no-charge"], "payments"


def bank_file(tmp_path: Path, db: Database, n: int) -> tuple[list[str], str]:
    day = date(2026, 11, 2)
    out = io.BytesIO()
    registry.writer("camt053").write(
        out,
        [
            StatementToWrite(
                account=IBAN,
                currency="EUR",
                exponent=2,
                statement_id=f"S{n}",
                opening=0,
                period_start=day,
                period_end=day,
                entries=[EntryToWrite(amount=100 + n, direction="credit", booking_date=day, bank_reference=f"R{n}")],
            )
        ],
    )
    path = tmp_path / f"statement-{n}.xml"
    path.write_bytes(out.getvalue())
    return ["bank", "import", str(path)], "bank_entries"


def refunds_file(tmp_path: Path, db: Database, n: int) -> tuple[list[str], str]:
    succeeded(db, f"paid-{n}", 5000)
    path = tmp_path / f"refunds-{n}.csv"
    path.write_text(f"merchant_reference,refund_reference,amount,reason\npaid-{n},rf-{n},1.00,\n", encoding="utf-8")
    return ["refunds", "import", str(path)], "refunds"


def sweep_run(tmp_path: Path, db: Database, n: int) -> tuple[list[str], str]:
    return ["sweep", "--enqueue-only", "--psp", "sandbox"], "sweep_runs"


CASES: dict[str, Callable[[Path, Database, int], tuple[list[str], str]]] = {
    "payments.import": payments_file,
    "bank.import": bank_file,
    "refunds.import": refunds_file,
    "sweep": sweep_run,
}


@pytest.mark.parametrize("action", list(CASES))
def test_batch_by__an_operator_acts_others_are_refused_none_is_the_system(
    action: str, db: Database, db_url: str, tmp_path: Path, staff: object, recon: Runner
) -> None:
    config = tmp_path / "recon.toml"
    config.write_text(f'[bank.accounts.main]\niban = "{IBAN}"\ncurrency = "EUR"\n', encoding="utf-8")
    env = {**{k: v for k, v in os.environ.items() if k != "RECON_OPERATOR"}, "RECON_CONFIG": str(config)}
    Operators(db).disable("amy", by="root")
    make = CASES[action]
    for n, (by, refusal) in enumerate(
        [
            ("vic", "has the role viewer; this takes operator or above"),
            ("amy", "operator 'amy' is disabled"),
            ("nobody", "'nobody' is not an operator"),
        ]
    ):
        argv, table = make(tmp_path, db, n)
        before = count(db, table)
        r = recon(*argv, "--by", by, db_url=db_url, env=env)
        assert r.returncode == 2 and refusal in r.stderr, (r.returncode, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1
        assert count(db, table) == before  # nothing written
    assert audit_rows(db, action) == []

    argv, table = make(tmp_path, db, 10)
    before = count(db, table)
    r = recon(*argv, "--by", "ann", db_url=db_url, env=env)
    assert r.returncode == 0, r.stderr
    assert count(db, table) == before + 1
    argv, table = make(tmp_path, db, 11)
    r = recon(*argv, db_url=db_url, env=env)  # no --by: the system, as a schedule or a script runs it
    assert r.returncode == 0, r.stderr
    assert count(db, table) == before + 2
    rows = audit_rows(db, action)
    assert [(actor, outcome) for actor, _subject, outcome, _evidence in rows] == [
        ("ann", "done"),
        ("system:cli", "done"),
    ]
    assert all(evidence["run_by"] for *_rest, evidence in rows)  # the user@host that ran it
    if action != "sweep":
        assert [evidence["file"] for *_rest, evidence in rows] == [
            str(tmp_path / name)
            for name in {
                "payments.import": ("payments-10.csv", "payments-11.csv"),
                "bank.import": ("statement-10.xml", "statement-11.xml"),
                "refunds.import": ("refunds-10.csv", "refunds-11.csv"),
            }[action]
        ]
    if action == "refunds.import":
        with db.begin() as conn:
            requested = [r[0] for r in conn.execute(sa.text("SELECT requested_by FROM refunds ORDER BY id"))]
        assert requested[0] == "ann" and requested[1] != "ann"  # without --by: the user@host that ran it
    if action == "sweep":
        with db.begin() as conn:
            operators = [r[0] for r in conn.execute(sa.text("SELECT operator FROM sweep_runs ORDER BY id"))]
        assert operators[0] == "ann" and "@" in operators[1]
