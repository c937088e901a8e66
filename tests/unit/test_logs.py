"""recon.logs: JSON and text lines, the job context, and redaction of credentials and card numbers."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator

import pytest

from recon.logs import bind, configure, job_scope, redact

KEY = "sk_test_51HvQzLmT0pSeCrEt"


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """JSON lines from the root logger at DEBUG into a buffer; the root logger is restored afterwards."""
    root = logging.getLogger()
    level = root.level
    out = io.StringIO()
    handler = configure(level="DEBUG", fmt="json", stream=out)
    yield out
    root.removeHandler(handler)
    root.setLevel(level)


def lines(out: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_logs__json_line_has_the_base_fields(captured: io.StringIO) -> None:
    logging.getLogger("recon.test").info("hello %s", "there")
    [line] = lines(captured)
    assert line["level"] == "INFO" and line["logger"] == "recon.test" and line["message"] == "hello there"
    assert str(line["ts"]).endswith("+00:00") and "job_id" not in line


def test_logs__job_scope_and_bind_name_the_job_on_every_line(captured: io.StringIO) -> None:
    log = logging.getLogger("recon.test")
    fields = {"job_id": 7, "kind": "charge", "attempt": 2, "worker": "h:1:abc"}
    with job_scope(fields):
        log.info("before the lookup")
        bind(payment_reference="order-7", ignored=None)
        log.info("after the lookup")
    log.warning("finish", extra=fields)  # another thread's line passes the same dict
    log.info("not about a job")
    first, second, finish, other = lines(captured)
    assert {k: first[k] for k in ("job_id", "kind", "attempt", "worker")} == {
        "job_id": 7, "kind": "charge", "attempt": 2, "worker": "h:1:abc"}
    assert "payment_reference" not in first
    assert second["payment_reference"] == "order-7" and "ignored" not in second
    assert finish["payment_reference"] == "order-7" and finish["job_id"] == 7
    assert "job_id" not in other


def test_logs__job_scope_is_per_thread(captured: io.StringIO) -> None:
    log = logging.getLogger("recon.test")
    with job_scope({"job_id": 1}):
        t = threading.Thread(target=lambda: log.info("elsewhere"))
        t.start()
        t.join()
    [line] = lines(captured)
    assert "job_id" not in line


@pytest.mark.parametrize("text", [
    f"charging with api_key={KEY}",
    f'{{"api_key": "{KEY}"}}',
    f"Authorization: Bearer {KEY}",
    f"https://user:{KEY}@psp.example/v1",
    f"stripe said: invalid key {KEY}",
])
def test_logs__credentials_are_redacted(captured: io.StringIO, text: str) -> None:
    log = logging.getLogger("recon.test")
    log.debug(text)
    log.debug("%s", text, extra={"detail": {"key": KEY}})
    try:
        raise RuntimeError(text)
    except RuntimeError:
        log.exception("failed")
    assert KEY not in captured.getvalue()
    assert len(lines(captured)) == 3


def test_logs__card_numbers_are_redacted_but_other_numbers_kept() -> None:
    assert redact("card 4242 4242 4242 4242 declined") == "card [card] declined"
    assert redact("pan=4000056655665556") == "pan=[card]"
    assert redact("job 1234567890123 amount 12000 at 1764460800000001") == (
        "job 1234567890123 amount 12000 at 1764460800000001")  # not Luhn-valid: not a card


def test_logs__text_format_appends_the_job_context() -> None:
    out = io.StringIO()
    root = logging.getLogger()
    level = root.level
    handler = configure(level="INFO", fmt="text", stream=out)
    try:
        with job_scope({"job_id": 3, "kind": "reconcile", "attempt": 1, "worker": "w"}):
            logging.getLogger("recon.test").warning("token=%s", KEY)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    line = out.getvalue().strip()
    assert line.endswith("recon.test: token=*** [job_id=3 kind=reconcile attempt=1 worker=w]")


def test_logs__configure_replaces_its_own_handler_only() -> None:
    root = logging.getLogger()
    level, before = root.level, list(root.handlers)
    first = configure(fmt="json", stream=io.StringIO())
    second = configure(fmt="text", stream=io.StringIO())
    try:
        assert first not in root.handlers and second in root.handlers
        assert [h for h in root.handlers if h is not second] == before
        with pytest.raises(ValueError, match="log format"):
            configure(fmt="xml")
    finally:
        root.removeHandler(second)
        root.setLevel(level)
