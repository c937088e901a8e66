"""``recon report``: the PSP's settlement listing against our payments, on PostgreSQL and SQLite.

The PSP is the sandbox server over real HTTP. It lists final payments by ``settled_at``, which is the moment
of the charge here, so every PSP charge made by a test falls in the period ``[now - 10d, now + 1h)``. The
settlement window is the default 2 days: a payment created 1 hour ago is inside it, 5 days ago past it.
"""

from __future__ import annotations

import csv
import io
import json
import os
import uuid
from collections.abc import Collection, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from psp_adapters.protocol import ChargeRequest, SettlementLine
from psp_adapters.sandbox.adapter import SandboxAdapter
from psp_adapters.sandbox.faults import Faults
from psp_adapters.sandbox.server import SandboxServer
from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.db.report_store import ReportStore
from recon.reconcile.settlement import (
    COLUMNS,
    Category,
    CsvWriter,
    Item,
    JsonWriter,
    ReportResult,
    Totals,
    run_report,
)
from recon.rows import EventSource, NewPayment, PaymentStatus, Transition
from tests.adapters.stripe_oracle import canonical
from tests.adapters.stripe_oracle import listing as stripe_list
from tests.cli import Runner

NOW = datetime.now(UTC)
SINCE, UNTIL = NOW - timedelta(days=10), NOW + timedelta(hours=1)
OLD, RECENT = timedelta(days=5), timedelta(hours=1)
WINDOW = timedelta(days=2)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SandboxServer]:
    srv = SandboxServer(tmp_path / "psp.db", faults=Faults(decline_amount_suffix="402")).start()  # 1402 declines
    yield srv
    srv.stop()


@pytest.fixture
def adapter(server: SandboxServer) -> Iterator[SandboxAdapter]:
    with SandboxAdapter(server.url) as a:
        yield a


class Collect:
    """An ItemWriter that keeps the items, for assertions."""

    def __init__(self) -> None:
        self.items: list[Item] = []
        self.totals: Totals | None = None

    def write(self, item: Item) -> None:
        self.items.append(item)

    def finish(self, totals: Totals) -> None:
        self.totals = totals

    def close(self) -> None:
        pass

    def by_ref(self) -> dict[str, list[Category]]:
        out: dict[str, list[Category]] = {}
        for i in self.items:
            out.setdefault(i.merchant_reference or "", []).append(i.category)
        return out


def local(db: Database, ref: str, *, status: str = "succeeded", psp_reference: str | None = None,
          age: timedelta = OLD, amount: int = 1000, currency: str = "EUR", account: str = "acct") -> int:
    """A payment of ours, created ``age`` ago, moved from created to ``status`` (with its PSP reference)."""
    ledger = PaymentStore(db)
    [pid] = ledger.create([NewPayment(account, ref, amount, currency, "sandbox", created_at=NOW - age)],
                          charge=False)
    if status != "created":
        with db.begin() as conn:
            assert ledger.apply(conn, Transition(pid, PaymentStatus.CREATED, PaymentStatus(status),
                                                 EventSource.MANUAL, psp_reference=psp_reference))
    return pid


def charge(adapter: SandboxAdapter, ref: str, *, amount: int = 1000, currency: str = "EUR") -> str:
    """A charge at the PSP (a fresh idempotency key each time: a second call is a second charge)."""
    outcome = adapter.create_payment(ChargeRequest(ref, amount, currency), idempotency_key=uuid.uuid4().hex)
    assert outcome.psp_reference
    return outcome.psp_reference


def admin(server: SandboxServer, psp_reference: str, action: str,
          body: dict[str, object] | None = None) -> None:
    r = httpx.post(f"{server.url}/_admin/payments/{psp_reference}/{action}", json=body or {})
    assert r.status_code == 200, r.text


def report(db: Database, adapter: Any) -> tuple[Collect, ReportResult]:
    """run_report in-process; ``adapter`` is the sandbox's or a ``Listing`` (only its listing is read)."""
    out = Collect()
    result = run_report(ReportStore(db), adapter, out, psp="sandbox", since=SINCE, until=UNTIL,
                        settlement_window=WINDOW)
    return out, result


def both_sides(db: Database, adapter: SandboxAdapter, ref: str, *, status: str = "succeeded",
               age: timedelta = OLD, amount: int = 1000) -> str:
    psp_reference = charge(adapter, ref, amount=amount)
    local(db, ref, status=status, psp_reference=psp_reference, age=age, amount=amount)
    return psp_reference


def test_report__every_category_from_a_constructed_case(db: Database, server: SandboxServer,
                                                        adapter: SandboxAdapter) -> None:
    both_sides(db, adapter, "matched")
    local(db, "matched-unstored-ref")  # crash between send and commit: found by merchant reference
    charge(adapter, "matched-unstored-ref")
    declined = charge(adapter, "matched-failed", amount=1402)  # amounts ending in 402 decline
    local(db, "matched-failed", status="failed", psp_reference=declined, amount=1402)
    charge(adapter, "ghost")  # money taken, no record of ours
    local(db, "old-unlisted", psp_reference="psp_never_listed")
    local(db, "old-processing", status="processing")
    local(db, "new-unlisted", age=RECENT)
    local(db, "new-processing", status="processing", age=RECENT)
    admin(server, both_sides(db, adapter, "amount", amount=1200), "amount", {"amount": 1250})
    admin(server, both_sides(db, adapter, "currency"), "amount", {"amount": 1000, "currency": "USD"})
    admin(server, both_sides(db, adapter, "refused-later"), "fail")
    both_sides(db, adapter, "ours-failed", status="failed")
    both_sides(db, adapter, "old-pending", status="pending")
    both_sides(db, adapter, "new-pending", status="pending", age=RECENT)
    both_sides(db, adapter, "review", status="needs_review")
    first = both_sides(db, adapter, "double")
    second = charge(adapter, "double")
    local(db, "unlisted-failed", status="failed")

    out, result = report(db, adapter)

    assert out.by_ref() == {
        "matched": [Category.MATCHED],
        "matched-unstored-ref": [Category.MATCHED],
        "matched-failed": [Category.MATCHED],
        "ghost": [Category.MISSING_LOCALLY],
        "old-unlisted": [Category.MISSING_AT_PSP],
        "old-processing": [Category.MISSING_AT_PSP],
        "new-unlisted": [Category.EXPECTED],
        "new-processing": [Category.EXPECTED],
        "amount": [Category.AMOUNT_MISMATCH],
        "currency": [Category.CURRENCY_MISMATCH],
        "refused-later": [Category.STATUS_MISMATCH],
        "ours-failed": [Category.STATUS_MISMATCH],
        "old-pending": [Category.STATUS_MISMATCH],
        "new-pending": [Category.EXPECTED],
        "review": [Category.STATUS_MISMATCH],
        "double": [Category.MATCHED, Category.DUPLICATE_AT_PSP],
    }
    doubles = {i.psp_reference: i.category for i in out.items if i.merchant_reference == "double"}
    assert doubles == {first: Category.MATCHED, second: Category.DUPLICATE_AT_PSP}
    assert result.unlisted_failed == 1 and result.lines_read == 13
    assert not result.consistent
    assert next(i for i in out.items if i.merchant_reference == "refused-later").psp_status == "failed"


def test_report__totals_per_category_and_currency(db: Database, server: SandboxServer,
                                                  adapter: SandboxAdapter) -> None:
    both_sides(db, adapter, "eur-1", amount=1000)
    both_sides(db, adapter, "eur-2", amount=2500)
    psp_reference = charge(adapter, "usd-1", amount=700, currency="USD")
    local(db, "usd-1", psp_reference=psp_reference, amount=700, currency="USD")
    charge(adapter, "ghost-1", amount=333, currency="GBP")
    charge(adapter, "ghost-2", amount=111, currency="GBP")
    local(db, "late", amount=900, age=RECENT)
    admin(server, both_sides(db, adapter, "bumped", amount=400), "amount", {"amount": 450})

    out, result = report(db, adapter)

    totals = result.totals.to_dict()
    assert totals["matched"] == {"EUR": {"count": 2, "amount": 3500}, "USD": {"count": 1, "amount": 700}}
    assert totals["missing_locally"] == {"GBP": {"count": 2, "amount": 444}}  # the PSP's money
    assert totals["expected"] == {"EUR": {"count": 1, "amount": 900}}
    assert totals["amount_mismatch"] == {"EUR": {"count": 1, "amount": 400}}  # our amount
    assert totals["duplicate_at_psp"] == {} and set(totals) == {str(c) for c in Category}
    assert result.totals.discrepancies == 3 and result.totals.items == len(out.items) == 7


def test_report__an_empty_period_is_consistent(db: Database, adapter: SandboxAdapter) -> None:
    local(db, "outside", age=timedelta(days=30))
    out, result = report(db, adapter)
    assert out.items == [] and result.consistent and result.lines_read == 0


class Listing:
    """An in-test PSP whose listing is given: for merged lines (Adyen) and duplicates inside the listing."""

    name = "sandbox"
    idempotency_retention = None

    def __init__(self, lines: list[SettlementLine]) -> None:
        self.lines = lines

    def iter_settlements(self, since: datetime, until: datetime, *,
                         merchant_accounts: Collection[str] = ()) -> Iterator[SettlementLine]:
        return iter(self.lines)


def line(ref: str, mref: str | None, status: str, *, at: timedelta, amount: int = 1000) -> SettlementLine:
    return SettlementLine(ref, mref, amount, "EUR", status, NOW - at)


@pytest.mark.parametrize("batch", [5000, 1])
def test_report__lines_of_one_psp_reference_are_merged_latest_status_wins(db: Database, batch: int) -> None:
    local(db, "refunded", psp_reference="R1")
    local(db, "settled", psp_reference="R2")
    listing = Listing([
        line("R1", "refunded", "succeeded", at=timedelta(days=3)),
        line("R2", "settled", "succeeded", at=timedelta(days=2)),
        line("R1", "refunded", "refunded", at=timedelta(days=1), amount=400),  # the refund event, later
        line("R2", None, "succeeded", at=timedelta(days=3)),  # listed twice, the older first in time
    ])
    out = Collect()
    with ReportStore(db).session(psp="sandbox") as session:
        assert session.load(listing.iter_settlements(SINCE, UNTIL), batch=batch) == 4
        matched = {m.psp_reference: m for m in session.matched_lines(cutoff=UNTIL - WINDOW)}
    assert {r: (m.psp_status, m.psp_amount, m.lines) for r, m in matched.items()} == {
        "R1": ("refunded", 1000, 2), "R2": ("succeeded", 1000, 2)}
    out, _ = report(db, listing)
    assert out.by_ref() == {"refunded": [Category.STATUS_MISMATCH], "settled": [Category.MATCHED]}
    assert "2 PSP lines merged" in out.items[0].detail


def test_report__matched_lines_carry_the_psps_fee_and_net_and_reversals_never_match(db: Database) -> None:
    local(db, "kept", psp_reference="R1")
    local(db, "refunded-later", psp_reference="R2")
    local(db, "disputed", psp_reference="R3")
    listing = Listing([
        replace(line("R1", "kept", "succeeded", at=timedelta(days=2)), fee=59, net=941),
        replace(line("R2", "refunded-later", "succeeded", at=timedelta(days=3)), fee=59, net=941,
                settlement_currency="USD"),
        line("R2", None, "refunded", at=timedelta(days=1), amount=-1000),
        replace(line("R3", "disputed", "chargeback", at=timedelta(days=2)), fee=59, net=941),
    ])
    out, result = report(db, listing)
    assert out.by_ref() == {"kept": [Category.MATCHED], "refunded-later": [Category.STATUS_MISMATCH],
                            "disputed": [Category.STATUS_MISMATCH]}
    by_ref = {i.merchant_reference: i for i in out.items}
    assert (by_ref["kept"].psp_fee, by_ref["kept"].psp_net, by_ref["kept"].settlement_currency) == (59, 941, "EUR")
    # the charge's fee survives the merge with the later refund line; its own settlement currency is kept
    assert (by_ref["refunded-later"].psp_fee, by_ref["refunded-later"].settlement_currency) == (59, "USD")
    assert by_ref["refunded-later"].psp_status == "refunded" and not result.consistent
    row = dict(zip(COLUMNS, by_ref["kept"].to_row(), strict=True))
    assert (row["psp_fee"], row["psp_net"], row["settlement_currency"]) == (59, 941, "EUR")


def test_report__a_psp_reference_we_did_not_store_is_a_duplicate(db: Database) -> None:
    local(db, "ours", psp_reference="R1", age=RECENT)
    out, _ = report(db, Listing([line("R2", "ours", "succeeded", at=timedelta(hours=1)),
                                line("G1", "nobody", "failed", at=timedelta(hours=1)),
                                line("G2", "nobody", "succeeded", at=timedelta(hours=1))]))
    assert out.by_ref() == {"ours": [Category.DUPLICATE_AT_PSP, Category.EXPECTED],
                            "nobody": [Category.DUPLICATE_AT_PSP, Category.MISSING_LOCALLY]}  # listing order
    assert [i.psp_reference for i in out.items if i.category is Category.MISSING_LOCALLY] == ["G2"]


def test_report__a_line_of_another_merchant_account_is_never_ours(db: Database) -> None:
    """Issue 22, item 2, for the report: two shops of one company may both use order-1. A line of another
    account matches no payment of ours, by merchant reference or by PSP reference: missing_locally (and ours,
    unlisted, missing_at_psp); a line naming our account, or none (Stripe), matches as before."""
    local(db, "order-1", account="AcmeShopUS")
    local(db, "order-2", psp_reference="R2", account="AcmeShopUS")
    local(db, "order-3", psp_reference="R3", account="AcmeShopUS")
    local(db, "order-4", psp_reference="R4", account="default")  # stored without an account: any agrees
    lines = [replace(line("EU1", "order-1", "succeeded", at=timedelta(days=1)), merchant_account="AcmeShopEU"),
             replace(line("R2", "order-2", "succeeded", at=timedelta(days=1)), merchant_account="AcmeShopEU"),
             replace(line("R3", "order-3", "succeeded", at=timedelta(days=1)), merchant_account="AcmeShopUS"),
             replace(line("R4", "order-4", "succeeded", at=timedelta(days=1)), merchant_account="AcmeShopEU")]
    out, result = report(db, Listing(lines))
    assert out.by_ref() == {"order-1": [Category.MISSING_LOCALLY, Category.MISSING_AT_PSP],
                            "order-2": [Category.MISSING_LOCALLY, Category.MISSING_AT_PSP],
                            "order-3": [Category.MATCHED], "order-4": [Category.MATCHED]}
    assert not result.consistent


@pytest.mark.parametrize("batch", [5000, 1])
def test_report__one_reference_listed_twice_at_one_time_with_different_statuses_is_never_matched(
        db: Database, batch: int) -> None:
    """The same class as issue 22, item 4: merged lines take the latest event's status, and a tie used to go to
    the copy listed last (here: succeeded, matching ours). Two copies at one time that disagree are a
    status_mismatch for a person, whichever is listed last; copies that agree still merge."""
    local(db, "torn", psp_reference="R1")
    local(db, "twin", psp_reference="R2")
    listing = Listing([line("R1", "torn", "failed", at=timedelta(days=1)),
                       line("R1", "torn", "succeeded", at=timedelta(days=1)),
                       line("R2", "twin", "succeeded", at=timedelta(days=1)),
                       line("R2", "twin", "succeeded", at=timedelta(days=1))])
    with ReportStore(db).session(psp="sandbox") as session:
        session.load(listing.iter_settlements(SINCE, UNTIL), batch=batch)
        statuses = {m.psp_reference: m.psp_status for m in session.matched_lines(cutoff=UNTIL - WINDOW)}
    assert statuses == {"R1": "conflicting", "R2": "succeeded"}
    out, _ = report(db, listing)
    assert out.by_ref() == {"torn": [Category.STATUS_MISMATCH], "twin": [Category.MATCHED]}
    assert "twice at one time with different statuses" in out.items[0].detail


def test_report__never_changes_payments(db: Database, server: SandboxServer, adapter: SandboxAdapter) -> None:
    ledger = PaymentStore(db)
    pid = local(db, "pending-here", status="pending", psp_reference=charge(adapter, "pending-here"))
    before = (ledger.get(pid), ledger.events(pid))
    report(db, adapter)
    assert (ledger.get(pid), ledger.events(pid)) == before


# --- the command line ---------------------------------------------------------------------------------------


@pytest.fixture
def env(subprocess_env: dict[str, str], server: SandboxServer) -> dict[str, str]:
    return {**subprocess_env, "RECON_SANDBOX_BASE_URL": server.url}


PERIOD = ("--psp", "sandbox", "--since", SINCE.isoformat(), "--until", UNTIL.isoformat())


def test_report_cli__csv_to_stdout_exits_1_on_discrepancies(db: Database, db_url: str, env: dict[str, str],
                                                            adapter: SandboxAdapter, recon: Runner) -> None:
    psp_reference = both_sides(db, adapter, "ok")
    charge(adapter, "ghost", amount=777)
    r = recon("report", *PERIOD, db_url=db_url, env=env, log_level="WARNING")
    assert r.returncode == 1, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert tuple(rows[0]) == COLUMNS
    assert {(x["category"], x["merchant_reference"]) for x in rows} == {("matched", "ok"),
                                                                       ("missing_locally", "ghost")}
    ok = next(x for x in rows if x["category"] == "matched")
    assert ok["psp_reference"] == psp_reference and ok["our_amount"] == ok["psp_amount"] == "1000"
    ghost = next(x for x in rows if x["category"] == "missing_locally")
    assert ghost["our_amount"] == "" and ghost["psp_amount"] == "777"
    assert r.stderr == ""  # totals go to stderr only with --output


def test_report_cli__json_to_a_file_exits_0_when_consistent(db: Database, db_url: str, env: dict[str, str],
                                                            adapter: SandboxAdapter, tmp_path: Path,
                                                            recon: Runner) -> None:
    both_sides(db, adapter, "ok-1")
    both_sides(db, adapter, "ok-2", amount=2000)
    local(db, "on-its-way", age=RECENT)
    target = tmp_path / "report.json"
    r = recon("report", *PERIOD, "--format", "json", "--output", str(target), db_url=db_url, env=env,
              log_level="WARNING")
    assert r.returncode == 0, r.stderr
    doc = json.loads(target.read_text())
    assert list(doc) == ["psp", "since", "until", "totals", "items"]
    assert doc["psp"] == "sandbox" and datetime.fromisoformat(doc["since"]) == SINCE
    assert doc["totals"]["matched"] == {"EUR": {"count": 2, "amount": 3000}}
    assert doc["totals"]["expected"] == {"EUR": {"count": 1, "amount": 1000}}
    assert sorted(i["category"] for i in doc["items"]) == ["expected", "matched", "matched"]
    assert set(doc["items"][0]) == set(COLUMNS)
    assert "3 items, 0 discrepancies" in r.stderr and "30.00 EUR" in r.stderr
    assert r.stdout == ""


def test_report_cli__psp_failure_exits_3_with_one_line_and_no_file(db_url: str, tmp_path: Path,
                                                                   subprocess_env: dict[str, str],
                                                                   recon: Runner) -> None:
    env = {**subprocess_env, "RECON_SANDBOX_BASE_URL": "http://127.0.0.1:9",  # nothing listens there
           "RECON_SANDBOX_CONNECT_TIMEOUT": "2"}
    target = tmp_path / "report.csv"
    r = recon("report", *PERIOD, "--output", str(target), db_url=db_url, env=env, log_level="WARNING")
    assert r.returncode == 3
    [message] = r.stderr.strip().splitlines()
    assert message.startswith("recon: report: the sandbox settlement listing failed: Psp")
    assert not target.exists() and list(tmp_path.glob(".recon-report-*")) == []
    assert r.stdout == ""


@pytest.mark.parametrize(("args", "message"), [
    (("--since", "2026-13-01", "--until", "2026-12-01"), "--since '2026-13-01' is not an ISO date"),
    (("--since", "2026-11-01", "--until", "yesterday"), "--until 'yesterday' is not an ISO date"),
    (("--since", "0001-01-01T00:30:00+01:00", "--until", "2026-11-01"), "is not an ISO date"),  # year 0 in UTC
    (("--since", "2026-11-02", "--until", "2026-11-01T23:00:00+00:00"), "must be before --until"),
    (("--since", "2026-11-01T01:00:00+01:00", "--until", "2026-11-01"), "must be before --until"),
])
def test_report_cli__bad_period_exits_2_with_one_line(tmp_path: Path, subprocess_env: dict[str, str],
                                                      args: tuple[str, ...], message: str, recon: Runner) -> None:
    r = recon("report", "--psp", "sandbox", *args, db_url=f"sqlite:///{tmp_path}/none.db", env=subprocess_env,
              log_level="WARNING")
    assert r.returncode == 2
    [line_] = r.stderr.strip().splitlines()
    assert line_.startswith("recon: ") and message in line_


def test_report_cli__unknown_psp_exits_2_with_one_line(tmp_path: Path,
                                                       subprocess_env: dict[str, str], recon: Runner) -> None:
    r = recon("report", "--psp", "paypal", "--since", "2026-11-01", "--until", "2026-11-02",
              db_url=f"sqlite:///{tmp_path}/none.db", env=subprocess_env, log_level="WARNING")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == ["recon: unknown PSP 'paypal' (known: adyen, sandbox, stripe)"]


def test_settlement__writers_produce_one_document_and_a_header_even_when_empty() -> None:
    csv_out, json_out = io.StringIO(), io.StringIO()
    c, j = CsvWriter(csv_out), JsonWriter(json_out, psp="x", since=SINCE, until=UNTIL, spool_bytes=64)
    item = Item(Category.MATCHED, "m", "r", 1, "EUR", 1, "EUR", "succeeded", "succeeded", "")
    for _ in range(50):  # past the spool's memory bound: items go through a temporary file
        j.write(item)
    t = Totals()
    c.finish(t)
    j.finish(t)
    assert csv_out.getvalue() == ",".join(COLUMNS) + "\n"
    doc = json.loads(json_out.getvalue())
    assert len(doc["items"]) == 50 and doc["items"][0]["category"] == "matched"
    empty = io.StringIO()
    JsonWriter(empty, psp="x", since=SINCE, until=UNTIL).finish(t)
    assert json.loads(empty.getvalue())["items"] == []


def test_report_cli__a_listing_that_repeats_its_page_exits_3_and_writes_nothing(
        db_url: str, tmp_path: Path, recon: Runner) -> None:
    """Issue 22, item 3, for `recon report`: Stripe's balance transactions answering has_more with the same page
    end at the second request, as a protocol error (exit 3, one line), never in an endless listing."""
    txn = canonical("balance_transaction", id="txn_1", reporting_category="payout", type="payout")
    target = tmp_path / "report.csv"
    env = {**os.environ, "RECON_STRIPE_BASE_URL": "https://stripe.test", "RECON_STRIPE_API_KEY": "sk_test_report"}
    with respx.mock(assert_all_mocked=True) as psp:
        route = psp.get("https://stripe.test/v1/balance_transactions").mock(side_effect=lambda request: httpx.Response(
            200, json=stripe_list("/v1/balance_transactions", [txn], has_more=route.call_count < 50)))
        r = recon("report", "--psp", "stripe", "--since", SINCE.isoformat(), "--until", UNTIL.isoformat(),
                  "--output", str(target), db_url=db_url, env=env, log_level="WARNING")
    assert route.call_count == 2
    assert r.returncode == 3, r.stderr
    [message] = r.stderr.strip().splitlines()
    assert "listing /v1/balance_transactions never ends" in message
    assert not target.exists() and list(tmp_path.glob(".recon-report-*")) == [] and r.stdout == ""
