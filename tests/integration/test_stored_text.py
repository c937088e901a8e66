"""No card number is stored in any text column of any table (issue 22, item 5), on both databases.

The schema is walked (``recon.db.schema.metadata``: every Text and JSON column of every table) and each column
must appear in ``COLUMNS`` with how a card number planted into its source, through the real entry point (a CSV
import, a signed webhook, a PSP's answer over HTTP, a job's payload, error and checkpoint, an operator's
command, the configuration, the host's name), ends:

- ``Masked(plant)``: the plant reaches the column, and the stored value holds the text around it but not the card
  number, plain or grouped by spaces or dashes;
- ``Refused(plant)``: the entry point refuses it (exit 2, HTTP 400) and nothing holds it;
- ``Verbatim(plant, why)``: the PSP's own identifier, stored exactly (the plant shows it is, with a number that
  passes the Luhn check, as one in ten of Adyen's numeric references does);
- ``Exempt(why)``: a column no outside text reaches.

A new text column without an entry fails ``test_columns__every_text_column_of_the_schema_is_planted``, so no
column can be added and forgotten. The card number is found here without recon's code: its digits, once spaces
and dashes are taken out of the stored text.
"""

from __future__ import annotations

import io
import json
import os
import re
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest
import respx
import sqlalchemy as sa
import stripe
from Adyen import util as adyen_util

from recon import Client, Dead, Handlers, Job, Lease
from recon.app import App
from recon.bank.formats import registry as bank_formats
from recon.bank.formats.protocol import EntryToWrite, StatementToWrite
from recon.db import schema
from recon.db.database import Database
from recon.db.modification_store import ModificationStore
from recon.db.payment_store import PaymentStore
from recon.db.refund_store import RefundStore
from recon.db.schedule_store import ScheduleStore
from recon.db.schema import Json
from recon.engine.worker import make_worker_id
from recon.modification_rows import ModificationSource, ModificationTransition, NewModification
from recon.refund_rows import NewRefund, RefundSource, RefundTransition
from recon.rows import EventSource, NewPayment, PaymentStatus, Transition
from recon.scheduler import Schedule, Scheduler
from tests.adapters.stripe_oracle import canonical
from tests.cli import Runner
from tests.console import TestClient
from tests.operators import add_staff

#: Stripe's test Visa (docs.stripe.com/testing): Luhn-valid
CARD = "4242424242424242"
#: the forms a card number takes in a text
FORMS = (CARD, "4242 4242 4242 4242", "4242-4242-4242-4242")
#: what every plant carries around the card number, so that the column is seen to hold the plant
PROBE = "probe"
#: a Luhn-valid variant of Adyen's own example reference (Webhooks-v1.json: 8515208516304269)
ADYEN_NUMERIC_REFERENCE = "8515208516304268"
STRIPE_SECRET = "whsec_" + "5" * 32
ADYEN_KEY = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
STRIPE_URL = "https://stripe.test"
USER = f"{PROBE}-{CARD}"


def planted(form: int = 0) -> str:
    """A text holding the card number in one of its forms."""
    return f"{PROBE} {FORMS[form % len(FORMS)]} {PROBE}"


@dataclass
class Env:
    db: Database
    db_url: str
    recon: Runner
    tmp_path: Path
    monkeypatch: pytest.MonkeyPatch

    def run(self, *args: str, env: dict[str, str] | None = None) -> Any:
        return self.recon(*args, db_url=self.db_url, log_level="WARNING", env=env)

    def config(self, text: str) -> str:
        path = self.tmp_path / f"recon-{len(list(self.tmp_path.glob('recon-*.toml')))}.toml"
        path.write_text(text, encoding="utf-8")
        return str(path)

    def app(self, config: str | None = None) -> App:
        return App(database_url=self.db_url, config_path=config)


def refused(result: Any, *fields: str) -> None:
    """The command exited 2 naming what it refused, and printed no card number."""
    assert result.returncode == 2, result.stdout + result.stderr
    for name in fields:
        assert name in result.stderr, result.stderr
    assert not holds_card(result.stdout + result.stderr)


# --- plants ------------------------------------------------------------------------------------------------


def plant_csv(env: Env) -> None:
    """Every identifier of a CSV row, each on a row of its own, and --merchant-account."""
    rows = [f"{PROBE}-{CARD},1.00,EUR,sandbox,,,",
            f"ok-1,1.00,EUR,sandbox,{PROBE}-{CARD},,",
            f"ok-2,1.00,EUR,sandbox,,pm {FORMS[1]},",
            f"ok-3,1.00,EUR,sandbox,,,cus-{FORMS[2]}",
            f"ok-4,1.00,{CARD},sandbox,,,",
            f"ok-5,1.00,EUR,{CARD},,,"]
    path = env.tmp_path / "payments.csv"
    path.write_text("merchant_reference,amount,currency,psp,merchant_account,payment_method,customer_reference\n"
                    + "\n".join(rows) + "\n", encoding="utf-8")
    refused(env.run("payments", "import", str(path)), "(field merchant_reference)", "(field merchant_account)",
            "(field payment_method)", "(field customer_reference)", "(field currency)", "(field psp)")
    ok = env.tmp_path / "ok.csv"
    ok.write_text("merchant_reference,amount,currency,psp\nok-6,1.00,EUR,sandbox\n", encoding="utf-8")
    refused(env.run("payments", "import", str(ok), "--merchant-account", f"acct {CARD}"), "--merchant-account")


def _webhook_app(env: Env) -> App:
    env.monkeypatch.setenv("RECON_STRIPE_WEBHOOK_SECRET", STRIPE_SECRET)
    env.monkeypatch.setenv("RECON_ADYEN_HMAC_KEY", ADYEN_KEY)
    return env.app()


def _work(app: App, *kinds: str) -> None:
    app.worker([app.webhook_config.queue, "reconcile"], handlers=app.handlers(kinds=kinds)).run(burst=True)


def plant_stripe_webhook(env: Env) -> None:
    """Signed Stripe events for a payment we do not know: the reference, the currency, an unknown status, the
    decline, all holding a card number (the issue's case: the body was masked, the columns were not)."""
    app = _webhook_app(env)
    failed = canonical("payment_intent", id="pi_probe_1", status="requires_payment_method", amount=1000,
                       currency=f"eur {PROBE} {FORMS[1]}", metadata={"merchant_reference": f"{PROBE}-{CARD}"},
                       last_payment_error={"type": "card_error", "code": "card_declined",
                                           "decline_code": planted(2), "message": planted()})
    odd = canonical("payment_intent", id="pi_probe_2", status=planted(1), amount=1000, currency="eur",
                    metadata={"merchant_reference": f"{PROBE} {FORMS[1]}"})
    with TestClient(_server(app), base_url="http://127.0.0.1") as client:
        for n, (kind, obj) in enumerate((("payment_intent.payment_failed", failed),
                                         ("payment_intent.processing", odd))):
            body = json.dumps(canonical("event", id=f"evt_probe_{n}", type=kind, created=int(time.time()),
                                        data={"object": obj})).encode()
            header = stripe.WebhookSignature.generate_signature_header(body.decode(), STRIPE_SECRET)
            r = client.post("/webhooks/stripe", content=body, headers={"Stripe-Signature": header})
            assert r.status_code == 200, r.text
    _work(app, "webhook")
    app.close()


def _server(app: App) -> Any:
    from recon.webhooks.server import create_app

    return create_app(app)


def _adyen_item(code: str, psp_reference: str, *, success: bool, **more: Any) -> dict[str, Any]:
    item: dict[str, Any] = {"amount": {"currency": "EUR", "value": 1000}, "eventCode": code,
                            "eventDate": "2026-12-01T12:00:00+01:00", "merchantAccountCode": "ShopECOM",
                            "pspReference": psp_reference, "success": "true" if success else "false", **more}
    item["additionalData"] = {"hmacSignature": adyen_util.generate_notification_sig(item, ADYEN_KEY).decode()}
    return item


def _post_adyen(client: TestClient, *items: dict[str, Any]) -> None:
    body = {"live": "false", "notificationItems": [{"NotificationRequestItem": i} for i in items]}
    assert adyen_util.is_valid_hmac_notification(body, ADYEN_KEY)  # Adyen's library: correctly signed
    r = client.post("/webhooks/adyen", content=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    assert r.status_code == 200 and r.text == "[accepted]", r.text


def plant_adyen_webhook(env: Env) -> None:
    """Signed Adyen notifications from an account, for a reference, with a reason and a report file name that
    hold a card number; the webhook job's tenant is the account."""
    app = _webhook_app(env)
    with TestClient(_server(app), base_url="http://127.0.0.1") as client:
        _post_adyen(client, _adyen_item("AUTHORISATION", "QFQTPCQ8HXSKGK82", success=False,
                                        merchantAccountCode=f"{PROBE}-{CARD}", merchantReference=planted(2),
                                        reason=planted(1)),
                    _adyen_item("REPORT_AVAILABLE", f"{PROBE}-{CARD}.csv", success=True,
                                merchantAccountCode=f"{PROBE} {FORMS[1]}", reason=f"https://x.example/{CARD}"))
    app.close()  # the jobs stay queued: their tenant is what is checked


def plant_psp_references(env: Env) -> None:
    """Adyen's numeric reference, Luhn-valid, on an event for our payment: kept exactly in the event (its id,
    its reference) and in the payment it heals, and a redelivery of it is still a redelivery."""
    app = _webhook_app(env)
    store = PaymentStore(env.db)
    [pid] = store.create([NewPayment("ShopECOM", "order-v1", 1000, "EUR", "adyen")], charge=False)
    with env.db.begin() as conn:
        assert store.apply(conn, Transition(pid, PaymentStatus.CREATED, PaymentStatus.PROCESSING, EventSource.CHARGE))
    item = _adyen_item("AUTHORISATION", ADYEN_NUMERIC_REFERENCE, success=True, merchantReference="order-v1")
    with TestClient(_server(app), base_url="http://127.0.0.1") as client:
        _post_adyen(client, item)
        _post_adyen(client, item)  # Adyen delivers again
    _work(app, "webhook")
    app.close()
    payment = store.get(pid)
    assert payment is not None and payment.status is PaymentStatus.SUCCEEDED
    assert payment.psp_reference == ADYEN_NUMERIC_REFERENCE
    assert column(env.db, "webhook_events", "psp_reference") == [ADYEN_NUMERIC_REFERENCE]
    assert column(env.db, "webhook_events", "event_id") == [f"AUTHORISATION:{ADYEN_NUMERIC_REFERENCE}::true"]


def plant_refund_webhook(env: Env) -> None:
    """Adyen's REFUND for our refund, whose refund pspReference is Luhn-valid digits: kept exactly in the event's
    movement reference and in the refund it moves."""
    app = _webhook_app(env)
    pid = _succeeded(env, "order-rw", "adyen", "8815208516304269")
    store = RefundStore(env.db)
    [rid] = store.create([NewRefund(pid, "rf-rw", 100, None, "alice")], queue="charges")
    item = _adyen_item("REFUND", ADYEN_NUMERIC_REFERENCE, success=True, merchantReference="rf-rw",
                       originalReference="8815208516304269")
    with TestClient(_server(app), base_url="http://127.0.0.1") as client:
        _post_adyen(client, item)
    _work(app, "webhook")
    app.close()
    refund = store.get(rid)
    assert refund is not None and refund.psp_refund_id == ADYEN_NUMERIC_REFERENCE
    assert column(env.db, "webhook_events", "movement_reference") == [ADYEN_NUMERIC_REFERENCE]


def plant_dispute_webhooks(env: Env) -> None:
    """Disputes of our payments: a Stripe Dispute whose status holds a card number, and Adyen chargebacks whose
    reason and currency do, on a payment whose Adyen reference is Luhn-valid digits (the dispute's id: exact)."""
    app = _webhook_app(env)
    _succeeded(env, "order-dsp", "stripe", "pi_dsp")
    adyen = PaymentStore(env.db)
    [pid] = adyen.create([NewPayment("ShopECOM", "order-dsa", 1000, "EUR", "adyen")], charge=False)
    with env.db.begin() as conn:
        assert adyen.apply(conn, Transition(pid, PaymentStatus.CREATED, PaymentStatus.SUCCEEDED, EventSource.CHARGE,
                                            psp_reference=ADYEN_NUMERIC_REFERENCE))
    dispute = canonical("dispute", id="dp_probe", status=planted(1), amount=2000, currency="usd",
                        payment_intent="pi_dsp")
    body = json.dumps(canonical("event", id="evt_dsp", type="charge.dispute.updated", created=int(time.time()),
                                data={"object": dispute})).encode()
    notice = _adyen_item("NOTIFICATION_OF_CHARGEBACK", "9915208516304260", success=True, merchantReference="order-dsa",
                         originalReference=ADYEN_NUMERIC_REFERENCE, reason=planted(2))
    lost = _adyen_item("SECOND_CHARGEBACK", ADYEN_NUMERIC_REFERENCE, success=True, merchantReference="order-dsa",
                       reason=planted())
    lost["amount"] = {"currency": f"{PROBE}{CARD}", "value": 1000}
    lost["additionalData"] = {"hmacSignature": adyen_util.generate_notification_sig(
        {k: v for k, v in lost.items() if k != "additionalData"}, ADYEN_KEY).decode()}
    with TestClient(_server(app), base_url="http://127.0.0.1") as client:
        header = stripe.WebhookSignature.generate_signature_header(body.decode(), STRIPE_SECRET)
        assert client.post("/webhooks/stripe", content=body, headers={"Stripe-Signature": header}).status_code == 200
        _post_adyen(client, notice)
        _post_adyen(client, lost)
    _work(app, "webhook")
    app.close()
    assert sorted(column(env.db, "disputes", "psp_dispute_id")) == sorted(["dp_probe", ADYEN_NUMERIC_REFERENCE])


def _stripe_app(env: Env, config: str = "") -> App:
    env.monkeypatch.setenv("RECON_STRIPE_API_KEY", "sk_test_" + "7" * 24)
    env.monkeypatch.setenv("RECON_STRIPE_BASE_URL", STRIPE_URL)
    return env.app(env.config(config) if config else None)


def _stripe_payments(env: Env, *refs: str) -> list[int]:
    return PaymentStore(env.db).create([NewPayment("default", ref, 2000, "USD", "stripe", payment_method="pm_card_visa",
                                                   customer_reference="cus_NffrFeUfNV2Hib") for ref in refs])


def plant_stripe_answers(env: Env) -> None:
    """Stripe's answers to charges, over HTTP: a decline whose code, a rejection whose message, and a success
    in a currency whose code hold a card number."""
    app = _stripe_app(env)
    _stripe_payments(env, "order-1", "order-2", "order-3")

    def answer(request: httpx.Request) -> httpx.Response:
        ref = parse_qs(request.content.decode())["metadata[merchant_reference]"][0]
        if ref == "order-1":
            intent = canonical("payment_intent", id="pi_o1", status="requires_payment_method", amount=2000,
                               currency="usd", metadata={"merchant_reference": ref})
            return httpx.Response(402, json={"error": {"type": "card_error", "code": "card_declined",
                                                       "decline_code": planted(1), "message": planted(),
                                                       "payment_intent": intent}})
        if ref == "order-2":
            return httpx.Response(400, json={"error": {"type": "invalid_request_error", "code": planted(2),
                                                       "message": planted()}})
        return httpx.Response(200, json=canonical("payment_intent", id="pi_o3", status="succeeded", amount=2000,
                                                  amount_received=2000, currency=f"eur {PROBE} {FORMS[2]}",
                                                  metadata={"merchant_reference": ref}))

    with respx.mock(assert_all_called=False) as router:
        router.post(f"{STRIPE_URL}/v1/payment_intents").mock(side_effect=answer)
        app.worker(["charges"], handlers=app.handlers(kinds=("charge",))).run(burst=True)
    app.close()


def plant_stripe_breaker(env: Env) -> None:
    """A Stripe 500 whose message holds a card number opens the breaker with that reason."""
    app = _stripe_app(env, "[psp.stripe]\nbreaker_failures = 1\n")
    _stripe_payments(env, "order-b")
    with respx.mock(assert_all_called=False) as router:
        router.post(f"{STRIPE_URL}/v1/payment_intents").mock(return_value=httpx.Response(
            500, json={"error": {"type": "api_error", "message": planted(1)}}))
        worker = app.worker(["charges"], handlers=app.handlers(kinds=("charge",)))
        worker.run(burst=True)
    app.close()


def plant_jobs(env: Env) -> None:
    """A producer's job (payload, unique key, tenant), run by a worker on a host whose name holds a card number:
    its handler checkpoints and dies of an error kind and text that do too; then it is replayed by a user whose
    name does (``recon jobs replay``: the operator is USER@host)."""
    app = env.app()
    client = Client(app.jobs, app.settings)
    client.enqueue("probe", {"note": planted(), "nested": [{"card": FORMS[1]}]}, unique_key=f"{PROBE}-{CARD}",
                   tenant=planted(2))

    def handler(job: Job, lease: Lease) -> Dead:
        lease.save_progress({"seen": planted(1)})
        return Dead(error_kind=f"{PROBE}-{CARD}", error=planted(2))

    def with_write(job: Job, lease: Lease) -> Dead:  # a finish with a domain write: its own statements
        return Dead(error_kind=f"{PROBE}-{FORMS[1]}", error=planted(1), write=lambda conn: None)

    handlers = Handlers()
    handlers.register("probe", handler)
    handlers.register("probe_write", with_write)
    client.enqueue("probe_write", {})
    client.enqueue("probe", {}, queue="held")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket, "gethostname", lambda: f"{PROBE}-{CARD}")
        worker = app.worker(["default"], handlers=handlers)
        worker.run(burst=True)
        # a lease still held (a finished job's owner is cleared): what the worker's claim loop writes
        assert len(app.jobs.claim(worker=worker.worker_id, queues=["held"], n=1, ttl=300)) == 1
    app.close()
    add_staff(env.db)
    r = env.run("jobs", "replay", "--by", "ann", env={**os.environ, "USER": USER, "LOGNAME": USER})
    assert r.returncode == 0, r.stderr


def plant_operators(env: Env) -> None:
    """An operator's words: a pause's reason, a resolution's reason (both four-eyes requests, approved), a sweep run
    by a user whose name holds a card number. Operators' names are refused at their entry (plant_operator_name)."""
    store = PaymentStore(env.db)
    [pid] = store.create([NewPayment("default", "order-r", 1000, "EUR", "sandbox")], charge=False)
    with env.db.begin() as conn:
        for t in (Transition(pid, PaymentStatus.CREATED, PaymentStatus.PROCESSING, EventSource.CHARGE),
                  Transition(pid, PaymentStatus.PROCESSING, PaymentStatus.NEEDS_REVIEW, EventSource.RECONCILE,
                             review_reason="no_final_answer: the PSP said nothing")):
            assert store.apply(conn, t)
    add_staff(env.db)
    assert env.run("psp", "pause", "sandbox", "--reason", planted(1), "--by", "ann").returncode == 1
    r = env.run("review", "resolve", "order-r", "--as", "failed", "--reason", planted(2), "--by", "ann",
                "--override")
    assert r.returncode == 1, r.stderr
    for approval in ("1", "2"):
        r = env.run("approvals", "approve", approval, "--by", "bob")
        assert r.returncode == 0, r.stderr
    r = env.run("sweep", "--enqueue-only", "--older-than", "1d", env={**os.environ, "USER": USER, "LOGNAME": USER})
    assert r.returncode == 0, r.stderr


def plant_review_workflow(env: Env) -> None:
    """An operator assigns a payment in review to a name holding a card number, and comments with one, through
    `recon review assign|comment` (``--by`` is an operator: recon.operators checks the name)."""
    add_staff(env.db)
    store = PaymentStore(env.db)
    [pid] = store.create([NewPayment("default", "order-w", 1000, "EUR", "sandbox")], charge=False)
    with env.db.begin() as conn:
        assert store.apply(conn, Transition(pid, PaymentStatus.CREATED, PaymentStatus.NEEDS_REVIEW,
                                            EventSource.RECONCILE, review_reason="missing_at_psp: none"))
    r = env.run("review", "assign", "order-w", "--to", planted(1), "--by", "ann")
    assert r.returncode == 0, r.stderr
    r = env.run("review", "comment", "order-w", "--text", planted(), "--by", "ann")
    assert r.returncode == 0, r.stderr


def plant_scheduler(env: Env) -> None:
    """A scheduler on a host whose name holds a card number claims a slot (its id is the worker's)."""
    env.monkeypatch.setattr(socket, "gethostname", lambda: f"{PROBE}-{FORMS[1]}")
    schedule = Schedule(name="nightly", kind="sweep", queue="reconcile", every=timedelta(hours=1))
    fired = Scheduler(ScheduleStore(env.db), [schedule], scheduler_id=make_worker_id()).run_once()
    assert len(fired) == 1


def config_refused(text: str, where: str) -> Callable[[Env], None]:
    """The configuration holding a card number at ``where`` is refused before anything is done."""
    def plant(env: Env) -> None:
        refused(env.run("--config", env.config(text), "stats"), where)
    plant.__name__ = f"config_{where.replace('.', '_')}"
    return plant


def plant_queues_flag(env: Env) -> None:
    refused(env.run("worker", "--burst", "--queues", f"default,q-{CARD}"), "--queues")


def plant_psp_name(env: Env) -> None:
    refused(env.run("psp", "pause", CARD, "--reason", "x"), "unknown PSP")
    refused(env.run("sweep", "--psp", f"psp-{CARD}", "--enqueue-only"), "--psp")


def plant_operator_name(env: Env) -> None:
    """An operator's name holding a card number is refused at `recon operators add` (the stored name is the one
    every --by and login compares); so is a --by naming one."""
    refused(env.run("operators", "add", f"{PROBE}-{CARD}", "--role", "admin", "--no-password"), "operator name")
    refused(env.run("operators", "add", f"{PROBE}-{FORMS[1]}", "--role", "admin", "--no-password"), "operator name")
    refused(env.run("review", "recheck", "x", "--by", f"{PROBE}-{CARD}"), "not an operator")
    refused(env.run("payouts", "resolve", "1", "--reason", "r", "--by", f"{PROBE}-{CARD}"), "not an operator")


def plant_login(env: Env) -> None:
    """A console login naming an operator that does not exist: its audit row names what was typed (masked)."""
    app = env.app()
    try:
        result = app.operators.login(f"{PROBE} {FORMS[2]}", "a wrong password", None, source="127.0.0.1")
    finally:
        app.close()
        app.db.dispose()
    assert result.operator is None


def plant_pause_request(env: Env) -> None:
    """A four-eyes PSP pause whose reason holds a card number: the request's payload and its audit evidence."""
    add_staff(env.db)
    r = env.run("psp", "pause", "sandbox", "--reason", planted(), "--by", "ann")
    assert r.returncode == 1, r.stderr
    assert env.run("approvals", "approve", "1", "--by", "bob").returncode == 0


def plant_bank_statement(env: Env) -> None:
    """A camt.053 statement whose file name, statement id, sequence number and every text of its entries (bank
    reference, end-to-end id, counterparty, remittance, the bank's proprietary transaction code) hold a card
    number; a second entry's bank reference is plain, so the entry key is seen to hold the bank's text."""
    iban = "NL91ABNA0417164300"
    config = env.config(f'[bank.accounts.payouts]\niban = "{iban}"\ncurrency = "EUR"\n')
    day = date(2026, 11, 2)
    entries = [EntryToWrite(amount=1000, direction="credit", booking_date=day, bank_reference=f"{PROBE}-{CARD}",
                            end_to_end_id=f"{PROBE}-{CARD}", counterparty=planted(1), remittance=planted(2)),
               EntryToWrite(amount=500, direction="debit", booking_date=day, bank_reference=f"{PROBE}-ref-2")]
    statement = StatementToWrite(account=iban, currency="EUR", exponent=2, statement_id=f"{PROBE}-{CARD}",
                                 opening=10_000, period_start=day, period_end=day, entries=entries)
    out = io.BytesIO()
    bank_formats.writer("camt053", camt_version="08").write(out, [statement])
    text = out.getvalue().decode()
    domain = text[text.index("<BkTxCd>"):text.index("</BkTxCd>") + len("</BkTxCd>")]
    text = text.replace(domain, f"<BkTxCd><Prtry><Cd>{planted()}</Cd></Prtry></BkTxCd>", 1)
    text = text.replace("<ElctrncSeqNb>1</ElctrncSeqNb>", f"<ElctrncSeqNb>{PROBE}{CARD}</ElctrncSeqNb>", 1)
    path = env.tmp_path / f"{PROBE}-{CARD}.xml"
    path.write_text(text, encoding="utf-8")
    result = env.run("--config", config, "bank", "import", str(path))
    assert result.returncode == 0, result.stderr
    assert not holds_card(result.stdout + result.stderr)


def plant_payouts(env: Env) -> None:
    """Stripe's payouts over HTTP (a statement descriptor, a trace id and a line's merchant reference holding a
    card number; payout, line, PaymentIntent and refund ids carrying a Luhn-valid number, kept exactly), fetched twice
    (the second time changed), a bank credit carrying the same trace id with another amount (an exception whose
    detail quotes it), and its resolution by an operator (ann) whose reason holds a card number."""
    add_staff(env.db)
    iban = "NL91ABNA0417164300"
    config = env.config(f'[bank.accounts.payouts]\niban = "{iban}"\ncurrency = "EUR"\npsps = ["stripe"]\n')
    _stripe_app(env).close()
    trace = f"{PROBE}-{CARD}"
    payout_id, txn_id = f"po_{ADYEN_NUMERIC_REFERENCE}", f"txn_{ADYEN_NUMERIC_REFERENCE}"
    intent = f"pi_{ADYEN_NUMERIC_REFERENCE}"

    def payouts(amount: int) -> httpx.Response:
        return httpx.Response(200, json={"object": "list", "url": "/v1/payouts", "has_more": False, "data": [
            canonical("payout", id=payout_id, amount=amount, currency="eur", status="paid", arrival_date=1762732800,
                      trace_id={"status": "supported", "value": trace}, statement_descriptor=planted())]})

    refund_txn, refund_id = f"txn_{ADYEN_NUMERIC_REFERENCE}r", f"re_{ADYEN_NUMERIC_REFERENCE}"
    lines = {"object": "list", "url": "/v1/balance_transactions", "has_more": False, "data": [
        canonical("balance_transaction", id=txn_id, reporting_category="charge", type="charge", amount=5500, fee=0,
                  net=5500, currency="eur", source=canonical("charge", payment_intent=intent, currency="eur",
                                                              metadata={"merchant_reference": planted(1)})),
        canonical("balance_transaction", id=refund_txn, reporting_category="refund", type="refund", amount=-500,
                  fee=0, net=-500, currency="eur", source=canonical("refund", id=refund_id, payment_intent=intent,
                                                                     currency="eur"))]}
    for amount in (5000, 4000):
        with respx.mock(assert_all_called=False) as router:
            router.get(f"{STRIPE_URL}/v1/payouts").mock(return_value=payouts(amount))
            router.get(f"{STRIPE_URL}/v1/balance_transactions").mock(return_value=httpx.Response(200, json=lines))
            result = env.run("--config", config, "payouts", "fetch", "--psp", "stripe", "--since", "2025-11-01",
                             "--until", "2025-12-01")
        assert result.returncode in (0, 1), result.stderr
        assert not holds_card(result.stdout + result.stderr)
    day = date(2025, 11, 10)
    statement = StatementToWrite(account=iban, currency="EUR", exponent=2, statement_id="S-payouts", opening=0,
                                 period_start=day, period_end=day, entries=[EntryToWrite(
                                     amount=3000, direction="credit", booking_date=day, bank_reference="B-1",
                                     end_to_end_id=trace)])
    out = io.BytesIO()
    bank_formats.writer("camt053", camt_version="08").write(out, [statement])
    path = env.tmp_path / "payouts.xml"
    path.write_bytes(out.getvalue())
    assert env.run("--config", config, "bank", "import", str(path)).returncode == 0
    result = env.run("--config", config, "close", "--psp", "stripe", "--since", "2025-11-01", "--until", "2025-12-01")
    assert result.returncode == 1, result.stderr
    assert not holds_card(result.stdout + result.stderr)
    kinds = sorted(column(env.db, "payout_exceptions", "kind"))
    assert kinds == ["amount_differs", "lines_differ"]  # the trace id on a credit of 3000; lines of 5000 in 4000
    for exception_id in column(env.db, "payout_exceptions", "id"):
        result = env.run("payouts", "resolve", str(exception_id), "--reason", planted(2), "--by", "ann")
        assert result.returncode == 0, result.stderr
    assert column(env.db, "payouts", "payout_ref") == [payout_id]
    assert sorted(column(env.db, "payout_lines", "line_ref")) == sorted([txn_id, refund_txn])
    assert column(env.db, "payout_lines", "psp_reference") == [intent, intent]
    assert sorted(column(env.db, "payout_lines", "movement_reference"), key=str) == sorted([None, refund_id], key=str)


def _succeeded(env: Env, ref: str, psp: str, psp_reference: str) -> int:
    store = PaymentStore(env.db)
    [pid] = store.create([NewPayment("default", ref, 2000, "USD", psp, payment_method="pm_card_visa",
                                     customer_reference="cus_NffrFeUfNV2Hib")], charge=False)
    with env.db.begin() as conn:
        assert store.apply(conn, Transition(pid, PaymentStatus.CREATED, PaymentStatus.SUCCEEDED, EventSource.CHARGE,
                                            psp_reference=psp_reference))
    return pid


def plant_refund_commands(env: Env) -> None:
    """``recon refund`` by an operator with a reason holding a card number (the sandbox takes any reason text), and
    by a "name" holding one (refused: no such operator, like a refunds CSV imported by one); a refund reference
    holding one, by the command and in a refunds CSV (refused)."""
    add_staff(env.db)
    _succeeded(env, "order-r", "sandbox", "pay_r1")
    r = env.run("refund", "order-r", "--amount", "1.00", "--reason", planted(1), "--by", "ann")
    assert r.returncode == 0, r.stderr
    refused(env.run("refund", "order-r", "--amount", "1.00", "--by", planted()), "not an operator")
    good = env.tmp_path / "refunds-ok.csv"
    good.write_text("merchant_reference,refund_reference,amount,reason\norder-r,rf-imported,1.00,\n", encoding="utf-8")
    refused(env.run("refunds", "import", str(good), "--by", planted()), "not an operator")
    refused(env.run("refund", "order-r", "--amount", "1.00", "--reference", f"{PROBE}-{CARD}", "--by", "ann"),
            "--reference")
    path = env.tmp_path / "refunds.csv"
    path.write_text(f"merchant_reference,refund_reference,amount,reason\norder-r,{PROBE}-{FORMS[2]},1.00,\n",
                    encoding="utf-8")
    refused(env.run("refunds", "import", str(path)), "(field refund_reference)")


def plant_stripe_refund_answers(env: Env) -> None:
    """Stripe's answers to refunds, over HTTP: a failure whose reason holds a card number (and whose refund id is
    Luhn-valid digits: kept exactly), and an answer naming another refund id than ours, holding one."""
    app = _stripe_app(env)
    pid = _succeeded(env, "order-rf", "stripe", "pi_rf")
    store = RefundStore(env.db)
    failing, other = store.create([NewRefund(pid, "rf-1", 100, None, "alice"), NewRefund(pid, "rf-2", 100, None,
                                                                                         "alice")], queue="charges")
    with env.db.begin() as conn:  # an earlier attempt was answered pending with its id
        assert store.apply(conn, RefundTransition(other, PaymentStatus.CREATED, PaymentStatus.PENDING,
                                                  RefundSource.REFUND, psp_refund_id="re_ours"))

    def answer(request: httpx.Request) -> httpx.Response:
        ref = parse_qs(request.content.decode())["metadata[refund_reference]"][0]
        if ref == "rf-1":
            return httpx.Response(200, json=canonical(
                "refund", id=f"re_{ADYEN_NUMERIC_REFERENCE}", status="failed", failure_reason=planted(1), amount=100,
                currency="usd", payment_intent="pi_rf", metadata={"refund_reference": ref}))
        return httpx.Response(200, json=canonical("refund", id=f"re_{PROBE}-{CARD}", status="succeeded", amount=100,
                                                  currency="usd", payment_intent="pi_rf",
                                                  metadata={"refund_reference": ref}))

    with respx.mock(assert_all_called=False) as router:
        router.post(f"{STRIPE_URL}/v1/refunds").mock(side_effect=answer)
        app.worker(["charges"], handlers=app.handlers(kinds=("refund",))).run(burst=True)
    app.close()
    failed, conflicted = store.get(failing), store.get(other)
    assert failed is not None and failed.status is PaymentStatus.FAILED
    assert failed.psp_refund_id == f"re_{ADYEN_NUMERIC_REFERENCE}"  # the PSP's id, exactly
    assert conflicted is not None and conflicted.status is PaymentStatus.NEEDS_REVIEW
    assert conflicted.psp_refund_id == "re_ours"  # never replaced
    # the evidence names both the PSP's ids exactly: the one it failed and the other one it named
    assert store.events(failing)[-1].details["psp_reference"] == f"re_{ADYEN_NUMERIC_REFERENCE}"  # type: ignore[index]
    assert evidence_ids(store.events(other)[-1].details) == {f"re_{PROBE}-{CARD}"}


def plant_stripe_capture_answers(env: Env) -> None:
    """Stripe's answers to captures, over HTTP: a PaymentIntent canceled instead of captured whose cancellation
    reason holds a card number (its id Luhn-valid digits: kept exactly), and an answer naming another id than the
    one a capture holds, holding one."""
    app = _stripe_app(env)
    store, payments = ModificationStore(env.db), PaymentStore(env.db)
    ids = payments.create([NewPayment("default", f"order-cp{i}", 2000, "USD", "stripe", capture_mode="manual",
                                      payment_method="pm_card_visa", customer_reference="cus_NffrFeUfNV2Hib")
                           for i in (1, 2)], charge=False)
    for pid, ref in zip(ids, (f"pi_{ADYEN_NUMERIC_REFERENCE}", "pi_cp2"), strict=True):
        with env.db.begin() as conn:
            assert payments.apply(conn, Transition(pid, PaymentStatus.CREATED, PaymentStatus.AUTHORISED,
                                                   EventSource.CHARGE, psp_reference=ref))
    failing = store.create(NewModification(ids[0], "capture", "order-cp1-capture1", "alice"), queue="charges")
    other = store.create(NewModification(ids[1], "capture", "order-cp2-capture1", "alice"), queue="charges")
    with env.db.begin() as conn:  # an earlier attempt was answered pending with its id
        assert store.apply(conn, ModificationTransition(other, PaymentStatus.CREATED, PaymentStatus.PENDING,
                                                        ModificationSource.MODIFICATION, psp_modification_id="pi_cp2"))

    def answer(request: httpx.Request) -> httpx.Response:
        if f"pi_{ADYEN_NUMERIC_REFERENCE}" in request.url.path:
            return httpx.Response(200, json=canonical(
                "payment_intent", id=f"pi_{ADYEN_NUMERIC_REFERENCE}", status="canceled", amount=2000, currency="usd",
                cancellation_reason=planted(1)))
        return httpx.Response(200, json=canonical("payment_intent", id=f"pi_{PROBE}-{CARD}", status="succeeded",
                                                  amount=2000, amount_received=2000, currency="usd"))

    with respx.mock(assert_all_called=False) as router:
        router.post(url__regex=rf"{STRIPE_URL}/v1/payment_intents/.*/capture").mock(side_effect=answer)
        app.worker(["charges"], handlers=app.handlers(kinds=("capture",))).run(burst=True)
    app.close()
    failed, conflicted = store.get(failing), store.get(other)
    assert failed is not None and failed.status is PaymentStatus.FAILED
    assert failed.psp_modification_id == f"pi_{ADYEN_NUMERIC_REFERENCE}"  # the PSP's id, exactly
    assert conflicted is not None and conflicted.status is PaymentStatus.NEEDS_REVIEW
    assert conflicted.psp_modification_id == "pi_cp2"  # never replaced
    # the evidence names both the PSP's ids exactly: the one it failed and the other one it named
    assert store.events(failing)[-1].details["psp_reference"] == f"pi_{ADYEN_NUMERIC_REFERENCE}"  # type: ignore[index]
    assert evidence_ids(store.events(other)[-1].details) == {f"pi_{PROBE}-{CARD}"}


# --- the columns -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Masked:
    plant: Callable[[Env], None]


@dataclass(frozen=True)
class Refused:
    plant: Callable[[Env], None]


@dataclass(frozen=True)
class Verbatim:
    plant: Callable[[Env], None]
    why: str


@dataclass(frozen=True)
class Exempt:
    why: str


Entry = Masked | Refused | Verbatim | Exempt

CHECKED = "a CHECK constraint admits only recon's own names"
PSP_ID = ("the PSP's own identifier, compared by every lookup and redelivery, stored exactly: Adyen's are often "
          "16 digits and one in ten passes the Luhn check; masking would merge two payments or two events")
BANK_ACCOUNT = ("the IBAN or number of one of our [bank.accounts] (recon.bank.config checks its form), never the "
                "statement's text: a statement for any other account is refused")
BANK_CURRENCY = "the currency of one of our [bank.accounts], an ISO-4217 code recon.bank.config checks"

COLUMNS: dict[str, Entry] = {
    "bank_statements.account": Exempt(BANK_ACCOUNT),
    "bank_statements.statement_ref": Masked(plant_bank_statement),
    "bank_statements.sequence": Masked(plant_bank_statement),
    "bank_statements.currency": Exempt(BANK_CURRENCY),
    "bank_statements.format": Exempt("the name of the recon.bank.formats reader that read the file"),
    "bank_statements.file_name": Masked(plant_bank_statement),
    "bank_statements.file_digest": Exempt("the SHA-256 of the file, 64 hexadecimal digits recon computed, "
                                              "in dotted groups (tests/integration/test_own_identifiers.py)"),
    "bank_entries.account": Exempt(BANK_ACCOUNT),
    "bank_entries.entry_key": Masked(plant_bank_statement),
    "bank_entries.direction": Exempt(CHECKED),
    "bank_entries.currency": Exempt(BANK_CURRENCY),
    "bank_entries.bank_reference": Masked(plant_bank_statement),
    "bank_entries.end_to_end_id": Masked(plant_bank_statement),
    "bank_entries.counterparty": Masked(plant_bank_statement),
    "bank_entries.remittance": Masked(plant_bank_statement),
    "bank_entries.bank_code": Masked(plant_bank_statement),
    "payouts.psp": Exempt("the PSP a command or job names, one of psp_adapters.registry's (checked before any work)"),
    "payouts.merchant_account": Exempt("the merchant account recon asked the PSP about (its configured or stored "
                                       "account), never text from the PSP's answer; empty for Stripe"),
    "payouts.payout_ref": Verbatim(plant_payouts, PSP_ID),
    "payouts.currency": Exempt("an ISO-4217 code the adapters check (three letters, else PspProtocolError) and a "
                               "CHECK constraint admits"),
    "payouts.status": Exempt(CHECKED),
    "payouts.trace_ref": Masked(plant_payouts),
    "payouts.statement_descriptor": Masked(plant_payouts),
    "payouts.digest": Exempt("the SHA-256 of what the PSP said, 64 hexadecimal digits recon computed"),
    "payout_lines.line_ref": Verbatim(plant_payouts, PSP_ID),
    "payout_lines.kind": Exempt(CHECKED),
    "payout_lines.psp_reference": Verbatim(plant_payouts, PSP_ID),
    "payout_lines.merchant_reference": Masked(plant_payouts),
    "payout_lines.movement_reference": Verbatim(plant_payouts, PSP_ID),
    "payout_lines.currency": Exempt("an ISO-4217 code the adapters check: three letters, else PspProtocolError"),
    "payout_events.kind": Exempt("recon's word for a payout's step: fetched, changed, matched, reopened, resolved"),
    "payout_events.detail": Masked(plant_payouts),
    "payout_matches.rule": Exempt("recon's name of the matching rule (recon.close.match), never outside text"),
    "payout_exceptions.exception_key": Exempt("made by recon: the exception's kind and two row ids"),
    "payout_exceptions.kind": Exempt(CHECKED),
    "payout_exceptions.detail": Masked(plant_payouts),
    "payout_exceptions.state": Exempt(CHECKED),
    "payout_exceptions.resolved_by": Refused(plant_operator_name),  # recon.actions authorizes --by
    "payout_exceptions.resolution": Masked(plant_payouts),
    "close_runs.psp": Exempt("the PSP `recon close --psp` names, one of psp_adapters.registry's (checked before "
                             "any work: App.close_day)"),
    "dispute_reads.psp": Exempt("the PSP whose listing was read, one of the configured PSPs (App.fetch_disputes "
                                "checks it with require_psps before any read; the disputes job's payload_window "
                                "before that)"),
    "jobs.queue": Refused(config_refused('[webhooks]\nqueue = "wh-4242424242424242"\n', "webhooks.queue")),
    "jobs.kind": Refused(config_refused('[schedule.s]\nkind = "k 4242 4242 4242 4242"\nevery = "1h"\n',
                                        "schedule.s.kind")),
    "jobs.payload": Masked(plant_jobs),
    "jobs.state": Exempt(CHECKED),
    "jobs.lease_owner": Masked(plant_jobs),
    "jobs.unique_key": Masked(plant_jobs),
    "jobs.last_error_kind": Masked(plant_jobs),
    "jobs.last_error": Masked(plant_stripe_answers),
    "jobs.tenant": Masked(plant_adyen_webhook),
    "jobs.progress": Masked(plant_jobs),
    "job_attempts.worker": Masked(plant_jobs),
    "job_attempts.outcome": Exempt(CHECKED),
    "job_attempts.error_kind": Masked(plant_jobs),
    "job_attempts.error": Masked(plant_stripe_answers),
    "job_replays.error_kind": Masked(plant_jobs),
    "job_replays.replayed_by": Refused(plant_operator_name),
    "payments.merchant_account": Refused(plant_csv),
    "payments.merchant_reference": Refused(plant_csv),
    "payments.currency": Refused(plant_csv),
    "payments.psp": Refused(plant_csv),
    "payments.psp_reference": Verbatim(plant_psp_references, PSP_ID),
    "payments.idempotency_key": Exempt("made by recon (recon- and 24 hex digits in dotted groups, -gN): never "
                                       "outside text, and a key the PSP holds; masking would merge keys "
                                       "(test_own_identifiers.py)"),
    "payments.status": Exempt(CHECKED),
    "payments.failure_reason": Masked(plant_stripe_answers),
    "payments.review_reason": Masked(plant_stripe_answers),
    "payments.payment_method": Refused(plant_csv),
    "payments.customer_reference": Refused(plant_csv),
    "payments.review_assignee": Masked(plant_review_workflow),
    "review_comments.author": Refused(plant_operator_name),  # an operator's name: recon.actions authorizes --by
    "review_comments.kind": Exempt(CHECKED),
    "review_comments.body": Masked(plant_review_workflow),
    "payment_events.from_status": Exempt("a PaymentStatus: PaymentStore writes the state machine's names"),
    "payment_events.to_status": Exempt("a PaymentStatus: PaymentStore writes the state machine's names"),
    "payment_events.source": Exempt(CHECKED),
    "payment_events.details": Masked(plant_operators),
    "sweep_runs.operator": Masked(plant_operators),
    "sweep_runs.options": Refused(plant_psp_name),
    "sweep_runs.outcome": Exempt(CHECKED),
    "sweep_runs.summary": Exempt("counts and exit codes the sweep computed, keyed by recon's names and the PSPs' "
                                 "registry names"),
    "workers.id": Masked(plant_jobs),
    "workers.host": Masked(plant_jobs),
    "workers.queues": Refused(plant_queues_flag),
    "workers.counters": Exempt("numbers keyed by recon's names: kinds, outcomes, PSPs of the registry"),
    "psp_controls.psp": Refused(plant_psp_name),
    "psp_controls.paused_by": Refused(plant_operator_name),
    "psp_controls.resumed_by": Refused(plant_operator_name),
    "psp_controls.pause_reason": Masked(plant_operators),
    "psp_controls.breaker_state": Exempt(CHECKED),
    "psp_controls.breaker_reason": Masked(plant_stripe_breaker),
    "webhook_events.psp": Exempt("the endpoint's PSP (the route), never the body's"),
    "webhook_events.event_id": Verbatim(plant_psp_references, PSP_ID),
    "webhook_events.event_type": Exempt("only the event types recon acts on are stored (the adapters' fixed sets); "
                                        "any other is acknowledged and dropped"),
    "webhook_events.psp_reference": Verbatim(plant_psp_references, PSP_ID),
    "webhook_events.merchant_reference": Masked(plant_stripe_webhook),
    "webhook_events.merchant_account": Masked(plant_adyen_webhook),
    "webhook_events.currency": Masked(plant_stripe_webhook),
    "webhook_events.news": Exempt("recon's word for what the event says (succeeded, failed, pending, refund, …)"),
    "webhook_events.psp_status": Masked(plant_stripe_webhook),
    "webhook_events.reason": Masked(plant_stripe_webhook),
    "webhook_events.report": Masked(plant_adyen_webhook),
    "webhook_events.body": Masked(plant_stripe_webhook),
    "webhook_events.state": Exempt(CHECKED),
    "webhook_events.movement_reference": Verbatim(plant_refund_webhook, PSP_ID),
    "schedule_slots.schedule": Refused(config_refused('[schedule."s-4242424242424242"]\nkind = "sweep"\n'
                                                      'every = "1h"\n', "schedule")),
    "schedule_slots.scheduler": Masked(plant_scheduler),
    "refunds.refund_reference": Refused(plant_refund_commands),
    "refunds.currency": Exempt("the payment's currency, copied from its row by the refund store (checked at import)"),
    "refunds.psp": Exempt("the payment's PSP, copied from its row by the refund store (a registry name)"),
    "refunds.status": Exempt(CHECKED),
    "refunds.reason": Masked(plant_refund_commands),
    "refunds.psp_refund_id": Verbatim(plant_stripe_refund_answers, PSP_ID),
    "refunds.idempotency_key": Exempt("made by recon (recon-refund- and 24 hex digits in dotted groups): never "
                                      "outside text, and a key the PSP holds; masking would merge keys "
                                      "(test_own_identifiers.py)"),
    "refunds.requested_by": Refused(plant_operator_name),
    "refunds.failure_reason": Masked(plant_stripe_refund_answers),
    "refunds.review_reason": Masked(plant_stripe_refund_answers),
    "refund_events.from_status": Exempt("a refund status: RefundStore writes the state machine's names"),
    "refund_events.to_status": Exempt("a refund status: RefundStore writes the state machine's names"),
    "refund_events.source": Exempt(CHECKED),
    "refund_events.details": Masked(plant_refund_commands),
    "payments.capture_mode": Exempt(CHECKED),
    "modifications.kind": Exempt(CHECKED),
    "modifications.modification_reference": Exempt(
        "made by recon: the payment's merchant reference (refused at import when it holds a card number), the "
        "kind and a number"),
    "modifications.currency": Exempt("the payment's currency, copied from its row by the modification store"),
    "modifications.psp": Exempt("the payment's PSP, copied from its row by the modification store (a registry name)"),
    "modifications.status": Exempt(CHECKED),
    "modifications.psp_modification_id": Verbatim(plant_stripe_capture_answers, PSP_ID),
    "modifications.idempotency_key": Exempt("made by recon (recon-capture- or recon-cancel- and 24 hex digits in "
                                            "dotted groups): never outside text, and a key the PSP holds; masking "
                                            "would merge keys (test_own_identifiers.py)"),
    "modifications.requested_by": Exempt("an enabled operator's name (recon.actions authorizes it first; "
                                         "operators.name refuses one holding a card number)"),
    "modifications.failure_reason": Masked(plant_stripe_capture_answers),
    "modifications.review_reason": Masked(plant_stripe_capture_answers),
    "modification_events.from_status": Exempt("a status: ModificationStore writes the state machine's names"),
    "modification_events.to_status": Exempt("a status: ModificationStore writes the state machine's names"),
    "modification_events.source": Exempt(CHECKED),
    "modification_events.details": Masked(plant_stripe_capture_answers),
    "disputes.psp": Exempt("the endpoint's PSP (the route), never the body's"),
    "disputes.psp_dispute_id": Verbatim(plant_dispute_webhooks, PSP_ID),
    "disputes.status": Exempt(CHECKED),
    "disputes.currency": Masked(plant_dispute_webhooks),
    "disputes.reason": Masked(plant_dispute_webhooks),
    "disputes.psp_status": Masked(plant_dispute_webhooks),
    "dispute_events.from_status": Exempt("a dispute status: DisputeStore writes the state machine's names"),
    "dispute_events.to_status": Exempt("a dispute status: DisputeStore writes the state machine's names"),
    "dispute_events.source": Exempt(CHECKED),
    "dispute_events.details": Masked(plant_dispute_webhooks),
    "operators.name": Refused(plant_operator_name),
    "operators.role": Exempt(CHECKED),
    "operators.password_hash": Exempt("argon2id's own encoding of a hash recon made ($argon2id$v=19$...), never "
                                      "the password"),
    "operators.totp_secret": Exempt("recon.totp_key's sealed form (v1.<key id>.<nonce>.<ciphertext>, base64url) of "
                                    "a seed pyotp.random_base32() drew (or, from before sealing, that seed plain): "
                                    "recon-made, never outside text"),
    "audit_log.actor": Masked(plant_login),
    "audit_log.action": Exempt("recon's own action names (review.resolve, login.failed, ...), constants in code"),
    "audit_log.subject": Masked(plant_login),
    "audit_log.outcome": Exempt("recon's own outcome words (done, refused, requested, ...), constants in code"),
    "audit_log.evidence": Masked(plant_pause_request),
    "audit_seals.stream": Exempt(CHECKED),
    "audit_seals.kind": Exempt(CHECKED),
    "audit_seals.row_hash": Exempt("a SHA-256 in hexadecimal that recon.audit computed"),
    "audit_seals.chain_hash": Exempt("a SHA-256 in hexadecimal that recon.audit computed"),
    "approvals.action": Exempt("recon's own four-eyes action names (recon.four_eyes), constants in code"),
    "approvals.subject": Exempt("a PSP name of the registry, a payment reference (refused at import when it holds a "
                                "card number) or recon's own count of dead jobs"),
    "approvals.payload": Masked(plant_pause_request),
    "approvals.state": Exempt(CHECKED),
    "approvals.requested_by": Refused(plant_operator_name),
    "approvals.decided_by": Refused(plant_operator_name),
    "approvals.result": Exempt("recon's sentence of what the approved action did (PSP name, payment reference, "
                               "counts), or a ReconError's message, redacted by the store"),
    "console_sessions.principal": Exempt("recon.console.session.token_principal: 'access-token/' and a base32 "
                                         "scrypt digest of the token, never the token or outside text"),
}


def text_columns() -> list[str]:
    """Every column of the schema that holds text: Text, and JSON (text on SQLite)."""
    return sorted(f"{t.name}.{c.name}" for t in schema.metadata.sorted_tables for c in t.columns
                  if isinstance(c.type, sa.Text) or c.type is Json or isinstance(c.type, sa.JSON))


def test_columns__every_text_column_of_the_schema_is_planted() -> None:
    columns = text_columns()
    assert len(columns) > 50  # the walk found the schema
    missing = sorted(set(columns) - set(COLUMNS))
    stale = sorted(set(COLUMNS) - set(columns))
    assert not missing, f"text columns without a plant or an exemption in COLUMNS: {missing}"
    assert not stale, f"COLUMNS names columns the schema does not have: {stale}"
    for name, entry in COLUMNS.items():
        if isinstance(entry, Exempt | Verbatim):
            assert len(entry.why) > 20, f"{name}: say why it is exempt"


#: where an event's details name the PSP's own identifiers: kept exactly there, as in the Verbatim columns
#: (the plants assert which), and left out of the search for a card number; every other text in them is searched
EVIDENCE_IDENTIFIERS = ("psp_reference", "psp_reference_conflict")


def evidence_ids(details: dict[str, Any] | None) -> set[str]:
    """Every identifier an event's details name under ``EVIDENCE_IDENTIFIERS``."""
    found: set[str] = set()
    for key in EVIDENCE_IDENTIFIERS:
        value = (details or {}).get(key)
        for v in value.values() if isinstance(value, dict) else [value]:
            found.update(v if isinstance(v, list) else [v] if isinstance(v, str) else [])
    return found


def without_identifiers(value: Any) -> Any:
    """A stored JSON value without the identifiers an event's details name (see ``EVIDENCE_IDENTIFIERS``)."""
    if isinstance(value, str) and value.startswith("{"):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k not in EVIDENCE_IDENTIFIERS}
    return value


def holds_card(text: str) -> bool:
    return CARD in re.sub(r"[ \-]", "", text)


def column(db: Database, table: str, name: str) -> list[Any]:
    with db.begin() as conn:
        return [r[0] for r in conn.execute(sa.text(f"SELECT {name} FROM {table}"))]  # nosec B608  # schema names


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value) if value is not None else ""


PLANTS = sorted({e.plant for e in COLUMNS.values() if not isinstance(e, Exempt)}, key=lambda f: f.__name__)


@pytest.fixture
def env(db: Database, db_url: str, recon: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    monkeypatch.delenv("RECON_CONFIG", raising=False)
    yield Env(db, db_url, recon, tmp_path, monkeypatch)


@pytest.mark.parametrize("plant", PLANTS, ids=[p.__name__ for p in PLANTS])
def test_plant__no_column_it_reaches_holds_the_card_number(env: Env, plant: Callable[[Env], None]) -> None:
    plant(env)
    for name, entry in COLUMNS.items():
        table, col = name.split(".")
        values = [as_text(without_identifiers(v)) if col == "details" else as_text(v)
                  for v in column(env.db, table, col)]
        holding = [v[:120] for v in values if holds_card(v)]
        if isinstance(entry, Verbatim):
            continue  # the plant asserts what is kept exactly
        assert not holding, f"{name} holds a card number after {plant.__name__}: {holding}"
        if isinstance(entry, Masked) and entry.plant is plant:
            assert any(PROBE in v.lower() for v in values), f"{name}: {plant.__name__} never reached it: {values[:3]}"
