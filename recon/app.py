"""The App: what a ``recon`` process runs on, wired once and built lazily.

Settings, the database, its stores, one adapter per PSP, the guard the PSP-calling handlers share, this
process's metrics, the handlers and the Worker. ``recon.cli`` builds one from the global options for its
commands; ``recon.demo`` builds one on its own database with its own settings, adapters and reconcile
schedule. With ``recon.demo`` this module is a composition root: the only one that builds adapters from
``psp_adapters.registry``.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import asdict, replace
from datetime import date, datetime, timedelta
from functools import cached_property
from typing import Any

from psp_adapters import registry
from psp_adapters.protocol import ChargeRequest, FieldProblem, PspAdapter
from recon.actions import Actions
from recon.audit import AuditConfig, Sealer, entry
from recon.bank.config import BankConfig
from recon.classify import classify_failure
from recon.clock import SystemClock
from recon.close import close as closing
from recon.close.config import CloseConfig
from recon.close.job import CloseJob
from recon.close.payouts import FetchResult, PayoutsJob, fetch_payouts, news_job
from recon.config import EngineConfig, Settings, load_settings, unknown
from recon.console.config import ConsoleConfig
from recon.counters import ProcessMetrics
from recon.db.audit_store import AuditStore
from recon.db.bank_store import BankStore
from recon.db.close_store import CloseStore
from recon.db.control_store import ControlStore
from recon.db.database import Database, connect, schema_revisions
from recon.db.database import upgrade as apply_migrations
from recon.db.dispute_store import DisputeStore
from recon.db.jobs_store import JobStore
from recon.db.listener import make_listener
from recon.db.modification_store import ModificationStore
from recon.db.payment_store import PaymentStore
from recon.db.payout_store import PayoutStore
from recon.db.pool_store import PoolStore
from recon.db.refund_store import RefundStore
from recon.db.report_store import ReportStore
from recon.db.schedule_store import ScheduleStore
from recon.db.sweep_store import SweepRunStore
from recon.db.webhook_store import WebhookStore
from recon.engine.client import Client
from recon.engine.handlers import Handlers, JobHandler
from recon.engine.periodic import Periodic
from recon.engine.pruner import Pruner
from recon.engine.retry import RetryPolicy
from recon.engine.sizing import Pressure
from recon.engine.worker import Worker, make_worker_id
from recon.errors import ConfigError, UsageError
from recon.four_eyes import FourEyes, FourEyesConfig
from recon.modification_rows import MODIFICATION_KINDS
from recon.operator_rows import Role
from recon.operators import Operators
from recon.payments.capture_config import CAPTURE_KEYS, CaptureConfig
from recon.payments.charge import ChargeHandler
from recon.payments.config import PaymentsConfig
from recon.payments.guard import Guard, PspGuard
from recon.payments.instrumented import instrument
from recon.payments.modification import ModificationHandler
from recon.payments.psp_limits import GUARD_KEYS, GuardConfig
from recon.payments.refund import RefundHandler
from recon.reconcile import settlement as st
from recon.reconcile.config import ReconcileConfig
from recon.reconcile.disputes import DisputeFetch, DisputeRecorder, DisputesJob, dispute_source, reach_back
from recon.reconcile.handler import ReconcileHandler
from recon.reconcile.modification import ModificationReconcileHandler
from recon.reconcile.modification_webhook import ModificationNewsApplier
from recon.reconcile.periodic import ReportJob, SweepJob, check_payload
from recon.reconcile.refund import RefundReconcileHandler
from recon.reconcile.webhook import WebhookHandler, report_sweep
from recon.reconcile.window import WindowHandler
from recon.redact import redact
from recon.review import ReviewDesk
from recon.review_config import ReviewConfig
from recon.rows import Job
from recon.scheduler import TICK_SECONDS, Schedule, Scheduler, load_schedules
from recon.totp_key import TotpKeyConfig
from recon.webhook_rows import WebhookRecord
from recon.webhooks.config import WebhookConfig
from recon.webhooks.config import check as check_webhooks

#: PSP name -> its adapter, not yet instrumented
AdapterFactory = Callable[[str], PspAdapter]


class App:
    """What every command needs, each piece built on first use.

    ``database_url`` and ``config_path`` are the global options (``None``: the environment, then the defaults).
    The demo passes ready ``settings``, its own ``reconcile_config``, an ``adapter_factory`` for its sandbox
    and an unguarded ``guard``; left out, they come from the settings and ``psp_adapters.registry``.
    """

    def __init__(self, database_url: str | None = None, config_path: str | None = None, *,
                 settings: Settings | None = None, reconcile_config: ReconcileConfig | None = None,
                 adapter_factory: AdapterFactory | None = None, guard: Guard | None = None) -> None:
        self._database_url = database_url
        self._config_path = config_path
        self._settings = settings
        self._reconcile_config = reconcile_config
        self._adapter_factory = adapter_factory or self._registry_adapter
        self._guard = guard
        self._db: Database | None = None
        self._adapters: dict[str, PspAdapter] = {}
        self._adapter_lock = threading.Lock()
        #: False only while the schema is brought up to date (``upgrade``)
        self.check_schema = True

    # --- settings and the database ------------------------------------------------------------------------

    @property
    def settings(self) -> Settings:
        """The settings, every section checked at once (a typo in [psp.*] fails every command, not the one
        that happens to read it)."""
        if self._settings is None:
            if self._database_url is not None and not self._database_url.strip():
                raise UsageError("--database-url: is empty; leave it out for the default or name a database")
            settings = load_settings(self._config_path)
            if self._database_url:
                settings = replace(settings, database_url=self._database_url)
            _check_psp_tables(settings)
            ReconcileConfig.from_table(settings.extra.get("reconcile"), source=settings.source)
            PaymentsConfig.from_table(settings.extra.get("payments"), source=settings.source)
            check_webhooks(settings.extra.get("webhooks"), source=settings.source, psps=registry.names())

            ConsoleConfig.load(settings.extra.get("console"), source=settings.source)
            BankConfig.from_table(settings.extra.get("bank"), source=settings.source)
            AuditConfig.load(settings.extra.get("audit"), source=settings.source)
            FourEyesConfig.load(settings.extra.get("four_eyes"), source=settings.source)
            TotpKeyConfig.load(settings.extra.get("operators"), source=settings.source)
            self._settings = settings
            self.schedules  # noqa: B018  # checked with the rest of the file
        return self._settings

    @property
    def db(self) -> Database:
        """The database, its schema checked once: a command never works on a schema it does not know."""
        if self._db is None:
            db = connect(self.settings.database_url, pool_size=self.settings.engine.concurrency + 4)
            if self.check_schema:
                _require_current_schema(db)
            self._db = db
        return self._db

    def upgrade(self) -> Database:
        """Apply the migrations (idempotent) to the database, whatever its schema; returns it."""
        self.check_schema = False
        apply_migrations(self.db)
        return self.db

    @cached_property
    def reconcile_config(self) -> ReconcileConfig:
        """``[reconcile]``, each PSP's defaults from its adapter (``search_lag``, ``listing_window``)."""
        if self._reconcile_config is not None:
            return self._reconcile_config
        return ReconcileConfig.from_table(self.settings.extra.get("reconcile"), source=self.settings.source,
                                          adapters={name: registry.adapter_class(name) for name in registry.names()})

    @cached_property
    def payments_config(self) -> PaymentsConfig:
        """``[payments]`` of the config file: the charge jobs' queue (recon.payments.config)."""
        return PaymentsConfig.from_table(self.settings.extra.get("payments"), source=self.settings.source)

    # --- the stores ---------------------------------------------------------------------------------------

    @cached_property
    def jobs(self) -> JobStore:
        return JobStore(self.db)

    @cached_property
    def payments(self) -> PaymentStore:
        return PaymentStore(self.db)

    @cached_property
    def refunds(self) -> RefundStore:
        """Refunds, their bound on each payment's captured amount, their events and jobs."""
        return RefundStore(self.db)

    @cached_property
    def modifications(self) -> ModificationStore:
        """Captures and cancels of authorised payments, their claim on each authorisation, events and jobs."""
        return ModificationStore(self.db, self.payments)

    @cached_property
    def capture_config(self) -> CaptureConfig:
        """``[psp.NAME]``'s capture mode and authorisation validity per PSP (recon.payments.capture_config)."""
        return CaptureConfig.from_table(
            self.settings.extra.get("psp"), source=self.settings.source,
            validity={n: getattr(registry.adapter_class(n), "authorisation_validity", None) for n in registry.names()})

    @cached_property
    def disputes(self) -> DisputeStore:
        """Disputes (chargebacks): objects of their own, recorded from the PSPs' webhooks."""
        return DisputeStore(self.db)

    @cached_property
    def pool(self) -> PoolStore:
        """The worker pool's presence and attempt counts (``recon stats``, the metrics endpoint)."""
        return PoolStore(self.db)

    @cached_property
    def controls(self) -> ControlStore:
        """Per-PSP pauses, cool-downs and breakers."""
        return ControlStore(self.db)

    @cached_property
    def reports(self) -> ReportStore:
        """The settlement report's matching (``recon report``)."""
        return ReportStore(self.db)

    @cached_property
    def sweeps(self) -> SweepRunStore:
        """One row per ``recon sweep`` (the last sweeps in ``recon stats`` and the console)."""
        return SweepRunStore(self.db)

    @cached_property
    def webhooks(self) -> WebhookStore:
        """The events PSPs pushed (``recon serve``) and their jobs."""
        return WebhookStore(self.db)

    @cached_property
    def bank(self) -> BankStore:
        """The bank statements and their entries (``recon bank``)."""
        return BankStore(self.db)

    @cached_property
    def payouts(self) -> PayoutStore:
        """The PSPs' payouts, their lines and history (``recon payouts``, the payouts job)."""
        return PayoutStore(self.db)

    @cached_property
    def closes(self) -> CloseStore:
        """The close's matches, exceptions and runs (``recon close``, ``recon payouts exceptions``, the desk)."""
        return CloseStore(self.db, payouts=self.payouts)

    @cached_property
    def close_config(self) -> CloseConfig:
        """``[close]`` of the config file: the matching rules (recon.close.config)."""
        return CloseConfig.from_table(self.settings.extra.get("close"), source=self.settings.source)

    def fetch_payouts(self, psp: str, since: date, until: date, *, files: Sequence[str] = ()) -> FetchResult:
        """``psp``'s payouts arriving in ``[since, until)`` fetched and stored (recon.close.payouts), in every
        merchant account of our payments of ``psp`` too."""
        self.require_psps([psp])
        with self.reports.session(psp=psp) as session:
            accounts = session.merchant_accounts()
        return fetch_payouts(self.payouts, self.adapter(psp), psp=psp, since=since, until=until, files=files,
                             merchant_accounts=accounts)

    def close_day(self, psp: str, since: date, until: date, *, as_of: date) -> closing.CloseReport:
        """The close of ``psp``'s payouts arriving in ``[since, until)`` (recon.close.close): the bank accounts
        read are those whose ``psps`` name it or name none; an unexplained credit is reported only on those that
        name it alone. Reads only what is stored: the PSP is not called. The run is recorded (``close_runs``: each
        PSP's last close in ``recon stats``)."""
        if psp not in self.psp_names():
            raise UsageError(f"--psp {psp!r}: unknown PSP (known: {', '.join(self.psp_names())})")
        accounts = [a for a in self.bank_config.accounts.values() if psp in a.psps or not a.psps]
        report = closing.run_close(self.closes, psp=psp, since=since, until=until,
                                   rules=self.close_config.rules_for(psp), accounts=[a.identifier for a in accounts],
                                   exclusive_accounts=[a.identifier for a in accounts if a.psps == (psp,)],
                                   as_of=as_of)
        self.closes.record_run(psp=psp, since=since, until=until, payouts=len(report.payouts),
                                open_items=report.open_items, closed=report.closed)
        return report

    def fetch_disputes(self, psp: str, since: datetime, until: datetime, *, job: Job | None = None,
                       rolling: bool = False) -> DisputeFetch:
        """``psp``'s disputes of ``[since, until)`` read from its listing and recorded (recon.reconcile.disputes),
        in every merchant account of our payments of ``psp`` too. ``rolling`` (the ``disputes`` job's
        ``days_back``, ``recon sweep --disputes``): the window reaches back over the listing's cursor and the
        oldest open dispute (``reach_back``), and a read without an error moves the cursor to ``until``.
        UsageError when its adapter lists none."""
        self.require_psps([psp])
        with self.reports.session(psp=psp) as session:
            accounts = session.merchant_accounts()
        source = dispute_source(self.adapter(psp))
        if source is None:
            raise UsageError(f"{psp}: its adapter lists no disputes")
        if rolling:
            read_until, oldest_open = self.disputes.listing_reach(psp)
            since = min(since, reach_back(since, until, read_until=read_until, oldest_open=oldest_open))
        recorder = DisputeRecorder(self.db, self.payments, self.disputes, psp=psp, job=job)
        result = recorder.fetch(source, since, until, merchant_accounts=accounts)
        if rolling:
            self.disputes.listing_read(psp, until=until)
        return result

    @cached_property
    def operators(self) -> Operators:
        """The named operators, their roles, logins and lockout (recon.operators)."""
        return Operators(self.db, totp_key=self.totp_key_config)

    @property
    def totp_key_config(self) -> TotpKeyConfig:
        """``[operators] totp_key_file`` or ``RECON_TOTP_KEY_FILE``: the TOTP key's file (recon.totp_key)."""
        return TotpKeyConfig.load(self.settings.extra.get("operators"), source=self.settings.source)

    @cached_property
    def audit(self) -> AuditStore:
        """The audit trail's rows and seals (recon.audit)."""
        return AuditStore(self.db)

    @cached_property
    def audit_config(self) -> AuditConfig:
        """``[audit]``: retention, the sealer's interval and gap grace (recon.audit)."""
        return AuditConfig.load(self.settings.extra.get("audit"), source=self.settings.source)

    @cached_property
    def four_eyes(self) -> FourEyes:
        """Four-eyes requests and their approval (recon.four_eyes), with ``[four_eyes]``'s thresholds."""
        return FourEyes(self, FourEyesConfig.load(self.settings.extra.get("four_eyes"), source=self.settings.source))

    @cached_property
    def actions(self) -> Actions:
        """What people do, each write role-checked, four-eyed where it needs it, and audited (recon.actions)."""
        return Actions(self)

    def authorize(self, name: str | None, needs: Role, *, action: str) -> str:
        """``--by`` checked (recon.operators.Operators.authorize): the operator's name, or NotAllowed."""
        return self.operators.authorize(name, needs, action=action).name

    @cached_property
    def bank_config(self) -> BankConfig:
        """``[bank]`` of the config file: our bank accounts (recon.bank.config)."""
        return BankConfig.from_table(self.settings.extra.get("bank"), source=self.settings.source)

    @cached_property
    def webhook_config(self) -> WebhookConfig:
        """``[webhooks]`` of the config file, with a receiver for each PSP whose secrets are in the environment
        (recon.webhooks.config)."""
        return WebhookConfig.load(self.settings.extra.get("webhooks"), os.environ, source=self.settings.source,
                                  factories=registry.webhook_factories())

    def webhook_secret_hint(self) -> str:
        """Which variables turn the PSPs' webhook endpoints on, for a message: "A (stripe) or B (adyen)"."""
        return " or ".join(f"{registry.webhook_secrets(name)[0]} ({name})" for name in registry.webhook_factories())

    @cached_property
    def schedules(self) -> list[Schedule]:
        """``[schedule.NAME]``: the periodic jobs every worker's scheduler queues (recon.scheduler), each
        built-in kind's payload checked."""
        schedules = load_schedules(self.settings.extra.get("schedule"), source=self.settings.source,
                                   default_queue=self.settings.engine.default_queue)
        for s in schedules:
            check_payload(s.kind, s.payload, f"{self.settings.source}: schedule.{s.name}", psp_names=self.psp_names())
        return schedules

    def client(self) -> Client:
        return Client(self.jobs, self.settings)

    @cached_property
    def review(self) -> ReviewDesk:
        """The review desk: payments in needs_review, their resolution and recheck (``recon review``, the
        console). Its PSP calls go through this process's guard."""
        return ReviewDesk(self.payments, self.jobs, self.client(), self.adapter, self.guard,
                          reconcile_queue=self.reconcile_config.queue, psp_names=self.psp_names(),
                          clock=self.db.clock, config=self.review_config)

    @cached_property
    def review_config(self) -> ReviewConfig:
        """``[review]``: severity thresholds, each reason's SLA, the bulk resolve bound."""
        return ReviewConfig.load(self.settings.extra.get("review"), source=self.settings.source)

    # --- the PSPs -----------------------------------------------------------------------------------------

    def psp_names(self) -> tuple[str, ...]:
        return registry.names()

    def check_charge(self, psp: str, request: ChargeRequest) -> list[FieldProblem]:
        """What PSP ``psp`` would refuse about ``request``, by its adapter's own rules; makes no call."""
        return registry.check_charge(psp, request)

    def refund_reasons(self, psp: str) -> tuple[str, ...] | None:
        """The reason codes PSP ``psp``'s adapter sends with a refund (None: any text); makes no call."""
        reasons: tuple[str, ...] | None = getattr(registry.adapter_class(psp), "refund_reasons", None)
        return reasons

    def adapter(self, name: str) -> PspAdapter:
        """The adapter for PSP ``name``, instrumented (PSP latency and 429s go to ``metrics``). Handler threads
        call this concurrently: one adapter (one connection pool) per PSP per process."""
        with self._adapter_lock:
            if name not in self._adapters:
                self._adapters[name] = instrument(self._adapter_factory(name), recorder=self.metrics)
            return self._adapters[name]

    def _registry_adapter(self, name: str) -> PspAdapter:
        """``[psp.NAME]`` in the config file (base_url, merchant_account, timeouts) over ``RECON_NAME_*``
        variables. Keys come only from the environment."""
        if name not in registry.names():
            raise ConfigError(f"unknown PSP {name!r} (known: {', '.join(registry.names())})")
        try:
            settings = registry.settings_from_env(name, os.environ)
        except ValueError as exc:
            raise ConfigError(f"PSP {name!r}: {exc}") from None
        table = self.psp_table(name)
        for key in registry.SECRET_KEYS:
            if key in table:
                raise ConfigError(f"{self.settings.source}: psp.{name}.{key}: keys come from the environment "
                                  f"(RECON_{name.upper()}_{key.upper()}), never from a file")
        try:
            settings.update(registry.settings_from_table(table, base=settings.get("timeout")))
        except ValueError as exc:
            raise ConfigError(f"{self.settings.source}: psp.{name}: {exc}") from None
        try:
            return registry.get_factory(name)(settings)
        except registry.MissingSetting as exc:
            raise ConfigError(_missing_setting(name, exc.key, secret=exc.key in registry.SECRET_KEYS)) from None
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"PSP {name!r}: {exc}") from None

    def psp_table(self, name: str) -> dict[str, Any]:
        """``[psp.NAME]`` of the config file (adapter settings and guard limits), empty when absent."""
        table = self.settings.extra.get("psp", {}).get(name, {})
        return dict(table) if isinstance(table, dict) else {}

    def unconfigured_psps(self) -> dict[str, str]:
        """PSP name -> why it cannot be called as configured (a key missing, …), for those that cannot: the
        console shows them as "not configured" rather than "flowing"."""
        out: dict[str, str] = {}
        for name in self.psp_names():
            try:
                self.adapter(name)
            except ConfigError as exc:
                out[name] = str(exc)
        return out

    def require_psps(self, names: Iterable[str]) -> None:
        """Before a command does any work: every PSP in ``names`` can be called as configured (its adapter
        builds: keys, accounts, report credentials, base URL). Raises ConfigError naming the setting."""
        for name in sorted(set(names)):
            self.adapter(name)

    def account_defaults(self) -> dict[str, str]:
        """Each PSP's configured default merchant account (``[psp.NAME] merchant_account`` over
        ``RECON_NAME_MERCHANT_ACCOUNT``), for rows of an import that name none."""
        out = {}
        for name in self.psp_names():
            value = self.psp_table(name).get("merchant_account") or os.environ.get(
                f"RECON_{name.upper()}_MERCHANT_ACCOUNT")
            if isinstance(value, str) and value.strip():
                out[name] = value.strip()
        return out

    @cached_property
    def guard_config(self) -> GuardConfig:
        """``[psp.NAME]``'s guard limits: rate limit, cool-down and breaker per PSP."""
        return GuardConfig.from_table(self.settings.extra.get("psp"), source=self.settings.source)

    @property
    def guard(self) -> Guard:
        """This process's guard, shared by both PSP-calling handlers: pause, cool-down, breaker and rate limit
        per PSP (recon.payments.guard.PspGuard, unless the App was given one)."""
        if self._guard is None:
            self._guard = PspGuard(self.controls, self.guard_config)
        return self._guard

    @cached_property
    def metrics(self) -> ProcessMetrics:
        """This process's counts: the workers' observer and the adapters' recorder."""
        return ProcessMetrics()

    def close(self) -> None:
        """Close the PSP adapters' HTTP clients and the database's pooled connections (a later use of
        ``db`` opens new ones)."""
        for adapter in self._adapters.values():
            adapter.close()
        self._adapters.clear()
        if self._db is not None:
            self._db.dispose()

    # --- handlers and workers -----------------------------------------------------------------------------

    def handlers(self, extra: tuple[str, ...] = (), *, kinds: Collection[str] | None = None,
                 queues: Collection[str] | None = None) -> Handlers:
        """recon's job handlers, each added by the kind and queue it declares (``JobHandler``): the payment ones
        (charge, reconcile, reconcile_window, webhook) and the periodic ones (sweep, report); only those of
        ``kinds``, or of ``queues``, when given; plus any ``--handlers MODULE:ATTR``."""
        handlers = Handlers()
        for handler in self._job_handlers():
            if (kinds is None or handler.kind in kinds) and (queues is None or handler.queue in queues):
                handlers.add(handler)
        for ref in extra:
            _merge_handlers(handlers, _import_ref(ref))
        return handlers

    def _job_handlers(self) -> list[JobHandler]:
        rc = self.reconcile_config
        sweep_func = report_sweep(self.payments, self.client(), queue=rc.queue, listing_func=self._listing_psps,
                                  config=rc)
        return [
            ChargeHandler(self.payments, self.adapter, guard=self.guard, clock=SystemClock(),
                          queue=self.payments_config.queue),
            RefundHandler(self.refunds, self.payments, self.adapter, guard=self.guard, clock=SystemClock(),
                          queue=self.payments_config.queue),
            ReconcileHandler(self.payments, self.adapter, config=rc, clock=SystemClock(), guard=self.guard),
            RefundReconcileHandler(self.refunds, self.payments, self.adapter, config=rc, clock=SystemClock(),
                                   guard=self.guard),
            *(ModificationHandler(kind, self.modifications, self.payments, self.adapter, guard=self.guard,
                                  clock=SystemClock(), queue=self.payments_config.queue)
              for kind in MODIFICATION_KINDS),
            ModificationReconcileHandler(self.modifications, self.payments, self.adapter, config=rc,
                                         clock=SystemClock(), guard=self.guard),
            WindowHandler(self.payments, self.adapter, config=rc, guard=self.guard),
            WebhookHandler(self.payments, self.webhooks, sweep_func=sweep_func, reconcile_queue=rc.queue,
                           queue=self.webhook_config.queue, payout_func=self._payout_news,
                           refunds=self.refunds, disputes=self.disputes,
                           modifications=ModificationNewsApplier(self.modifications, self.payments, self.webhooks)),
            SweepJob(self.payments, self.client(), self.sweeps, self.audit, reconcile_queue=rc.queue,
                     psp_names=self.psp_names(), listing_func=self._listing_psps, config=rc),
            ReportJob(self._report_file, psp_names=self.psp_names()),
            PayoutsJob(lambda psp, since, until, files: self.fetch_payouts(psp, since, until, files=files),
                       psp_names=self.psp_names(), queue=self.close_config.queue),
            CloseJob(self._close_file, psp_names=self.psp_names()),
            DisputesJob(lambda psp, since, until, job, rolling: self.fetch_disputes(psp, since, until, job=job,
                                                                                    rolling=rolling),
                        psp_names=self.psp_names()),
        ]

    def _listing_psps(self) -> set[str]:
        """The PSPs with unfinished payments whose adapters list payments (bulk reconciliation); a PSP that
        cannot be called as configured is left to the per-payment jobs, whose failure says why."""
        listing = set()
        for name in self.payments.psps_unfinished():
            try:
                if getattr(self.adapter(name), "lists_payments", False):
                    listing.add(name)
            except ConfigError:
                continue
        return listing

    def _report_file(self, psp: str, since: datetime, until: datetime, path: str, fmt: str) -> int:
        """The settlement report of ``psp`` for ``[since, until)`` into ``path``; its discrepancies."""
        result = st.write_report(self.reports, self.adapter(psp), psp=psp, since=since, until=until, fmt=fmt,
                                 output=path, settlement_window=self.reconcile_config.settlement_window,
                                 unknown_events=self.webhooks.unknown_between(psp=psp, since=since, until=until))
        return result.totals.discrepancies

    def _payout_news(self, record: WebhookRecord) -> int:
        """A webhook's payout news: its payouts job, on ``[close] queue`` (recon.close.payouts.news_job)."""
        return self.client().enqueue_many([news_job(record, queue=self.close_config.queue)])[0]

    def _close_file(self, psp: str, since: date, until: date, path: str, fmt: str, as_of: date) -> int:
        """The close of ``psp`` for ``[since, until)``, payouts fetched first where its adapter lists them,
        written into ``path``; how many items are open."""
        if getattr(self.adapter(psp), "pays_out", False):
            self.fetch_payouts(psp, since, until)
        report = self.close_day(psp, since, until, as_of=as_of)
        closing.write_file(report, self.payouts, path=path, fmt=fmt)
        return report.open_items

    def engine_config(self, *, concurrency: int | None = None, prefetch: int | None = None,
                      lease_ttl: timedelta | None = None, heartbeat: timedelta | None = None,
                      drain_timeout: timedelta | None = None, poll_interval: timedelta | None = None) -> EngineConfig:
        """The engine settings with the command line's overrides, checked together. A shorter lease TTL
        without a heartbeat brings the heartbeat down to a third of it when it would not fit."""
        engine = self.settings.engine
        changes: dict[str, Any] = {}
        if concurrency:
            changes["concurrency"] = concurrency
        if prefetch is not None:
            changes["prefetch"] = prefetch
        if lease_ttl is not None:
            changes["lease_ttl_seconds"] = lease_ttl.total_seconds()
            if heartbeat is None and engine.heartbeat_interval_seconds >= lease_ttl.total_seconds():
                changes["heartbeat_interval_seconds"] = lease_ttl.total_seconds() / 3
        if heartbeat is not None:
            changes["heartbeat_interval_seconds"] = heartbeat.total_seconds()
        if drain_timeout is not None:
            changes["drain_timeout_seconds"] = drain_timeout.total_seconds()
        if poll_interval is not None:
            changes["poll_interval_seconds"] = poll_interval.total_seconds()
        engine = replace(engine, **changes)
        engine.validate("options")
        return engine

    def worker(self, queues: Sequence[str], *, handlers: Handlers | None = None, engine: EngineConfig | None = None,
               wakeups: bool = False) -> Worker:
        """A Worker on ``queues`` (``recon worker``, ``recon sweep``, the demo): ``handlers`` (default: the
        payment handlers), ``engine`` (default: the settings'), the retry policy and each queue's concurrency
        cap from the settings, recon's error classifier, this process's metrics as its observer; with
        ``wakeups``, woken by the database's notifications instead of polling alone. ``run(burst=True)`` on
        the result works until no claimable job is left. Besides its own loops (heartbeat, presence, watcher),
        the worker runs the pruner and the scheduler when the settings ask for them (``loops``)."""
        engine = self.settings.engine if engine is None else engine
        worker_id = redact(make_worker_id())
        # the configuration a worker started with, in the audit trail (recon.audit)
        self.audit.record(entry(f"system:{worker_id}", "worker.start", worker_id, queues=list(queues),
                                engine=asdict(engine), config=self.settings.source, wakeups=wakeups))
        return Worker(self.jobs, self.handlers() if handlers is None else handlers, config=engine,
                      policy=RetryPolicy(self.settings.retry), queues=list(queues),
                      queue_caps={q: self.settings.queue(q).concurrency for q in queues},
                      classify_func=classify_failure, wakeup_func=make_listener(self.db) if wakeups else None,
                      observer=self.metrics, worker_id=worker_id, loops=self.loops(engine, worker_id=worker_id),
                      pressure_func=self._pressure)

    def _pressure(self) -> Pressure:
        """The PSPs' pressure on a worker that sizes itself: the guard's (an unguarded App: none)."""
        guard = self.guard
        return guard.pressure() if isinstance(guard, PspGuard) else Pressure()

    def loops(self, engine: EngineConfig, *, worker_id: str) -> list[Periodic]:
        """A worker's loops beyond its own: the pruner (``engine.prune_older_than`` set; recon.engine.pruner) and
        the scheduler (``[schedule.NAME]`` set; recon.scheduler: each slot runs once across the pool; not in a
        burst run)."""
        loops = []
        sealer = Sealer(self.audit, gap_grace=self.audit_config.gap_grace)
        loops.append(Periodic("sealer", sealer.run_once, interval=self.audit_config.seal_interval.total_seconds(),
                              in_burst=False, note="audit rows and payment events chained into audit_seals every "
                                                   f"{self.audit_config.seal_interval.total_seconds():g}s"))
        if engine.prune_after is not None:
            pruner = Pruner(self.jobs, older_than=engine.prune_after, batch=engine.prune_batch_size)
            loops.append(Periodic("pruner", pruner.run_once, interval=engine.prune_interval_seconds,
                                  note=f"finished jobs older than {engine.prune_after} are deleted every "
                                       f"{engine.prune_interval_seconds:g}s"))
        if self.schedules:
            scheduler = Scheduler(ScheduleStore(self.db), self.schedules, scheduler_id=worker_id,
                                  max_depth={s.queue: self.settings.queue(s.queue).max_depth for s in self.schedules})
            loops.append(Periodic("scheduler", lambda _stop: scheduler.run_once(), interval=TICK_SECONDS,
                                  in_burst=False, note="; ".join(f"{s.name} ({s.kind}, {s.describe()})"
                                                                 for s in self.schedules)))
        return loops


def _check_psp_tables(settings: Settings) -> None:
    """``[psp.NAME]``: a registered PSP, and only adapter settings (registry) or guard limits (psp_limits)."""
    tables = settings.extra.get("psp", {})
    if not isinstance(tables, dict):
        raise ConfigError(f"{settings.source}: psp: must be a table of [psp.NAME] tables")
    known = (set(registry.PLAIN_KEYS) | set(registry.SECRET_KEYS) | set(registry.TIMEOUT_KEYS) | GUARD_KEYS
             | CAPTURE_KEYS)
    for name, table in tables.items():
        if name not in registry.names():
            raise unknown("PSP", name, registry.names(), f"{settings.source}: psp.")
        if not isinstance(table, dict):
            raise ConfigError(f"{settings.source}: psp.{name}: must be a table")
        for key in table:
            if key not in known:
                raise unknown("key", key, known, f"{settings.source}: psp.{name}.")
    GuardConfig.from_table(tables, source=settings.source)
    CaptureConfig.from_table(tables, source=settings.source, validity={})


def _require_current_schema(db: Database) -> None:
    current, head = schema_revisions(db)
    if current != head:
        have = f"at revision {current}" if current else "empty (no recon tables)"
        raise ConfigError(f"the database schema is {have}; this recon needs revision {head}: run `recon db upgrade`")


def _missing_setting(name: str, key: str, *, secret: bool) -> str:
    variable = f"RECON_{name.upper()}_{key.upper()}"
    where = f"the environment variable {variable}" if secret else f"[psp.{name}] {key} in the config file or {variable}"
    return f"PSP {name!r}: {key} is not set; set {where}"


def _import_ref(ref: str) -> Handlers:
    module_name, _, attr = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
        obj = getattr(module, attr or "handlers")
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"--handlers {ref!r}: cannot import ({exc})") from None
    if not isinstance(obj, Handlers):
        raise ConfigError(f"--handlers {ref!r}: is a {type(obj).__name__}, not recon.Handlers")
    return obj


def _merge_handlers(into: Handlers, other: Handlers) -> None:
    for kind in other.kinds():
        into.register(kind, other.get(kind))
