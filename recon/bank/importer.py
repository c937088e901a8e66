"""Reading a bank statement file for ``recon bank import``: format, validation, keys; no SQL.

All or nothing: the whole file is read and checked before anything is written (``read_statement_file``
returns a ``StatementPlan``; the store then writes it in one transaction). The first problem stops the read
and is raised as ``BankImportRejected``, one line naming the file, the line or XML path, and the field:
``stmt.xml /Document/BkToCstmrStmt/Stmt[2]/Ntry[14]/Amt: amount '12.345' has more decimals than EUR allows``.

What is checked, beyond each format's own syntax (``recon.bank.formats``):
- the format, from the content only (``--format`` must agree with it); a format read whole has a size cap;
- every amount converted exactly by the ISO-4217 exponent of its currency (``recon.payments.money``): more
  decimals than the currency has is an error, never rounded; BAI2 amounts are minor units already;
- per statement: its account is one of ``[bank.accounts]``, in that account's currency; every entry in the
  statement's currency; opening + credits - debits = closing, exactly;
- per account within the file: no entry key twice (a bank reference repeated, or an overlapping second
  statement of the same days in one file): the second is named with the first's position;
- texts at most ``TEXT_MAX`` characters, without control characters, and redacted (``recon.redact``) before
  they are keyed or kept: a card number in remittance text is never stored, nor spilled to disk.

Memory: the entries go to an anonymous temporary file as they are read (one JSON line each, redacted), so a
streamed format (camt.053) is imported in bounded memory whatever its size; what stays in memory is the
statements and, per account, the ``hash()`` of each key seen (for the duplicate check): about 70 bytes per
entry, a tenth of what a camt.053 entry takes in the file. A hash seen again is only a suspicion: the
temporary file is then read back to find the entry with the same key (and its position for the message), and
a hash collision of two different keys is let through.
"""

from __future__ import annotations

import hashlib
import io
import re
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson

from recon.bank import entry_key
from recon.bank.config import BankAccount, BankConfig
from recon.bank.formats import registry
from recon.bank.formats.protocol import Amount, Balance, Entry, FormatError, Position, Statement, StatementFormat
from recon.bank.rows import NewEntry, NewStatement
from recon.errors import BankImportRejected, UsageError
from recon.payments.money import exact_minor, format_amount
from recon.redact import grouped, redact

TEXT_MAX = 4096
#: amounts fit the bigint columns
AMOUNT_MAX = 2**63 - 1
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_TEXT_FIELDS = ("bank_reference", "end_to_end_id", "counterparty", "remittance", "bank_code")



@dataclass
class StatementPlan:
    """A file read and checked: its statements, and its entries waiting in a temporary file."""

    source: str
    format: str
    digest: str
    statements: list[NewStatement]
    entry_count: int
    _spill: IO[bytes]

    def entries(self) -> Iterator[NewEntry]:
        """The entries, in file order (read back from the temporary file), each with its statement's account."""
        accounts = {s.index: s.account for s in self.statements}
        for doc, _ in _spilled(self._spill):
            doc["account"] = accounts[doc["statement_index"]]
            yield NewEntry.from_json(doc)

    def close(self) -> None:
        self._spill.close()


@dataclass
class _Open:
    """What is known of the statement being read, until its ``Statement`` arrives."""

    sums: Counter[str] = field(default_factory=Counter)
    ordinals: Counter[str] = field(default_factory=Counter)
    hashes: set[int] = field(default_factory=set)  #: hash() of each entry key


def read_statement_file(path: str | Path, *, config: BankConfig, format_name: str = "auto") -> StatementPlan:
    """The statements and entries of the file at ``path``, checked; raises BankImportRejected."""
    source = str(path)
    file = Path(path)
    fmt = _choose_format(file, source, format_name)
    spill = tempfile.TemporaryFile(prefix="recon-bank-")  # closed by StatementPlan.close
    try:
        digest = _digest(file)
        reader = _Reader(source, fmt, config, spill, digest=digest)
        try:
            reader.read(file)
        except FormatError as exc:
            raise BankImportRejected(_render(source, fmt, exc)) from None
        return StatementPlan(source=source, format=fmt.name, digest=digest, statements=reader.statements,
                             entry_count=reader.count, _spill=spill)
    except BaseException:
        spill.close()
        raise


def _choose_format(file: Path, source: str, format_name: str) -> StatementFormat:
    try:
        size = file.stat().st_size
        with file.open("rb") as fh:
            head = fh.read(registry.HEAD_BYTES)
    except OSError as exc:
        raise BankImportRejected(f"{source}: cannot read: {exc.strerror}") from None
    if not head.strip():
        raise BankImportRejected(f"{source}: the file is empty")
    found = registry.detect(head)
    if format_name != "auto":
        fmt = registry.FORMATS[format_name]
        if not fmt.detect(head):
            seen = f"it looks like {found.name}" if found else "its content matches no statement format"
            raise BankImportRejected(f"{source}: --format {format_name}: {seen}")
        found = fmt
    if found is None:
        raise BankImportRejected(f"{source}: not a bank statement recon reads (camt.053 XML, MT940, BAI2); "
                                 "the format is recognised from the content")
    if found.max_bytes is not None and size > found.max_bytes:
        raise BankImportRejected(f"{source}: {size / 2**20:.1f} MiB; {found.name} files are read whole and "
                                 f"accepted up to {found.max_bytes // 2**20} MiB (camt.053 is streamed, any size)")
    return found


def _digest(file: Path) -> str:
    sha = hashlib.sha256()
    with file.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            sha.update(chunk)
    return grouped(sha.hexdigest())  # shown by `recon bank show`, whose redaction would mask a Luhn-valid run


def _render(source: str, fmt: StatementFormat, exc: FormatError) -> str:
    name = fmt.field_names.get(exc.field) if exc.field else None
    if exc.position.path is not None:
        return f"{exc.position.render(source, name)}: {exc.message}"
    return f"{exc.position.render(source)}: {exc.message}" + (f" (field {name})" if name else "")


class _Reader:
    def __init__(self, source: str, fmt: StatementFormat, config: BankConfig, spill: IO[bytes], *,
                 digest: str) -> None:
        self.source, self.fmt, self.config, self.spill, self.digest = source, fmt, config, spill, digest
        self.statements: list[NewStatement] = []
        self.count = 0
        self.open = _Open()
        #: account -> hash() of the entry keys of its statements read so far
        self.seen: dict[str, set[int]] = {}
        #: statement index -> account, for the statements read so far
        self.accounts: dict[int, str] = {}
        self.buffered: list[tuple[NewEntry, Position]] = []

    def read(self, file: Path) -> None:
        for item in self.fmt.parse(file):
            if isinstance(item, Entry):
                self._entry(item)
            else:
                self._statement(item)
        if self.open.hashes:
            raise FormatError("the file ends inside a statement (entries after the last statement's end)")

    def _entry(self, item: Entry) -> None:
        where = item.position.render(self.source)
        amount = self._minor(item.amount, item, "amount")
        texts = {name: self._text(getattr(item, name), item, name) for name in _TEXT_FIELDS}
        key = entry_key.reference_key(item.bank_reference)
        if key is None:
            digest = entry_key.fallback_digest([item.booking_date.isoformat(), _iso(item.value_date), item.direction,
                                                amount, item.amount.currency.upper(), texts["end_to_end_id"],
                                                texts["counterparty"], texts["remittance"], texts["bank_code"]])
            self.open.ordinals[digest] += 1
            key = entry_key.fallback_key(digest, self.open.ordinals[digest])
        if hash(key) in self.open.hashes:
            self._refuse_repeat(key, item)
        self.open.hashes.add(hash(key))
        self.open.sums[item.amount.currency.upper()] += amount if item.direction == "credit" else -amount
        self.buffered.append((NewEntry(
            statement_index=item.statement_index, account="", entry_key=key, booking_date=item.booking_date,
            value_date=item.value_date, amount=amount, direction=item.direction,
            currency=item.amount.currency.upper(), position=where, **texts), item.position))
        if len(self.buffered) >= 1000:
            self._spill_buffer()

    def _statement(self, item: Statement) -> None:
        account = self._account(item)
        opening, closing = self._balance(item.opening, item, "opening_balance"), \
            self._balance(item.closing, item, "closing_balance")
        self._check_sums(item, account, opening, closing)
        known = self.seen.setdefault(account.identifier, set())
        if not known.isdisjoint(self.open.hashes):
            self._refuse_overlap(account.identifier, item.index, known & self.open.hashes)
        known |= self.open.hashes
        self.accounts[item.index] = account.identifier
        self._spill_buffer()
        self.statements.append(NewStatement(
            index=item.index, account=account.identifier, statement_ref=self._ref(item),
            sequence=redact(item.sequence)[:64], currency=account.currency, opening_balance=opening,
            closing_balance=closing, period_start=item.period_start, period_end=item.period_end,
            entry_count=item.entries, format=self.fmt.name, file_name=redact(Path(self.source).name)[:255],
            file_digest=self.digest, position=item.position.render(self.source)))
        self.open = _Open()

    def _account(self, item: Statement) -> BankAccount:
        account = self.config.account_for(item.account)
        if account is None:
            known = ", ".join(f"{a.key} ({a.identifier})" for a in self.config.accounts.values()) or "none configured"
            raise FormatError(f"statement {item.statement_id!r} is for account {item.account!r}, which is not one "
                              f"of ours in [bank.accounts] (known: {known})", item.position, "account")
        currency = item.closing.amount.currency.upper()
        if currency != account.currency or item.opening.amount.currency.upper() != account.currency:
            raise FormatError(f"statement {item.statement_id!r} is in {currency}, but [bank.accounts.{account.key}] "
                              f"is a {account.currency} account", item.position)
        if item.period_start > item.period_end:
            raise FormatError(f"statement {item.statement_id!r} ends ({item.period_end}) before it starts "
                              f"({item.period_start})", item.position, "statement_id")
        return account

    def _check_sums(self, item: Statement, account: BankAccount, opening: int, closing: int) -> None:
        other = sorted(c for c in self.open.sums if c != account.currency)
        if other:
            raise FormatError(f"statement {item.statement_id!r} is in {account.currency} but has entries in "
                              f"{', '.join(other)}", item.position)
        net = self.open.sums[account.currency]
        if opening + net != closing:
            c = account.currency
            raise FormatError(
                f"statement {item.statement_id!r} does not add up: opening {format_amount(opening, c)} + entries "
                f"{format_amount(net, c)} = {format_amount(opening + net, c)}, but its closing balance is "
                f"{format_amount(closing, c)}", item.position, "closing_balance")

    def _spill_buffer(self) -> None:
        """To the temporary file, a thousand at a time; the account is given when read back (a statement's
        account is known only at its end)."""
        self.spill.writelines(orjson.dumps(pair, option=orjson.OPT_APPEND_NEWLINE) for pair in self.buffered)
        self.count += len(self.buffered)
        self.buffered = []

    def _refuse_repeat(self, key: str, item: Entry) -> None:
        """A key's hash seen before in this statement: FormatError if an entry of it has the same key."""
        self._spill_buffer()
        first = next((doc["position"] for doc, _ in _spilled(self.spill)
                      if doc["statement_index"] == item.statement_index and doc["entry_key"] == key), None)
        self.spill.seek(0, io.SEEK_END)
        if first is not None:
            raise FormatError(f"entry repeats {_shown(key)} of the entry at {first}", item.position, "bank_reference")

    def _refuse_overlap(self, account: str, index: int, hashes: set[int]) -> None:
        """Key hashes of this statement seen in an earlier one of the same account: FormatError at the first
        entry (in file order) whose key an earlier statement has, naming where that one was."""
        self._spill_buffer()
        earlier: dict[str, str] = {}
        here: list[tuple[str, Position]] = []
        for doc, read_at in _spilled(self.spill):
            if hash(doc["entry_key"]) not in hashes:
                continue
            if doc["statement_index"] == index:
                here.append((doc["entry_key"], Position(**read_at)))
            elif self.accounts.get(doc["statement_index"]) == account:
                earlier.setdefault(doc["entry_key"], doc["position"])
        self.spill.seek(0, io.SEEK_END)
        for key, where in here:
            if key in earlier:
                raise FormatError(f"entry repeats {_shown(key)} of the entry at {earlier[key]} "
                                  "(the same account's statements overlap within the file)", where, "bank_reference")

    def _minor(self, amount: Amount, item: Entry | Statement, field_name: str) -> int:
        try:
            value = int(amount.text) if amount.minor and amount.text.isdigit() \
                else exact_minor(amount.text, amount.currency)
        except (UsageError, ValueError) as exc:
            raise FormatError(str(exc), item.position, field_name) from None
        if value > AMOUNT_MAX:
            raise FormatError(f"amount {amount.text!r} is too large", item.position, field_name)
        return value

    def _balance(self, balance: Balance, item: Statement, field_name: str) -> int:
        value = self._minor(balance.amount, item, field_name)
        return -value if balance.negative else value

    def _text(self, value: str | None, item: Entry, field_name: str) -> str | None:
        if value is None:
            return None
        where = item.field_positions.get(field_name, item.position)
        if len(value) > TEXT_MAX:
            raise FormatError(f"{len(value)} characters; at most {TEXT_MAX}", where, field_name)
        if not value.isprintable() and _CONTROL.search(value):  # a printable text has no control character
            raise FormatError("has a control character", where, field_name)
        return redact(value.strip()) or None

    def _ref(self, item: Statement) -> str:
        if len(item.statement_id) > 255 or _CONTROL.search(item.statement_id):
            raise FormatError("statement id is over 255 characters or has a control character", item.position,
                              "statement_id")
        return redact(item.statement_id)


def _spilled(spill: IO[bytes]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """The temporary file's lines from its start: each an entry (as a dict) and where it was read."""
    spill.seek(0)
    for line in spill:
        entry, where = orjson.loads(line)
        yield entry, where


def _iso(value: object) -> str:
    return value.isoformat() if value is not None else ""  # type: ignore[attr-defined]


def _shown(key: str) -> str:
    if key.startswith(entry_key.REFERENCE_PREFIX):
        return f"bank reference {key[len(entry_key.REFERENCE_PREFIX):]!r}"
    return "every field (no bank reference)"

