"""The ``recon`` command line: the group (global options, logging, the App every command takes from
``ctx.obj``), its commands from ``recon.commands``, and ``main``, which keeps the exit-code contract.

Exit codes (docs/design.md): 0 done and consistent; 1 done, with items that need review; 2 bad usage, input or
configuration; 3 the run failed. ``--json`` prints one JSON document on stdout; diagnostics go to stderr.
"""

from __future__ import annotations

import logging
import sys
from typing import NoReturn

import click

from recon.app import App
from recon.commands import (
    approvals,
    audit,
    bank,
    captures,
    close,
    console,
    disputes,
    engine,
    jobs,
    operators,
    payments,
    psp,
    reconcile,
    refunds,
    review,
    sandbox_statement,
    schedule,
    serve,
)
from recon.errors import ConfigError, InvalidJobState, JobNotFound, QueueFull, ReconError, UnknownJobKind, UsageError
from recon.logs import configure
from recon.params import EXIT_FAILED, EXIT_OK, EXIT_USAGE, say

log = logging.getLogger("recon")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--database-url", envvar="RECON_DATABASE_URL", help="Default: sqlite:///recon.db")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), envvar="RECON_CONFIG",
              help="A TOML file like config/recon.toml.")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              envvar="RECON_LOG_FORMAT", help="json: one JSON object per line (ts, level, logger, message, "
              "job_id, kind, attempt, worker, payment_reference); secrets are redacted in both.")
@click.pass_context
def cli(ctx: click.Context, database_url: str | None, config_path: str | None, log_level: str,
        log_format: str) -> None:
    """recon: payments kept honest between our database and the PSPs."""
    configure(level=log_level.upper(), fmt=log_format, stream=sys.stderr)
    logging.getLogger("alembic").setLevel(max(logging.WARNING, logging.getLogger().level))
    # one INFO line per HTTP request from httpx drowns what recon says; its warnings still show
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
    app = App(database_url, config_path)
    ctx.obj = app
    ctx.call_on_close(app.close)


for _command in (engine.db, engine.worker, engine.watch, engine.stats, jobs.jobs, payments.payments, psp.psp,
                 psp.psp_sandbox, psp.demo, reconcile.sweep, reconcile.report, review.review, console.console,
                 serve.serve, schedule.schedule, bank.bank, sandbox_statement.psp_sandbox_statement, close.close,
                 close.payouts, refunds.refunds, refunds.refund, disputes.disputes, operators.operators,
                 approvals.approvals, audit.audit, captures.capture, captures.cancel, captures.captures):
    cli.add_command(_command)


def main(argv: list[str] | None = None) -> NoReturn:
    try:
        # standalone_mode=False: click returns ctx.exit(n)'s code instead of exiting, and lets our errors through
        rc = cli.main(args=argv, prog_name="recon", standalone_mode=False)
    except click.exceptions.Abort:
        say("aborted", err=True)
        sys.exit(EXIT_FAILED)
    except click.UsageError as exc:  # one line, naming the command: "recon report: Invalid value for '--since' …"
        where = exc.ctx.command_path if exc.ctx is not None else "recon"
        say(f"{where}: {exc.format_message()}", err=True)
        sys.exit(EXIT_USAGE)
    except click.ClickException as exc:
        say(f"recon: {exc.format_message()}", err=True)
        sys.exit(EXIT_USAGE)
    except (ConfigError, UsageError) as exc:
        say(f"recon: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    except ReconError as exc:
        say(f"recon: {exc}", err=True)
        sys.exit(_exit_code_for(exc))
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except Exception as exc:  # a bug or an environment failure: exit 3, never 1 (1 means "items need review")
        _unexpected(exc, argv)
    sys.exit(rc if isinstance(rc, int) else EXIT_OK)


def _unexpected(exc: Exception, argv: list[str] | None) -> NoReturn:
    """One line on stderr (the traceback only at --log-level debug), then exit 3."""
    words = [a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")]
    command = next((w for w in words if w in cli.commands), "recon")
    log.debug("unexpected error", exc_info=exc)
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    say(f"recon: {command} failed unexpectedly: {type(exc).__name__}: {first} "
        "(rerun with --log-level debug for the traceback)", err=True)
    sys.exit(EXIT_FAILED)


def _exit_code_for(exc: ReconError) -> int:
    return EXIT_USAGE if isinstance(exc, JobNotFound | InvalidJobState | UnknownJobKind | QueueFull) else EXIT_FAILED
