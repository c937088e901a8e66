"""The console's writes, checked through the command line: pause and resume (`recon psp status`), replay from
the dead-letter page (`recon jobs show`), resolve and recheck from a payment's page (`recon payments show`),
against the PSP sandbox over real HTTP for the resolve's question to the PSP."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from psp_adapters.sandbox.server import SandboxServer
from recon import Client, Settings
from recon.db.database import Database
from recon.db.jobs_store import JobStore
from recon.db.payment_store import PaymentStore
from recon.rows import EventSource, Finish, NewPayment, PaymentStatus, Transition
from tests.cli import Runner
from tests.console import attribute, console, csrf_token, make_dead, refusal, stats
from tests.integration.payment_flow import create


def cli_json(recon: Runner, db_url: str, *args: str) -> Any:
    r = recon(*args, "--json", db_url=db_url)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SandboxServer]:
    with SandboxServer(tmp_path / "psp.db") as server:
        monkeypatch.setenv("RECON_SANDBOX_BASE_URL", server.url)
        yield server


def in_review(db: Database, n: int) -> list[str]:
    """``n`` payments never charged, in review because the PSP had no payment for them."""
    store = PaymentStore(db)
    refs = []
    for payment_id in create(db, n, charge=False, prefix="lost"):
        with db.begin() as conn:
            assert store.apply(conn, Transition(payment_id, PaymentStatus.CREATED, PaymentStatus.NEEDS_REVIEW,
                                                EventSource.RECONCILE, review_reason="missing_at_psp: none there"))
        payment = store.get(payment_id)
        assert payment is not None
        refs.append(payment.merchant_reference)
    return refs


def test_psps__pause_by_four_eyes_and_resume_from_the_pages_show_in_recon_psp_status(db_url: str,
                                                                                    recon: Runner) -> None:
    with console(db_url, login="ann") as client, console(db_url, login="bob") as approver:
        csrf = csrf_token(client)
        unconfirmed = client.post("/psps/stripe/pause", data={"reason": "incident 7", "csrf": csrf},
                                  follow_redirects=False)  # refused: POST -> redirect -> GET, the reason kept
        assert refusal(client, unconfirmed, to="/psps?", form="stripe") == \
            'not paused: tick "Yes, stop all calls to stripe" to confirm'
        assert unconfirmed.headers["location"].endswith("#psp-stripe")
        assert 'value="incident 7"' in client.get(unconfirmed.headers["location"]).text
        r = client.post("/psps/stripe/pause", data={"reason": "incident 7", "confirm": "1", "csrf": csrf})
        assert r.status_code == 200 and "pause of stripe requested by ann: approval 1 waits" in r.text
        assert not any(p["paused"] for p in cli_json(recon, db_url, "psp", "status")["psps"])
        own = client.post("/approvals/1", data={"verdict": "approve", "csrf": csrf}, follow_redirects=False)
        assert "ann has the role operator; this takes approver or above" in refusal(  # ann is an operator
            client, own, to="/approvals?", form="approval")
        page = approver.get("/approvals")
        assert page.status_code == 200 and "Approve 1" in page.text and "incident 7" in page.text
        r = approver.post("/approvals/1", data={"verdict": "approve", "csrf": csrf_token(approver, "/approvals")})
        assert r.status_code == 200 and "approval 1 (psp.pause of stripe) approved by bob" in r.text
        twice = approver.post("/approvals/1", data={"verdict": "approve", "csrf": csrf_token(approver, "/approvals")},
                              follow_redirects=False)  # no longer pending: the refusal above the list
        assert refusal(approver, twice, to="/approvals?", form="approval").startswith("not decided: ")
        odd = approver.post("/approvals/1", data={"verdict": "maybe", "csrf": csrf_token(approver, "/approvals")},
                            follow_redirects=False)
        assert refusal(approver, odd, to="/approvals?", form="approval") == "not decided: verdict: approve or reject"
        [stripe] = [p for p in cli_json(recon, db_url, "psp", "status")["psps"] if p["psp"] == "stripe"]
        assert (stripe["paused"], stripe["paused_by"], stripe["pause_reason"]) == (
            True, "ann (approved by bob)", "incident 7")
        r = client.post("/psps/stripe/resume", data={"operator": "mallory", "csrf": csrf})  # the field is ignored
        assert r.status_code == 200 and "resumed by ann" in r.text
        page = client.get("/psps").text  # who resumed it, beside who paused it
        assert attribute(page, "psp-stripe-resumed", "data-value") == "ann"
        assert re.match(r"resumed by ann \S+ \S+ UTC; paused before by ann \(approved by bob\) \(incident 7\)$",
                        stats(page)["psp-stripe-resumed"])
        [stripe] = [p for p in cli_json(recon, db_url, "psp", "status")["psps"] if p["psp"] == "stripe"]
        assert (stripe["paused"], stripe["resumed_by"], stripe["paused_by"], stripe["last_pause"]["by"]) == (
            False, "ann", None, "ann (approved by bob)")
        assert client.post("/psps/nopsp/pause", data={"reason": "b", "confirm": "1", "csrf": csrf}).status_code == 404
        resumed = client.post("/psps/stripe/resume", data={"csrf": csrf})
        assert resumed.status_code == 200 and "psp stripe was not paused" in resumed.text
    with console(db_url, login="vic") as viewer:
        r = viewer.post("/psps/stripe/pause", data={"reason": "x", "confirm": "1",
                                                    "csrf": csrf_token(viewer)}, follow_redirects=False)
        assert refusal(viewer, r, to="/psps?", form="stripe") == \
            "not paused: vic has the role viewer; this takes operator or above"
        r = viewer.post("/psps/stripe/resume", data={"csrf": csrf_token(viewer)}, follow_redirects=False)
        assert refusal(viewer, r, to="/psps?", form="stripe") == \
            "not resumed: vic has the role viewer; this takes operator or above"
    assert not any(p["paused"] for p in cli_json(recon, db_url, "psp", "status")["psps"])


def test_dead__preview_changes_nothing_and_replay_moves_the_matching_jobs(db: Database, db_url: str,
                                                                         recon: Runner) -> None:
    jobs = JobStore(db)
    hit = make_dead(jobs, queue="charges", error_kind="psp_unavailable")
    miss = make_dead(jobs, queue="charges", error_kind="validation")
    filters = {"queue": "charges", "error_kind": "psp_unavailable", "since": "1h"}
    with console(db_url, login="ann") as client:
        preview = client.get("/dead/preview", params=filters)
        assert preview.status_code == 200
        assert f'data-job="{hit}"' in preview.text and f'data-job="{miss}"' not in preview.text
        assert cli_json(recon, db_url, "jobs", "show", str(hit))["job"]["state"] == "dead"
        unconfirmed = client.post("/dead/replay", data={**filters, "csrf": csrf_token(client)},
                                  follow_redirects=False)
        assert refusal(client, unconfirmed, to="/dead/preview?", form="replay") == \
            'nothing replayed: tick "Yes, replay these jobs" to confirm'
        assert unconfirmed.headers["location"].startswith(  # back to the preview of the same filter
            "/dead/preview?queue=charges&error_kind=psp_unavailable&since=1h&")
        assert cli_json(recon, db_url, "jobs", "show", str(hit))["job"]["state"] == "dead"
        r = client.post("/dead/replay", data={**filters, "confirm": "1", "csrf": csrf_token(client)})
        assert r.status_code == 200 and "replayed 1 dead jobs" in r.text and f'data-replayed="{hit}"' in r.text
        bad = client.post("/dead/replay", data={"since": "someday", "confirm": "1", "csrf": csrf_token(client)},
                          follow_redirects=False)  # the preview it leads to says why (422), the refusal beside it
        assert refusal(client, bad, to="/dead/preview?since=someday&", form="replay", status=422).startswith(
            "nothing replayed: since: ")
    shown = cli_json(recon, db_url, "jobs", "show", str(hit))
    assert shown["job"]["state"] == "runnable"
    assert [r["replayed_by"] for r in shown["replays"]] == ["ann"]
    assert cli_json(recon, db_url, "jobs", "show", str(miss))["job"]["state"] == "dead"


def test_dead__a_replay_above_the_amount_of_a_currency_is_a_four_eyes_request(db: Database, db_url: str,
                                                                             recon: Runner) -> None:
    payments = PaymentStore(db).create([NewPayment("default", f"big-{i}", 600_000, "EUR", "sandbox")
                                        for i in range(2)], charge=False)  # 12,000.00 EUR in all
    client_store = Client(JobStore(db), Settings())
    jobs = []
    for pid in payments:  # a charge job per payment, dead (the default [four_eyes.replay_amount] EUR: 10,000.00)
        job_id = client_store.enqueue("charge", {"payment_id": pid}, queue="charges")
        [job] = JobStore(db).claim(worker="w", queues=["charges"], n=1, ttl=30)
        assert job.id == job_id
        JobStore(db).finish(worker="w", finishes=[Finish(id=job_id, attempt=1, state="dead", outcome="dead",
                                                         error_kind="bug", error="bug on attempt 1")])
        jobs.append(job_id)
    with console(db_url, login="ann") as client:
        r = client.post("/dead/replay", data={"queue": "charges", "confirm": "1", "csrf": csrf_token(client)})
        assert r.status_code == 200
        assert ("a replay of 2 dead jobs worth 12,000.00 EUR over 10,000.00 EUR needs four eyes; approval 1 waits "
                "for another approver") in r.text
    assert {cli_json(recon, db_url, "jobs", "show", str(j))["job"]["state"] for j in jobs} == {"dead"}
    [pending] = cli_json(recon, db_url, "approvals", "list")["approvals"]
    assert (pending["action"], pending["requested_by"]) == ("jobs.replay", "ann")


def test_review__resolve_refused_by_the_psp_then_overridden_by_four_eyes_and_recorded(
        db: Database, db_url: str, sandbox: SandboxServer, recon: Runner) -> None:
    ref, other = in_review(db, 2)
    with console(db_url, login="ann") as client, console(db_url, login="amy") as approver:
        csrf = csrf_token(client, f"/payments/{ref}")
        form = {"as": "succeeded", "reason": "customer sent a receipt", "csrf": csrf}
        refused = client.post(f"/payments/{ref}/resolve", data=form, follow_redirects=False)
        said = refusal(client, refused, to=f"/payments/{ref}?", form="resolve")
        assert said.startswith("not resolved: ") and "the PSP has no such payment" in said
        assert "tick \"override the PSP's answer\"" in said and "--" not in said  # the checkbox, not the flag
        assert refused.headers["location"].endswith("#resolve")
        assert 'value="customer sent a receipt"' in client.get(refused.headers["location"]).text  # kept
        empty = client.post(f"/payments/{ref}/resolve", data={**form, "reason": ""}, follow_redirects=False)
        assert refusal(client, empty, to=f"/payments/{ref}?", form="resolve") == "not resolved: reason is required"
        pending = client.post(f"/payments/{ref}/resolve", data={**form, "as": "pending"}, follow_redirects=False)
        assert refusal(client, pending, to=f"/payments/{ref}?", form="resolve") == \
            "not resolved: resolve as: 'pending' is not succeeded or failed"
        assert cli_json(recon, db_url, "payments", "show", ref)["payment"]["status"] == "needs_review"
        asked = client.post(f"/payments/{ref}/resolve", data={**form, "override": "1"})
        assert asked.status_code == 200 and "override requested by ann: approval 1 waits" in asked.text
        assert cli_json(recon, db_url, "payments", "show", ref)["payment"]["status"] == "needs_review"
        done = approver.post("/approvals/1", data={"verdict": "approve", "csrf": csrf_token(approver, "/approvals")})
        assert done.status_code == 200 and "approved by amy" in done.text
        failed = client.post(f"/payments/{other}/resolve", data={**form, "as": "failed", "override": "1"})
        assert failed.status_code == 200
        rejected = approver.post("/approvals/2", data={"verdict": "reject",
                                                       "csrf": csrf_token(approver, "/approvals")})
        assert rejected.status_code == 200 and "rejected by amy" in rejected.text
        assert client.post("/payments/nope/resolve", data=form).status_code == 404
    shown = cli_json(recon, db_url, "payments", "show", ref)
    assert shown["payment"]["status"] == "succeeded"
    last = shown["events"][-1]
    assert (last["source"], last["details"]["operator"], last["details"]["approved_by"],
            last["details"]["override"]) == ("manual", "ann", "amy", True)
    assert cli_json(recon, db_url, "payments", "show", other)["payment"]["status"] == "needs_review"


def test_review__recheck_queues_a_reconcile_job(db: Database, db_url: str, recon: Runner) -> None:
    [ref] = in_review(db, 1)
    with console(db_url, login="ann") as client:
        csrf = csrf_token(client, f"/payments/{ref}")
        r = client.post(f"/payments/{ref}/recheck", data={"csrf": csrf})
        assert r.status_code == 200
        job_id = int(r.text.split('data-job-link="')[1].split('"')[0])
    job = cli_json(recon, db_url, "jobs", "show", str(job_id))["job"]
    assert job["kind"] == "reconcile" and job["state"] == "runnable"
