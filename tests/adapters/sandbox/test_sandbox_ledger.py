"""The sandbox ledger's schema grows additively: a state file written by the first release still opens."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import httpx

from psp_adapters.sandbox import SandboxServer
from psp_adapters.sandbox.ledger import Ledger
from psp_adapters.sandbox.records import sandbox_fee

# the first release's tables, as it created them
_OLD_SCHEMA = """
CREATE TABLE payments (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, psp_reference TEXT NOT NULL UNIQUE, idempotency_key TEXT NOT NULL,
    merchant_reference TEXT NOT NULL, merchant_account TEXT, payment_method TEXT, description TEXT,
    amount INTEGER NOT NULL, currency TEXT NOT NULL, status TEXT NOT NULL, failure_reason TEXT, settle_to TEXT,
    settle_at TEXT, created_at TEXT NOT NULL, updated_at TEXT NOT NULL, settled_at TEXT
);
CREATE TABLE idempotency (
    key TEXT PRIMARY KEY, request_hash TEXT NOT NULL, state TEXT NOT NULL CHECK (state IN ('in_flight', 'done')),
    status_code INTEGER, response TEXT, created_at TEXT NOT NULL
);
"""
_AT = "2026-03-02T12:00:00.000000+00:00"
_PAYMENT = {
    "object": "payment",
    "psp_reference": "psp_old",
    "merchant_reference": "order-1",
    "amount": 1250,
    "currency": "EUR",
    "merchant_account": None,
    "payment_method": None,
    "description": None,
    "status": "succeeded",
    "failure_reason": None,
    "created_at": _AT,
    "updated_at": _AT,
    "settled_at": _AT,
}


def _old_file(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(_OLD_SCHEMA)
    conn.execute(
        "INSERT INTO payments (psp_reference, idempotency_key, merchant_reference, amount, currency, status, "
        "created_at, updated_at, settled_at) VALUES ('psp_old', 'k1', 'order-1', 1250, 'EUR', 'succeeded', ?, ?, ?)",
        (_AT, _AT, _AT),
    )
    conn.execute("INSERT INTO idempotency VALUES ('k1', 'h', 'done', 201, ?, ?)", (json.dumps(_PAYMENT), _AT))
    conn.commit()
    conn.close()


def test_ledger__an_old_state_file_is_upgraded_in_place(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    _old_file(db)

    with SandboxServer(db) as server, httpx.Client(base_url=server.url) as c:
        assert c.get("/v1/payments/psp_old").json() == _PAYMENT
        assert c.get("/_admin/charges").json()["per_key"] == {"k1": 1}
        refund = c.post("/_admin/payments/psp_old/refund", json={"amount": 50}).json()
        assert (refund["object"], refund["amount"]) == ("refund", 50)

    ledger = Ledger(db)
    try:
        record = ledger.get_payment("psp_old")
        assert record is not None
        assert (record.flavor, record.customer_reference, dict(record.metadata), record.fee) == (
            "native",
            None,
            {},
            None,
        )
        assert record.booked_fee == sandbox_fee(1250)  # the fee rule, for a payment booked before fees were
    finally:
        ledger.close()


def test_ledger__flavours_sharing_a_file_never_see_each_others_payments(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    with SandboxServer(db) as server, httpx.Client(base_url=server.url) as c:
        native = c.post(
            "/v1/payments",
            json={"merchant_reference": "order-1", "amount": 1250, "currency": "EUR"},
            headers={"Idempotency-Key": "k1"},
        ).json()
    with SandboxServer(db, flavor="stripe") as server, httpx.Client(base_url=server.url) as c:
        assert c.get(f"/v1/payment_intents/{native['psp_reference']}").status_code == 404
        assert c.get("/_admin/charges").json()["charges"] == 0
        created = c.post(
            "/v1/payment_intents",
            headers={"Idempotency-Key": "k1"},
            data={"amount": "1250", "currency": "eur", "payment_method": "pm_card_visa", "confirm": "true"},
        )
        assert created.status_code == 200  # the same key in another flavour is another key
    with SandboxServer(db) as server, httpx.Client(base_url=server.url) as c:
        assert c.get("/_admin/charges").json()["per_key"] == {"k1": 1}
        assert c.get(f"/v1/payments/{created.json()['id']}").status_code == 404
