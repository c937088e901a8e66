"""Exit codes are a contract cron scripts rely on: 1 means "done, items need review", so an unexpected failure
must exit 3, with one line naming what failed, and no traceback unless asked for (--log-level debug)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from datetime import date
from pathlib import Path

import click

from recon.bank.formats import registry
from recon.bank.formats.protocol import EntryToWrite, StatementToWrite
from recon.cli import cli

#: arguments that get each command past its own usage checks to the point where it does its work
ARGS = {
    ("db", "upgrade"): [], ("demo",): [], ("jobs", "cancel"): ["1"], ("jobs", "list"): [],
    ("jobs", "prune"): ["--older-than", "7d"], ("jobs", "replay"): [], ("jobs", "retry"): ["1"],
    ("jobs", "show"): ["1"], ("payments", "import"): ["{csv}"], ("payments", "list"): [],
    ("payments", "show"): ["order-1"], ("psp", "pause"): ["sandbox"], ("psp", "resume"): ["sandbox"],
    ("psp", "status"): [], ("psp-sandbox",): ["--port", "0"],
    ("report",): ["--psp", "sandbox", "--since", "2026-01-01", "--until", "2026-01-02"],
    ("stats",): [], ("sweep",): [], ("watch",): ["--once"], ("worker",): ["--burst"],
    ("review", "list"): [], ("review", "show"): ["order-1"], ("review", "recheck"): ["order-1"],
    ("review", "resolve"): ["order-1", "--as", "failed", "--reason", "r", "--by", "me"],
    ("review", "assign"): ["order-1", "--to", "ann", "--by", "me"],
    ("review", "comment"): ["order-1", "--text", "t", "--by", "me"], ("review", "bulk-resolve"): ["--as", "failed"],
    ("console",): ["--port", "0"], ("serve",): ["--port", "0"], ("schedule", "list"): [],
    # a statement of an account of [bank.accounts] (RECON_CONFIG): read and checked whole, then the database
    ("bank", "import"): ["{statement}"], ("bank", "list"): [], ("bank", "show"): ["R1"],
    ("operators", "add"): ["ann", "--role", "admin"], ("operators", "list"): [],
    ("operators", "disable"): ["ann", "--by", "root"], ("operators", "enable"): ["ann", "--by", "root"],
    ("operators", "reset-password"): ["ann", "--by", "root"], ("operators", "seal-totp"): ["--by", "root"],
    ("operators", "rotate-totp-key"): ["--new-key-file", "new.key", "--by", "root"],
    ("operators", "totp-key", "new"): ["new.key"],
    ("approvals", "list"): [], ("approvals", "show"): ["1"], ("approvals", "approve"): ["1", "--by", "bob"],
    ("approvals", "reject"): ["1", "--by", "bob"],
    ("audit", "seal"): [], ("audit", "verify"): [], ("audit", "export"): ["--since", "1d"],
    ("audit", "prune"): ["--older-than", "400d", "--by", "root"],
    ("psp-sandbox-statement",): ["--psp", "stripe", "--format", "mt940", "--iban", "NL91ABNA0417164300",
                                 "--since", "2026-11-01", "--until", "2026-11-02", "--output", "s.sta"],
    ("close",): ["--psp", "stripe", "--since", "2026-11-01", "--until", "2026-11-02"],
    ("payouts", "fetch"): ["--psp", "sandbox", "--since", "2026-11-01", "--until", "2026-11-02"],
    ("payouts", "list"): [], ("payouts", "show"): ["1"], ("payouts", "exceptions"): [],
    ("payouts", "resolve"): ["1", "--reason", "r", "--by", "me"],
    ("refunds", "import"): ["{refunds}", "--by", "me"], ("refunds", "show"): ["rf-1"],
    ("refunds", "resolve"): ["rf-1", "--as", "failed", "--reason", "r", "--by", "me"],
    ("refund",): ["order-1", "--amount", "1.00", "--by", "me"],
    ("capture",): ["order-1", "--amount", "1.00", "--by", "me"], ("cancel",): ["order-1", "--by", "me"],
    ("captures", "resolve"): ["order-1-capture1", "--as", "failed", "--reason", "r", "--by", "me"],
    ("disputes", "fetch"): ["--psp", "sandbox", "--since", "2026-11-01", "--until", "2026-11-02"],
    ("disputes", "list"): [], ("disputes", "show"): ["dp_1"],
}
IBAN = "NL91ABNA0417164300"

# Runs every command in one process with a crash planted where it starts its work: the database connection
# (every command that has one), the demo's story and the sandbox server.
PLANT = """
import contextlib, io, json, os, sys
import recon.app, recon.cli, recon.commands.operators, recon.commands.psp, recon.commands.sandbox_statement, recon.demo

os.environ["RECON_STRIPE_WEBHOOK_SECRET"] = "whsec_planted"  # recon serve gets past its own check

def crash(*_a, **_k):
    raise RuntimeError("planted crash")

recon.app.connect = crash
recon.demo.run_demo = crash
recon.commands.psp.serve_forever = crash  # the sandbox server, as `recon psp-sandbox` starts it
recon.commands.sandbox_statement.fetch = crash  # the sandbox's bank credits, as the statement asks for them
recon.commands.operators.write_new_key = crash  # the TOTP key file, as `totp-key new` writes it
recon.commands.operators.load_key = crash  # the new TOTP key file, as `rotate-totp-key` reads it before the DB
out = {}
for name, argv in json.loads(sys.argv[1]).items():
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            recon.cli.main(argv)
        except SystemExit as exc:
            out[name] = [exc.code, err.getvalue()]
print(json.dumps(out))
"""


def commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            found.extend(commands(command, (*prefix, name)))
        else:
            found.append((*prefix, name))
    return found


def _statement(tmp_path: Path) -> Path:
    day = date(2026, 11, 2)
    out = io.BytesIO()
    registry.writer("camt053").write(out, [StatementToWrite(
        account=IBAN, currency="EUR", exponent=2, statement_id="S1", opening=0, period_start=day, period_end=day,
        entries=[EntryToWrite(amount=100, direction="credit", booking_date=day, bank_reference="R1")])])
    path = tmp_path / "statement.xml"
    path.write_bytes(out.getvalue())
    return path


def run_planted(tmp_path: Path, *global_args: str) -> dict[str, list[object]]:
    csv = tmp_path / "p.csv"
    csv.write_text("merchant_reference,amount,currency,psp\norder-1,1.00,EUR,sandbox\n", encoding="utf-8")
    config = tmp_path / "recon.toml"
    config.write_text(f'[bank.accounts.main]\niban = "{IBAN}"\ncurrency = "EUR"\n', encoding="utf-8")
    refunds = tmp_path / "r.csv"
    refunds.write_text("merchant_reference,refund_reference,amount,reason\norder-1,rf-1,1.00,\n", encoding="utf-8")
    files = {"csv": csv, "statement": _statement(tmp_path), "refunds": refunds}
    argvs = {" ".join(name): [*global_args, *name, *(a.format(**files) for a in args)]
             for name, args in ARGS.items()}
    r = subprocess.run([sys.executable, "-c", PLANT, json.dumps(argvs)], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path, env={**os.environ, "RECON_CONFIG": str(config)})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def test_every_command_is_covered() -> None:
    assert set(commands(cli)) == set(ARGS)


def test_an_unexpected_failure_exits_3_with_one_line_and_no_traceback(tmp_path: Path) -> None:
    results = run_planted(tmp_path, "--database-url", f"sqlite:///{tmp_path / 'r.db'}")
    assert set(results) == {" ".join(name) for name in ARGS}
    for name, (code, err) in results.items():
        assert code == 3, f"recon {name}: exit {code}: {err}"
        assert "Traceback" not in str(err), f"recon {name}: {err}"
        lines = str(err).strip().splitlines()
        assert len(lines) == 1 and "planted crash" in lines[0] and "--log-level debug" in lines[0], (name, err)


def test_with_debug_logging_the_traceback_is_shown(tmp_path: Path) -> None:
    results = run_planted(tmp_path, "--log-level", "DEBUG", "--database-url", f"sqlite:///{tmp_path / 'r.db'}")
    code, err = results["stats"]
    assert code == 3 and "Traceback" in str(err) and "planted crash" in str(err)
