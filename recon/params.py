"""What the ``recon`` commands share besides the App: click parameter types, the exit codes, output checks,
the operator's name, signal handling and the long-running commands' heap. Imports no command and no
composition root."""

from __future__ import annotations

import gc
import getpass
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from types import FrameType
from typing import Any, NoReturn

import click

from recon.clock import parse_instant
from recon.durations import parse_duration
from recon.errors import UsageError
from recon.redact import Identifier, redact
from recon.terminal import shown

#: the exit-code contract (docs/design.md): done and consistent; done, with items that need review; bad usage,
#: input or configuration; the run failed
EXIT_OK, EXIT_REVIEW, EXIT_USAGE, EXIT_FAILED = 0, 1, 2, 3

#: a row id or a count that fits the database's signed 64-bit integers
INT64_MAX = 2**63 - 1
JOB_ID = click.IntRange(1, INT64_MAX)
#: --limit of listings and sweeps: at most this many rows
LIMIT = click.IntRange(1, 10_000_000)

log = logging.getLogger("recon")


class Duration(click.ParamType[timedelta, Any]):
    """A duration: ``30s``, ``15m``, ``2h``, ``7d`` (recon.durations)."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> timedelta:
        if isinstance(value, timedelta):
            return value
        try:
            what = f"--{param.name.replace('_', '-')}" if param and param.name else "duration"
            return parse_duration(str(value), what=what)
        except UsageError as exc:
            self.fail(str(exc).split(": ", 1)[-1], param, ctx)


class Since(click.ParamType[timedelta | datetime, Any]):
    """``--since``: a duration back from now (``2h``, ``7d``) or an ISO date / datetime (UTC if no offset)."""

    name = "since"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> timedelta | datetime:
        if isinstance(value, timedelta | datetime):
            return value
        raw = str(value).strip()
        try:
            return parse_duration(raw)
        except UsageError:
            pass
        try:
            return parse_instant(raw)
        except ValueError:
            self.fail(f"{value!r} is neither a duration (2h, 7d) nor an ISO date or datetime (2026-11-01, "
                      "2026-11-01T12:00:00Z) within the years 1..9999", param, ctx)


def check_output_path(path: str, *, option: str) -> None:
    """Before any work: ``path`` can be written (its directory exists and is writable; it is not a directory).
    Raises UsageError naming ``option``."""
    target = os.path.abspath(path)
    directory = os.path.dirname(target)
    if os.path.isdir(target):
        raise UsageError(f"{option} {path!r}: is a directory")
    if not os.path.isdir(directory):
        raise UsageError(f"{option} {path!r}: the directory {directory} does not exist")
    if not os.access(directory, os.W_OK):
        raise UsageError(f"{option} {path!r}: the directory {directory} is not writable")
    if os.path.exists(target) and not os.access(target, os.W_OK):
        raise UsageError(f"{option} {path!r}: the file is not writable")


def say(*parts: str, err: bool = False) -> None:
    """One human line on stdout (stderr with ``err``), as ``recon.render`` prints: literally (control
    characters escaped, ``recon.terminal.shown``), card numbers and keys masked (``recon.redact``). A line made
    of ``parts`` is their concatenation, each part redacted on its own but for a PSP's identifier shown as such
    (``recon.redact.Identifier``: made by ``identifier``, shown exactly)."""
    click.echo(shown("".join(p if isinstance(p, Identifier) else redact(p) for p in parts)), err=err)


def operator_name() -> str:
    """Who runs this command, for the records it leaves (replays, PSP pauses): user@host."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


#: ``--by`` of the batch commands (imports, the sweep): who acts, or the system when left out (recon.actions)
BATCH_BY_HELP = ("The operator who runs it (recon operators list; role operator or above), audited; without it "
                 "(and RECON_OPERATOR), the system (audited as system:cli), as schedules and scripts run it.")


def by_option(help_text: str = "The operator who acts (recon operators list); their role must allow it."
              ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--by NAME`` of every write command: an existing, enabled operator (checked by ``recon.actions``);
    ``RECON_OPERATOR`` when left out."""
    return click.option("--by", "by", envvar="RECON_OPERATOR", metavar="OPERATOR", help=help_text)


def pending_approval(approval: Any) -> NoReturn:
    """A four-eyes request's line (recon.four_eyes), then exit 1: done, with an item for review."""
    say(f"{approval.action} of {approval.subject} needs a second operator: approval {approval.id} requested by "
        f"{approval.requested_by}, pending until {approval.expires_at:%Y-%m-%d %H:%M} UTC "
        f"(recon approvals approve {approval.id} --by APPROVER)")
    sys.exit(EXIT_REVIEW)


def install_signal_handlers(stop: Callable[[], None]) -> None:
    """SIGTERM and SIGINT call ``stop`` (drain); a second one exits at once. Only the main thread can install
    signal handlers: called from any other thread, this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        return
    received = {"n": 0}

    def handle(signum: int, _frame: FrameType | None) -> None:
        received["n"] += 1
        if received["n"] > 1:  # a second signal: exit now; leases expire and the watcher recovers the jobs
            os._exit(128 + signum)
        log.warning("signal %s: draining (send it again to exit at once)", signal.Signals(signum).name)
        stop()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


def freeze_heap() -> None:
    """Everything a long-running command (``recon worker``, ``serve``, ``console``) built before its loop
    (modules, the application) lives as long as the process: moved out of the garbage collector's sight, a
    full collection walks only what the loop allocates. A full collection of ``recon serve``'s start-up heap (the
    console's included) held up whichever request arrived meanwhile, which set the webhook intake's p99
    (docs/benchmarks.md, webhooks)."""
    gc.collect()
    gc.freeze()
