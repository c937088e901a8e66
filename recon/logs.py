"""Logging: text or JSON lines on stderr, the job's context on every line about a job, secrets redacted.

``configure(level=…, fmt="json")`` installs one handler on the root logger. A JSON line carries ``ts``,
``level``, ``logger`` and ``message``, then the record's extras. Lines about a job carry ``job_id``, ``kind``,
``attempt``, ``queue``, ``worker`` and, once known, ``payment_reference``:

- the worker runs each handler inside ``job_scope(fields)``: a context variable that a filter copies onto
  every record emitted in that thread meanwhile (the handler's own lines, httpx's, the adapter's);
- code that learns more about the job adds to the scope with ``bind(payment_reference=…)`` (the
  instrumented PSP adapter does, from the charge request or the payment lookup);
- lines logged later by the worker's finisher thread pass the same dict as ``extra``.

Redaction (``recon.redact``, the same function the stores apply) runs on every string that goes into a
line, in both formats: card numbers and codes, API keys, tokens and passwords. It is a last line of
defence: adapters keep keys in ``Secret`` and never log them in the first place.

Lines are printed literally (``recon.terminal``): a message or field that holds an escape sequence, a carriage
return or a newline (a PSP's text, a reference) shows it as ``\x1b``, ``\r``, ``\n`` and cannot recolour the
terminal or forge a line; a text line's traceback keeps its own line breaks, each line escaped.
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import logging
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, Protocol, TextIO

from recon.redact import redact, redact_value
from recon.terminal import json_line, shown

FORMATS = ("text", "json")
#: the fields of a line about a job, in the order a text line shows them
JOB_FIELDS = ("job_id", "kind", "attempt", "queue", "worker", "payment_reference")


class LazyScope(Protocol):
    """A job scope whose fields are built when first needed (the worker's ``Running``): ``log_fields`` returns
    the same dict every time."""

    @property
    def log_fields(self) -> dict[str, Any]: ...


_job: contextvars.ContextVar[dict[str, Any] | LazyScope | None] = contextvars.ContextVar("recon_job_log",
                                                                                        default=None)
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


@contextlib.contextmanager
def job_scope(fields: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every line logged in this thread inside the ``with`` carries ``fields`` (the dict itself, so that
    ``bind`` and the caller see later additions)."""
    token = enter_job(fields)
    try:
        yield fields
    finally:
        leave_job(token)


#: ``job_scope`` without the context manager or a function call, for the worker's per-job loop:
#: ``token = enter_job(scope)``, then ``leave_job(token)`` in a ``finally``. The scope is the fields' dict or a
#: ``LazyScope`` (the runner's: most jobs log nothing, so their fields are never built)
enter_job = _job.set
leave_job = _job.reset


def _current() -> dict[str, Any] | None:
    scope = _job.get()
    if scope is None or isinstance(scope, dict):
        return scope
    return scope.log_fields


def bind(**fields: Any) -> None:
    """Add fields to the current job's log context; outside a job, nothing happens."""
    current = _current()
    if current is not None:
        current.update({k: v for k, v in fields.items() if v is not None})


class JobContextFilter(logging.Filter):
    """Copies the current job scope onto each record (in the emitting thread, where the scope is set)."""

    def filter(self, record: logging.LogRecord) -> bool:
        scope = _current()
        if scope:
            for key, value in scope.items():
                if not hasattr(record, key):
                    setattr(record, key, value)
        return True


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in redact_value(value).items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return redact(repr(value) if not isinstance(value, datetime) else value.isoformat())


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message, the record's extras, and exc (a traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        for key, value in _extras(record).items():
            doc.setdefault(key, _clean(value))
        if record.exc_info:
            doc["exc"] = redact(self.formatException(record.exc_info))
        elif record.exc_text:
            doc["exc"] = redact(record.exc_text)
        return json_line(doc, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message [job_id=… kind=… …]``, then a traceback's lines, redacted like the JSON lines
    and escaped (``recon.terminal.shown``): the first line is one line whatever the message holds; a traceback
    keeps its line breaks (its exception's message's too), each line escaped."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        record.message = record.getMessage()
        record.asctime = self.formatTime(record, self.datefmt)
        line = shown(self.formatMessage(record))
        context = " ".join(f"{k}={getattr(record, k)}" for k in JOB_FIELDS if getattr(record, k, None) is not None)
        if context:
            line += f" [{shown(context)}]"
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)  # logging's own cache, as other handlers expect
        for block in (record.exc_text, record.stack_info and self.formatStack(record.stack_info)):
            if block:
                line += "\n" + "\n".join(shown(part) for part in block.split("\n"))
        return redact(line)


@contextlib.contextmanager
def lines_through(stream: TextIO | io.TextIOBase) -> Iterator[None]:
    """recon's log lines go to ``stream`` inside the ``with`` (every thread's), then back where they went.

    ``recon.render.output.progress_while`` passes a stream that prints through its progress bar's console, so a line
    logged while the bar is drawn lands above the bar instead of in the middle of its line.
    """
    handlers = [h for h in logging.getLogger().handlers
                if getattr(h, "_recon", False) and isinstance(h, logging.StreamHandler)]
    previous = [h.setStream(stream) for h in handlers]
    try:
        yield
    finally:
        for handler, old in zip(handlers, previous, strict=True):
            if old is not None:
                handler.setStream(old)


def configure(*, level: str | int = "INFO", fmt: str = "text",
              stream: TextIO | None = None) -> logging.Handler:
    """Send every log line to ``stream`` (stderr) in ``fmt``; replaces a handler an earlier call installed."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_recon", False)]:
        root.removeHandler(old)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(JobContextFilter())
    handler._recon = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    return handler
