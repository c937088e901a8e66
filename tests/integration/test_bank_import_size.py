"""A 100 MB camt.053 statement is imported in bounded memory (the finance team's month of credits must go in,
not be refused): written at run time into tmp, imported by ``python -m recon`` (a process of its own, whose own
peak RSS ``wait4`` reports), all entries stored once, and its peak compared with a 7 MB statement's: fourteen
times the entries, the same memory within a few MB. Its time is bounded only by a generous timeout: the
figures are bench/bank_import.py's (docs/benchmarks.md). MT940 and BAI2, read whole, are refused over their cap."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tempfile
import threading
from datetime import date
from pathlib import Path

import pytest

from recon.bank.formats import registry
from recon.bank.formats.protocol import EntryToWrite, StatementToWrite
from tests.cli import Runner

IBAN = "NL91ABNA0417164300"
TARGET_BYTES = 100 * 2**20
SMALL_BYTES = 7 * 2**20
#: what a 14-fold larger file may add to the peak: the importer keeps about 70 bytes per entry (key hashes)
GROWTH_LIMIT_MB = 25
#: the 100 MB import takes about 15 s on a quiet 2-core machine (docs/benchmarks.md); this bounds the processor
#: time the import spent (its own, as ``wait4`` reports it: a loaded machine stretches the wall clock, not this),
#: which catches a return to the minutes it once took
CPU_SECONDS = 180
#: the wall clock only catches a hang
TIMEOUT_SECONDS = 900


def _write_big_camt(path: Path, target_bytes: int, *, tag: str) -> int:
    """Statements of 10,000 entries each, written until the file passes ``target_bytes``; their ids and bank
    references start with ``tag``. Returns the entry count."""
    count, n, opening = 0, 0, 0
    with path.open("wb") as fh:
        head = io.BytesIO()
        registry.writer("camt053").write(head, [])
        text = head.getvalue().decode()
        prefix, suffix = text.split("</BkToCstmrStmt>")
        fh.write(prefix.encode())
        while fh.tell() < target_bytes:
            entries = [EntryToWrite(amount=1000 + i, direction="credit", booking_date=date(2026, 11, 1 + n % 28),
                                    bank_reference=f"{tag}{count + i:09d}", end_to_end_id=f"po_{count + i:012d}",
                                    counterparty="STRIPE PAYMENTS EUROPE LTD",
                                    remittance=f"STRIPE PAYOUT po_{count + i:012d} " + "X" * 200)
                       for i in range(10_000)]
            statement = StatementToWrite(account=IBAN, currency="EUR", exponent=2, statement_id=f"{tag}{n}",
                                         opening=opening, period_start=date(2026, 11, 1 + n % 28),
                                         period_end=date(2026, 11, 1 + n % 28), entries=entries, sequence=str(n + 1))
            body = io.BytesIO()
            registry.writer("camt053").write(body, [statement])
            fh.write(body.getvalue().decode().split("</GrpHdr>\n", 1)[1].split("</BkToCstmrStmt>")[0].encode())
            opening = statement.closing_balance()
            count += len(entries)
            n += 1
        fh.write(("</BkToCstmrStmt>" + suffix).encode())
    return count


def _import(path: Path, config: Path, db_url: str, env: dict[str, str]) -> tuple[int, str, str, float, float]:
    """``python -m recon bank import``: exit code, stdout, stderr, the child's own peak RSS in MB and the
    processor seconds it spent."""
    argv = [sys.executable, "-m", "recon", "--config", str(config), "--database-url", db_url, "bank", "import",
            str(path)]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
        timer = threading.Timer(TIMEOUT_SECONDS, child.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(child.pid, 0)
        finally:
            timer.cancel()
        child.returncode = code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return code, out.read().decode(), err.read().decode(), usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


@pytest.mark.slow
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_bank_import__a_100_mb_camt_statement_is_imported_in_bounded_memory(
        db_url: str, tmp_path: Path, subprocess_env: dict[str, str]) -> None:
    config = tmp_path / "recon.toml"
    config.write_text(f'[bank.accounts.big]\niban = "{IBAN}"\ncurrency = "EUR"\n')
    small, big = tmp_path / "small.xml", tmp_path / "big.xml"
    small_entries = _write_big_camt(small, SMALL_BYTES, tag="Q")
    entries = _write_big_camt(big, TARGET_BYTES, tag="R")
    assert big.stat().st_size >= TARGET_BYTES and entries >= 14 * small_entries
    code, out, err, small_peak, _ = _import(small, config, db_url, subprocess_env)
    assert code == 0 and f"{small_entries} entries added" in out, err
    code, out, err, peak, cpu = _import(big, config, db_url, subprocess_env)
    assert code == 0, err[-2000:] or f"killed after {TIMEOUT_SECONDS} s"
    assert cpu < CPU_SECONDS, f"the import of {big.stat().st_size >> 20} MB took {cpu:.0f} s of processor time"
    assert f"{entries} entries added, 0 already known" in out.splitlines()[-1]
    assert peak - small_peak < GROWTH_LIMIT_MB, (
        f"peak RSS {peak:.0f} MB for a {big.stat().st_size >> 20} MB file, {small_peak:.0f} MB for "
        f"{small.stat().st_size >> 20} MB")


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_bank_import__an_mt940_file_over_its_cap_is_refused_before_it_is_read(
        recon: Runner, db_url: str, tmp_path: Path) -> None:
    config = tmp_path / "recon.toml"
    config.write_text(f'[bank.accounts.big]\niban = "{IBAN}"\ncurrency = "EUR"\n')
    path = tmp_path / "big.sta"
    with path.open("wb") as fh:
        fh.write(b":20:S1\r\n:25:" + IBAN.encode() + b"\r\n:28C:1\r\n:60F:C261102EUR0,\r\n")
        fh.truncate(65 * 2**20)  # sparse: 65 MiB at no cost
    result = recon("--config", str(config), "bank", "import", str(path), db_url=db_url)
    assert result.returncode == 2
    assert "mt940 files are read whole and accepted up to 64 MiB" in result.stderr
