"""The check that lets a camt.053 file through the standard library's C-accelerated XML parser: its prolog.

Why checking the prolog is enough (XML 1.0, §2.8): ``document ::= prolog element Misc*`` and
``prolog ::= XMLDecl? Misc* (doctypedecl Misc*)?``, ``Misc ::= Comment | PI | S``. A document type declaration,
and with it every entity declaration and every external reference (a DTD's ``SYSTEM``/``PUBLIC`` identifier,
an external entity), can only stand in the prolog, before the root element's start tag. After that tag,
``<!DOCTYPE`` or ``<!ENTITY`` is a syntax error the parser stops at, and a reference to any entity but the
five predefined ones is an "undefined entity" error, since no DTD declared it. So when the prolog holds
nothing but the XML declaration, comments, processing instructions and white space, nothing in the file can
be expanded and nothing can be fetched. ``check`` reads the prolog as bytes and refuses anything else before a
parser exists. expat (2.4 and later) also bounds entity amplification: a second line, never the first.

The check reads bytes, so it must know how they map to characters. It scans them as ASCII, which is exact for
UTF-8 and for the ASCII-compatible encodings accepted here (US-ASCII, ISO-8859-1), and the reader then tells
the parser to decode with the encoding the check found (``XMLParser(encoding=…)`` overrides the declaration)
and feeds it the bytes after a UTF-8 byte order mark: the parser reads the bytes the way they were checked.
UTF-16 and UTF-32 (a byte order mark, NUL bytes) and every other declared encoding are refused by name:
ISO 20022 messages are UTF-8 (and expat would switch to UTF-16 on a BOM whatever it is told).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from recon.bank.formats.protocol import FormatError, Position

#: the most of a file read to find its root element; a longer prolog is refused, not searched further
HEAD_MAX = 64 * 1024
BOM = b"\xef\xbb\xbf"
#: declared encoding (lower case, without '-' and '_') -> the name the parser is given
ENCODINGS = {"utf8": "utf-8", "usascii": "us-ascii", "ascii": "us-ascii", "iso88591": "iso-8859-1",
             "latin1": "iso-8859-1"}
_SPACE = b" \t\r\n"
_DECLARATION = re.compile(rb"<\?xml[ \t\r\n]")
_ENCODING = re.compile(rb"""[ \t\r\n]encoding[ \t\r\n]*=[ \t\r\n]*(["'])([A-Za-z][A-Za-z0-9._-]*)\1""")
_NAME_START = re.compile(rb"[A-Za-z_:\x80-\xff]")


@dataclass(frozen=True, slots=True)
class Prolog:
    """What the parser is given: ``encoding`` to decode with, and the bytes from ``start`` (past a BOM)."""

    encoding: str
    start: int


def check(head: bytes, *, whole: bool) -> Prolog:
    """The prolog of a file starting with ``head`` (``whole``: ``head`` is all of it), checked.

    Raises FormatError naming the line for a DTD, an entity declaration or any other ``<!`` declaration, a
    byte order mark other than UTF-8's, NUL bytes, an encoding not accepted, or a prolog over HEAD_MAX."""
    start = len(BOM) if head.startswith(BOM) else 0
    first = head[start:start + 4]
    # expat picks UTF-16 by itself from a BOM or a NUL byte in the first two, whatever encoding it is given
    if not first or first[0] not in b"< \t\r\n" or b"\x00" in first:
        raise FormatError("does not start with '<' in UTF-8 (a UTF-16 or UTF-32 file, or not XML); a camt.053 "
                          "statement is UTF-8 (ISO 20022)", Position(line=1))
    encoding, pos = _declaration(head, start)
    while pos < len(head):
        if head[pos] in _SPACE:
            pos += 1
        elif head.startswith(b"<!--", pos):
            pos = _past(head, pos, b"-->", whole)
        elif head.startswith(b"<?", pos):
            pos = _past(head, pos, b"?>", whole)
        elif head.startswith(b"<!", pos):
            raise FormatError(_declared(head, pos), Position(line=head.count(b"\n", 0, pos) + 1))
        elif head.startswith(b"<", pos) and _NAME_START.match(head, pos + 1):
            return Prolog(encoding=encoding, start=start)  # the root element's start tag
        else:
            break  # not XML here: the parser says where
    if not whole and pos >= len(head):
        raise _too_long(head)
    return Prolog(encoding=encoding, start=start)


def _declaration(head: bytes, start: int) -> tuple[str, int]:
    """The encoding (UTF-8 unless declared) and the position after the XML declaration, if there is one."""
    if not _DECLARATION.match(head, start):
        return "utf-8", start
    end = head.find(b"?>", start)
    if end < 0:
        return "utf-8", start  # an unterminated declaration: the parser refuses it
    found = _ENCODING.search(head, start, end)
    if found is None:
        return "utf-8", end + 2
    declared = found[2].decode("ascii")
    encoding = ENCODINGS.get(declared.lower().replace("-", "").replace("_", ""))
    if encoding is None:
        raise FormatError(f"declares encoding {declared!r}; a camt.053 statement is UTF-8 (ISO 20022), and "
                          "recon reads only UTF-8, US-ASCII and ISO-8859-1", Position(line=1))
    if start and encoding != "utf-8":
        raise FormatError(f"starts with a UTF-8 byte order mark but declares encoding {declared!r}",
                          Position(line=1))
    return encoding, end + 2


def _past(head: bytes, pos: int, end: bytes, whole: bool) -> int:
    found = head.find(end, pos)
    if found >= 0:
        return found + len(end)
    if whole:
        return len(head)  # unterminated: the parser refuses it
    raise _too_long(head)


def _declared(head: bytes, pos: int) -> str:
    if head.startswith(b"<!DOCTYPE", pos):
        return "has a DTD (<!DOCTYPE>); a bank statement has none, and recon refuses it before parsing"
    if head.startswith(b"<!ENTITY", pos):
        return "declares an XML entity (<!ENTITY>); refused before parsing, never expanded"
    return f"has the declaration {head[pos:pos + 12]!r} before its root element; refused before parsing"


def _too_long(head: bytes) -> FormatError:
    return FormatError(f"has no root element in its first {HEAD_MAX // 1024} KiB (a prolog that long is refused)",
                       Position(line=head.count(b"\n") + 1))
