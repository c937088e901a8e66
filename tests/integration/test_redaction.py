"""Nothing stored that must not be: card numbers, card codes and keys a PSP quotes back never reach the database
or any output. One function (``recon.redact``) at the storage and log boundaries."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
import sqlalchemy as sa

from psp_adapters.errors import PspRejectedError, PspTransientError
from psp_adapters.protocol import Failed, Pending, Unknown
from recon.db.database import Database
from recon.db.jobs_store import JobStore
from recon.db.payment_store import PaymentStore
from recon.engine.handlers import Handlers
from recon.payments.charge import ChargeHandler
from recon.redact import redact, redact_value
from recon.rows import NewPayment
from tests.cli import Runner
from tests.integration.payment_flow import drain
from tests.integration.test_charge_decisions import ScriptedPsp

#: what a hostile or careless PSP might echo back; each must be masked everywhere
PLANTED = {
    "card (spaces)": "4111 1111 1111 1111",
    "card (dashes)": "5555-5555-5555-4444",
    "card (plain, 15 digits)": "378282246310005",
    "stripe secret key": "sk_live_51HxYzAbCdEfGhIjKlMnOpQr",
    "stripe restricted key": "rk_test_51HxYzAbCdEfGhIjKlMnOpQr",
    "stripe webhook secret": "whsec_abcDEF1234567890abcdef",
    "adyen api key": "AQEyhmfxK4zPbhNGw0m/n3Q5qf3VaY9UCJ1+XWZe9W27jmlZiiSGn5ep1gxBCGCQlDgrExEMFdWw2+5HzctViMSCJMYAc",
    "bearer token": "Bearer eyJhbGciOiJIUzI1NiJ9.secretpayload.sig",
}
CVC_TEXT = 'card declined; "cvc": "737", cvv=123'


def hostile_text() -> str:
    return "PSP says: " + "; ".join(f"{k}: {v}" for k, v in PLANTED.items()) + "; " + CVC_TEXT + \
        '; {"api_key": "plain-secret-value"}; https://user:hunter2@psp.example/v1'


SECRETS = [*PLANTED.values(), "eyJhbGciOiJIUzI1NiJ9.secretpayload.sig", "\"737\"", "cvv=123", "plain-secret-value",
           "hunter2", "4111111111111111"]


def assert_clean(text: str, where: str) -> None:
    found = [s for s in SECRETS if s in text]
    assert not found, f"{where} contains {found}"


def test_redact__masks_each_kind_and_keeps_what_is_not_secret() -> None:
    out = redact(hostile_text())
    assert_clean(out, "redact()")
    assert out.count("[card]") == 3
    keep = "order-1234567890123 ref QFQTPCQ8HXSKGK82 amount 123456 at 2026-12-01T09:30:00+00:00 pi_3MtwBwLkdIwHu7ix"
    assert redact(keep) == keep  # not Luhn-valid, not a key: PSP references and amounts survive
    nested = redact_value({"card": {"number": "4242424242424242", "cvc": "314"}, "note": ["sk_test_abcdef123"],
                           "amount": 1000, "ok": True})
    assert nested == {"card": {"number": "***", "cvc": "***"}, "note": ["[redacted]"], "amount": 1000, "ok": True}


def all_text(db: Database) -> str:
    """Every row of every table recon writes payment and job data to, as text."""
    with db.begin() as conn:
        return "\n".join(repr(tuple(row)) for table in ("payments", "payment_events", "jobs", "job_attempts",
                                                      "psp_controls")
                         for row in conn.execute(sa.text(f"SELECT * FROM {table}")))


@pytest.mark.parametrize("answer", [
    PspRejectedError(hostile_text(), psp="sandbox", status_code=400),
    PspTransientError(hostile_text(), psp="sandbox", status_code=500),
    Failed(psp_reference="psp_1", raw_status=hostile_text(), reason=hostile_text()),
    Unknown(psp_reference="psp_1", raw_status=hostile_text()),
], ids=["rejected", "transient", "declined", "unknown"])
def test_storage__no_planted_secret_reaches_the_database_or_the_show_commands(
        db: Database, db_url: str, subprocess_env: dict[str, str], recon: Runner, answer: Any) -> None:
    [pid] = PaymentStore(db).create([NewPayment("shop", "order-x", 1000, "EUR", "sandbox")])
    answers = [answer] + ([Pending(psp_reference="psp_1")] if isinstance(answer, PspTransientError) else [])
    psp = ScriptedPsp(create=answers)
    h = Handlers()
    h.register("charge", ChargeHandler(PaymentStore(db), lambda _name: psp))
    drain(db, h, queues=["charges"])
    assert_clean(all_text(db), "the database")
    [job] = JobStore(db).list_jobs(kind="charge", limit=5)
    for args in (("payments", "show", "order-x", "--json"), ("payments", "show", "order-x"),
                 ("jobs", "show", str(job.id), "--json"), ("jobs", "show", str(job.id))):
        r = recon(*args, db_url=db_url, env=subprocess_env)
        assert r.returncode == 0, r.stderr
        assert_clean(r.stdout + r.stderr, " ".join(args))
    events = PaymentStore(db).events(pid)
    assert json.dumps([e.to_dict() for e in events])  # the audit trail is still there, masked


def test_logs__a_webhook_like_payload_logged_as_extra_is_masked(capsys: pytest.CaptureFixture[str]) -> None:
    import logging

    from recon.logs import configure

    handler = configure(level="INFO", fmt="json", stream=sys.stderr)
    try:
        logging.getLogger("recon.test").warning("webhook %s", hostile_text(),
                                                extra={"payload": {"card": {"number": "4111111111111111"},
                                                                   "api_key": "plain-secret-value"}})
    finally:
        logging.getLogger().removeHandler(handler)
    assert_clean(capsys.readouterr().err, "the log line")
