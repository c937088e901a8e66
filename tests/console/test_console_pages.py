"""The console's pages on both databases: the overview's figures equal `recon stats --json` (the same
function builds both), the listings, the 404 and 422 pages, and no planted secret on any page."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from recon.db import schema
from recon.db.database import Database
from recon.db.dispute_store import DisputeStore
from recon.db.jobs_store import JobStore
from recon.db.payment_store import PaymentStore
from recon.dispute_rows import DisputeStatus, DisputeWord
from recon.rows import EventSource, NewPayment, PaymentStatus, Transition
from tests.cli import Runner
from tests.console import attribute, console, make_dead, stats
from tests.operators import add_staff

CARD = "4242424242424242"
KEY = "sk_live_51Hx0aBcDeFgHiJkLmNoPq"


def seed(tmp_path: Path, db: Database, db_url: str, recon: Runner) -> None:
    """Unfinished payments in three currencies and three age buckets, one in review, dead jobs in two
    queues, a paused PSP: all through the command line and the stores."""
    csv = tmp_path / "payments.csv"
    csv.write_text("merchant_reference,amount,currency,psp,created_at\n"
                   "old-1,12.34,EUR,sandbox,2024-01-01T00:00:00\nold-2,0.66,EUR,sandbox,2024-01-02T00:00:00\n"
                   "new-1,5,JPY,sandbox,\nnew-2,1.234,KWD,sandbox,\nrev-1,20.00,EUR,sandbox,\n", encoding="utf-8")
    assert recon("payments", "import", str(csv), "--no-charge", db_url=db_url).returncode == 0
    store = PaymentStore(db)
    rev = store.by_reference("rev-1")
    assert rev is not None
    with db.begin() as conn:
        assert store.apply(conn, Transition(rev.id, PaymentStatus.CREATED, PaymentStatus.NEEDS_REVIEW,
                                            EventSource.RECONCILE, review_reason="missing_at_psp: PSP has none"))
    jobs = JobStore(db)
    make_dead(jobs, queue="charges", error_kind="validation")
    make_dead(jobs, queue="reconcile", kind="reconcile", error_kind="psp_unavailable")
    add_staff(db)
    assert recon("psp", "pause", "stripe", "--reason", "incident 42", "--by", "ann", db_url=db_url).returncode == 1
    assert recon("approvals", "approve", "1", "--by", "bob", db_url=db_url).returncode == 0


def as_json(db: Database, value: dict[str, Any]) -> Any:
    """A JSON column's value as the dialect's column takes it (SQLite: text; PostgreSQL: JSONB)."""
    return json.dumps(value) if db.dialect == "sqlite" else value


def test_overview__figures_equal_recon_stats_json(tmp_path: Path, db: Database, db_url: str, recon: Runner) -> None:
    seed(tmp_path, db, db_url, recon)
    r = recon("stats", "--json", db_url=db_url)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    with console(db_url) as client:
        page = client.get("/")
    assert page.status_code == 200
    html = page.text
    shown = stats(html)
    assert int(shown["unfinished"]) == sum(doc["payments"]["unfinished_by_age"].values())
    assert int(shown["dead"]) == sum(q["depth"].get("dead", 0) for q in doc["queues"].values()) > 0
    assert int(shown["needs_review"]) == doc["review"]["needs_review"] > 0
    assert int(shown["workers-live"]) == doc["workers"]["live"]
    for queue, entry in doc["queues"].items():  # the overview counts unfinished and dead jobs, not finished ones
        if not any(entry["depth"].get(s) for s in ("pending", "runnable", "retryable", "leased", "dead")):
            assert f"queue-depth-{queue}-" not in html
            continue
        for state in ("pending", "runnable", "retryable", "leased", "dead"):
            assert int(shown[f"queue-depth-{queue}-{state}"]) == entry["depth"].get(state, 0), (queue, state)
        assert f"queue-depth-{queue}-succeeded" not in html
    totals: dict[tuple[str, str], int] = {}
    for row in doc["payments"]["unfinished"]:
        totals[row["currency"], row["age"]] = totals.get((row["currency"], row["age"]), 0) + row["amount"]
    assert totals  # the seed left money at risk
    for (currency, bucket), amount in totals.items():
        assert int(attribute(html, f"at-risk-{currency}-{bucket}", "data-minor")) == amount
    for currency, amount in doc["payments"]["money_at_risk"].items():
        assert int(attribute(html, f"at-risk-{currency}", "data-minor")) == amount
    for p in doc["psp_controls"]:  # no Stripe or Adyen key in the tests' environment: those two cannot be called
        expected = "paused" if p["paused"] else "flowing" if p["psp"] == "sandbox" else "not configured"
        assert attribute(html, f"psp-{p['psp']}-paused", "data-value") == expected
    assert "<svg" in html and 'aria-label="money at risk by currency and age"' in html
    assert "13.00 EUR" in html and "1.234 KWD" in html and "5 JPY" in html


def test_pages__listings_show_what_the_stores_hold(tmp_path: Path, db: Database, db_url: str,
                                                   recon: Runner) -> None:
    seed(tmp_path, db, db_url, recon)
    with console(db_url) as client:
        review = client.get("/review")
        assert review.status_code == 200 and 'data-payment="rev-1"' in review.text
        assert "missing at psp" in review.text and "20.00 EUR" in review.text
        assert 'data-payment="rev-1"' not in client.get("/review?kind=amount_mismatch").text
        assert 'data-payment="rev-1"' in client.get("/review?psp=sandbox&currency=eur&older_than=0s").text
        dead = client.get("/dead?queue=charges")
        [charges_job] = [j["id"] for j in json.loads(recon("jobs", "list", "--state", "dead", "--queue", "charges",
                                                           "--json", db_url=db_url).stdout)["jobs"]]
        assert f'data-job="{charges_job}"' in dead.text and dead.text.count("data-job=") == 1
        job = client.get(f"/jobs/{charges_job}")
        assert job.status_code == 200 and "validation on attempt 1" in job.text
        found = client.get("/search?q=rev-1")
        assert found.status_code == 200 and 'data-payment="rev-1"' in found.text
        payment = client.get("/payments/rev-1")
        assert payment.status_code == 200
        assert 'action="/payments/rev-1/resolve"' in payment.text and "missing at psp: PSP has none" in payment.text
        assert 'action="/payments/old-1/resolve"' not in client.get("/payments/old-1").text  # not in review
        psps = client.get("/psps")
        assert "incident 42" in psps.text and 'action="/psps/stripe/resume"' in psps.text


def test_pages__unknown_things_are_404_and_bad_filters_422_never_a_traceback(db_url: str) -> None:
    with console(db_url) as client:
        for path in ("/payments/no-such-ref", "/jobs/424242", "/jobs/99999999999999999999", "/nowhere",
                     "/psps/nopsp/pause"):
            r = client.get(path) if not path.endswith("pause") else client.post(path)
            assert r.status_code in (404, 403), path
            assert "Traceback" not in r.text
        assert client.get("/payments/no-such-ref").status_code == 404
        for path, says in (("/dead?since=yesterday", "neither a duration"), ("/dead?after=x", "not a job id"),
                           ("/dead?after=%C2%B2", "not a job id"),  # "²": str.isdigit() says yes, int() no
                           ("/dead?since=0001-01-01T00:30:00%2B01:00", "neither a duration"),  # year 0 in UTC
                           ("/review?older_than=soon", "not a duration"), ("/review?currency=EURO", "EURO"),
                           ("/review?psp=nopsp", "unknown PSP"), ("/review?kind=bogus", "unknown kind")):
            r = client.get(path)
            assert r.status_code == 422, path
            assert says in r.text and "Traceback" not in r.text, path


def test_pages__a_planted_card_number_or_key_is_never_rendered(tmp_path: Path, db: Database, db_url: str,
                                                               recon: Runner) -> None:
    """The stores redact what they write; these are written behind their back, as an old version or a
    hand-made fix might have left them: the pages still mask them."""
    seed(tmp_path, db, db_url, recon)
    job_id = make_dead(JobStore(db), queue="charges", error_kind="bug")
    rev = PaymentStore(db).by_reference("rev-1")
    assert rev is not None
    with db.begin() as conn:
        conn.execute(sa.update(schema.payment_events).where(schema.payment_events.c.payment_id == rev.id)
                     .values(details=as_json(db, {"note": f"card {CARD} exp 12/30", "card_number": CARD,
                                                  "api_key": KEY})))
        conn.execute(sa.update(schema.payments).where(schema.payments.c.id == rev.id)
                     .values(review_reason=f"other: customer sent {CARD} and {KEY}"))
        conn.execute(sa.update(schema.jobs).where(schema.jobs.c.id == job_id)
                     .values(last_error=f"declined card {CARD}", payload=as_json(db, {"note": f"pan {CARD}"})))
        conn.execute(sa.update(schema.job_attempts).where(schema.job_attempts.c.job_id == job_id)
                     .values(error=f"Bearer {KEY} card 4242 4242 4242 4242"))
    with console(db_url) as client:
        for path in ("/", "/review", "/payments/rev-1", "/dead", f"/jobs/{job_id}", "/dead/preview",
                     f"/search?q={CARD}", "/search?q=rev-1"):
            r = client.get(path)
            assert r.status_code == 200, path
            for secret in (CARD, "4242 4242 4242 4242", KEY):
                assert secret not in r.text, (path, secret)
        assert "[card]" in client.get(f"/jobs/{job_id}").text


def test_pages__an_unexpected_error_is_a_one_line_500_page(db_url: str, monkeypatch: pytest.MonkeyPatch,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    def broken(**_: Any) -> None:
        raise RuntimeError(f"boom with {CARD}")

    with console(db_url) as client:
        app = client.app.state.console_recon  # type: ignore[attr-defined]
        monkeypatch.setattr(app.jobs.dead_letters, "list_jobs_filtered", broken)
        r = client.get("/dead?queue=secret-form-value")
    assert r.status_code == 500
    assert "Traceback" not in r.text and "boom" not in r.text and CARD not in r.text
    [record] = [rec for rec in caplog.records if rec.name == "recon.console" and rec.levelname == "ERROR"]
    assert "RuntimeError" in record.getMessage() and "secret-form-value" not in record.getMessage()


def _disputed(db: Database, ref: str, *, currency: str, amount: int, status: DisputeStatus,
              due_in: timedelta | None) -> None:
    """A succeeded payment ``ref`` with a dispute of ``amount`` withdrawn, in ``status``, evidence due in
    ``due_in`` (None: not said), as a webhook records it."""
    payments = PaymentStore(db)
    [pid] = payments.create([NewPayment("acct", ref, 5000, currency, "stripe")], charge=False)
    with db.begin() as conn:
        assert payments.apply(conn, Transition(pid, PaymentStatus.CREATED, PaymentStatus.SUCCEEDED,
                                               EventSource.CHARGE, psp_reference=f"pi_{ref}"))
        DisputeStore(db).record(conn, DisputeWord(
            payment_id=pid, psp="stripe", psp_dispute_id=f"dp_{ref}", status=status, amount=amount,
            currency=currency, fee=1500, reason="fraudulent", psp_status="needs_response",
            evidence_due_by=datetime.now(UTC) + due_in if due_in else None), details={}, job_id=None, attempt=None)


def _listed(html: str) -> set[str]:
    return set(re.findall(r'<tr data-payment="([^"]+)"', html))


def test_overview__the_disputes_figure_equals_recon_stats_json_and_leads_to_its_payments(
        db: Database, db_url: str, recon: Runner) -> None:
    _disputed(db, "dsp-soon", currency="EUR", amount=1000, status=DisputeStatus.OPENED, due_in=timedelta(days=2))
    _disputed(db, "dsp-later", currency="EUR", amount=500, status=DisputeStatus.OPENED, due_in=timedelta(days=20))
    _disputed(db, "dsp-usd", currency="USD", amount=700, status=DisputeStatus.OPENED, due_in=None)
    _disputed(db, "dsp-won", currency="EUR", amount=900, status=DisputeStatus.WON, due_in=timedelta(days=1))
    r = recon("stats", "--json", db_url=db_url)
    assert r.returncode == 0, r.stderr
    disputes = json.loads(r.stdout)["disputes"]
    # the seed is what the document says, so the page is compared with something
    assert (disputes["open"], disputes["withdrawn"], disputes["due_soon"]) == (3, {"EUR": 1500, "USD": 700}, 1)
    with console(db_url) as client:
        html = client.get("/").text
        assert stats(html)["disputes-open"] == "3"
        assert {c: int(attribute(html, f"disputes-withdrawn-{c}", "data-minor")) for c in ("EUR", "USD")} == {
            "EUR": 1500, "USD": 700}
        due = re.search(r'data-stat="disputes-due-soon">([^<]*)</a>', html)
        assert due is not None and due.group(1).startswith("1 with evidence due within 7 days")
        for link in ('href="/payments?dispute=open"', 'href="/payments?dispute=open&amp;currency=EUR"',
                     'href="/payments?dispute=due_soon"'):
            assert link in html
        assert _listed(client.get("/payments?dispute=open").text) == {"dsp-soon", "dsp-later", "dsp-usd"}
        assert _listed(client.get("/payments?dispute=open&currency=EUR").text) == {"dsp-soon", "dsp-later"}
        assert _listed(client.get("/payments?dispute=due_soon").text) == {"dsp-soon"}
        assert _listed(client.get("/payments").text) >= {"dsp-soon", "dsp-later", "dsp-usd", "dsp-won"}
        bad = client.get("/payments?dispute=lost")
        assert bad.status_code == 422 and "dispute: &#39;lost&#39; is not one of open, due_soon" in bad.text
