"""The console in a real browser: Debian's chromium driven by Playwright for Python, against the console served
for real (uvicorn in a background thread on 127.0.0.1 and a free port), seeded through recon's own code.

Chromium is the system's (``/usr/bin/chromium``, or ``RECON_CHROMIUM``), never Playwright's download: nothing
is fetched at run time. Without it the tests skip, saying so; with ``RECON_BROWSER_TESTS=required`` (set by
``.ci/run``, which installs the package) a missing chromium fails them instead.

Each test gets a browser context of its own (its own cookies, storage and cache, as a fresh profile) in a
chromium and a Playwright driver that the tests of one module share (starting them costs seconds a test): both
stop before a test of another module runs (a module-scoped fixture ends when the next test is elsewhere, under
pytest-xdist too), since a live sync Playwright keeps an event loop marked as running in this thread, which
would break any later ``asyncio.run`` in the same pytest worker.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from psp_adapters.sandbox.faults import Faults
from psp_adapters.sandbox.server import SandboxServer
from recon import Client, JobStore, Settings
from recon.app import App
from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.rows import EventSource, Finish, NewPayment, PaymentStatus, Transition
from tests.cli import Runner
from tests.integration.payment_flow import admin, drain, handlers_for, sandbox_adapter, sweep_now
from tests.operators import PASSWORD, add_staff

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Locator, Page, Playwright

CHROMIUM = Path(os.environ.get("RECON_CHROMIUM", "/usr/bin/chromium"))
#: the flags chromium runs with: headless, no sandbox (containers run as root), nothing fetched in the background
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1200, "height": 800}
#: the access token of the ``token_console`` fixture
TOKEN = "browser-test-token-0123456789"
#: how long a page action or navigation may take (a loaded CI machine included)
ACTION_TIMEOUT_MS = 15_000


def _chromium_or_skip() -> None:
    if CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK):
        return
    reason = (f"no chromium at {CHROMIUM}: the browser tests drive Debian's chromium package "
              f"(apt-get install chromium; .ci/run installs it) or RECON_CHROMIUM=PATH")
    if os.environ.get("RECON_BROWSER_TESTS") == "required":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    _chromium_or_skip()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="module")
def chromium(playwright: Playwright) -> Iterator[Browser]:
    """The module's chromium (module docstring)."""
    browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
    try:
        yield browser
    finally:
        browser.close()


@pytest.fixture
def browser(chromium: Browser) -> Iterator[BrowserContext]:
    """A fresh browser context of this test's own in the module's chromium: nothing kept from another test."""
    context = chromium.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
    context.set_default_timeout(ACTION_TIMEOUT_MS)
    context.set_default_navigation_timeout(ACTION_TIMEOUT_MS)
    try:
        yield context
    finally:
        context.close()


@pytest.fixture
def page(browser: BrowserContext) -> Page:
    return browser.pages[0] if browser.pages else browser.new_page()


# --- the console, served for real ---------------------------------------------------------------------------


@dataclass
class Console:
    """A running console: its base URL (``http://127.0.0.1:PORT``) and the App it serves."""

    url: str
    app: App

    def at(self, path: str) -> str:
        return self.url + path


class ConsoleServer:
    """``recon.console.server.create_app(App(database_url=...), token=token)`` served in a background thread on
    127.0.0.1 and a port the kernel picked (``recon.asgi.background``, as the demo serves its webhook endpoint);
    stopped, and the App's engine disposed of, on exit."""

    def __init__(self, database_url: str, *, token: str | None = None) -> None:
        self.database_url = database_url
        self.token = token
        self.app: App | None = None
        self.stack = contextlib.ExitStack()

    def __enter__(self) -> Console:
        from recon.asgi import background
        from recon.console.server import create_app

        self.app = App(database_url=self.database_url)
        try:
            base = self.stack.enter_context(background(create_app(self.app, token=self.token)))
        except RuntimeError as exc:
            self.__exit__()
            raise AssertionError(f"the console did not start: {exc}") from None
        return Console(url=base.rstrip("/"), app=self.app)

    def __exit__(self, *exc: object) -> None:
        self.stack.close()
        assert not any(t.name == "recon-asgi" and t.is_alive() for t in threading.enumerate()), \
            "the console's server thread did not stop"
        if self.app is not None:
            self.app.close()
            self.app.db.dispose()


@pytest.fixture
def console(db_url: str, page: Page, monkeypatch: pytest.MonkeyPatch) -> Iterator[Console]:
    """The console on ``db_url`` (each test seeds the database first or meanwhile: every page reads it live), with
    tests/operators.py's staff, ``page`` logged in as ``root`` (an admin; ``sign_in`` changes who)."""
    monkeypatch.delenv("RECON_CONFIG", raising=False)
    add_staff(db_url)
    with ConsoleServer(db_url) as running:
        sign_in(running, page, "root")
        yield running


@pytest.fixture
def token_console(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Console]:
    """The console on ``db_url`` started with the access token ``TOKEN``, with tests/operators.py's staff;
    nobody logged in."""
    monkeypatch.delenv("RECON_CONFIG", raising=False)
    add_staff(db_url)
    with ConsoleServer(db_url, token=TOKEN) as running:
        yield running


def sign_in(console: Console, page: Page, name: str, *, password: str = PASSWORD, refused: bool = False) -> None:
    """Log in on the login form as operator ``name`` (a session already open is replaced); ``refused``: the
    login is refused (a redirect to the form, which says why)."""
    page.goto(console.at("/login"))
    page.get_by_label("Operator").fill(name)
    page.get_by_label("Password").fill(password)
    submit(page, page.get_by_role("button", name="Log in", exact=True), refused=refused)


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SandboxServer]:
    """The PSP sandbox over HTTP, every charge left pending until a test settles it; the console's App (and
    in-process ``recon`` runs) reach it through RECON_SANDBOX_BASE_URL, as a deployment would."""
    faults = Faults(pending_fraction=1.0, settle_after_seconds=600, decline_amount_suffix=None)
    with SandboxServer(tmp_path / "psp.db", faults=faults) as server:
        monkeypatch.setenv("RECON_SANDBOX_BASE_URL", server.url)
        yield server


# --- seeding through recon's own code ---------------------------------------------------------------------


def create(db: Database, refs: list[str], *, amount: int = 1000, currency: str = "EUR", psp: str = "sandbox",
           age: timedelta | None = None, charge: bool = True) -> list[int]:
    """Payments created by the store (with their charge jobs unless ``charge`` is False), ``age`` old."""
    created = datetime.now(UTC) - age if age else None
    return PaymentStore(db).create([NewPayment("shop", ref, amount, currency, psp, created_at=created)
                                    for ref in refs], charge=charge)


def to_review(db: Database, payment_id: int, reason: str, *, details: dict[str, Any] | None = None) -> None:
    """A payment moved to needs_review by the store's own compare-and-set, as a handler does."""
    store = PaymentStore(db)
    current = store.get(payment_id).status  # type: ignore[union-attr]
    with db.begin() as conn:
        assert store.apply(conn, Transition(payment_id, current, PaymentStatus.NEEDS_REVIEW, EventSource.RECONCILE,
                                            review_reason=reason, details=details))


def make_dead(db: Database, *, queue: str = "charges", kind: str = "charge", error_kind: str = "bug",
              error: str | None = None, payload: dict[str, Any] | None = None) -> int:
    """A job that ran once and died of ``error_kind``, through the engine's enqueue, claim and fenced finish.
    The claim takes the queue's first claimable job: make dead jobs before enqueueing others to ``queue``."""
    store = JobStore(db)
    job_id = Client(store, Settings()).enqueue(kind, payload or {"planted": True}, queue=queue)
    [job] = store.claim(worker="w", queues=[queue], n=1, ttl=30)
    assert job.id == job_id
    store.finish(worker="w", finishes=[Finish(id=job_id, attempt=1, state="dead", outcome="dead", delay=None,
                                              error_kind=error_kind, error=error or f"{error_kind} on attempt 1")])
    return job_id


def charged_into_review(db: Database, sandbox: SandboxServer, ref: str, *, amount: int, psp_amount: int) -> int:
    """One payment charged at the sandbox (left pending there), then settled by the sandbox for ``psp_amount``:
    the sweep asks the PSP and sends the payment to review (amount_mismatch), as in production."""
    [pid] = create(db, [ref], amount=amount)
    adapter = sandbox_adapter(sandbox.url)
    try:
        drain(db, handlers_for(db, adapter), queues=["charges"])
        psp_ref = PaymentStore(db).get(pid).psp_reference  # type: ignore[union-attr]
        assert psp_ref, "the sandbox gave no reference"
        admin(sandbox.url, f"/_admin/payments/{psp_ref}/amount", {"amount": psp_amount})
        admin(sandbox.url, f"/_admin/payments/{psp_ref}/settle", {})
        sweep_now(db, handlers_for(db, adapter), until_finished=True)
    finally:
        adapter.close()
    assert PaymentStore(db).get(pid).status is PaymentStatus.NEEDS_REVIEW  # type: ignore[union-attr]
    return pid


def recon_json(recon: Runner, db_url: str, *args: str) -> Any:
    """``recon ARGS --json`` on ``db_url``, its exit code 0, its output parsed."""
    r = recon(*args, "--json", db_url=db_url, log_level="WARNING")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def submit(page: Page, button: Locator, *, expect: int = 200, refused: bool = False) -> None:
    """Click a form's submit ``button`` and wait for the page the POST answers with; its status must be
    ``expect`` (the page's error line is the assertion's message otherwise). A write that succeeded answers
    with a redirect to a page (POST -> redirect -> GET): ``expect=200`` accepts that 303 when the browser then
    shows a page by GET, at an address that is not the POST's. ``refused``: the POST is refused, which answers
    with a redirect too (``web.refused``), to a page by GET that shows the refusal next to a form."""
    with page.expect_response(lambda r: r.request.method == "POST") as answer:
        button.click()
    page.wait_for_load_state()
    status = answer.value.status
    if refused:
        said = " / ".join(page.locator("main .error").all_inner_texts()) or page.inner_text("main")[:300]
        assert status == 303, f"POST {answer.value.url} answered {status}, not a redirect: {said}"
        assert page.url != answer.value.url and "refused=" in page.url, page.url
        assert page.locator("main [data-form-error]").count() == 1, said
        return
    if status == 303 and expect == 200:
        assert page.url != answer.value.url, "the redirect after the POST led back to the POST's address"
        status = 200
    if status != expect:
        said = " / ".join(page.locator("main .error").all_inner_texts()) or page.inner_text("main")[:300]
        raise AssertionError(f"POST {answer.value.url} answered {status}, not {expect}: {said}")


def paid(db: Database, ref: str, *, status: PaymentStatus, capture_mode: str = "automatic") -> None:
    """A 50.00 EUR Stripe payment of ours at ``status`` (succeeded: a refund may be asked; authorised, with
    ``capture_mode="manual"``: a capture or a cancel)."""
    store = PaymentStore(db)
    [pid] = store.create([NewPayment("shop", ref, 5000, "EUR", "stripe", capture_mode=capture_mode)], charge=False)
    with db.begin() as conn:
        assert store.apply(conn, Transition(pid, PaymentStatus.CREATED, status, EventSource.CHARGE,
                                            psp_reference="pi_browser"))


def assert_fits(page: Page, width: int) -> None:
    """At 390 px, nothing in the page is wider than the screen (the first five that are, named on failure)."""
    if width != 390:
        return
    wide = page.evaluate("""[...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect()
        .right > 391 && getComputedStyle(e).position !== 'absolute').map(e => e.tagName + '.' + e.className)
        .slice(0, 5)""")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390, wide
