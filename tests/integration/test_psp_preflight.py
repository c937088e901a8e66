"""Every command that will call a PSP checks that PSP's settings before it does any work: exit 2 with one line
naming the setting and its environment variable, and nothing claimed, moved or enqueued."""

from __future__ import annotations

from recon.db.database import Database
from recon.db.jobs_store import JobStore
from recon.db.payment_store import PaymentStore
from recon.rows import JobState, NewPayment, PaymentStatus
from tests.cli import Runner


def without_psp_keys(env: dict[str, str], **extra: str) -> dict[str, str]:
    """``env`` without any Stripe or Adyen setting, plus ``extra``."""
    return {**{k: v for k, v in env.items() if not k.startswith(("RECON_STRIPE_", "RECON_ADYEN_"))}, **extra}


def stripe_payment(db: Database) -> int:
    [pid] = PaymentStore(db).create([NewPayment("default", "s-1", 1000, "USD", "stripe", payment_method="pm_card_visa",
                                               customer_reference="cus_NffrFeUfNV2Hib")])
    return pid


def test_worker__refuses_to_start_without_the_keys_of_a_psp_it_would_call(db: Database, db_url: str,
                                                                          subprocess_env: dict[str, str],
                                                                          recon: Runner) -> None:
    pid = stripe_payment(db)
    r = recon("worker", "--burst", db_url=db_url, env=without_psp_keys(subprocess_env))
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "recon: PSP 'stripe': api_key is not set; set the environment variable RECON_STRIPE_API_KEY"]
    payment = PaymentStore(db).get(pid)
    assert payment is not None and payment.status is PaymentStatus.CREATED
    [job] = JobStore(db).list_jobs(kind="charge", limit=10)
    assert job.state is JobState.RUNNABLE and job.attempts == 0


def test_worker__psps_without_unfinished_payments_are_not_required(db: Database, db_url: str,
                                                                   subprocess_env: dict[str, str],
                                                                   recon: Runner) -> None:
    r = recon("worker", "--burst", db_url=db_url, env=without_psp_keys(subprocess_env))
    assert r.returncode == 0, r.stderr


def test_sweep__checks_the_psps_it_will_call_before_enqueueing(db: Database, db_url: str,
                                                               subprocess_env: dict[str, str], recon: Runner) -> None:
    stripe_payment(db)
    r = recon("sweep", "--older-than", "0s", db_url=db_url, env=without_psp_keys(subprocess_env))
    assert r.returncode == 2, r.stderr
    assert "RECON_STRIPE_API_KEY" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert JobStore(db).list_jobs(kind="reconcile", limit=10) == []
    dry = recon("sweep", "--older-than", "0s", "--dry-run", "--json", db_url=db_url,
                env=without_psp_keys(subprocess_env))
    assert dry.returncode == 0, dry.stderr  # a dry run calls no PSP


def test_adyen__report_user_credentials_are_a_setting_of_their_own(db: Database, db_url: str,
                                                                   subprocess_env: dict[str, str],
                                                                   recon: Runner) -> None:
    r = recon("report", "--psp", "adyen", "--since", "2026-11-01", "--until", "2026-11-02", db_url=db_url,
              env=without_psp_keys(subprocess_env, RECON_ADYEN_API_KEY="AQEyhmfxNotARealKey",
                                   RECON_ADYEN_MERCHANT_ACCOUNT="AcmeShopEU"))
    assert r.returncode == 2, r.stderr
    assert "RECON_ADYEN_REPORT" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert r.stdout == ""


def test_report__names_the_missing_key(db_url: str, subprocess_env: dict[str, str], recon: Runner) -> None:
    r = recon("report", "--psp", "stripe", "--since", "2026-11-01", "--until", "2026-11-02", db_url=db_url,
              env=without_psp_keys(subprocess_env))
    assert r.returncode == 2 and "RECON_STRIPE_API_KEY" in r.stderr and r.stdout == ""
