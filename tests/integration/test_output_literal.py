"""Outside text is printed literally by every command that prints stored or outside text (issue 22, item 6).

A reference or reason holding ``[/bold]`` made ``payments show``, ``review list`` and ``review show`` exit 3
(rich's MarkupError: one such reference broke the review queue for everyone), ``[red]x[/red]`` was rendered as
red, and escape sequences reached the terminal. Here hostile strings sit in every field those commands print
(references, accounts, reasons, PSP evidence, job errors, operator names, pause reasons), and each command,
human and ``--json``, must exit as it always does, print every markup string as those characters, show every
character a terminal acts on as its escape (docs/design.md, the output rule; the escapes below are written out
by hand), and decode to the exact strings in JSON. Both databases.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from recon.clock import FixedClock
from recon.db.database import Database, connect
from recon.db.jobs_store import JobStore
from recon.db.payment_store import PaymentStore
from recon.db.sweep_store import SweepRunStore
from recon.operator_rows import Role
from recon.rows import EventSource, Finish, NewPayment, PaymentStatus, Transition
from tests.cli import Result, Runner
from tests.operators import add_operator

#: rich markup and emoji codes: printed as these very characters
MARKUP = ("[/bold]", "[red]x[/red]", "[link=e.x]y[/link]", ":smiley: [bold]")
#: what a terminal acts on, each with the text recon prints for it (written out here, not computed)
CONTROL = {
    "\x1b[31mred\x1b[0m": r"\x1b[31mred\x1b[0m",
    "a\rb\x08c\x07d": r"a\rb\x08c\x07d",
    "e\nf\x7fg\x9bh": r"e\nf\x7fg\x9bh",
    "\u202eevil": r"\u202eevil",
    "\x1b]8;;http://e.example\x07z\x1b]8;;\x07": r"\x1b]8;;http://e.example\x07z\x1b]8;;\x07",
}
LONG = "L" * 3000 + "[/bold]"
ACCOUNT = "acct-[/bold]"
OPERATOR = "[link=e.x]op[/link]"
#: no character a terminal acts on may reach it: rich and click write only newlines themselves
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
PAST = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def strings(value: Any) -> Iterator[str]:
    """Every string inside a decoded JSON document, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def seed(db_url: str, recon: Runner) -> tuple[dict[str, int], dict[str, Result]]:
    """Payments in review under hostile references, with hostile reasons and PSP evidence; a failed payment with
    a 3,000-character reason; pending ones (a sweep's dry run lists them); a dead job whose error is hostile; a
    sweep run and a pause by hostile operators; a resolution with a hostile reason."""
    db = connect(db_url, clock=FixedClock(PAST))  # written an hour ago: stale for the sweep
    try:
        store = PaymentStore(db)
        reasons = list(CONTROL)
        refs = [*MARKUP, "long-reason", *(f"pending {m}" for m in MARKUP)]
        ids = dict(zip(refs, store.create([NewPayment(ACCOUNT, ref, 1000, "EUR", "sandbox") for ref in refs],
                                          charge=True), strict=True))
        with db.begin() as conn:
            for i, ref in enumerate(MARKUP):
                control = reasons[i % len(reasons)]
                evidence = {"psp_status": control, "psp_outcome": "succeeded", "psp_amount": 900,
                            "psp_currency": "EUR", "note": MARKUP[(i + 1) % len(MARKUP)]}
                for t in (Transition(ids[ref], PaymentStatus.CREATED, PaymentStatus.PROCESSING, EventSource.CHARGE),
                          Transition(ids[ref], PaymentStatus.PROCESSING, PaymentStatus.NEEDS_REVIEW,
                                     EventSource.RECONCILE, details=evidence, psp_reference=f"pi_{i}",
                                     review_reason=f"amount_mismatch: {control} {MARKUP[i]}")):
                    assert store.apply(conn, t)
            for t in (Transition(ids["long-reason"], PaymentStatus.CREATED, PaymentStatus.PROCESSING,
                                 EventSource.CHARGE),
                      Transition(ids["long-reason"], PaymentStatus.PROCESSING, PaymentStatus.FAILED,
                                 EventSource.CHARGE, failure_reason=LONG, details={"reason": LONG})):
                assert store.apply(conn, t)
        jobs = JobStore(db)
        [charge] = jobs.claim(worker=OPERATOR, queues=["charges"], n=1, ttl=30)
        error = "PSP said " + " ".join([*MARKUP, *CONTROL])
        jobs.finish(worker=OPERATOR, finishes=[Finish(id=charge.id, attempt=1, state="dead", outcome="dead",
                                                      error_kind="validation", error=error)])
        SweepRunStore(db).finish(SweepRunStore(db).start(operator=OPERATOR, options={"by": MARKUP[1]}),
                                 outcome="finished", exit_code=0, summary={"checked": 0})
    finally:
        db.dispose()
    # operator names are checked at `recon operators add` (letters, digits, . _ @ -); these hostile ones are put
    # in the store directly, to show that whatever a name holds is printed literally
    db = connect(db_url)
    try:
        add_operator(db, MARKUP[0], Role.OPERATOR)
        add_operator(db, OPERATOR, Role.OPERATOR)
        add_operator(db, "bob", Role.APPROVER)
    finally:
        db.dispose()
    said = {"pause": recon("psp", "pause", "sandbox", "--reason", f"{MARKUP[1]} \x1b[31mred\x1b[0m", "--by",
                           MARKUP[0], db_url=db_url, log_level="WARNING"),
            "resolve": recon("review", "resolve", MARKUP[3], "--as", "failed", "--reason", f"{MARKUP[2]} \u202eevil",
                             "--by", OPERATOR, "--override", db_url=db_url, log_level="WARNING")}
    for result in said.values():
        assert result.returncode == 1, result.stderr  # four eyes: requested
    for approval in ("1", "2"):
        said[f"approve {approval}"] = recon("approvals", "approve", approval, "--by", "bob", db_url=db_url,
                                            log_level="WARNING")
        assert said[f"approve {approval}"].returncode == 0, said[f"approve {approval}"].stderr
    return {"charge_job": charge.id, **ids}, said


@pytest.fixture
def seeded(db_url: str, recon: Runner) -> tuple[dict[str, int], dict[str, Result]]:
    return seed(db_url, recon)


def test_psp_pause_and_review_resolve__say_what_they_did_literally(seeded: tuple[dict[str, int], dict[str, Result]]
                                                                   ) -> None:
    said = seeded[1]
    assert said["pause"].stdout.startswith("psp.pause of sandbox needs a second operator: approval 1 requested by "
                                           "[/bold], pending until ")
    assert said["resolve"].stdout.startswith(f"review.resolve of {MARKUP[3]} needs a second operator: approval 2 "
                                             f"requested by {OPERATOR}, pending until ")
    assert said["approve 1"].stdout == "approval 1 (psp.pause of sandbox) approved by bob: psp sandbox paused\n"
    assert said["approve 2"].stdout == (f"approval 2 (review.resolve of {MARKUP[3]}) approved by bob: payment "
                                        f"{MARKUP[3]} resolved as failed (an override, approved by bob)\n")


def literal(out: str, expected: list[str], where: str) -> None:
    missing = [e for e in expected if e not in out]
    assert not missing, f"{where}: not printed literally: {missing}\n{out}"
    raw = sorted({repr(c) for c in RAW.findall(out)})
    assert not raw, f"{where}: printed {raw} as they are"


#: every command that prints stored or outside text: its arguments, what its human output shows literally, and the
#: hostile strings its --json output holds exactly
CASES: list[tuple[tuple[str, ...], list[str], list[str]]] = [
    (("payments", "show", MARKUP[0]), [f"payment {MARKUP[0]}", ACCOUNT, r"\x1b[31mred\x1b[0m", "pi_0"],
     [MARKUP[0], ACCOUNT, "\x1b[31mred\x1b[0m", MARKUP[1]]),
    (("payments", "show", MARKUP[1]), [MARKUP[1], r"a\rb\x08c\x07d"], [MARKUP[1], "a\rb\x08c\x07d"]),
    (("payments", "show", MARKUP[2]), [MARKUP[2], r"e\nf\x7fg\x9bh"], [MARKUP[2], "e\nf\x7fg\x9bh"]),
    (("payments", "show", "long-reason"), ["L" * 100], [LONG]),
    (("payments", "list"), [*MARKUP, ACCOUNT], [*MARKUP, ACCOUNT]),
    (("review", "list"), [*MARKUP[:3], r"\x1b[31mred\x1b[0m", r"a\rb\x08c\x07d"],
     [*MARKUP[:3], "\x1b[31mred\x1b[0m", "a\rb\x08c\x07d"]),
    (("review", "show", MARKUP[0]), [MARKUP[0], r"\x1b[31mred\x1b[0m", "pi_0", OPERATOR],
     [MARKUP[0], "\x1b[31mred\x1b[0m", OPERATOR]),
    (("review", "show", MARKUP[3]), [MARKUP[3], OPERATOR], [MARKUP[3], OPERATOR, MARKUP[2], "\u202eevil"]),
    (("jobs", "list", "--state", "dead"), [MARKUP[0]], [*MARKUP, *CONTROL]),
    (("jobs", "show", "{charge_job}"), [OPERATOR, MARKUP[0], MARKUP[1]], [OPERATOR, *MARKUP, *CONTROL]),
    (("jobs", "replay", "--dry-run"), [MARKUP[0]], [*MARKUP, *CONTROL]),
    (("psp", "status"), [MARKUP[0], MARKUP[1], r"\x1b[31mred"], [MARKUP[0], f"{MARKUP[1]} \x1b[31mred\x1b[0m"]),
    (("stats",), [ACCOUNT, OPERATOR], [ACCOUNT, OPERATOR]),
    (("sweep", "--dry-run", "--older-than", "1m", "--mode", "single"), [f"pending {m}" for m in MARKUP[:2]], []),
]


@pytest.mark.parametrize(("args", "human", "exact"), CASES, ids=[" ".join(a) for a, _, _ in CASES])
def test_commands__print_outside_text_literally_and_exit_as_always(
        seeded: tuple[dict[str, int], dict[str, Result]], db_url: str, recon: Runner, args: tuple[str, ...],
        human: list[str], exact: list[str]) -> None:
    argv = [a.format(**seeded[0]) for a in args]
    shown = recon(*argv, db_url=db_url, log_level="WARNING")
    assert shown.returncode == 0, shown.stderr  # was 3 (MarkupError) for payments show, review list and show
    literal(shown.stdout + shown.stderr, human, " ".join(argv))
    machine = recon(*argv, "--json", db_url=db_url, log_level="WARNING")
    assert machine.returncode == 0, machine.stderr
    assert not RAW.findall(machine.stdout), "--json wrote a control character as it is"
    found = list(strings(json.loads(machine.stdout)))
    for text in exact:  # the exact strings, decoded
        assert any(text in s for s in found), f"{' '.join(argv)} --json lacks {text!r}"


def test_import__a_problem_quoting_a_hostile_cell_is_one_literal_line(tmp_path: Any, db: Database, db_url: str,
                                                                       recon: Runner) -> None:
    path = tmp_path / "p.csv"
    path.write_text("merchant_reference,amount,currency,psp\n[/bold],1.00,EUR,sandbox\n[/bold],2.00,EUR,sandbox\n"
                    "[red]x[/red],1.0\x1b[31m,EUR,sandbox\n", encoding="utf-8")
    r = recon("payments", "import", str(path), db_url=db_url, log_level="WARNING")
    assert r.returncode == 2
    literal(r.stderr, ["merchant_reference '[/bold]' is also on line 2", r"'1.0\x1b[31m'"], "payments import")
    assert PaymentStore(db).by_reference("[/bold]") is None


def test_schedule_list__a_schedules_name_from_the_config_is_printed_literally(tmp_path: Any, db_url: str,
                                                                             recon: Runner) -> None:
    config = tmp_path / "recon.toml"
    config.write_text('[schedule."[/bold] [red]x[/red]"]\nkind = "sweep"\nevery = "1h"\n', encoding="utf-8")
    human = recon("--config", str(config), "schedule", "list", db_url=db_url, log_level="WARNING")
    assert human.returncode == 0, human.stderr
    literal(human.stdout, ["[/bold] [red]x[/red]"], "schedule list")
    machine = recon("--config", str(config), "schedule", "list", "--json", db_url=db_url, log_level="WARNING")
    assert machine.returncode == 0, machine.stderr
    assert [s["name"] for s in json.loads(machine.stdout)["schedules"]] == ["[/bold] [red]x[/red]"]
