"""docs/psps.md's "Pointing the official SDKs at the sandbox", run as written.

The sandboxes are started with the commands the section's first ``bash`` block gives (``recon psp-sandbox
--flavor …``), each on a free port (``--port 0`` for the documented one); every ``python`` block of the SDK
subsection then runs in a fresh interpreter, the documented URLs replaced by the ones the sandboxes printed. A
snippet that fails (an assertion, an exception from stripe-python or Adyen's library) fails the test.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
DOCS = REPO / "docs" / "psps.md"
_FENCE = re.compile(r"^```(?P<lang>\w+)\n(?P<code>.*?)^```$", re.MULTILINE | re.DOTALL)
_READY = re.compile(r"listening on (http://127\.0\.0\.1:\d+) ")


def section(title: str, text: str) -> str:
    start = text.index(title)
    level = title.split(" ", 1)[0] + " "
    end = text.find("\n" + level, start + len(title))
    return text[start:] if end < 0 else text[start:end]


def blocks(text: str, lang: str) -> list[str]:
    return [m["code"] for m in _FENCE.finditer(text) if m["lang"] == lang]


@contextmanager
def sandbox(command: list[str]) -> Iterator[str]:
    """The documented command, on a free port; yields the URL it printed."""
    proc = subprocess.Popen([sys.executable, "-m", "recon", *command], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = _READY.search(line)
        assert found, line
        yield found[1]
    finally:
        proc.terminate()
        proc.communicate(timeout=20)


def test_docs__the_sdk_snippets_run_against_the_documented_sandboxes() -> None:
    text = DOCS.read_text(encoding="utf-8")
    mocked = section("## Testing against a mocked PSP", text)
    commands = [line.split("#", 1)[0].split() for line in blocks(mocked, "bash")[0].splitlines()
                if line.startswith("recon psp-sandbox --flavor")]
    snippets = blocks(section("### Pointing the official SDKs at the sandbox", mocked), "python")
    assert len(commands) == 2 and len(snippets) == 3, (commands, len(snippets))

    with ExitStack() as stack:
        urls = {}
        for command in commands:
            port = command[command.index("--port") + 1]
            started = [*command[1:command.index("--port")], "--port", "0", *command[command.index("--port") + 2:]]
            urls[f"http://127.0.0.1:{port}"] = stack.enter_context(sandbox(started))
        for snippet in snippets:
            code = snippet
            for documented, actual in urls.items():
                code = code.replace(documented, actual)
            assert code != snippet, "a snippet that names no documented sandbox"
            done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                                  timeout=60, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
            assert done.returncode == 0, f"{snippet}\n--- stderr:\n{done.stderr}"
            assert done.stdout.strip(), snippet  # each prints what it did
