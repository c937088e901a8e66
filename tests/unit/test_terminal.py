"""Outside text on a terminal (issue 22, item 6): ``recon.terminal`` shows what a terminal would act on as its
escape, ``recon.render``'s console never reads markup, log lines are escaped, and the commands print nothing
but through them or as JSON (checked on their source, so a new ``print`` or a bare ``click.echo`` of text
cannot slip in)."""

from __future__ import annotations

import ast
import io
import json
import logging
import re
from pathlib import Path

import pytest
from rich.table import Table

from recon.logs import configure
from recon.render import output as render
from recon.terminal import json_line, shown

REPO = Path(__file__).resolve().parents[2]

#: (text, what is printed for it), the escapes written out by hand (Python's repr spells them so)
ESCAPED = [
    ("plain [/bold] [red]x[/red] :smiley: \\ stays", "plain [/bold] [red]x[/red] :smiley: \\ stays"),
    ("\x1b[31mred\x1b[0m", r"\x1b[31mred\x1b[0m"),
    ("\x1b]8;;http://evil.example\x07x\x1b]8;;\x07", r"\x1b]8;;http://evil.example\x07x\x1b]8;;\x07"),
    ("over\rwrite\x08\x08", r"over\rwrite\x08\x08"),
    ("two\nlines\tand a tab", r"two\nlines\tand a tab"),
    ("nul\x00 del\x7f csi\x9b[2J", r"nul\x00 del\x7f csi\x9b[2J"),
    ("\u202egnp.exe \u2066isolate\u2069 \u200fmark", r"\u202egnp.exe \u2066isolate\u2069 \u200fmark"),
    ("accents é ü ß, CJK 中文, emoji 🙂 stay", "accents é ü ß, CJK 中文, emoji 🙂 stay"),
]
ACTED_ON = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


@pytest.mark.parametrize(("text", "printed"), ESCAPED)
def test_shown__escapes_what_a_terminal_acts_on_and_nothing_else(text: str, printed: str) -> None:
    assert shown(text) == printed


@pytest.mark.parametrize(("text", "printed"), ESCAPED)
def test_json_line__one_line_nothing_acted_on_decoding_to_the_exact_text(text: str, printed: str) -> None:
    for ascii_only in (True, False):
        line = json_line({"text": text, "n": [1, None]}, ensure_ascii=ascii_only)
        assert "\n" not in line and not ACTED_ON.search(line)
        assert json.loads(line) == {"text": text, "n": [1, None]}


def rendered(*objects: object, markup: bool | None = None) -> str:
    out = io.StringIO()
    console = render.PlainConsole(file=out, width=200, force_terminal=False)
    console.print(*objects, markup=markup)
    return out.getvalue()


@pytest.mark.parametrize("text", ["[/bold]", "[red]x[/red]", "[link=http://evil.example]x[/link]", ":smiley:",
                                  "[bold]unclosed", "\\[escaped]"])
def test_plain_console__prints_markup_and_emoji_codes_as_they_are_even_when_asked_for_markup(text: str) -> None:
    assert rendered(text).rstrip("\n") == text
    assert rendered(text, markup=True).rstrip("\n") == text
    table = Table(title=f"title {text}")
    table.add_column(f"head {text}")
    table.add_row(f"cell {text}")
    out = rendered(table)
    assert f"title {text}" in out and f"head {text}" in out and f"cell {text}" in out


def test_plain_console__escapes_control_characters_and_masks_card_numbers() -> None:
    out = rendered("a\x1b[31mb\rc 4242 4242 4242 4242")
    assert out == "a\\x1b[31mb\\rc [card]\n"


def test_plain_console__a_long_text_in_a_table_folds_never_loses_characters() -> None:
    from recon.render.output import FoldTable

    table = FoldTable(title="t")
    table.add_column("reference")
    table.add_column("other")
    table.add_row("R" * 500 + "[/bold]", "x" * 150)
    out = rendered(table)
    assert "…" not in out
    assert out.count("R") == 500 and "[/bold]" in out.replace("│", "").replace(" ", "").replace("\n", "")


def test_logs__a_text_line_shows_controls_as_escapes_and_forges_no_line() -> None:
    root = logging.getLogger()
    level = root.level
    out = io.StringIO()
    handler = configure(level="INFO", fmt="text", stream=out)
    try:
        log = logging.getLogger("recon.test")
        log.warning("PSP said %s", "\x1b[31mred\x1b[0m\nrecon.fake: forged line\r\x9b[2J [/bold]",
                     extra={"payment_reference": "ref\x1b[1m"})
        try:
            raise ValueError("boom \x1b[31mred\x1b[0m\nsecond")
        except ValueError:
            log.exception("failed")
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    text = out.getvalue()
    first, *rest = text.splitlines()
    assert first.endswith(r"recon.test: PSP said \x1b[31mred\x1b[0m\nrecon.fake: forged line\r\x9b[2J [/bold]"
                          r" [payment_reference=ref\x1b[1m]")
    assert not ACTED_ON.search(text.replace("\n", ""))
    assert rest[0].endswith("recon.test: failed") and rest[1] == "Traceback (most recent call last):"  # lines kept
    assert rest[-2:] == [r"ValueError: boom \x1b[31mred\x1b[0m", "second"]


def test_logs__a_json_line_holds_nothing_a_terminal_acts_on_and_decodes_exactly() -> None:
    root = logging.getLogger()
    level = root.level
    out = io.StringIO()
    handler = configure(level="INFO", fmt="json", stream=out)
    hostile = "\x1b[31mred\x1b[0m \x9b[2J \u202eevil \x7f é"
    try:
        logging.getLogger("recon.test").warning("said %s", hostile, extra={"reason": hostile})
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    [line] = out.getvalue().splitlines()
    assert not ACTED_ON.search(line) and "é" in line  # still UTF-8, not \u00e9
    doc = json.loads(line)
    assert (doc["message"], doc["reason"]) == (f"said {hostile}", hostile)


# --- the commands print through recon.render, recon.params.say or as JSON ---------------------------------------

#: where the command line's output is written: every other module prints nothing
PRINTING = sorted([*(REPO / "recon" / "commands").glob("*.py"), REPO / "recon" / "cli.py", REPO / "recon" / "demo.py",
                   REPO / "recon" / "params.py", *(REPO / "recon" / "render").glob("*.py")])


def _printing_calls(path: Path, root: Path = REPO) -> list[str]:
    """Calls that would print text without ``recon.terminal``: ``print(…)``, ``click.echo``/``secho`` of
    anything but ``json.dumps(…)`` or ``shown(…)``, and a rich ``Console`` other than ``PlainConsole``."""
    bad = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func)
        first = ast.unparse(node.args[0]) if node.args else ""
        if name == "print" or name == "click.secho" or name == "Console" or \
                (name == "click.echo" and not first.startswith(("json.dumps(", "shown("))):
            bad.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)[:80]}")
    return bad


def test_commands__print_only_through_the_plain_console_say_or_json() -> None:
    bad = [call for path in PRINTING for call in _printing_calls(path)]
    assert not bad, "print through recon.params.say / recon.render (or json.dumps):\n" + "\n".join(bad)


def test_commands__the_rule_sees_a_bare_echo_a_print_and_a_console(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text("import click, json\nfrom rich.console import Console\nclick.echo(f'x {y}')\nprint(1)\n"
                       "Console().print('[b]')\nclick.echo(json.dumps({}))\n", encoding="utf-8")
    found = [line.split(": ", 1)[1] for line in _printing_calls(planted, tmp_path)]
    assert found == ["click.echo(f'x {y}')", "print(1)", "Console()"]
