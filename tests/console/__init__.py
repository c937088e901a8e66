"""HTTP-level tests of ``recon console`` (Starlette's TestClient on the real App and databases), and what
they share: a console client on a database, its CSRF token, the figures a page marks with ``data-stat``.

``starlette.testclient`` warns at import when it finds httpx rather than httpx2 (pytest turns warnings into
errors); the console does not use it, so the import is made here with that one warning silenced.
"""

from __future__ import annotations

import html
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from recon import Client, JobStore, Settings
from recon.app import App
from recon.clock import Clock
from recon.console.server import create_app
from recon.rows import Finish
from tests.operators import PASSWORD, add_staff

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=".*httpx2.*")
    from starlette.testclient import TestClient

#: the TestClient's requests name a loopback host, as a browser pointed at the console does
BASE_URL = "http://127.0.0.1:8470"


@contextmanager
def console(db_url: str, *, token: str | None = None, clock: Clock | None = None, config_path: str | None = None,
            login: str | None = "default", **kwargs: Any) -> Iterator[TestClient]:
    """A client of the console on ``db_url`` (its own App, closed afterwards). ``clock`` becomes the database's
    clock (the time every session check reads); ``config_path`` is the App's config file. ``login``: the
    operator the client logs in as (tests/operators.py's staff, added when the database has no operator yet);
    by default ``root`` (an admin) without a token, nobody with one; None: not logged in."""
    app = App(db_url, config_path)
    if clock is not None:
        app.db.clock = clock
    who = ("root" if token is None else None) if login == "default" else login
    try:
        with TestClient(create_app(app, token=token), base_url=BASE_URL, **kwargs) as client:
            if who is not None:
                log_in(client, app, who)
            yield client
    finally:
        app.close()
        app.db.dispose()


def log_in(client: TestClient, app: App, name: str) -> None:
    """Log ``client`` in as operator ``name`` (the staff added first when there is no operator)."""
    if not app.operators.list() or all(o.name.startswith("console-token") for o in app.operators.list()):
        add_staff(app.db)
    r = client.post("/login", data={"operator": name, "password": PASSWORD, "csrf": csrf_token(client, "/login")},
                    follow_redirects=False)
    assert r.status_code == 303, r.text[-2000:]


def csrf_token(client: TestClient, path: str = "/psps") -> str:
    """The CSRF field of the forms on ``path`` (the GET also sets its cookie on the client)."""
    r = client.get(path)
    found = re.search(r'name="csrf" value="([^"]+)"', r.text)
    assert found, r.text[-2000:]
    return found.group(1)


def stats(html: str) -> dict[str, str]:
    """Every ``data-stat`` figure of a page: name -> its text."""
    return {m.group(1): re.sub(r"<[^>]+>", "", m.group(2)).strip()
            for m in re.finditer(r'data-stat="([^"]+)"[^>]*>(.*?)</(?:span|td|dd|h2|p)>', html, re.S)}


def attribute(html: str, stat: str, name: str) -> str:
    """Attribute ``name`` of the element carrying ``data-stat="stat"``."""
    found = re.search(rf'<[^>]*data-stat="{re.escape(stat)}"[^>]*>', html)
    assert found, f"no data-stat={stat!r}"
    value = re.search(rf'{name}="([^"]*)"', found.group(0))
    assert value, f"data-stat={stat!r} has no {name}"
    return value.group(1)


def make_dead(store: JobStore, *, queue: str = "default", kind: str = "charge", error_kind: str = "bug",
              error: str | None = None) -> int:
    """A job that ran once and died of ``error_kind``."""
    job_id = Client(store, Settings()).enqueue(kind, {"q": queue}, queue=queue)
    [job] = store.claim(worker="w", queues=[queue], n=1, ttl=30)
    assert job.id == job_id
    store.finish(worker="w", finishes=[Finish(id=job_id, attempt=1, state="dead", outcome="dead",
                                              error_kind=error_kind, error=error or f"{error_kind} on attempt 1")])
    return job_id


def refusal(client: TestClient, response: Any, *, to: str, form: str, status: int = 200) -> str:
    """A refused POST's answer, checked whole: a 303 (POST -> redirect -> GET) to a page starting with ``to``;
    that page (by GET, answering ``status``) shows the message once, next to the form named ``form``
    (``data-form-error``); the same address with its signature tampered with shows no refusal. The message."""
    assert response.status_code == 303, f"{response.status_code}: {response.text[-1500:]}"
    location = response.headers["location"]
    assert location.startswith(to), location
    shown = client.get(location)
    assert shown.status_code == status, shown.text[-1500:]
    found = re.findall(rf'data-form-error="{re.escape(form)}">(.*?)</p>', shown.text, re.S)
    assert len(found) == 1, f"{len(found)} refusals of {form!r} on {location}"
    assert shown.text.count(found[0]) == 1, "the refusal is shown more than once"
    forged = re.sub(r"([?&]rs=)[0-9a-f]+", lambda m: m.group(1) + "0" * 32, location)
    assert forged != location
    assert "data-form-error" not in client.get(forged).text
    return html.unescape(found[0])
