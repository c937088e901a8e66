"""Reading ISO 20022 camt.053 (BankToCustomerStatement) 001.02 and 001.08, streamed.

Safety: ``prolog.check`` reads the bytes before the root element and refuses a DTD, an entity declaration,
any other ``<!`` declaration and an encoding it cannot check, before a parser exists; after the root's start
tag none of these can appear (the module docstring of ``prolog`` says why, after XML 1.0 §2.8). Only then
does the standard library's C-accelerated ``iterparse`` (expat) read the file, told the encoding the check
found and fed exactly the bytes the check read. A billion-laughs file fails at its ``<!DOCTYPE``, an
external-entity file too; nothing is expanded, nothing but the file is read.

Memory stays bounded whatever the file's size: every child of a ``Stmt`` is read when its end tag arrives
and the statement element is then emptied, and an ended statement is removed from its parent. What stays is
one entry's elements (an ``Ntry`` and its ``TxDtls``) and the parser's current chunk.

Paths for error messages are tracked only down to a statement's children (``Stmt[2]/Ntry[14]``, ``Bal[1]``,
``Acct``): deeper elements are only counted (the nesting limit) and checked for their namespace, which is
what keeps the per-element cost of a 100 MB file low (docs/benchmarks.md, "Bank statement import").

The namespace picks the version; another camt.053 version is refused by name, not guessed at. Only booked
entries (``Sts`` BOOK) are yielded: pending and information-only entries are not on the balance. Within an
entry, the first ``TxDtls`` gives the end-to-end id, the counterparty (the debtor of a credit, the creditor
of a debit) and the unstructured remittance (its ``Ustrd`` lines joined); ``AddtlNtryInf`` stands in for a
remittance the entry does not detail.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import IO, Any
from xml.etree.ElementTree import (  # nosec B405  # a DTD is refused before parsing: prolog.check
    Element,
    ParseError,
    XMLParser,
    iterparse,
)

from recon.bank.formats.camt053 import prolog
from recon.bank.formats.protocol import Amount, Balance, Direction, Entry, FormatError, Position, Statement

PREFIX = "urn:iso:std:iso:20022:tech:xsd:camt.053.001."
VERSIONS = {"02": PREFIX + "02", "08": PREFIX + "08"}
_HEADER = {"Id", "ElctrncSeqNb", "FrToDt", "Acct", "Bal"}
#: every element name the reader looks up, qualified once per file by its namespace
_NAMES = ("Amt", "CdtDbtInd", "Sts", "Cd", "BookgDt", "ValDt", "Dt", "DtTm", "AcctSvcrRef", "NtryDtls", "TxDtls",
          "Refs", "EndToEndId", "RltdPties", "Dbtr", "Cdtr", "Pty", "Nm", "RmtInf", "Ustrd", "AddtlNtryInf",
          "BkTxCd", "Domn", "Fmly", "SubFmlyCd", "Prtry", "FrDtTm", "ToDtTm", "Id", "IBAN", "Othr", "Tp",
          "CdOrPrtry")
#: deeper than any camt.053 element (about 12 levels): a nesting bomb is refused here
MAX_DEPTH = 40
#: the parser's chunk, as iterparse asks: larger ones were slower (a longer event queue, colder caches)
CHUNK = 16 * 1024
_DECIMAL = re.compile(r"[0-9]+(\.[0-9]+)?")
_OPENING = ("OPBD", "PRCD")
_NOT_PROVIDED = "NOTPROVIDED"
#: what expat says of a document that stops short
_TRUNCATED = {"no element found", "unclosed token"}


@dataclass
class _Stmt:
    """What a statement's header said, collected at the header elements' end tags."""

    index: int
    path: str
    element: Element
    statement_id: str | None = None
    sequence: str = ""
    account: str | None = None
    period: tuple[date, date] | None = None
    balances: dict[str, Balance] = field(default_factory=dict)
    entries: int = 0
    #: how many Ntry and Bal children have started: their indexes in the paths
    ntry: int = 0
    bal: int = 0


class _Checked:
    """The file as the parser reads it: first the bytes ``prolog.check`` read (past a BOM), then the rest."""

    def __init__(self, head: bytes, rest: IO[bytes]) -> None:
        self.head, self.rest = head, rest

    def read(self, size: int = -1) -> bytes:
        if self.head:
            data, self.head = self.head, b""
            return data
        return self.rest.read(CHUNK)


def read(path: Path) -> Iterator[Entry | Statement]:
    """Entries and statements of the camt.053 file at ``path`` (recon.bank.formats.protocol's order)."""
    with open(path, "rb") as fh:
        head = fh.read(prolog.HEAD_MAX)
        checked = prolog.check(head, whole=len(head) < prolog.HEAD_MAX)
        source = _Checked(head[checked.start:], fh)
        parser = XMLParser(encoding=checked.encoding)  # nosec B314  # its prolog is checked: no DTD can follow
        try:
            yield from _Reader().run(iterparse(source, events=("start", "end"), parser=parser))  # nosec B314  # idem
        except ParseError as exc:
            line, column = exc.position
            reason = str(exc).split(":", 1)[0]  # expat's words: "undefined entity", "mismatched tag", …
            cut = "; the file may be truncated" if reason in _TRUNCATED else ""
            raise FormatError(f"not well-formed XML ({reason}, column {column}){cut}", Position(line=line)) from None


class _Reader:
    def __init__(self) -> None:
        self.brace = ""  #: "{namespace}"
        self.version = ""
        self.q: dict[str, str] = {}
        #: the display names of the open elements down to a statement's child: the error paths
        self.names: list[str] = []
        self.group: Element | None = None  #: the open BkToCstmrStmt
        self.stmt: _Stmt | None = None
        self.statements = 0

    def run(self, events: Iterator[tuple[str, Any]]) -> Iterator[Entry | Statement]:
        # the hot loop: millions of events, so locals and the fewest tests for the deep ones
        depth, brace = 0, ""
        for event, elem in events:
            if event == "start":
                depth += 1
                if depth > 4:
                    if depth > MAX_DEPTH or not elem.tag.startswith(brace):
                        self._refuse_deep(elem, depth)
                else:
                    self._open(elem, depth)
                    brace = self.brace
                continue
            if depth == 4 and self.stmt is not None:
                entry = self._close_child(elem, self.stmt)
                if entry is not None:
                    yield entry
            elif depth == 3 and self.stmt is not None:
                yield self._statement(self.stmt)
                self.stmt = None
                if self.group is not None:
                    self.group.clear()  # the statement is read: memory stays flat
            depth -= 1
        if not self.statements:
            raise FormatError("has no Stmt: not a bank statement", Position(path="/Document/BkToCstmrStmt"))

    def _open(self, elem: Element, depth: int) -> None:
        if depth == 1:
            self._check_root(elem.tag)
            self.names = ["Document"]
            return
        if not elem.tag.startswith(self.brace):
            name = elem.tag.rpartition("}")[2]
            raise FormatError(f"element {name} is outside the camt.053 namespace",
                              Position(path=self._path(depth - 1) + "/" + name))
        name = elem.tag[len(self.brace):]
        shown = name
        if depth == 2:
            self.group = elem if name == "BkToCstmrStmt" else None
        elif depth == 3 and name == "Stmt" and self.group is not None:
            self.statements += 1
            shown = f"Stmt[{self.statements}]"
            self.stmt = _Stmt(index=self.statements - 1, path=f"{self._path(2)}/{shown}", element=elem)
        elif depth == 4 and self.stmt is not None and name == "Ntry":
            self.stmt.ntry += 1
            shown = f"Ntry[{self.stmt.ntry}]"
        elif depth == 4 and self.stmt is not None and name == "Bal":
            self.stmt.bal += 1
            shown = f"Bal[{self.stmt.bal}]"
        del self.names[depth - 1:]
        self.names.append(shown)

    def _refuse_deep(self, elem: Element, depth: int) -> None:
        name = elem.tag.rpartition("}")[2]
        where = Position(path=self._path(4))
        if depth > MAX_DEPTH:
            raise FormatError(f"nested deeper than {MAX_DEPTH} elements (element {name})", where)
        raise FormatError(f"element {name} (within) is outside the camt.053 namespace", where)

    def _check_root(self, tag: str) -> None:
        ns, _, name = tag.rpartition("}")
        ns = ns.lstrip("{")
        if name != "Document":
            raise FormatError(f"the root element is {name}, not Document: not an ISO 20022 message",
                              Position(path=f"/{name}"))
        if not ns.startswith(PREFIX):
            shown = ns.rsplit(":", 1)[-1] if ns else "no namespace"
            raise FormatError(f"namespace {shown!r} is not camt.053 (a bank-to-customer statement)",
                              Position(path="/Document"))
        version = ns[len(PREFIX):]
        if version not in VERSIONS:
            raise FormatError(f"camt.053.001.{version} is not supported (supported: camt.053.001.02, "
                              "camt.053.001.08)", Position(path="/Document"))
        self.brace, self.version = "{" + ns + "}", version
        self.q = {name: self.brace + name for name in _NAMES}

    def _path(self, depth: int) -> str:
        return "/" + "/".join(self.names[:depth])

    def _close_child(self, elem: Element, stmt: _Stmt) -> Entry | None:
        """A statement's child has ended: an entry is returned, a header element noted; then it is let go."""
        name = elem.tag[len(self.brace):]
        try:
            if name == "Ntry":
                return self._entry(elem, stmt, Position(path=f"{stmt.path}/Ntry[{stmt.ntry}]"))
            if name in _HEADER:
                where = Position(path=f"{stmt.path}/Bal[{stmt.bal}]" if name == "Bal" else f"{stmt.path}/{name}")
                self._header(name, elem, stmt, where)
            return None
        finally:
            stmt.element.clear()  # read: memory stays flat

    # --- statement header -------------------------------------------------------------------------------

    def _header(self, name: str, elem: Element, stmt: _Stmt, where: Position) -> None:
        if name == "Id":
            stmt.statement_id = _text(elem) or _fail("statement Id is empty", where)
        elif name == "ElctrncSeqNb":
            stmt.sequence = _text(elem) or ""
        elif name == "FrToDt":
            start, end = self._text(elem, "FrDtTm"), self._text(elem, "ToDtTm")
            if start and end:
                stmt.period = (_day(start, where, "FrDtTm"), _day(end, where, "ToDtTm"))
        elif name == "Acct":
            stmt.account = self._text(elem, "Id", "IBAN") or self._text(elem, "Id", "Othr", "Id")
            if not stmt.account:
                raise FormatError("Acct has neither Id/IBAN nor Id/Othr/Id", where)
        else:
            code = self._text(elem, "Tp", "CdOrPrtry", "Cd")
            if code in ("OPBD", "PRCD", "CLBD") and code not in stmt.balances:
                stmt.balances[code] = self._balance(elem, where)

    def _balance(self, elem: Element, where: Position) -> Balance:
        amount = self._amount(elem, where)
        day_text = self._text(elem, "Dt", "Dt") or self._text(elem, "Dt", "DtTm")
        day = _day(day_text, where, "Dt") if day_text else None
        return Balance(amount=amount, negative=self._direction(elem, where) == "debit", day=day)

    def _statement(self, stmt: _Stmt) -> Statement:
        where = Position(path=stmt.path)
        opening = next((stmt.balances[c] for c in _OPENING if c in stmt.balances), None)
        closing = stmt.balances.get("CLBD")
        if opening is None or closing is None:
            missing = "opening (OPBD or PRCD)" if opening is None else "closing (CLBD)"
            raise FormatError(f"statement has no {missing} balance", where, "opening_balance")
        if stmt.statement_id is None or stmt.account is None:
            raise FormatError("statement has no Id or no Acct", where, "statement_id")
        period = stmt.period or (opening.day or closing.day, closing.day or opening.day)
        if period[0] is None or period[1] is None:
            raise FormatError("statement has neither FrToDt nor dated balances", where, "statement_id")
        return Statement(index=stmt.index, position=where, statement_id=stmt.statement_id, sequence=stmt.sequence,
                         account=stmt.account, opening=opening, closing=closing, period_start=period[0],
                         period_end=period[1], entries=stmt.entries)

    # --- entries ----------------------------------------------------------------------------------------

    def _entry(self, elem: Element, stmt: _Stmt, where: Position) -> Entry | None:
        status = self._text(elem, "Sts", "Cd") if self.version == "08" else self._text(elem, "Sts")
        if status is None:
            raise FormatError("entry has no status", where, "status")
        if status != "BOOK":
            return None
        booked = self._text(elem, "BookgDt", "Dt") or self._text(elem, "BookgDt", "DtTm")
        if booked is None:
            raise FormatError("booked entry has no booking date", where, "booking_date")
        valued = self._text(elem, "ValDt", "Dt") or self._text(elem, "ValDt", "DtTm")
        direction = self._direction(elem, where)
        tx = self._at(elem, "NtryDtls", "TxDtls")
        entry = Entry(statement_index=stmt.index, position=where, amount=self._amount(elem, where),
                      direction=direction, booking_date=_day(booked, where, "BookgDt", "booking_date"),
                      value_date=_day(valued, where, "ValDt", "value_date") if valued else None,
                      bank_reference=self._text(elem, "AcctSvcrRef"),
                      end_to_end_id=self._end_to_end(tx), counterparty=self._counterparty(tx, direction),
                      remittance=self._remittance(tx) or self._text(elem, "AddtlNtryInf"),
                      bank_code=self._bank_code(elem))
        stmt.entries += 1
        return entry

    def _amount(self, elem: Element, where: Position) -> Amount:
        amt = elem.find(self.q["Amt"])
        text = (amt.text or "").strip() if amt is not None else ""
        if amt is None or not text:
            raise FormatError("amount missing", where, "amount")
        currency = (amt.get("Ccy") or "").strip()
        if not _DECIMAL.fullmatch(text):
            raise FormatError(f"amount {text[:40]!r} is not a decimal number", where, "amount")
        if not currency:
            raise FormatError("amount has no Ccy", where, "currency")
        return Amount(text=text, currency=currency)

    def _direction(self, elem: Element, where: Position) -> Direction:
        code = self._text(elem, "CdtDbtInd")
        if code == "CRDT":
            return "credit"
        if code == "DBIT":
            return "debit"
        raise FormatError(f"CdtDbtInd {code!r} is neither CRDT nor DBIT", where, "direction")

    def _end_to_end(self, tx: Element | None) -> str | None:
        value = self._text(tx, "Refs", "EndToEndId")
        return None if value == _NOT_PROVIDED else value

    def _counterparty(self, tx: Element | None, direction: Direction) -> str | None:
        party = "Dbtr" if direction == "credit" else "Cdtr"
        return self._text(tx, "RltdPties", party, "Pty", "Nm") or self._text(tx, "RltdPties", party, "Nm")

    def _remittance(self, tx: Element | None) -> str | None:
        info = self._at(tx, "RmtInf")
        if info is None:
            return None
        lines = [(u.text or "").strip() for u in info.findall(self.q["Ustrd"])]
        return " ".join(line for line in lines if line) or None

    def _bank_code(self, elem: Element) -> str | None:
        domain = self._at(elem, "BkTxCd", "Domn")
        code = self._text(domain, "Cd")
        if code:
            family = self._at(domain, "Fmly")
            parts = [code, self._text(family, "Cd"), self._text(family, "SubFmlyCd")]
            return "/".join(p for p in parts if p)
        return self._text(elem, "BkTxCd", "Prtry", "Cd")

    def _at(self, elem: Element | None, *names: str) -> Element | None:
        """The first element down the path ``names`` (each a child's local name), or None."""
        for name in names:
            if elem is None:
                return None
            elem = elem.find(self.q[name])  # a qualified name alone: the C lookup, no ElementPath
        return elem

    def _text(self, elem: Element | None, *names: str) -> str | None:
        found = self._at(elem, *names)
        text = found.text if found is not None else None
        return (text.strip() or None) if text else None


def _text(elem: Element) -> str | None:
    return (elem.text or "").strip() or None


def _day(text: str, where: Position, name: str, field: str | None = None) -> date:
    try:
        return date.fromisoformat(text.strip()[:10])
    except ValueError:
        raise FormatError(f"{name} {text[:40]!r} is not a date (YYYY-MM-DD)", where, field) from None


def _fail(message: str, where: Position) -> str:
    raise FormatError(message, where)
