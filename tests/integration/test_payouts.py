"""Payouts stored once with their lines, and the close, on both databases: each matching rule and each exception
kind through ``recon close`` on a bank statement imported by ``recon bank import``; the close run twice (same
answer, nothing duplicated); a payout that changes after a close reopens it visibly; exceptions resolved with a
reason and an operator. Expected values are written out here, never computed by recon."""

from __future__ import annotations

import io
import json
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from recon.app import App
from recon.bank.formats import registry
from recon.bank.formats.protocol import EntryToWrite, StatementToWrite
from recon.db.close_store import CloseStore
from recon.db.database import Database
from recon.db.dispute_store import DisputeStore
from recon.db.payment_store import PaymentStore
from recon.db.payout_store import PayoutStore
from recon.dispute_rows import DisputeStatus, DisputeWord
from recon.operator_rows import Role
from recon.payout_rows import ExceptionKind, Finding, LineKind, Match, NewPayout, NewPayoutLine, PayoutStatus
from recon.rows import EventSource, NewPayment, PaymentStatus, Transition
from tests.adapters.stripe_oracle import canonical, listing
from tests.cli import Runner
from tests.operators import add_operator

IBAN = "NL91ABNA0417164300"
SHARED = "DE14740618130000033626"
CONFIG = f"""
[bank.accounts.stripe-eur]
iban = "{IBAN}"
currency = "EUR"
psps = ["stripe"]

[bank.accounts.shared]
iban = "{SHARED}"
currency = "EUR"
psps = ["stripe", "adyen"]
"""
DAY = date(2026, 11, 10)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "recon.toml"
    path.write_text(CONFIG)
    return path


def line(ref: str, kind: LineKind, net: int, *, fee: int = 0, psp_ref: str | None = None,
         ours: str | None = None) -> NewPayoutLine:
    return NewPayoutLine(line_ref=ref, kind=kind, psp_reference=psp_ref, merchant_reference=ours, gross=net + fee,
                         fee=fee, net=net, currency="EUR")


def new_payout(ref: str, amount: int, *, day: date = DAY, trace: str | None = None,
               status: PayoutStatus = PayoutStatus.PAID, lines: tuple[NewPayoutLine, ...] | None = None) -> NewPayout:
    if lines is None:
        lines = (line(f"txn_{ref}_c", LineKind.CHARGE, amount + 30, fee=30, psp_ref=f"pi_{ref}"),
                 line(f"txn_{ref}_f", LineKind.FEE, -30),
                 line(f"txn_{ref}_p", LineKind.PAYOUT, -amount))
    return NewPayout(psp="stripe", merchant_account="", payout_ref=ref, amount=amount, currency="EUR", status=status,
                     arrival_date=day, trace_ref=trace, statement_descriptor="ACME PAYOUT", lines=lines)


def statement(tmp_path: Path, entries: list[EntryToWrite], *, account: str = IBAN, name: str = "s.xml") -> Path:
    out = io.BytesIO()
    registry.writer("camt053", camt_version="08").write(out, [StatementToWrite(
        account=account, currency="EUR", exponent=2, statement_id=f"S-{name}", opening=0,
        period_start=date(2026, 11, 1), period_end=date(2026, 11, 30), entries=entries)])
    path = tmp_path / name
    path.write_bytes(out.getvalue())
    return path


def credit(amount: int, day: date, ref: str, *, e2e: str | None = None, text: str = "STRIPE PAYOUT") -> EntryToWrite:
    return EntryToWrite(amount=amount, direction="credit", booking_date=day, bank_reference=ref, end_to_end_id=e2e,
                        remittance=text, counterparty="Stripe")


def close(recon: Runner, db_url: str, config: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    result = recon("--config", str(config), "close", "--psp", "stripe", "--since", "2026-11-01", "--until",
                   "2026-12-01", "--format", "json", *extra, db_url=db_url)
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def categories(doc: dict[str, Any]) -> dict[str, tuple[str, str | None]]:
    return {p["payout_id"]: (p["category"], p["bank_reference"]) for p in doc["payouts"]}


def _paid(db: Database, ref: str, psp_reference: str | None, *, amount: int = 1000) -> int:
    store = PaymentStore(db)
    [pid] = store.create([NewPayment("acct", ref, amount, "EUR", "stripe")], charge=False)
    if psp_reference:
        with db.begin() as conn:
            assert store.apply(conn, Transition(pid, PaymentStatus.CREATED, PaymentStatus.SUCCEEDED,
                                                EventSource.CHARGE, psp_reference=psp_reference))
    return pid


def test_payout_store__stores_once_links_each_line_or_marks_it_missing_locally(db: Database) -> None:
    by_psp = _paid(db, "order-a", "pi_A")
    by_ours = _paid(db, "order-b", None)
    store = PayoutStore(db)
    payout = new_payout("po_1", 2940, lines=(
        line("txn_1", LineKind.CHARGE, 970, fee=30, psp_ref="pi_A"),
        line("txn_2", LineKind.CHARGE, 1970, fee=30, psp_ref="pi_B", ours="order-b"),
        line("txn_3", LineKind.CHARGE, 1000, psp_ref="pi_Z", ours="order-z"),
        line("txn_4", LineKind.REFUND, -1000, psp_ref="pi_A"),
        line("txn_5", LineKind.FEE, 0),
        line("txn_6", LineKind.PAYOUT, -2940)))
    first = store.store(payout)
    assert first.result == "new"
    assert store.store(payout).result == "same"
    stored = store.get(first.payout_id)
    assert stored is not None and (stored.line_count, stored.lines_net, stored.lines_add_up) == (6, 2940, True)
    lines = {ln.line_ref: (ln.payment_id, ln.missing_locally, ln.category) for ln in store.lines(first.payout_id)}
    assert lines == {"txn_1": (by_psp, False, "matched"), "txn_2": (by_ours, False, "matched"),
                     "txn_3": (None, True, "missing_locally"), "txn_4": (by_psp, False, "matched"),
                     "txn_5": (None, False, "not_a_payment"), "txn_6": (None, False, "not_a_payment")}
    assert [e.kind for e in store.events(first.payout_id)] == ["fetched"]


def test_close__each_rule_and_exception_through_the_command_line(recon: Runner, db_url: str, db: Database,
                                                                 config: Path, tmp_path: Path) -> None:
    store = PayoutStore(db)
    for p in (new_payout("po_ref", 5000, trace="TRACE-1"),            # reference (end-to-end id)
              new_payout("po_amount", 6100, day=date(2026, 11, 12)),  # amount + date, booked two days later
              new_payout("po_split", 9000, day=date(2026, 11, 14)),   # 1:N: two credits of 4000 + 5000
              new_payout("po_n1", 3300, day=date(2026, 11, 16)),      # N:1 with po_n2: one credit of 3300 + 2200
              new_payout("po_n2", 2200, day=date(2026, 11, 16)),
              new_payout("po_missing", 7700, day=date(2026, 11, 18)),  # bank_missing
              new_payout("po_twice", 8800, day=date(2026, 11, 20)),   # ambiguous: two credits of 8800
              new_payout("po_wrong", 4400, trace="TRACE-W"),          # amount_differs: its reference on 4300
              new_payout("po_failed", 1200, status=PayoutStatus.FAILED),  # payout_failed
              new_payout("po_lines", 2500, day=date(2026, 11, 22), lines=(  # lines_differ (still matched)
                  line("txn_l1", LineKind.CHARGE, 2400), line("txn_l2", LineKind.PAYOUT, -2500)))):
        store.store(p)
    path = statement(tmp_path, [
        credit(5000, date(2026, 11, 10), "B-REF", e2e="TRACE-1"),
        credit(6100, date(2026, 11, 14), "B-AMT"),
        credit(4000, date(2026, 11, 14), "B-S1"), credit(5000, date(2026, 11, 15), "B-S2"),
        credit(5500, date(2026, 11, 17), "B-N1"),
        credit(8800, date(2026, 11, 20), "B-T1"), credit(8800, date(2026, 11, 21), "B-T2"),
        credit(4300, date(2026, 11, 10), "B-W", e2e="TRACE-W"),
        credit(2500, date(2026, 11, 22), "B-L"),
        credit(123, date(2026, 11, 25), "B-ODD", text="REFUND FROM SOMEONE")])
    assert recon("--config", str(config), "bank", "import", str(path), db_url=db_url).returncode == 0
    shared = statement(tmp_path, [credit(999, date(2026, 11, 25), "B-SHARED")], account=SHARED, name="t.xml")
    assert recon("--config", str(config), "bank", "import", str(shared), db_url=db_url).returncode == 0

    code, doc = close(recon, db_url, config)
    assert code == 1 and doc["closed"] is False
    assert categories(doc) == {
        "po_ref": ("matched", "B-REF"), "po_amount": ("matched", "B-AMT"), "po_split": ("matched", "B-S1, B-S2"),
        "po_n1": ("matched", "B-N1"), "po_n2": ("matched", "B-N1"), "po_missing": ("bank_missing", None),
        "po_twice": ("ambiguous", None), "po_wrong": ("amount_differs", None), "po_failed": ("payout_failed", None),
        "po_lines": ("lines_differ", "B-L")}
    # B-ODD; not B-SHARED, on an account two PSPs pay into; B-T1 and B-T2 are named by po_twice's exception
    assert [e["kind"] for e in doc["credit_exceptions"]] == ["unexplained_credit"]
    assert "123 EUR" in doc["credit_exceptions"][0]["detail"]
    twice = next(p for p in doc["payouts"] if p["payout_id"] == "po_twice")
    assert "B-T1" in twice["exceptions"][0]["detail"] and "B-T2" in twice["exceptions"][0]["detail"]
    lines = next(p for p in doc["payouts"] if p["payout_id"] == "po_ref")["lines"]
    assert [(ln["kind"], ln["psp_reference"], ln["gross"], ln["fee"], ln["net"], ln["category"]) for ln in lines] == [
        ("charge", "pi_po_ref", 5060, 30, 5030, "missing_locally"), ("fee", None, -30, 0, -30, "not_a_payment"),
        ("payout", None, -5000, 0, -5000, "not_a_payment")]
    eur = doc["totals"]["EUR"]
    # paid out: every payout; received: every matched credit once (B-N1 carries two payouts)
    assert (eur["paid_out"], eur["received"]) == (5000 + 6100 + 9000 + 3300 + 2200 + 7700 + 8800 + 4400 + 1200 + 2500,
                                                  5000 + 6100 + 4000 + 5000 + 5500 + 2500)
    assert (eur["fees"], eur["refunds"], eur["disputes"]) == (9 * 30, 0, 0)

    again_code, again = close(recon, db_url, config)
    assert (again_code, again) == (code, doc)  # idempotent: same answer
    with db.begin() as conn:
        counts = [conn.exec_driver_sql(f"SELECT count(*) FROM {t}").scalar()
                  for t in ("payout_matches", "payout_exceptions")]
    assert counts == [1 + 1 + 2 + 2 + 1, 6]  # nothing duplicated

    add_operator(db, "alice", Role.OPERATOR)
    for e in [*(x for p in doc["payouts"] for x in p["exceptions"]), *doc["credit_exceptions"]]:
        result = recon("payouts", "resolve", str(e["id"]), "--reason", "checked with the bank", "--by", "alice",
                       db_url=db_url)
        assert result.returncode == 0, result.stderr
    code, doc = close(recon, db_url, config)
    assert code == 0 and doc["closed"] is True
    assert categories(doc)["po_missing"] == ("resolved", None)
    assert categories(doc)["po_lines"] == ("matched", "B-L")
    refused = recon("payouts", "resolve", str(e["id"]), "--reason", "again", "--by", "alice", db_url=db_url)
    assert refused.returncode == 2 and "not open" in refused.stderr


def test_close__a_payout_that_fails_after_its_close_reopens_it_visibly(recon: Runner, db_url: str, db: Database,
                                                                      config: Path, tmp_path: Path) -> None:
    store = PayoutStore(db)
    first = store.store(new_payout("po_late", 5000, trace="TRACE-L"))
    path = statement(tmp_path, [credit(5000, DAY, "B-L", e2e="TRACE-L")])
    assert recon("--config", str(config), "bank", "import", str(path), db_url=db_url).returncode == 0
    code, doc = close(recon, db_url, config)
    assert (code, categories(doc)) == (0, {"po_late": ("matched", "B-L")})

    changed = store.store(new_payout("po_late", 5000, trace="TRACE-L", status=PayoutStatus.FAILED))
    assert (changed.result, changed.changes) == ("changed", ("status paid -> failed",))
    events = store.events(first.payout_id)
    assert [e.kind for e in events] == ["fetched", "matched", "changed", "reopened"]
    assert "1 bank match(es) removed" in events[-1].detail
    assert CloseStore(db).matched_entries(first.payout_id) == []
    code, doc = close(recon, db_url, config)
    assert code == 1
    assert categories(doc) == {"po_late": ("payout_failed", None)}
    assert [e["kind"] for e in doc["credit_exceptions"]] == ["unexplained_credit"]  # the credit is free again
    shown = recon("payouts", "show", "po_late", "--json", db_url=db_url)
    assert shown.returncode == 0
    assert [e["kind"] for e in json.loads(shown.stdout)["events"]] == ["fetched", "matched", "changed", "reopened"]


def test_close_store__record_close_twice_adds_nothing_and_clears_what_is_explained(db: Database) -> None:
    store = CloseStore(db)
    pid = store.payouts.store(new_payout("po_x", 100)).payout_id
    finding = Finding(ExceptionKind.BANK_MISSING, pid, None, "no credit")
    assert [e.kind for e in store.record_close([], [finding], payout_ids=[pid], entry_ids=[])] == [
        ExceptionKind.BANK_MISSING]
    assert len(store.record_close([], [finding], payout_ids=[pid], entry_ids=[])) == 1
    assert store.record_close([], [], payout_ids=[pid], entry_ids=[]) == []  # explained now: cleared
    assert [e.state.value for e in store.exceptions_of(pid)] == ["cleared"]
    assert store.matches(payout_ids=[pid]) == []
    assert isinstance(Match((pid,), (), rule="x"), Match)


def test_payouts_list_and_show(recon: Runner, db_url: str, db: Database) -> None:
    PayoutStore(db).store(new_payout("po_a", 100))
    PayoutStore(db).store(new_payout("po_b", 200, status=PayoutStatus.IN_TRANSIT))
    listed = recon("payouts", "list", "--status", "in_transit", "--json", db_url=db_url)
    assert listed.returncode == 0
    assert [p["payout_id"] for p in json.loads(listed.stdout)["payouts"]] == ["po_b"]
    human = recon("payouts", "show", "po_a", db_url=db_url)
    assert human.returncode == 0 and "po_a" in human.stdout and "adds up" in human.stdout
    assert recon("payouts", "show", "po_nope", db_url=db_url).returncode == 2
    assert recon("close", "--psp", "nope", "--since", "2026-11-01", "--until", "2026-11-02",
                 db_url=db_url).returncode == 2
    assert recon("close", "--psp", "stripe", "--since", "2026-11-02", "--until", "2026-11-01",
                 db_url=db_url).returncode == 2


def test_payouts_job__fetches_with_its_lines_and_a_late_failure_is_seen_as_a_change(
        db_url: str, db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """The payouts job (as a webhook's news queues it) on a worker, Stripe answering over HTTP."""
    monkeypatch.setenv("RECON_STRIPE_API_KEY", "sk_test_" + "7" * 24)
    monkeypatch.setenv("RECON_STRIPE_BASE_URL", "https://stripe.test")
    monkeypatch.delenv("RECON_CONFIG", raising=False)
    app = App(database_url=db_url)
    arrival = int(datetime.now(UTC).timestamp()) // 86400 * 86400  # today, as Stripe writes a day

    def answer(status: str) -> dict[str, Any]:
        return listing("/v1/payouts", [canonical("payout", id="po_J", amount=970, currency="eur", status=status,
                                                 arrival_date=arrival)])

    txns = listing("/v1/balance_transactions", [
        canonical("balance_transaction", id="txn_J1", reporting_category="charge", amount=1000, fee=30, net=970,
                  currency="eur", source=canonical("charge", payment_intent="pi_J", currency="eur")),
        canonical("balance_transaction", id="txn_J2", reporting_category="payout", amount=-970, fee=0, net=-970,
                  currency="eur", source="po_J")])
    try:
        for status in ("in_transit", "failed"):
            app.client().enqueue("payouts", {"psp": "stripe", "days_back": 31, "files": ["po_J"]}, queue="close")
            with respx.mock(assert_all_called=True) as router:
                router.get("https://stripe.test/v1/payouts").mock(return_value=httpx.Response(200, json=answer(status)))
                router.get("https://stripe.test/v1/balance_transactions").mock(
                    return_value=httpx.Response(200, json=txns))
                app.worker(["close"], handlers=app.handlers(kinds=("payouts",))).run(burst=True)
        [payout] = PayoutStore(db).find("po_J", psp="stripe")
        assert (payout.status, payout.version, payout.line_count, payout.lines_net) == (PayoutStatus.FAILED, 2, 2, 970)
        assert [e.kind for e in PayoutStore(db).events(payout.id)] == ["fetched", "changed"]
        assert "status in_transit -> failed" in PayoutStore(db).events(payout.id)[1].detail
    finally:
        app.close()


def test_schedule_kind_close__checked_at_load_and_its_job_writes_the_close(
        recon: Runner, db_url: str, db: Database, config: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[schedule.daily-close]\ncron = "0 7 * * *"\nkind = "close"\npayload = { psp = "nope" }\n')
    refused = recon("--config", str(bad), "schedule", "list", db_url=db_url)
    assert refused.returncode == 2 and "schedule.daily-close.payload: psp: unknown PSP 'nope'" in refused.stderr
    day = datetime.now(UTC).date()
    PayoutStore(db).store(NewPayout(psp="sandbox", merchant_account="", payout_ref="sb_1", amount=0, currency="EUR",
                                    status=PayoutStatus.PAID, arrival_date=day, trace_ref=None,
                                    statement_descriptor=None, lines=()))
    app = App(database_url=db_url, config_path=str(config))
    try:
        app.client().enqueue("close", {"psp": "sandbox", "directory": str(tmp_path / "closes"), "days_back": 0,
                                       "format": "json"})
        app.worker(["default"], handlers=app.handlers(kinds=("close",))).run(burst=True)
    finally:
        app.close()
    written = json.loads((tmp_path / "closes" / f"close-sandbox-{day.isoformat()}.json").read_text())
    assert (written["closed"], categories(written)) == (True, {"sb_1": ("matched", None)})  # nothing to pay: explained


def test_payouts_show__outside_text_is_printed_literally(recon: Runner, db_url: str, db: Database) -> None:
    hostile = "[red]x[/red]\x1b[31mred"
    PayoutStore(db).store(new_payout("po_lit", 100, lines=(
        line("txn_lit", LineKind.CHARGE, 100, ours=hostile), line("txn_lit_p", LineKind.PAYOUT, -100))))
    shown = recon("payouts", "show", "po_lit", db_url=db_url)
    assert shown.returncode == 0
    assert "[red]x[/red]\\x1b[31mred" in shown.stdout and "\x1b" not in shown.stdout
    machine = json.loads(recon("payouts", "show", "po_lit", "--json", db_url=db_url).stdout)
    assert machine["lines"][0]["merchant_reference"] == hostile  # exact in JSON


def _disputed(db: Database, pid: int, dispute: str, *, fee: int | None) -> int:
    """A dispute of payment ``pid`` as a webhook records it, with the fee the PSP gave."""
    store = DisputeStore(db)
    with db.begin() as conn:
        made, _ = store.record(conn, DisputeWord(payment_id=pid, psp="stripe", psp_dispute_id=dispute,
                                                 status=DisputeStatus.OPENED, amount=1000, currency="EUR", fee=fee,
                                                 reason="fraudulent", psp_status="needs_response",
                                                 evidence_due_by=None), details={}, job_id=None, attempt=None)
    return made.id


def test_close__a_dispute_fee_its_payout_lines_do_not_carry_is_an_exception_until_they_do(
        recon: Runner, db_url: str, db: Database, config: Path) -> None:
    """The dispute's fee (the webhook's: 15.00) against its payout lines: the withdrawal's line carries 20.00 (an
    exception naming both, keeping the day open); a later payout's line gives 5.00 back, and the next close clears
    it. A dispute whose lines carry its fee, or whose fee the PSP did not give, is no exception."""
    pid = _paid(db, "order-d", "pi_D")
    dispute = _disputed(db, pid, "dp_fee", fee=1500)
    _disputed(db, _paid(db, "order-e", "pi_E"), "dp_ok", fee=1500)
    _disputed(db, _paid(db, "order-f", "pi_F"), "dp_nofee", fee=None)
    store = PayoutStore(db)
    withdrawal = NewPayoutLine(line_ref="txn_dp", kind=LineKind.DISPUTE, psp_reference="pi_D", merchant_reference=None,
                               gross=-1000, fee=2000, net=-3000, currency="EUR", movement_reference="dp_fee")
    fine = NewPayoutLine(line_ref="txn_ok", kind=LineKind.DISPUTE, psp_reference="pi_E", merchant_reference=None,
                         gross=-1000, fee=1500, net=-2500, currency="EUR", movement_reference="dp_ok")
    unsaid = NewPayoutLine(line_ref="txn_nf", kind=LineKind.DISPUTE, psp_reference="pi_F", merchant_reference=None,
                           gross=-1000, fee=1500, net=-2500, currency="EUR", movement_reference="dp_nofee")
    first = store.store(new_payout("po_disp", 2000, lines=(
        line("txn_c", LineKind.CHARGE, 10000, psp_ref="pi_X"), withdrawal, fine, unsaid,
        line("txn_p", LineKind.PAYOUT, -2000))))
    assert [ln.dispute_id for ln in store.lines(first.payout_id) if ln.line_ref == "txn_dp"] == [dispute]
    code, doc = close(recon, db_url, config)
    assert code == 1 and doc["closed"] is False
    found = next(p for p in doc["payouts"] if p["payout_id"] == "po_disp")
    assert found["category"] == "bank_missing"  # no statement here: the bank's exception names the category
    assert [(e["kind"], e["detail"]) for e in found["exceptions"] if e["kind"] != "bank_missing"] == [
        ("dispute_fee_differs",
         "payout po_disp: dispute dp_fee's fee is 1500 EUR, its payout lines carry 2000 EUR (minor units)")]
    assert close(recon, db_url, config)[1] == doc  # run twice: the same exception, once

    reinstated = NewPayoutLine(line_ref="txn_dr", kind=LineKind.DISPUTE_REVERSAL, psp_reference="pi_D",
                               merchant_reference=None, gross=0, fee=-500, net=500, currency="EUR",
                               movement_reference="dp_fee")
    store.store(new_payout("po_back", 500, day=date(2026, 11, 11), lines=(
        reinstated, line("txn_p2", LineKind.PAYOUT, -500))))
    _, after = close(recon, db_url, config)
    cleared = next(p for p in after["payouts"] if p["payout_id"] == "po_disp")
    assert [e["kind"] for e in cleared["exceptions"]] == ["bank_missing"]
    assert {(e.kind.value, e.state.value) for e in CloseStore(db).exceptions_of(first.payout_id)} == {
        ("bank_missing", "open"), ("dispute_fee_differs", "cleared")}
