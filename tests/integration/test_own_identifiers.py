"""recon's own identifiers made of hex digits survive redaction exactly, on both databases (recon.redact.grouped;
docs/design.md, "recon's own identifiers").

A digest or random token holds a Luhn-valid run of 13 or more digits now and then, which redaction, at a store's
row builder or at an output, masks as a card number. Each test plants such a value where recon makes the
identifier (its SHA-256 or its random hex replaced, in that module only, by ``PLANT``: ``RUN``, a Luhn-valid 16
digits, then hex letters), and checks that the stored and the shown identifier is the planted one in the dotted
groups written out here by hand, while a card number in free text beside it is still masked.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
import sqlalchemy as sa

from recon import audit, review_bulk
from recon.bank import entry_key, importer
from recon.bank.formats import registry
from recon.bank.formats.protocol import EntryToWrite, StatementToWrite
from recon.db import modification_store, payment_store, refund_store
from recon.db.audit_store import AuditStore
from recon.db.bank_store import BankStore
from recon.db.database import Database, upgrade
from recon.db.modification_store import ModificationStore
from recon.db.payment_store import PaymentStore
from recon.db.refund_store import RefundStore
from recon.modification_rows import CAPTURE, NewModification
from recon.operator_rows import AuditEntry
from recon.refund_rows import NewRefund
from recon.rows import EventSource, NewPayment, PaymentStatus, Transition
from tests.cli import Runner

#: Stripe's test Visa (docs.stripe.com/testing): 16 digits that pass the Luhn check
RUN = "4242424242424242"
CARD = RUN
#: a SHA-256 hex digest holding RUN, and its dotted form
PLANT = RUN + "abcdef01" * 6
PLANT_DOTTED = "42424242.42424242.abcdef01.abcdef01.abcdef01.abcdef01.abcdef01.abcdef01"
IBAN = "NL91ABNA0417164300"
CONFIG = f'[bank.accounts.payouts-eur]\niban = "{IBAN}"\ncurrency = "EUR"\n'
DAY = date(2026, 11, 2)
DAY_ZERO, FAR = datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC)


class _Sha256:
    """A SHA-256 whose digest is PLANT, whatever it is fed."""

    def __init__(self, data: bytes = b"") -> None:
        del data

    def update(self, data: bytes) -> None:
        del data

    def hexdigest(self) -> str:
        return PLANT


def _planted_hex(n: int) -> str:
    """``secrets.token_hex(n)``, planted: 2n hex digits starting with RUN."""
    return PLANT[: 2 * n]


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "recon.toml"
    path.write_text(CONFIG)
    return path


def _statement_file(tmp_path: Path, *entries: EntryToWrite) -> Path:
    statement = StatementToWrite(account=IBAN, currency="EUR", exponent=2, statement_id="S1", opening=50_000,
                                 period_start=DAY, period_end=DAY, entries=list(entries))
    out = io.BytesIO()
    registry.writer("camt053", camt_version="08").write(out, [statement])
    path = tmp_path / "statement.xml"
    path.write_bytes(out.getvalue())
    return path


def _import(recon: Runner, db_url: str, config: Path, path: Path) -> dict[str, int]:
    result = recon("--config", str(config), "bank", "import", str(path), "--json", db_url=db_url)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    return {"added": doc["entries_added"], "known": doc["entries_known"]}


def test_bank__a_fallback_key_and_a_file_digest_holding_a_luhn_valid_run_are_stored_and_shown_as_made(
        recon: Runner, db_url: str, db: Database, config: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(entry_key, "hashlib", SimpleNamespace(sha256=_Sha256))
    monkeypatch.setattr(importer, "hashlib", SimpleNamespace(sha256=_Sha256))
    entry = EntryToWrite(amount=1250, direction="credit", booking_date=DAY, bank_reference=None,
                         remittance=f"PAYOUT card {CARD}", end_to_end_id=None, counterparty=None)
    assert _import(recon, db_url, config, _statement_file(tmp_path, entry)) == {"added": 1, "known": 0}
    [stored] = BankStore(db).iter_entries()
    key = "fb:42424242.42424242.abcdef01.abcdef01:1"
    assert stored.entry_key == key
    assert stored.remittance == "PAYOUT card [card]"  # a card number in the text is still masked
    statement = BankStore(db).statement(stored.statement_id)
    assert statement is not None and statement.file_digest == PLANT_DOTTED
    shown = recon("--config", str(config), "bank", "show", str(stored.id), db_url=db_url)
    assert shown.returncode == 0, shown.stderr
    assert f"entry_key: {key}" in shown.stdout and PLANT_DOTTED in shown.stdout
    assert "PAYOUT card [card]" in shown.stdout and CARD not in shown.stdout


def test_bank__migration_0026_dots_the_keys_stored_before_so_a_reimport_adds_nothing(
        recon: Runner, db_url: str, db: Database, config: Path, tmp_path: Path) -> None:
    same = EntryToWrite(amount=700, direction="credit", booking_date=DAY, bank_reference=None, remittance="CASH",
                        end_to_end_id=None, counterparty=None)
    other = EntryToWrite(amount=900, direction="debit", booking_date=DAY, bank_reference=None, remittance="FEE",
                         end_to_end_id=None, counterparty=None)
    path = _statement_file(tmp_path, same, same, other)
    assert _import(recon, db_url, config, path) == {"added": 3, "known": 0}
    made = sorted(e.entry_key for e in BankStore(db).iter_entries())
    assert all(k.startswith("fb:") and k.count(".") == 3 for k in made)
    with db.begin() as conn:  # the database as 0025 left it: keys and digests as plain hex, as recon wrote them
        head = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one()
        conn.execute(sa.text("UPDATE bank_entries SET entry_key = replace(entry_key, '.', '')"))
        conn.execute(sa.text("UPDATE bank_statements SET file_digest = replace(file_digest, '.', '')"))
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '0025'"))
    try:
        assert all(len(e.entry_key) == len("fb:") + 32 + len(":1") for e in BankStore(db).iter_entries())
    finally:  # 0026 alone (the later migrations' changes are in place already), then back at the head
        upgrade(db, "0026")
        with db.begin() as conn:
            conn.execute(sa.text("UPDATE alembic_version SET version_num = :head"), {"head": head})
    assert sorted(e.entry_key for e in BankStore(db).iter_entries()) == made
    [statement] = [BankStore(db).statement(e.statement_id) for e in list(BankStore(db).iter_entries())[:1]]
    assert statement is not None and statement.file_digest.count(".") == 7 and len(statement.file_digest) == 71
    assert _import(recon, db_url, config, path) == {"added": 0, "known": 3}


@pytest.fixture
def planted_tokens(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for module in (payment_store, refund_store, modification_store):
        monkeypatch.setattr(module, "secrets", SimpleNamespace(token_hex=_planted_hex))
    yield


def _payment(db: Database, ref: str, to: PaymentStatus, *, capture_mode: str = "automatic") -> int:
    store = PaymentStore(db)
    [pid] = store.create([NewPayment("shop", ref, 5000, "EUR", "stripe", capture_mode=capture_mode)], charge=False)
    with db.begin() as conn:
        assert store.apply(conn, Transition(pid, PaymentStatus.CREATED, to, EventSource.CHARGE,
                                            psp_reference=f"pi_{ref}"))
    return pid


def test_idempotency_keys__a_payments_holding_a_luhn_valid_run_is_stored_as_made(
        db: Database, planted_tokens: None) -> None:
    [pid] = PaymentStore(db).create([NewPayment("shop", "order-k", 5000, "EUR", "stripe")], charge=False)
    payment = PaymentStore(db).get(pid)
    assert payment is not None and payment.idempotency_key == "recon-42424242.42424242.abcdef01"


def test_idempotency_keys__a_refunds_holding_a_luhn_valid_run_is_stored_as_made_its_reason_masked(
        db: Database, planted_tokens: None) -> None:
    pid = _payment(db, "order-r", PaymentStatus.SUCCEEDED)
    [rid] = RefundStore(db).create([NewRefund(pid, "rf-k", 100, f"customer said {CARD}", "alice")], queue="charges")
    refund = RefundStore(db).get(rid)
    assert refund is not None and refund.idempotency_key == "recon-refund-42424242.42424242.abcdef01"
    assert refund.reason == "customer said [card]"


def test_idempotency_keys__a_captures_holding_a_luhn_valid_run_is_stored_as_made(
        db: Database, planted_tokens: None) -> None:
    pid = _payment(db, "order-m", PaymentStatus.AUTHORISED, capture_mode="manual")
    mid = ModificationStore(db).create(NewModification(pid, CAPTURE, "order-m-capture1", "alice", amount=3000),
                                       queue="charges")
    made = ModificationStore(db).get(mid)
    assert made is not None and made.idempotency_key == "recon-capture-42424242.42424242.abcdef01"


def test_bulk_resolve__a_digest_holding_a_luhn_valid_run_is_printed_as_made(
        recon: Runner, db_url: str, db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(review_bulk, "hashlib", SimpleNamespace(sha256=_Sha256))
    _payment(db, "order-b", PaymentStatus.NEEDS_REVIEW)
    shown = recon("review", "bulk-resolve", "--as", "failed", db_url=db_url)
    assert shown.returncode == 0, shown.stderr
    assert f"digest {PLANT_DOTTED}: add --apply {PLANT_DOTTED} " in shown.stdout


def test_audit_verify__a_head_holding_a_luhn_valid_run_is_printed_as_made(
        recon: Runner, db_url: str, db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(audit, "chain", lambda previous, row: PLANT)  # every seal's chain hash: the sealer's and
    AuditStore(db).record(AuditEntry(f"alice {CARD}", "login", "operator:alice", "ok"))  # verify's alike
    assert recon("audit", "seal", db_url=db_url).returncode == 0
    verified = recon("audit", "verify", db_url=db_url)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert f"head {PLANT_DOTTED} (row 1)" in verified.stdout
    [row] = [r for r in AuditStore(db).between(DAY_ZERO, FAR, after=0, n=10)]
    assert row.fields["actor"] == "alice [card]"  # a card number in a text is still masked
