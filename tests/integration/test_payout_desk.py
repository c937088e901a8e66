"""The close's exceptions at the review desk, on both databases: listed by `recon review list` beside the
payments in review (a kind filter, JSON too), linked from the console's review queue, counted by `recon stats`
and the metrics (open by kind, what they leave unexplained per currency, each PSP's last close); resolved by
`recon payouts resolve --by` through recon.actions (an enabled operator with the operator role, one audit row
each, refusals included). Expected values are written out here, never computed by recon."""

from __future__ import annotations

import json
import os
from datetime import date
from pathlib import Path

import httpx
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from recon.db import schema
from recon.db.close_store import CloseStore
from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.db.payout_store import PayoutStore
from recon.metrics import serve
from recon.operator_rows import Role
from recon.rows import EventSource, NewPayment, PaymentStatus, Transition
from tests.cli import Runner
from tests.integration.test_payouts import close, credit, new_payout, statement
from tests.operators import add_operator, add_staff

IBAN = "NL91ABNA0417164300"
CONFIG = f'[bank.accounts.stripe-eur]\niban = "{IBAN}"\ncurrency = "EUR"\npsps = ["stripe"]\n'


def desk(db: Database, recon: Runner, db_url: str, tmp_path: Path) -> Path:
    """A payment in review (amount_mismatch); three Stripe payouts of November: po_ok matched by its trace id,
    po_gone (77.00 EUR) with no credit (bank_missing), po_short (44.00 EUR) whose trace id is on a credit of
    43.00 (amount_differs); and a foreign credit of 1.23 EUR (unexplained_credit); closed once."""
    store = PaymentStore(db)
    [pid] = store.create([NewPayment("shop", "order-r", 1250, "EUR", "stripe")], charge=False)
    with db.begin() as conn:
        assert store.apply(conn, Transition(pid, PaymentStatus.CREATED, PaymentStatus.NEEDS_REVIEW,
                                            EventSource.RECONCILE, review_reason="amount_mismatch: 9.90 EUR"))
    payouts = PayoutStore(db)
    payouts.store(new_payout("po_ok", 5000, trace="TRACE-OK"))
    payouts.store(new_payout("po_gone", 7700, day=date(2026, 11, 12)))
    payouts.store(new_payout("po_short", 4400, trace="TRACE-S"))
    config = tmp_path / "recon.toml"
    config.write_text(CONFIG)
    path = statement(tmp_path, [credit(5000, date(2026, 11, 10), "B-OK", e2e="TRACE-OK"),
                                credit(4300, date(2026, 11, 10), "B-S", e2e="TRACE-S"),
                                credit(123, date(2026, 11, 11), "B-X", text="INVOICE 17")])
    assert recon("--config", str(config), "bank", "import", str(path), db_url=db_url).returncode == 0
    code, _ = close(recon, db_url, config)
    assert code == 1
    return config


def test_review_list__payout_exceptions_beside_the_payments_filtered_by_kind(db: Database, db_url: str,
                                                                             recon: Runner, tmp_path: Path) -> None:
    desk(db, recon, db_url, tmp_path)
    doc = json.loads(recon("review", "list", "--json", db_url=db_url).stdout)
    assert [p["merchant_reference"] for p in doc["payments"]] == ["order-r"]
    assert sorted(e["kind"] for e in doc["payout_exceptions"]) == ["amount_differs", "bank_missing",
                                                                   "unexplained_credit"]
    assert doc["payout_exceptions_by_kind"] == {"amount_differs": 1, "bank_missing": 1, "unexplained_credit": 1}

    only = json.loads(recon("review", "list", "--kind", "bank_missing", "--json", db_url=db_url).stdout)
    assert only["payments"] == [] and [e["kind"] for e in only["payout_exceptions"]] == ["bank_missing"]
    assert "po_gone" in only["payout_exceptions"][0]["detail"]
    payments = json.loads(recon("review", "list", "--kind", "amount_mismatch", "--json", db_url=db_url).stdout)
    assert [p["merchant_reference"] for p in payments["payments"]] == ["order-r"]
    assert payments["payout_exceptions"] == []
    # --psp keeps the exceptions of that PSP's payouts (a credit's has no PSP); a payment-only filter none
    stripe = json.loads(recon("review", "list", "--psp", "stripe", "--json", db_url=db_url).stdout)
    assert sorted(e["kind"] for e in stripe["payout_exceptions"]) == ["amount_differs", "bank_missing"]
    assert json.loads(recon("review", "list", "--currency", "EUR", "--json",
                            db_url=db_url).stdout)["payout_exceptions"] == []

    text = recon("review", "list", db_url=db_url)
    assert text.returncode == 0, text.stderr
    assert "3 open payout exceptions" in text.stdout and "unexplained_credit" in text.stdout
    assert "order-r" in text.stdout
    refused = recon("review", "list", "--kind", "no_such_kind", db_url=db_url)
    assert refused.returncode == 2 and "no_such_kind" in refused.stderr


def test_stats__the_close_s_open_exceptions_unexplained_amounts_and_last_close(db: Database, db_url: str,
                                                                               recon: Runner, tmp_path: Path) -> None:
    desk(db, recon, db_url, tmp_path)
    doc = json.loads(recon("stats", "--json", db_url=db_url).stdout)["payouts"]
    assert doc["open_exceptions"] == 3
    assert doc["open_by_kind"] == {"amount_differs": 1, "bank_missing": 1, "unexplained_credit": 1}
    # po_gone 77.00 + po_short 44.00; the foreign credit 1.23
    assert doc["unmatched"] == {"EUR": {"payouts": 2, "payouts_amount": 12100, "bank_entries": 1,
                                        "bank_entries_amount": 123}}
    [last] = doc["last_close"]
    assert (last["psp"], last["since"], last["until"], last["payouts"], last["open_items"], last["closed"]) == (
        "stripe", "2026-11-01", "2026-12-01", 3, 3, False)
    text = recon("stats", db_url=db_url).stdout
    assert "payout exceptions open: 3 (1 amount_differs, 1 bank_missing, 1 unexplained_credit)" in text
    assert "unexplained EUR: 2 payouts 121.00 EUR, 1 bank entries 1.23 EUR" in text
    assert "last close stripe: 2026-11-01..2026-12-01" in text and "3 payouts, 3 open" in text

    server = serve(db, port=0, refresh=0)
    assert server is not None
    try:
        body = httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=10).text
    finally:
        server.close()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(body) for s in family.samples}
    assert samples[("recon_payout_exceptions_open", (("kind", "bank_missing"),))] == 1.0
    assert samples[("recon_payout_unexplained_minor_units", (("currency", "EUR"), ("side", "payouts")))] == 12100.0
    assert samples[("recon_payout_unexplained_minor_units",
                    (("currency", "EUR"), ("side", "bank_entries")))] == 123.0
    assert samples[("recon_close_last_open_items", (("psp", "stripe"),))] == 3.0
    assert samples[("recon_close_last_run_timestamp_seconds", (("psp", "stripe"),))] > 0


def test_payouts_resolve__an_operator_through_recon_actions_one_audit_row_each(db: Database, db_url: str,
                                                                              recon: Runner, tmp_path: Path) -> None:
    desk(db, recon, db_url, tmp_path)
    add_staff(db)
    add_operator(db, "gone", Role.OPERATOR)
    assert recon("operators", "disable", "gone", "--by", "root", db_url=db_url).returncode == 0
    [first, *_] = CloseStore(db).iter_exceptions(state="open")
    for by, why in (("vic", "has the role viewer"), ("mallory", "'mallory' is not an operator"),
                    ("gone", "operator 'gone' is disabled")):
        refused = recon("payouts", "resolve", str(first.id), "--reason", "seen", "--by", by, db_url=db_url)
        assert refused.returncode == 2 and why in refused.stderr, refused.stderr
    nobody = recon("payouts", "resolve", str(first.id), "--reason", "seen", db_url=db_url,
                   env={k: v for k, v in os.environ.items() if k != "RECON_OPERATOR"})
    assert nobody.returncode == 2 and "--by names who acts" in nobody.stderr
    assert CloseStore(db).exception(first.id).state.value == "open"  # type: ignore[union-attr]

    done = recon("payouts", "resolve", str(first.id), "--reason", "the bank confirmed it", "--by", "ann",
                 db_url=db_url)
    assert done.returncode == 0, done.stderr
    assert f"exception {first.id} ({first.kind.value}) resolved by ann" in done.stdout
    again = recon("payouts", "resolve", str(first.id), "--reason", "twice", "--by", "ann", db_url=db_url)
    assert again.returncode == 2 and "not open" in again.stderr
    resolved = CloseStore(db).exception(first.id)
    assert (resolved.state.value, resolved.resolved_by, resolved.resolution) == (  # type: ignore[union-attr]
        "resolved", "ann", "the bank confirmed it")
    with db.begin() as conn:
        rows = conn.execute(sa.select(schema.audit_log.c.actor, schema.audit_log.c.subject,
                                      schema.audit_log.c.outcome, schema.audit_log.c.evidence).where(
            schema.audit_log.c.action == "payouts.resolve").order_by(schema.audit_log.c.id)).all()
    assert [(r.actor, r.subject, r.outcome) for r in rows] == [
        ("ann", f"payout exception {first.id}", "done"), ("ann", f"payout exception {first.id}", "refused")]
    evidence = rows[0].evidence if isinstance(rows[0].evidence, dict) else json.loads(rows[0].evidence)
    assert (evidence["reason"], evidence["kind"]) == ("the bank confirmed it", first.kind.value)
