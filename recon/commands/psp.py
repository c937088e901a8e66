"""`recon psp pause|resume|status`, `recon psp-sandbox` and `recon demo`."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any
from zoneinfo import ZoneInfo

import click

from psp_adapters.protocol import Secret
from psp_adapters.sandbox.faults import FAULT_FLAGS, Faults
from psp_adapters.sandbox.server import (
    DEFAULT_API_KEYS,
    DEFAULT_REPORT_PASSWORD,
    DEFAULT_REPORT_USERNAME,
    check_webhooks,
    serve_forever,
)
from psp_adapters.sandbox.webhooks import WebhookConfig
from recon.app import App
from recon.errors import UsageError
from recon.overview import psp_controls_document
from recon.params import by_option, install_signal_handlers, pending_approval, say
from recon.render.stats import psp_controls_table


@click.group()
def psp() -> None:
    """Per-PSP controls: pause and resume traffic; see cool-downs and circuit breakers."""


def _known_psp(app: App, name: str) -> None:
    if name not in app.psp_names():
        raise UsageError(f"unknown PSP {name!r} (known: {', '.join(app.psp_names())})")


@psp.command("pause")
@click.argument("name")
@click.option("--reason", help="Why; shown by `recon psp status`.")
@by_option("Who asks for the pause: an operator (role operator or above).")
@click.pass_obj
def psp_pause(app: App, name: str, reason: str | None, by: str | None) -> None:
    """Ask to stop all traffic to PSP NAME without stopping workers: four eyes, so the pause is requested (exit
    1) and takes effect when another operator approves it (recon approvals approve ID). Then its jobs wait
    (snoozed, no attempt spent) until `recon psp resume NAME`; running workers see it within a quarter of a
    second."""
    _known_psp(app, name)
    pending_approval(app.actions.pause(name, reason=reason, by=by))


@psp.command("resume")
@click.argument("name")
@by_option()
@click.pass_obj
def psp_resume(app: App, name: str, by: str | None) -> None:
    """Let traffic to PSP NAME flow again; the jobs the pause put to sleep are due at once."""
    _known_psp(app, name)
    was_paused, woken = app.actions.resume(name, by=by)
    say(f"psp {name} resumed; {woken} waiting jobs are due now" if was_paused
               else f"psp {name} was not paused")


@psp.command("status")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def psp_status(app: App, as_json: bool) -> None:
    """Pause, 429 cool-down, circuit breaker and rate limit of every PSP."""
    doc = psp_controls_document(app.controls, app.guard_config, app.psp_names(),
                                unconfigured=app.unconfigured_psps())
    if as_json:
        click.echo(json.dumps(doc))
        return

    psp_controls_table(doc["psps"], at=doc["at"])


def _sandbox_fault_options(func: Callable[..., Any]) -> Callable[..., Any]:
    for flag in reversed(FAULT_FLAGS):
        func = click.option(flag.flag, type=flag.type, default=None, help=flag.help)(func)
    return func


@click.command("psp-sandbox")
@click.option("--port", type=click.IntRange(0, 65535), default=8787, show_default=True,
              help="0: any free port; the ready line prints the URL chosen.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Loopback only, unless you mean it.")
@click.option("--state-file", type=click.Path(dir_okay=False),
              help="SQLite file holding the sandbox's payments, kept across restarts (default: in memory, fresh at "
                   "every start).")
@click.option("--api-key", envvar="RECON_SANDBOX_API_KEY",
              help="The key the PSP API requires (native, stripe: Authorization: Bearer; adyen: X-API-Key). Default: "
                   "the flavour's documented test key (docs/psps.md).")
@click.option("--flavor", type=click.Choice(["native", "stripe", "adyen"]), default="native", show_default=True,
              help="The wire the sandbox speaks: its own, Stripe's or Adyen's.")
@click.option("--report-username", envvar="RECON_SANDBOX_REPORT_USERNAME",
              help="adyen: the report user for basic auth on report downloads (e.g. report@Company.X).")
@click.option("--report-password", envvar="RECON_SANDBOX_REPORT_PASSWORD", help="adyen: the report user's password.")
@click.option("--report-api-key", envvar="RECON_SANDBOX_REPORT_API_KEY",
              help="adyen: the report user's X-API-Key. No report credential given: the documented test user.")
@click.option("--report-timezone", default="CET", show_default=True,
              help="adyen: the IANA time zone of the reports' days and Booking Date column.")
@click.option("--webhook-url", help="stripe, adyen: send the PSP's webhooks to this URL (default: none).")
@click.option("--webhook-secret", envvar="RECON_SANDBOX_WEBHOOK_SECRET",
              help="stripe: the endpoint's signing secret (whsec_…); adyen: the HMAC key in hex. Required with "
                   "--webhook-url.")
@click.option("--webhook-username", envvar="RECON_SANDBOX_WEBHOOK_USERNAME",
              help="adyen: HTTP basic auth user for webhook deliveries.")
@click.option("--webhook-password", envvar="RECON_SANDBOX_WEBHOOK_PASSWORD",
              help="adyen: HTTP basic auth password for webhook deliveries.")
@click.option("--webhook-events", metavar="TYPE,...",
              help="The event types the endpoint takes, comma-separated; '*': all (default: stripe, the payment "
                   "intent, refund and dispute events docs/psps.md lists; adyen, every event code).")
@_sandbox_fault_options
def psp_sandbox(port: int, host: str, state_file: str | None, api_key: str | None, flavor: str,
                report_username: str | None, report_password: str | None, report_api_key: str | None,
                report_timezone: str, webhook_url: str | None, webhook_secret: str | None,
                webhook_username: str | None, webhook_password: str | None, webhook_events: str | None,
                **faults: Any) -> None:
    """The local PSP simulator, with fault injection (also changeable at run time: POST /_admin/faults).

    Fresh in-memory state unless --state-file; keys always required (the flavour's documented test key unless
    --api-key); the first line it prints names the URL it listens on (with --port 0, the port chosen)."""
    try:
        parsed = Faults.from_options(**faults)
        if api_key is not None and not api_key.strip():
            raise ValueError("--api-key must not be empty (the sandbox always requires a key)")
        if (report_username is None) != (report_password is None):
            raise ValueError("--report-username and --report-password go together")
        if report_username is None and report_api_key is None:
            report_username, report_password = DEFAULT_REPORT_USERNAME, DEFAULT_REPORT_PASSWORD
        ZoneInfo(report_timezone)
        webhooks = None
        if webhook_url is not None:
            if not webhook_secret:
                raise ValueError("--webhook-url needs --webhook-secret (or RECON_SANDBOX_WEBHOOK_SECRET)")
            if (webhook_username is None) != (webhook_password is None):
                raise ValueError("--webhook-username and --webhook-password go together")
            events = frozenset(t.strip() for t in webhook_events.split(",") if t.strip()) if webhook_events else None
            if webhook_events is not None and not events:
                raise ValueError("--webhook-events names no event type")
            webhooks = WebhookConfig(url=webhook_url, secret=Secret(webhook_secret), username=webhook_username,
                                     password=Secret(webhook_password) if webhook_password else None, events=events)
            check_webhooks(flavor, webhooks)
    except (ValueError, LookupError) as exc:
        raise UsageError(f"psp-sandbox: {exc}") from None
    key = "the documented test key (docs/psps.md)" if api_key is None else "the --api-key given"
    details = (f"(state {f'in {state_file}' if state_file else 'in memory'}; api key: {key})"
               + (f"; webhooks to {webhook_url}" if webhooks else ""))
    speaking = "" if flavor == "native" else f" ({flavor})"
    stop = threading.Event()
    install_signal_handlers(stop.set)
    serve_forever(state_file, host=host, port=port, faults=parsed, api_key=api_key or DEFAULT_API_KEYS[flavor],
                  stop=stop, flavor=flavor, report_username=report_username,
                  report_password=Secret(report_password) if report_password else None,
                  report_api_key=Secret(report_api_key) if report_api_key else None,
                  report_timezone=report_timezone, webhooks=webhooks,
                  on_ready_func=lambda url: say(f"PSP sandbox{speaking} listening on {url} {details}"))


@click.command()
@click.option("--payments", "count", type=click.IntRange(10, 5000), default=300, show_default=True)
@click.option("--dir", "directory", type=click.Path(file_okay=False),
              help="Keep the demo's database and sandbox state here (default: a new directory under the system's "
                   "temporary directory, kept for the console).")
@click.option("--psp", type=click.Choice(["sandbox", "stripe", "adyen"]), default="sandbox", show_default=True,
              help="The wire the sandbox speaks: its own API, or Stripe's or Adyen's through recon's real adapter.")
@click.pass_context
def demo(ctx: click.Context, count: int, directory: str | None, psp: str) -> None:
    """End to end on SQLite and the PSP sandbox with faults on: charge, lose answers, heal, prove no double charge.

    Exit codes: 0 every payment ended final and none was charged twice; 1 some need review or stay unfinished;
    3 a payment was charged twice (or a charge belongs to no payment)."""
    from recon.demo import run_demo

    if logging.getLogger().level >= logging.INFO:  # the story is the output; the workers' start/stop lines are noise
        logging.getLogger("recon.engine").setLevel(logging.WARNING)
    ctx.exit(run_demo(payments=count, directory=directory, say=say, psp=psp))
