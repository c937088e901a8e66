"""``recon demo``: the whole story end to end on SQLite and the PSP sandbox, in under a minute.

It starts the sandbox in-process with faults switched on (429s, answers lost after charging, 5xx, slow
settlement, declines), creates a few hundred payments, runs the charge workers, then sweeps: reconciliation
heals what the charges left pending. It ends with a check against the sandbox's own ledger that no payment was
charged twice, whatever its key generation. ``--psp``: ``sandbox`` (the sandbox's own API and adapter),
``stripe`` or ``adyen`` (the sandbox speaking that PSP's wire, recon talking to it through the real adapter,
authenticated with a per-run test key). It runs on an App of its own (``recon.app``): a fresh SQLite database,
short backoffs and leases, the wire's adapter, a short reconcile schedule and no PSP guard. With ``recon.app``,
this module is a composition root: it builds the adapters of its wires.
"""

from __future__ import annotations

import contextlib
import random
import re
import secrets
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import httpx

from psp_adapters import adyen, registry, stripe
from psp_adapters.errors import PspTransientError
from psp_adapters.protocol import ChargeRequest, FieldProblem, PspAdapter, Secret
from psp_adapters.sandbox.adapter import SandboxAdapter
from psp_adapters.sandbox.bank_credits import fetch as fetch_bank_credits
from psp_adapters.sandbox.faults import Faults
from psp_adapters.sandbox.server import SandboxServer
from psp_adapters.sandbox.webhooks import WebhookConfig
from recon.app import App
from recon.asgi import background
from recon.bank.formats.protocol import EntryToWrite, StatementToWrite
from recon.bank.formats.registry import writer
from recon.bank.importer import read_statement_file
from recon.clock import SystemClock
from recon.config import BackoffConfig, Settings
from recon.db.payment_store import PaymentStore
from recon.payments.guard import Unguarded
from recon.payments.money import MINOR_UNITS, format_amount
from recon.reconcile import sweep as sw
from recon.reconcile.config import PspSchedule, ReconcileConfig
from recon.rows import NewPayment, Payment, PaymentStatus
from recon.webhooks.config import WebhookConfig as Endpoint
from recon.webhooks.config import default_path

DEMO_FAULTS = Faults(rate_429=0.05, retry_after_seconds=1, rate_500=0.03, rate_hang=0.04, hang_seconds=1.5,
                     pending_fraction=0.12, settle_after_seconds=3.0, pending_fail_fraction=0.25,
                     rate_decline=0.04, decline_amount_suffix=None, seed=7)
#: chargeable by all three: JPY is zero-decimal everywhere; KWD amounts are whole dinars (Stripe wants a last 0)
CURRENCIES = (("EUR", 100), ("USD", 100), ("GBP", 100), ("JPY", 1), ("KWD", 1000))
#: the demo's payouts fetch, under the sandbox's faults
FETCH_ATTEMPTS = 10
TIMEOUT = httpx.Timeout(connect=1.0, read=1.0, write=1.0, pool=1.0)  # shorter than the injected hangs
#: the sandbox's search and reports are immediately consistent: no grace for lag, a short pending schedule
SCHEDULE = PspSchedule(schedule=(timedelta(seconds=1), timedelta(seconds=2)), grace_period=timedelta(0))
#: two merchant accounts of one company: the adapter charges each in its own, and reads each one's own report
ADYEN_ACCOUNTS, ADYEN_ZONE = ("DemoShopECOM", "DemoShopAPP"), "Europe/Amsterdam"
_GENERATION = re.compile(r"-g\d+$")  # KEY-gN: a later idempotency key generation of the payment whose key is KEY


class Creds(NamedTuple):
    """This run's credentials, shared by the sandbox and the adapter, so that auth is really checked."""

    api_key: str
    report_user: str
    report_password: str

    @classmethod
    def new(cls, prefix: str) -> Creds:
        return cls(prefix + secrets.token_hex(12), "report@Company.DemoCompany", secrets.token_urlsafe(16))


@dataclass(frozen=True, slots=True)
class Wire:
    """What differs per PSP: the sandbox's flavour, recon's adapter, and what each payment carries."""

    psp: str  #: recon's PSP name (the payments' ``psp``)
    label: str  #: the PSP's name in the story
    speaking: str  #: how the sandbox line names the wire
    #: the sandbox for this wire, sending its webhooks where the WebhookConfig says (None: no webhooks)
    server: Callable[[Path, Creds, WebhookConfig | None], SandboxServer]
    adapter: Callable[[str, Creds], PspAdapter]
    #: payment i -> (merchant account, payment method, customer reference)
    carries: Callable[[int], tuple[str, str | None, str | None]]
    check: Callable[[ChargeRequest], list[FieldProblem]] | None = None  #: the import-time check of the PSP
    key_prefix: str = "sk_test_"
    webhooks: bool = True  #: the PSP pushes webhooks (the native sandbox does not)
    lookup: str = "asks the PSP for each payment"  #: how the sweep learns the truth; ``{n}``: how many have no PSP id


WIRES: dict[str, Wire] = {
    "sandbox": Wire(
        "sandbox", "the sandbox", "", lambda path, c, _w: SandboxServer(path, faults=DEMO_FAULTS, api_key=c.api_key),
        lambda url, c: SandboxAdapter(url, api_key=Secret(c.api_key), timeout=TIMEOUT),
        lambda _i: ("demo-shop", None, None), key_prefix="sandbox_demo_", webhooks=False),
    "stripe": Wire(
        "stripe", "Stripe", " speaking Stripe's API",
        lambda path, c, w: SandboxServer(path, faults=DEMO_FAULTS, flavor="stripe", api_key=c.api_key, webhooks=w),
        lambda url, c: stripe.StripeAdapter(url, api_key=Secret(c.api_key), timeout=TIMEOUT),
        lambda i: ("demo-shop", "pm_card_visa", f"cus_demo{i:05d}"),
        stripe.check_charge,
        lookup="reads each PaymentIntent by id, and searches metadata['merchant_reference'] for those without "
               "one ({n})"),
    "adyen": Wire(
        "adyen", "Adyen", " speaking Adyen's Checkout v72 API and reports",
        lambda path, c, w: SandboxServer(path, faults=DEMO_FAULTS, flavor="adyen", api_key=c.api_key, webhooks=w,
                                      report_username=c.report_user, report_password=c.report_password,
                                      report_timezone=ADYEN_ZONE, company_account="DemoCompany"),
        lambda url, c: adyen.AdyenAdapter(url, api_key=Secret(c.api_key), merchant_account=ADYEN_ACCOUNTS[0],
                                          report_base_url=url, report_username=c.report_user,
                                          report_password=Secret(c.report_password), report_timezone=ADYEN_ZONE,
                                          lookback_days=1, timeout=TIMEOUT),
        lambda i: (ADYEN_ACCOUNTS[i % 2], f"{8315_0000_0000_0000 + i}", f"shopper-{i:05d}"),  # stored card
        adyen.check_charge, key_prefix="AQE_demo_",
        lookup="reads its merchant account's Payment accounting report of today as the report user (Checkout "
               "cannot read a payment back)"),
}


def run_demo(*, payments: int = 300, directory: str | None = None, say: Any = print, psp: str = "sandbox") -> int:
    """Run the story; return the exit code: 0 when every payment ended final and none was charged twice, 1
    when some need review or stay unfinished, 3 on a double charge (or a charge under no payment's key)."""
    # kept afterwards (a directory of its own under the system's temporary directory by default), so that the
    # console can show what happened
    where = Path(directory or tempfile.mkdtemp(prefix="recon-demo-"))
    where.mkdir(parents=True, exist_ok=True)
    return _story(where, payments, say, WIRES[psp])


def _story(where: Path, n: int, say: Any, wire: Wire) -> int:
    started = time.monotonic()
    creds = Creds.new(wire.key_prefix)
    url = ""  # the sandbox's, once it listens: the adapters are built on first use, after that
    # PSP latency and 429s through the App's instrumented adapter (app.metrics); no guard between them
    app = App(settings=_demo_settings(where), reconcile_config=_demo_reconcile_config(wire),
              adapter_factory=lambda _name: wire.adapter(url, creds), guard=Unguarded())
    app.upgrade()
    with contextlib.ExitStack() as stack:
        hook = _webhook_endpoint(app, wire, stack) if wire.webhooks else None
        server = stack.enter_context(wire.server(where / "psp-sandbox.db", creds, hook))
        url = server.url
        say(f"PSP sandbox{wire.speaking} on {server.url}: 5% 429s, 3% 500s, 4% answers lost after charging, "
            f"12% slow settlement, 4% declines" + (f"; its webhooks go to recon's endpoint {hook.url}" if hook else ""))
        if hook:  # a worker applies the webhooks as they come, all story long
            stack.enter_context(_worker_in_background(app, app.webhook_config.queue))
        ledger = app.payments
        new = _payments(wire, n)
        ledger.create(new, queue=app.payments_config.queue)
        accounts = len({p.merchant_account for p in new})
        say(f"created {n} payments in {len({p.currency for p in new})} currencies"
            + (f" and {accounts} merchant accounts" if accounts > 1 else "") + ", each with a charge job"
            + (f" (each carries what {wire.label} needs; {wire.psp}.check_charge accepts all)" if wire.check else ""))

        charged = _run_until_done(app, queue=app.payments_config.queue, timeout=40)
        counts = _statuses(ledger)
        say(f"charge workers: {charged['succeeded']} charge jobs done first time or after retries; "
            f"payments now {_fmt(counts)}")

        unfinished = [p for p in ledger.iter_payments() if p.status in (PaymentStatus.PENDING,
                                                                         PaymentStatus.PROCESSING)]
        if unfinished:
            say(f"{len(unfinished)} payments have no final answer (slow settlement or a lost answer); "
                f"waiting {DEMO_FAULTS.settle_after_seconds:.0f}s for the PSP to settle them, then sweeping")
            saved = sum(1 for p in unfinished if _got_saved_answer(ledger, p))
            if saved:
                say(f"{saved} of them got a 500 that {wire.label} saved under their idempotency key (a retry would "
                    f"only replay it): they stay pending until the sweep finds them by search")
            time.sleep(DEMO_FAULTS.settle_after_seconds + 0.5)
        queue = app.reconcile_config.queue
        sweep_run = app.sweeps.start(operator="recon demo", options={"older_than_seconds": 0.0})
        selection = sw.enqueue(ledger, app.client(), sw.SweepOptions(older_than=timedelta(0)), queue=queue)
        if selection:
            say("sweep " + wire.lookup.format(n=sum(1 for p in ledger.get_many(selection.payment_ids)
                                                         if not p.psp_reference)))
        _run_until_done(app, queue=queue, timeout=30)
        summary = sw.summarise(ledger, app.jobs, selection)
        app.sweeps.finish(sweep_run, outcome="finished", exit_code=summary.exit_code, summary=summary.to_dict())
        say(f"sweep checked {summary.checked}: healed->succeeded {summary.counts['healed_succeeded']}, "
            f"healed->failed {summary.counts['healed_failed']}, needs review {summary.counts['needs_review']}, "
            f"still pending {summary.counts['still_pending']}")
        final = _statuses(ledger)
        say(f"final: {_fmt(final)}")
        charges = httpx.get(f"{server.url}/_admin/charges", timeout=5).json()
        for name, (requests, throttled) in app.metrics.psp_totals().items():
            say(f"PSP calls to {name}: {requests}, of which {throttled} were answered 429 (rate limited)")
        if hook:
            _webhooks_settled(app, server.url, queue=app.webhook_config.queue, timeout=15)
            said = {r["state"]: r["events"] for r in app.webhooks.counts(since=app.jobs.db_now() - timedelta(hours=1))}
            by_hook = sum(1 for p in ledger.iter_payments() if p.status.final and any(
                e.source == "webhook" and e.from_status != e.to_status for e in ledger.events(p.id)))
            say(f"webhooks: {sum(said.values())} events received and stored once each "
                f"({', '.join(f'{k} {v}' for k, v in sorted(said.items()))}); {by_hook} payments were finalised "
                f"by a webhook, the rest by the charge's answer or the sweep")
        most, stray = _charges_per_payment(charges, {p.idempotency_key: p.id for p in ledger.iter_payments()})
        if wire.webhooks:  # the PSPs that pay out: the day closed on money
            _close_the_day(app, wire, server.url, creds, where, say)
    app.close()
    app.db.dispose()
    double = most > 1 or stray > 0
    verdict = "DOUBLE CHARGE" if most > 1 else "UNACCOUNTED CHARGE" if stray else "no double charge"
    say(f"sandbox ledger: {charges['charges']} charges for {charges['keys']} idempotency keys; "
        f"most charges for one key: {charges['max_per_key']}, for one payment (all its key generations): {most}"
        + (f"; {stray} charges under no payment's key" if stray else "") + f" -> {verdict}")
    say(f"done in {time.monotonic() - started:.1f}s")
    say(f"see what happened in the console: recon --database-url sqlite:///{where / 'recon.db'} console "
        f"(then open http://127.0.0.1:8470/)")
    left = final.get("pending", 0) + final.get("processing", 0) + final.get("created", 0)
    return 3 if double else (1 if left or final.get("needs_review") else 0)


def _close_the_day(app: App, wire: Wire, url: str, creds: Creds, where: Path, say: Any) -> None:
    """The sandbox pays out what it took (``/_admin/payouts/run``: now, paid at once), recon fetches the payouts
    with their lines, the bank's statement of each currency's account (written from the sandbox's payouts, as
    ``recon psp-sandbox-statement`` writes it) is imported, and the close matches them: the day closed."""
    started = time.monotonic()
    auth = {"X-API-Key": creds.api_key} if wire.psp == "adyen" else {"Authorization": f"Bearer {creds.api_key}"}
    httpx.post(f"{url}/_admin/payouts/run", json={}, headers=auth, timeout=10).raise_for_status()
    today = SystemClock().now().astimezone(UTC).date()  # the sandbox pays out on the real clock
    since, until = today - timedelta(days=1), today + timedelta(days=2)
    # the sandbox's faults (429s, 500s) hit the listings too: fetched again, as the payouts job's retries would
    # (storing is idempotent: what was stored is recognised)
    for attempt in range(1, FETCH_ATTEMPTS + 1):
        try:
            app.fetch_payouts(wire.psp, since, until)
            break
        except PspTransientError:
            if attempt == FETCH_ATTEMPTS:
                raise
            time.sleep(0.2)
    fetched = list(app.payouts.iter_payouts(psp=wire.psp, since=since, until=until))
    _, credits = fetch_bank_credits(url, since, until)
    imported = 0
    for currency, _unit in CURRENCIES:
        mine = [c for c in credits if c.currency == currency]
        if not mine:
            continue
        path = where / f"statement-{currency}.sta"
        with path.open("wb") as out:
            writer("mt940").write(out, [StatementToWrite(
                account=f"DEMO{currency}", currency=currency, exponent=MINOR_UNITS[currency],
                statement_id=f"DEMO{today:%y%m%d}{currency}", opening=0, period_start=since, period_end=until,
                entries=[EntryToWrite(amount=c.amount, direction="credit", booking_date=c.booking_date,
                                      value_date=c.value_date, bank_reference=c.bank_reference,
                                      end_to_end_id=c.end_to_end_id, counterparty=c.counterparty,
                                      remittance=c.remittance) for c in mine])])
        plan = read_statement_file(path, config=app.bank_config)
        try:
            imported += app.bank.import_plan(plan, money_func=format_amount).entries_added
        finally:
            plan.close()
    report = app.close_day(wire.psp, since, until, as_of=today)
    lines = sum(r.payout.line_count for r in report.payouts)
    say(f"payouts: {wire.label} paid out {len(fetched)} payouts carrying {lines} lines; the bank statements "
        f"({imported} credits, MT940) imported; close {report.since}..{report.until}: "
        + (f"{len(report.payouts)} payouts matched to the bank: day closed" if report.closed
           else f"{report.open_items} open ({', '.join(f'{n} {k}' for k, n in report.categories().items())})")
        + f" ({time.monotonic() - started:.1f}s)")


def _payments(wire: Wire, n: int) -> list[NewPayment]:
    """``n`` payments in ``CURRENCIES``, each carrying what ``wire``'s PSP needs and passing its check."""
    rng = random.Random(42)  # nosec B311  # jitter and simulation, not security
    new = []
    for i in range(n):
        currency, unit = rng.choice(CURRENCIES)
        account, method, customer = wire.carries(i)
        charge = ChargeRequest(merchant_reference=f"order-{i:05d}", amount=rng.randint(1, 500) * unit,
                               currency=currency, merchant_account=account, payment_method=method,
                               customer_reference=customer)
        problems = wire.check(charge) if wire.check else []
        if problems:
            raise ValueError(f"demo payment {charge.merchant_reference}: {wire.label} would refuse it: {problems}")
        new.append(NewPayment(merchant_account=account, merchant_reference=charge.merchant_reference,
                              amount=charge.amount, currency=currency, psp=wire.psp, payment_method=method,
                              customer_reference=customer))
    return new


def _got_saved_answer(ledger: PaymentStore, payment: Payment) -> bool:
    return any((e.details or {}).get("saved_answer") for e in ledger.events(payment.id))


def _charges_per_payment(charges: dict[str, Any], owner: dict[str, int]) -> tuple[int, int]:
    """(most charges for one payment, all its key generations together; charges under no payment's key), from
    the sandbox's ``/_admin/charges`` and ``owner``: each payment's first idempotency key -> its id."""
    per_payment: Counter[int] = Counter()
    stray = int(charges.get("without_key", 0))
    for key, count in charges["per_key"].items():
        payment_id = owner.get(key, owner.get(_GENERATION.sub("", key)))
        if payment_id is None:
            stray += count
        else:
            per_payment[payment_id] += count
    return max(per_payment.values(), default=0), stray


def _demo_settings(where: Path) -> Settings:
    """The demo's own SQLite database in ``where``; short backoffs and leases so its retries happen within
    seconds."""
    base = Settings()
    fast = BackoffConfig(base_seconds=0.1, cap_seconds=1.5, max_attempts=12)
    retry = {kind: fast for kind in base.retry}
    engine = replace(base.engine, concurrency=16, lease_ttl_seconds=10, heartbeat_interval_seconds=2,
                     poll_interval_seconds=0.05, watcher_interval_seconds=1)
    # one bank account per currency the PSPs pay out to (recon close reads them)
    bank = {"accounts": {f"demo-{c.lower()}": {"number": f"DEMO{c}", "currency": c, "psps": ["stripe", "adyen"]}
                         for c, _unit in CURRENCIES}}
    return replace(base, database_url=f"sqlite:///{where / 'recon.db'}", retry=retry, engine=engine,
                   extra={**base.extra, "bank": bank})


def _demo_reconcile_config(wire: Wire) -> ReconcileConfig:
    """Settled at once: no settlement window, and ``SCHEDULE`` for the wire's PSP."""
    return ReconcileConfig(default=PspSchedule(schedule=(), grace_period=timedelta(0)),
                           settlement_window=timedelta(0), per_psp={wire.psp: SCHEDULE})


def _run_until_done(app: App, *, queue: str, timeout: float) -> Counter[str]:
    """Run a worker on ``queue`` until no job of it is unfinished (retries included), or ``timeout``."""
    worker = app.worker([queue])
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.2)
        if _queue_done(app, queue):
            break
    worker.request_stop()
    thread.join(30)
    return worker.stats.outcomes


def _webhooks_settled(app: App, sandbox_url: str, *, queue: str, timeout: float) -> None:
    """Wait until the sandbox has sent every webhook it has (none queued, held back or in flight) and the
    background worker has applied what recon stored (no unfinished job on ``queue``), or ``timeout``: the
    story then counts every webhook the payments caused, however busy the machine."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = httpx.get(f"{sandbox_url}/_admin/webhooks", timeout=5).json()
        sent = log["waiting"] == 0 and not any(row["state"] == "sending" for row in log["webhooks"])
        if sent and _queue_done(app, queue):
            return
        time.sleep(0.1)


def _queue_done(app: App, queue: str) -> bool:
    """No job of ``queue`` is unfinished (retries included)."""
    depth = app.jobs.stats(window=timedelta(0))["depth"]
    return not any(q == queue and s not in ("succeeded", "dead", "canceled") for q, s, _n in depth)


def _webhook_endpoint(app: App, wire: Wire, stack: contextlib.ExitStack) -> WebhookConfig:
    """recon's webhook endpoint for ``wire``'s PSP, served in a thread of this process with a per-run secret,
    and the sandbox's side of it: where it sends and what it signs with."""
    from recon.webhooks.intake import Intake
    from recon.webhooks.server import create_app

    secret = ("whsec_" if wire.psp == "stripe" else "") + secrets.token_hex(32)
    # the PSP's receiver as `recon serve` builds it, from the variable that turns its endpoint on
    endpoint = Endpoint.load(None, {registry.webhook_secrets(wire.psp)[0]: secret},
                             factories={wire.psp: registry.webhook_factories()[wire.psp]})
    intake = Intake(app.webhooks, endpoint, max_attempts=app.settings.engine.default_max_attempts)
    base = stack.enter_context(background(create_app(app, intake=intake)))
    return WebhookConfig(url=base.rstrip("/") + default_path(wire.psp), secret=Secret(secret), backoff_seconds=0.2)


@contextlib.contextmanager
def _worker_in_background(app: App, queue: str) -> Iterator[None]:
    worker = app.worker([queue], wakeups=True)
    thread = threading.Thread(target=worker.run, name="recon-demo-webhooks", daemon=True)
    thread.start()
    try:
        yield
    finally:
        worker.request_stop()
        thread.join(30)


def _statuses(ledger: PaymentStore) -> dict[str, int]:
    return dict(Counter(str(p.status) for p in ledger.iter_payments()))


def _fmt(counts: dict[str, int]) -> str:
    order = [s.value for s in PaymentStatus]
    return ", ".join(f"{s} {counts[s]}" for s in order if counts.get(s))
