"""The Adyen flavour settles (``adyen_settlement``): batches per merchant account closing at midnight of the report
time zone, the Settlement details report of each batch (``settlement_detail_report_batch_N.csv``, Adyen's
documented columns in their order), announced by a ``REPORT_AVAILABLE`` notification that Adyen's own library
verifies, and the bank credit each batch makes (``GET /_admin/bank-credits``).

Expected rows and amounts are written here from what the test charged and the documented fee (2.9 % + 30:
1250 -> 66, 2000 -> 88; ``records.sandbox_fee``'s doctest) and dispute fee, never computed by the code under test.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from psp_adapters.protocol import Secret
from psp_adapters.sandbox import SandboxServer
from psp_adapters.sandbox.records import DISPUTE_FEE
from psp_adapters.sandbox.webhooks import WebhookConfig
from tests.adapters import adyen_schema
from tests.adapters.sandbox.test_flavor_stripe import Clock
from tests.adapters.sandbox.test_webhooks_adyen import ACCEPTED, HMAC_KEY, KEY, PASSWORD, USER, item, pay
from tests.adapters.sandbox.webhook_receiver import Receiver, receiving

pytestmark = [adyen_schema.requires_webhook_specs]

#: Adyen's standard columns, in order (docs.adyen.com/developers/reporting/settlement-detail-report/
#: settlement-detail-report-structure and the sample rows of the Settlement details report page)
DOCUMENTED = [
    "Company Account", "Merchant Account", "Psp Reference", "Merchant Reference", "Payment Method", "Creation Date",
    "TimeZone", "Type", "Modification Reference", "Gross Currency", "Gross Debit (GC)", "Gross Credit (GC)",
    "Exchange Rate", "Net Currency", "Net Debit (NC)", "Net Credit (NC)", "Commission (NC)", "Markup (NC)",
    "Scheme Fees (NC)", "Interchange (NC)", "Payment Method Variant", "Modification Merchant Reference",
    "Batch Number", "Reserved4", "Reserved5", "Reserved6", "Reserved7", "Reserved8", "Reserved9", "Reserved10",
]  # fmt: skip


@pytest.fixture
def clock() -> Clock:
    return Clock()  # 2026-03-02 12:00 UTC, 13:00 CET


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving(ACCEPTED) as r:
        yield r


@pytest.fixture
def server(tmp_path: Path, clock: Clock, receiver: Receiver) -> Iterator[SandboxServer]:
    hooks = WebhookConfig(url=receiver.url, secret=Secret(HMAC_KEY), username=USER, password=Secret(PASSWORD),
                          backoff_seconds=0.05, events=frozenset({"REPORT_AVAILABLE"}))
    with SandboxServer(tmp_path / "a.db", flavor="adyen", api_key=KEY, now_func=clock, webhooks=hooks) as srv:
        yield srv


@pytest.fixture
def http(server: SandboxServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=5.0, headers={"X-API-Key": KEY}) as c:
        yield c


def admin(http: httpx.Client, ref: str, action: str, **body: object) -> None:
    assert http.post(f"/_admin/payments/{ref}/{action}", json=body).status_code == 200


def settlement_reports(receiver: Receiver, count: int) -> list[dict[str, object]]:
    found = [item(d) for d in receiver.wait_for(count)]
    return [f for f in found if str(f["pspReference"]).startswith("settlement_detail_report_batch_")]


def rows(text: str) -> tuple[list[str], list[dict[str, str]]]:
    reader = csv.reader(io.StringIO(text))
    header = next(reader)
    return header, [dict(zip(header, line, strict=True)) for line in reader]


def test_batch__a_days_settled_refunded_and_chargeback_rows_then_the_merchant_payout(
    http: httpx.Client, clock: Clock, receiver: Receiver, server: SandboxServer
) -> None:
    a, b, c = pay(http, "order-1", value=1250), pay(http, "order-2", value=2000), pay(http, "order-3", value=5000)
    admin(http, a, "refund", amount=300)
    admin(http, b, "dispute")
    assert http.get("/reports/download/MerchantAccount/AcmeEU/settlement_detail_report_batch_1.csv").status_code == 404

    clock.advance(hours=11, seconds=1)  # 00:00:01 CET: the batch closes without anybody asking
    [announced] = settlement_reports(receiver, 2)  # the day's accounting report, then the batch
    name = "settlement_detail_report_batch_1.csv"
    assert (announced["eventCode"], announced["pspReference"], announced["success"]) == ("REPORT_AVAILABLE", name,
                                                                                         "true")
    assert announced["reason"] == f"{server.url}/reports/download/MerchantAccount/AcmeEU/{name}"
    download = httpx.get(str(announced["reason"]), timeout=5.0)
    assert download.status_code == 200 and download.headers["Content-Type"].startswith("text/csv")

    header, lines = rows(download.text)
    assert header == DOCUMENTED
    got = [(r["Psp Reference"], r["Type"], r["Gross Debit (GC)"], r["Gross Credit (GC)"], r["Net Debit (NC)"],
            r["Net Credit (NC)"], r["Commission (NC)"]) for r in lines]
    assert DISPUTE_FEE == 1500  # the sandbox's documented dispute fee (docs/psps.md)
    assert sorted(got[:-1]) == sorted([
        (a, "Settled", "", "12.50", "", "11.84", "0.66"),
        (b, "Settled", "", "20.00", "", "19.12", "0.88"),
        (c, "Settled", "", "50.00", "", "48.25", "1.75"),
        (a, "Refunded", "3.00", "", "3.00", "", ""),
        (b, "Chargeback", "20.00", "", "35.00", "", "15.00"),
    ])
    # 11.84 + 19.12 + 48.25 - 3.00 - 35.00
    assert got[-1][1] == "MerchantPayout" and lines[-1]["Net Debit (NC)"] == "41.21"
    assert {r["Batch Number"] for r in lines} == {"1"}
    assert {(r["Merchant Account"], r["Gross Currency"] or "EUR", r["Net Currency"]) for r in lines} == {
        ("AcmeEU", "EUR", "EUR")}
    assert {r["TimeZone"] for r in lines} == {"CET"}
    assert lines[-1]["Creation Date"] == "2026-03-03 00:00:00"


def test_batches__numbered_per_account_a_negative_day_waits_and_each_makes_a_bank_credit(
    http: httpx.Client, clock: Clock, receiver: Receiver, server: SandboxServer
) -> None:
    a = pay(http, "order-1", value=2000)
    clock.advance(days=1)  # day 2, 13:00 CET: batch 1 (day 1) closed
    admin(http, a, "refund", amount=1500)
    pay(http, "order-9", value=1250)  # day 2: 1250 - 66 - 1500 < 0: no batch tonight
    clock.advance(days=1)  # day 3
    pay(http, "order-3", value=2000)
    clock.advance(days=2)  # day 5: day 2 and 3 in batch 2; batch 2's money arrived on day 5

    first = http.get("/reports/download/MerchantAccount/AcmeEU/settlement_detail_report_batch_1.csv")
    second = http.get("/reports/download/MerchantAccount/AcmeEU/settlement_detail_report_batch_2.csv")
    assert http.get("/reports/download/MerchantAccount/AcmeEU/settlement_detail_report_batch_3.csv").status_code == 404
    assert http.get("/reports/download/MerchantAccount/Other/settlement_detail_report_batch_1.csv").status_code == 404
    assert [r["Type"] for r in rows(first.text)[1]] == ["Settled", "MerchantPayout"]
    types = sorted(r["Type"] for r in rows(second.text)[1])
    assert types == ["MerchantPayout", "Refunded", "Settled", "Settled"]
    net2 = -1500 + 1250 - 66 + 2000 - 88
    assert rows(second.text)[1][-1]["Net Debit (NC)"] == f"{net2 // 100}.{net2 % 100:02d}"

    credits = http.get("/_admin/bank-credits", params={"since": "2026-03-01", "until": "2026-03-31"}).json()
    assert sorted((c["value_date"], c["amount"], c["currency"], c["remittance"]) for c in credits["credits"]) == [
        ("2026-03-04", 2000 - 88, "EUR", "ADYEN PAYOUT AcmeEU BATCH 1"),
        ("2026-03-06", net2, "EUR", "ADYEN PAYOUT AcmeEU BATCH 2"),
    ]


def test_run_now__closes_a_batch_at_once_with_its_money_in_the_bank_today(
    http: httpx.Client, clock: Clock, receiver: Receiver
) -> None:
    pay(http, "order-1", value=2000)
    answer = http.post("/_admin/payouts/run", json={})
    assert answer.status_code == 200
    [made] = answer.json()["payouts"]
    assert (made["merchant_account"], made["batch"], made["currency"], made["net"]) == ("AcmeEU", 1, "EUR", 2000 - 88)
    assert [r["pspReference"] for r in settlement_reports(receiver, 2)] == ["settlement_detail_report_batch_1.csv"]
    report = http.get("/reports/download/MerchantAccount/AcmeEU/settlement_detail_report_batch_1.csv")
    assert [r["Type"] for r in rows(report.text)[1]] == ["Settled", "MerchantPayout"]
    credits = http.get("/_admin/bank-credits", params={"since": "2026-03-02", "until": "2026-03-02"}).json()
    assert [(c["amount"], c["remittance"]) for c in credits["credits"]] == [(2000 - 88, "ADYEN PAYOUT AcmeEU BATCH 1")]
    clock.advance(seconds=1)  # (a frozen clock: what comes next must come after the run)
    pay(http, "order-2", value=1250)
    clock.advance(hours=11)  # past midnight CET: batch 2 has only order-2
    second = http.get("/reports/download/MerchantAccount/AcmeEU/settlement_detail_report_batch_2.csv")
    assert [r["Merchant Reference"] for r in rows(second.text)[1]] == ["order-2", ""]
    assert http.post("/_admin/payouts/run", json={}).json() == {"payouts": []}


def test_report_user__the_settlement_report_is_for_the_report_user_only(clock: Clock) -> None:
    with SandboxServer(flavor="adyen", api_key=KEY, now_func=clock, report_username="report@Company.Acme",
                       report_password="s3cret") as srv, httpx.Client(base_url=srv.url, timeout=5.0,
                                                                       headers={"X-API-Key": KEY}) as api:
        pay(api, "order-1", value=2000)
        assert api.post("/_admin/payouts/run", json={}).status_code == 200
        path = "/reports/download/MerchantAccount/AcmeEU/settlement_detail_report_batch_1.csv"
        assert httpx.get(srv.url + path, timeout=5.0).status_code == 401
        assert httpx.get(srv.url + path, auth=("report@Company.Acme", "wrong"), timeout=5.0).status_code == 401
        answer = httpx.get(srv.url + path, auth=("report@Company.Acme", "s3cret"), timeout=5.0)
        assert answer.status_code == 200 and "MerchantPayout" in answer.text
