"""`recon review`: payments in needs_review listed, shown, resolved by hand and rechecked, on both databases,
against the PSP sandbox over real HTTP (the PSP's answers come from the sandbox, not from these tests)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from psp_adapters.sandbox.faults import Faults
from psp_adapters.sandbox.server import SandboxServer
from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.operator_rows import Role
from recon.rows import EventSource, PaymentStatus, Transition
from tests.cli import Runner
from tests.integration.payment_flow import admin, create, drain, handlers_for, sandbox_adapter, sweep_now
from tests.operators import add_operator


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[SandboxServer]:
    with SandboxServer(tmp_path / "psp.db", faults=Faults(pending_fraction=1.0, settle_after_seconds=600,
                                                          decline_amount_suffix=None)) as server:
        yield server


@pytest.fixture
def env(sandbox: SandboxServer) -> dict[str, str]:
    return {**os.environ, "RECON_SANDBOX_BASE_URL": sandbox.url}


def charged(db: Database, sandbox: SandboxServer, n: int, **kwargs: object) -> list[int]:
    """``n`` payments charged at the sandbox, each left pending there (the PSP has not decided yet)."""
    ids = create(db, n, **kwargs)  # type: ignore[arg-type]
    with sandbox_adapter(sandbox.url) as adapter:
        drain(db, handlers_for(db, adapter), queues=["charges"])
    return ids


def psp_reference(db: Database, payment_id: int) -> str:
    ref = PaymentStore(db).get(payment_id).psp_reference  # type: ignore[union-attr]
    assert ref
    return ref


def into_review_by_amount(db: Database, sandbox: SandboxServer, payment_id: int, psp_amount: int) -> None:
    """The PSP settles another amount than ours; the sweep sends the payment to review (amount_mismatch)."""
    ref = psp_reference(db, payment_id)
    admin(sandbox.url, f"/_admin/payments/{ref}/amount", {"amount": psp_amount})
    admin(sandbox.url, f"/_admin/payments/{ref}/settle", {})
    with sandbox_adapter(sandbox.url) as adapter:
        sweep_now(db, handlers_for(db, adapter), until_finished=True)
    assert PaymentStore(db).get(payment_id).status is PaymentStatus.NEEDS_REVIEW  # type: ignore[union-attr]


def to_review(db: Database, payment_id: int, reason: str) -> None:
    """A payment moved to review by the store's own compare-and-set, as a handler would."""
    store = PaymentStore(db)
    current = store.get(payment_id).status  # type: ignore[union-attr]
    with db.begin() as conn:
        assert store.apply(conn, Transition(payment_id, current, PaymentStatus.NEEDS_REVIEW, EventSource.RECONCILE,
                                            review_reason=reason))


def test_review_list__says_why_how_long_and_what_the_psp_said_in_major_units(
        db: Database, db_url: str, sandbox: SandboxServer, env: dict[str, str], recon: Runner) -> None:
    [a] = charged(db, sandbox, 1, amount=1250)
    into_review_by_amount(db, sandbox, a, psp_amount=990)
    [b] = create(db, 1, charge=False, prefix="lost")
    to_review(db, b, "missing_at_psp: PSP has no payment pi_gone")

    r = recon("review", "list", "--json", db_url=db_url, env=env)
    assert r.returncode == 0, r.stderr
    rows = {row["merchant_reference"]: row for row in json.loads(r.stdout)["payments"]}
    assert set(rows) == {"order-0", "lost-0"}
    mismatch = rows["order-0"]
    assert mismatch["kind"] == "amount_mismatch" and mismatch["amount"] == 1250 and mismatch["currency"] == "EUR"
    assert mismatch["amount_formatted"] == "12.50 EUR"
    assert mismatch["psp_answer"]["psp_amount"] == 990  # what the sandbox settled, as its latest answer
    assert mismatch["age_seconds"] >= 0 and mismatch["since"]
    assert rows["lost-0"]["kind"] == "missing_at_psp"

    only = json.loads(recon("review", "list", "--reason", "missing_at_psp", "--json", db_url=db_url).stdout)
    assert [p["merchant_reference"] for p in only["payments"]] == ["lost-0"]
    assert json.loads(recon("review", "list", "--currency", "usd", "--json", db_url=db_url).stdout)["payments"] == []
    assert json.loads(recon("review", "list", "--older-than", "1d", "--json", db_url=db_url).stdout)["payments"] == []

    table = recon("review", "list", db_url=db_url)
    assert "12.50 EUR" in table.stdout and "9.90 EUR" in table.stdout and "amount_mismatch" in table.stdout
    bad = recon("review", "list", "--psp", "nope", db_url=db_url)
    assert bad.returncode == 2 and "unknown PSP 'nope'" in bad.stderr


def test_review_resolve__a_mismatch_as_succeeded_records_both_amounts_the_operator_and_shows_everywhere(
        db: Database, db_url: str, staff: object, sandbox: SandboxServer, env: dict[str, str], recon: Runner) -> None:
    add_operator(db, "alice", Role.OPERATOR)
    [pid] = charged(db, sandbox, 1, amount=1250)
    into_review_by_amount(db, sandbox, pid, psp_amount=990)

    r = recon("review", "resolve", "order-0", "--as", "succeeded", "--reason", "partial capture agreed",
              "--by", "alice", "--json", db_url=db_url, env=env)
    assert r.returncode == 0, r.stderr
    assert PaymentStore(db).get(pid).status is PaymentStatus.SUCCEEDED  # type: ignore[union-attr]
    last = PaymentStore(db).events(pid)[-1]
    assert (last.from_status, last.to_status, last.source) == ("needs_review", "succeeded", "manual")
    details = last.details or {}
    assert details["operator"] == "alice" and details["reason"] == "partial capture agreed"
    assert details["override"] is False and details["review_kind"] == "amount_mismatch"
    assert details["ours"] == {"amount": 1250, "currency": "EUR"}
    assert details["psp"] == {"amount": 990, "currency": "EUR"}  # asked again: the sandbox's settled amount
    assert details["psp_outcome"] == "succeeded"

    shown = recon("payments", "show", "order-0", db_url=db_url)
    assert "resolved succeeded by alice: partial capture agreed" in shown.stdout
    assert "ours 12.50 EUR, PSP 9.90 EUR" in shown.stdout
    stats = json.loads(recon("stats", "--json", db_url=db_url).stdout)
    [row] = stats["resolutions"]["by_day"]
    assert (row["operator"], row["status"], row["count"], row["overrides"]) == ("alice", "succeeded", 1, 0)
    assert stats["review"]["needs_review"] == 0
    again = recon("review", "resolve", "order-0", "--as", "failed", "--reason", "x", "--by", "alice", db_url=db_url,
                  env=env)
    assert again.returncode == 2 and "is succeeded, not needs_review" in again.stderr


def test_review_resolve__refuses_what_the_psp_contradicts_unless_overridden_and_records_the_override(
        db: Database, db_url: str, staff: object, sandbox: SandboxServer, env: dict[str, str], recon: Runner) -> None:
    [pid] = charged(db, sandbox, 1)
    into_review_by_amount(db, sandbox, pid, psp_amount=1000 - 1)
    before = len(PaymentStore(db).events(pid))

    r = recon("review", "resolve", "order-0", "--as", "failed", "--reason", "customer says no", "--by", "ann",
              db_url=db_url, env=env)
    assert r.returncode == 2
    assert "the PSP says it succeeded" in r.stderr and "9.99 EUR taken" in r.stderr and "--override" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert PaymentStore(db).get(pid).status is PaymentStatus.NEEDS_REVIEW  # type: ignore[union-attr]
    assert len(PaymentStore(db).events(pid)) == before

    r = recon("review", "resolve", "order-0", "--as", "failed", "--reason", "refunded by hand", "--by", "ann",
              "--override", db_url=db_url, env=env)
    assert r.returncode == 1 and "needs a second operator: approval 1" in r.stdout  # four eyes
    assert PaymentStore(db).get(pid).status is PaymentStatus.NEEDS_REVIEW  # type: ignore[union-attr]
    r = recon("approvals", "approve", "1", "--by", "bob", db_url=db_url, env=env)
    assert r.returncode == 0, r.stderr
    payment = PaymentStore(db).get(pid)
    assert payment.status is PaymentStatus.FAILED  # type: ignore[union-attr]
    assert "resolved by ann: refunded by hand" in (payment.failure_reason or "")  # type: ignore[union-attr]
    details = PaymentStore(db).events(pid)[-1].details or {}
    assert details["override"] is True and "the PSP says it succeeded" in details["contradicts_psp"]
    assert (details["operator"], details["approved_by"]) == ("ann", "bob")
    [row] = json.loads(recon("stats", "--json", db_url=db_url).stdout)["resolutions"]["by_day"]
    assert (row["operator"], row["status"], row["overrides"]) == ("ann", "failed", 1)


def test_review_resolve__a_failed_answer_forbids_succeeded_and_a_paused_psp_is_not_asked(
        db: Database, db_url: str, staff: object, sandbox: SandboxServer, env: dict[str, str], recon: Runner) -> None:
    a, b = charged(db, sandbox, 2)
    admin(sandbox.url, f"/_admin/payments/{psp_reference(db, a)}/fail", {"reason": "insufficient_funds"})
    to_review(db, a, "no_final_answer: after 3 checks: PSP still says pending")
    r = recon("review", "resolve", "order-0", "--as", "succeeded", "--reason", "x", "--by", "ann", db_url=db_url,
              env=env)
    assert r.returncode == 2 and "the PSP says it failed" in r.stderr
    ok = recon("review", "resolve", "order-0", "--as", "failed", "--reason", "PSP declined", "--by", "ann",
               db_url=db_url, env=env)
    assert ok.returncode == 0, ok.stderr

    to_review(db, b, "no_final_answer: after 3 checks: PSP still says pending")
    assert recon("psp", "pause", "sandbox", "--reason", "incident", "--by", "ann", db_url=db_url).returncode == 1
    assert recon("approvals", "approve", "1", "--by", "bob", db_url=db_url).returncode == 0
    charges_before = httpx.get(f"{sandbox.url}/_admin/charges", timeout=5).json()
    r = recon("review", "resolve", "order-1", "--as", "failed", "--reason", "x", "--by", "ann", db_url=db_url,
              env=env)
    assert r.returncode == 2 and "could not be asked" in r.stderr and "paused" in r.stderr
    assert httpx.get(f"{sandbox.url}/_admin/charges", timeout=5).json() == charges_before
    r = recon("review", "resolve", "order-1", "--as", "failed", "--reason", "PSP down, decided on the phone",
              "--by", "ann", "--override", db_url=db_url, env=env)
    assert r.returncode == 1, r.stderr
    assert recon("approvals", "approve", "2", "--by", "amy", db_url=db_url, env=env).returncode == 0
    details = PaymentStore(db).events(b)[-1].details or {}
    assert details["psp_asked"] is False and "paused" in details["psp_not_asked"] and details["override"] is True


@pytest.mark.parametrize("args, message", [
    (["--as", "succeeded", "--reason", "  ", "--by", "ann"], "--reason: is required"),
    (["--as", "succeeded", "--reason", "ok", "--by", ""], "--by names who acts"),
    (["--as", "succeeded", "--reason", "ok", "--by", "vic"], "has the role viewer"),
    (["--as", "succeeded", "--reason", "ok", "--by", "mallory"], "'mallory' is not an operator"),
    (["--as", "pending", "--reason", "ok", "--by", "ann"], "'pending' is not one of"),
])
def test_review_resolve__bad_input_exits_2_with_one_line(db: Database, db_url: str, staff: object, recon: Runner,
                                                         args: list[str], message: str) -> None:
    [pid] = create(db, 1, charge=False)
    to_review(db, pid, "missing_at_psp: gone")
    r = recon("review", "resolve", "order-0", *args, db_url=db_url)
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert PaymentStore(db).get(pid).status is PaymentStatus.NEEDS_REVIEW  # type: ignore[union-attr]
    missing = recon("review", "resolve", "nope", "--as", "failed", "--reason", "x", "--by", "ann", db_url=db_url)
    assert missing.returncode == 2 and "payment nope not found" in missing.stderr


def test_review_recheck__asks_the_psp_again_and_keeps_its_answer_as_evidence_without_moving_the_payment(
        db: Database, db_url: str, staff: object, sandbox: SandboxServer, env: dict[str, str], recon: Runner) -> None:
    [pid] = charged(db, sandbox, 1)
    to_review(db, pid, "no_final_answer: after 3 checks: PSP still says pending")
    admin(sandbox.url, f"/_admin/payments/{psp_reference(db, pid)}/settle", {})

    r = recon("review", "recheck", "order-0", "--json", "--by", "ann", db_url=db_url)
    assert r.returncode == 0, r.stderr
    job_id = json.loads(r.stdout)["job_id"]
    again = recon("review", "recheck", "order-0", "--json", "--by", "ann", db_url=db_url)
    assert json.loads(again.stdout)["job_id"] == job_id
    with sandbox_adapter(sandbox.url) as adapter:
        drain(db, handlers_for(db, adapter), queues=["reconcile"])
    payment = PaymentStore(db).get(pid)
    assert payment.status is PaymentStatus.NEEDS_REVIEW  # type: ignore[union-attr]
    note = PaymentStore(db).events(pid)[-1]
    assert (note.from_status, note.to_status, note.source, note.job_id) == ("needs_review", "needs_review",
                                                                           "reconcile", job_id)
    assert (note.details or {})["psp_outcome"] == "succeeded" and (note.details or {})["recheck"] is True
    [item] = json.loads(recon("review", "list", "--json", db_url=db_url).stdout)["payments"]
    assert item["psp_answer"]["psp_outcome"] == "succeeded"  # the latest answer is the recheck's


def test_review_show__the_audit_trail_and_every_job_with_its_attempts(
        db: Database, db_url: str, sandbox: SandboxServer, env: dict[str, str], recon: Runner) -> None:
    [pid] = charged(db, sandbox, 1, amount=1250)
    into_review_by_amount(db, sandbox, pid, psp_amount=990)
    doc = json.loads(recon("review", "show", "order-0", "--json", db_url=db_url).stdout)
    kinds = sorted(j["job"]["kind"] for j in doc["jobs"])
    assert kinds == ["charge", "reconcile"]
    assert all(j["attempts"] for j in doc["jobs"])  # each job's attempt history is there
    first, last = doc["events"][0], doc["events"][-1]
    assert first["to_status"] == "created" and last["to_status"] == "needs_review"
    assert first["job_id"] in {j["job"]["id"] for j in doc["jobs"]}  # the creation event names its charge job
    text = recon("review", "show", "order-0", db_url=db_url).stdout
    assert "12.50 EUR" in text and "attempt 1" in text


def test_stats__needs_review_oldest_money_in_major_units_and_the_last_sweeps(
        db: Database, db_url: str, sandbox: SandboxServer, env: dict[str, str], recon: Runner) -> None:
    charged(db, sandbox, 2, amount=123456)
    r = recon("sweep", "--older-than", "0", "--json", db_url=db_url, env=env, log_level="ERROR")
    assert r.returncode == 0, r.stderr
    doc = json.loads(recon("stats", "--json", db_url=db_url).stdout)
    [sweep] = doc["sweeps"]
    assert sweep["outcome"] == "finished" and sweep["exit_code"] == 0
    assert sweep["summary"]["checked"] == json.loads(r.stdout)["checked"] == 2
    assert doc["payments"]["money_at_risk"] == {"EUR": 246912}  # JSON keeps integer minor units
    to_review(db, 1, "missing_at_psp: gone")
    doc = json.loads(recon("stats", "--json", db_url=db_url).stdout)
    assert doc["review"]["needs_review"] == 1 and doc["review"]["oldest_since"]
    text = recon("stats", db_url=db_url).stdout
    assert "1234.56 EUR" in text and "needs_review: 1 payments" in text and "last sweeps" in text
