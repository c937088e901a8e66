"""Outside text on a terminal: shown as it is, never acted on.

Text recon did not write (a PSP's refusal reason, a CSV's reference, an operator's note, an exception's message)
reaches people through the command line, log lines and JSON lines. A terminal acts on some characters instead
of showing them: ESC starts a sequence that recolours, moves the cursor, retitles the window or writes a
hyperlink (``\\x1b[31m``, ``\\x1b]8;;…``), a carriage return or backspace overwrites what was printed, a newline
forges a line of its own, C1 controls (``\\x9b`` is a one-byte CSI on some terminals) do what ESC does, and the
bidirectional overrides (U+202E) print a text in an order other than its own. ``shown(text)`` writes each of
them as the escape Python's ``repr`` uses (``\\x1b``, ``\\n``, ``\\u202e``), so what is printed is the text,
visibly, and nothing more; every other character, backslashes included, is printed as it is.

``json_line(doc)`` is one JSON document on one line that holds none of them either: JSON escapes C0 controls
itself, and the rest are written as ``\\uXXXX``, which every JSON reader decodes back to the exact text.

Rich markup (``[bold]``, ``[link=…]``) is the other way outside text could be interpreted: ``recon.render``'s
console renders every string with markup, emoji codes and highlighting off, through ``shown``.
"""

from __future__ import annotations

import json
import re
from typing import Any

#: what a terminal acts on: C0 controls, DEL, C1 controls, and the bidirectional embeddings, overrides and isolates
_ACTED_ON = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
#: the same, less the C0 controls that ``json.dumps`` always escapes; what is left occurs only inside strings
_ACTED_ON_IN_JSON = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    char = match.group(0)
    code = ord(char)
    return _SHORT.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def shown(text: str) -> str:
    """``text`` with every character a terminal would act on written as its escape (module docstring)."""
    return _ACTED_ON.sub(_escape, text) if _ACTED_ON.search(text) else text


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group(0)):04x}"


def json_line(doc: Any, **dumps: Any) -> str:
    """``doc`` as one line of JSON (``json.dumps`` with ``dumps``) in which no character a terminal acts on is
    left as it is: safe to print whatever ``ensure_ascii`` says."""
    return _ACTED_ON_IN_JSON.sub(_json_escape, json.dumps(doc, **dumps))
