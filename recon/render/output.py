"""The console every human line and table of the command line goes through, and what the tables share.

Human output for the CLI: rich tables on stdout (a single line: ``recon.params.say``). Machine output
(``--json``) never comes through here.

Everything printed here is printed literally: a reference, reason or name that holds ``[/bold]`` or
``[link=…]`` is shown as those characters, never read as rich markup (which made ``payments show`` fail with a
MarkupError, and let ``[red]x[/red]`` restyle what people read), and characters a terminal would act on are
shown as escapes (``recon.terminal.shown``); card numbers and keys are masked (``recon.redact``), a last line of
defence behind the stores', as on the console's pages, except in a PSP's identifier that a table shows as such
(``recon.redact.Identifier``, made by ``identifier``: a Luhn-valid Adyen reference is shown as itself). All of
it holds for every string a ``PlainConsole`` renders (cells, titles, headers, lines), so no call site has to
remember it; tests/unit/test_terminal.py checks that the commands print nothing but through here, ``say`` or as
JSON.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from rich.console import Console, HighlighterType, JustifyMethod, OverflowMethod, RenderableType
from rich.file_proxy import FileProxy
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.style import Style
from rich.table import Table
from rich.text import Text

from recon.logs import lines_through
from recon.redact import Identifier, redact
from recon.terminal import shown


class PlainConsole(Console):
    """A rich console that renders every string as plain text: no markup, no emoji codes, no highlighting (a
    caller cannot turn them on), control characters escaped (``recon.terminal.shown``), secrets masked."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(markup=False, emoji=False, highlight=False, **kwargs)

    def render_str(self, text: str, *, style: str | Style = "", justify: JustifyMethod | None = None,
                   overflow: OverflowMethod | None = None, emoji: bool | None = None, markup: bool | None = None,
                   highlight: bool | None = None, highlighter: HighlighterType | None = None) -> Text:
        text = text if isinstance(text, Identifier) else redact(text)  # an identifier was redacted when made
        return super().render_str(shown(text), style=style, justify=justify, overflow=overflow, emoji=False,
                                  markup=False, highlight=False, highlighter=None)


class FoldTable(Table):
    """A table whose columns fold what does not fit onto more lines: a reference or a reason is never cut to an
    ellipsis."""

    def add_column(self, header: RenderableType = "", footer: RenderableType = "", *,
                   overflow: OverflowMethod = "fold", justify: JustifyMethod = "left", **kwargs: Any) -> None:
        super().add_column(header, footer, overflow=overflow, justify=justify, **kwargs)


def stdout_console() -> PlainConsole:
    console = PlainConsole(soft_wrap=False)
    if not console.is_terminal:
        console.width = max(console.width, 140)  # piped output: do not squeeze columns into 80
    return console


def timestamp(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else ""


def age_text(seconds: float) -> str:
    """3725.0 -> "1h 2m"; 93600 -> "1d 2h"."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def duration_text(seconds: float) -> str:
    """7d, 12h, 90m, 30s: the largest unit that divides ``seconds``, as people type durations."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def progress_while(run: Callable[[], Any], done_func: Callable[[], int], *, total: int, label: str,
                   enabled: bool = True, console: Console | None = None) -> Any:
    """Run ``run()`` with a progress bar on stderr when stderr is a terminal (none when piped).

    While the bar is up, recon's log lines (any thread's: the in-process worker's) go through the bar's
    console, which prints them above the bar and redraws it, instead of tearing its line (``recon.logs.
    lines_through``).
    """
    console = console or PlainConsole(stderr=True)
    if not enabled or not console.is_terminal:
        return run()
    stop = threading.Event()
    with Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=False) as progress, \
            lines_through(FileProxy(progress.console, sys.stderr)):
        task = progress.add_task(shown(label), total=total)

        def update() -> None:
            while not stop.wait(0.2):
                progress.update(task, completed=min(done_func(), total))

        t = threading.Thread(target=update, daemon=True)
        t.start()
        try:
            return run()
        finally:
            stop.set()
            t.join()
            progress.update(task, completed=min(done_func(), total))
