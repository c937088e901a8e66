"""Reading a payments CSV for ``recon payments import``: parsing and validation, no SQL.

All or nothing: the whole file is read and checked before anything is written, and a file with any problem
imports nothing. Problems name the physical line (the header is line 1) and the field, e.g.
``payments.csv:7: amount '12.345' has more decimals than EUR allows (2) (field amount)``. Up to
``max_problems`` are collected, in line order; reading stops there, since the file is rejected anyway.

Columns: merchant_reference, amount, currency, psp (required); created_at, merchant_account, payment_method,
customer_reference, capture (optional: ``automatic`` or ``manual``; empty or absent: the PSP's ``[psp.NAME]
capture``, ``capture_defaults``). Amounts are converted exactly by the currency's ISO-4217 exponent
(``recon.payments.money``), never rounded. A merchant reference must be unique within the file and must not
exist already: ``existing_func`` is asked about the file's references in batches, as they are read.

No identifier may hold what recon masks (``recon.redact``: a card number, a key, a credential): a reference,
account or token is stored, printed and sent to the PSP as it is, so one that holds a card number is refused
rather than stored masked (a masked reference would no longer be the one the PSP knows). The problem never
repeats the value.

A row's merchant account is its ``merchant_account`` cell, else ``merchant_account`` (``--merchant-account``),
else the PSP's configured default (``account_defaults``), else ``DEFAULT_ACCOUNT``, a label for PSPs that have
no merchant accounts (it is never sent: an adapter that needs an account refuses it at import). Then each
row is checked by its PSP's own rules (``charge_check``: what the PSP would refuse, e.g. a Stripe charge
without a customer, an Adyen charge without a shopper reference), so a file a PSP cannot charge is rejected
before anything is written.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO

from psp_adapters.protocol import ChargeRequest, FieldProblem
from recon.clock import parse_instant
from recon.errors import UsageError
from recon.payments.money import check_currency, parse_amount
from recon.redact import CARD_MASK, KEY_MASK, MASK, redact
from recon.rows import CAPTURE_MODES, NewPayment

REQUIRED_COLUMNS = ("merchant_reference", "amount", "currency", "psp")
OPTIONAL_COLUMNS = ("created_at", "merchant_account", "payment_method", "customer_reference", "capture")
#: the merchant account of rows that name none, for PSPs without merchant accounts; never sent to a PSP
DEFAULT_ACCOUNT = "default"
MERCHANT_REFERENCE_MAX = 200
#: merchant accounts, payment-method tokens and customer references: at most this long
TOKEN_MAX = 255
MAX_PROBLEMS_DEFAULT = 20
#: problems printed at most (the count follows)
SHOWN_PROBLEMS = 20
#: references asked about per ``existing_func`` call
EXISTING_BATCH = 5000
#: the payments.amount column is a signed 64-bit integer
AMOUNT_MAX = 2**63 - 1
# Decimal() also takes "1_000", "1e3", ".5", "12." and non-ASCII digits; a money file gets plain digits only.
_PLAIN_DECIMAL = re.compile(r"[+-]?[0-9]+(?:\.[0-9]+)?")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: the problem of an identifier recon would mask (module docstring); the value is not repeated
_MASKED = ("holds what recon masks as a card number or a secret, or one of its masks (it would be stored, printed "
           "and sent to the PSP)")


def _masked(value: str) -> bool:
    """Whether ``value`` holds what recon masks, or a mask itself: ``order-[card]`` would match the masked
    reference of a webhook for ``order-<card number>``, another shop's payment."""
    return redact(value) != value or any(mask in value for mask in (CARD_MASK, KEY_MASK, MASK))

ExistingFunc = Callable[[Sequence[str]], Collection[str]]
#: (psp name, the charge the row would make) -> what that PSP would refuse about it
ChargeCheck = Callable[[str, ChargeRequest], Sequence[FieldProblem]]


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with the file; ``line`` is None when it concerns the file as a whole."""

    line: int | None
    message: str
    field: str | None = None

    def render(self, source: str) -> str:
        where = f"{source}:{self.line}" if self.line is not None else source
        return f"{where}: {self.message}" + (f" (field {self.field})" if self.field else "")


class ImportRejected(UsageError):
    """The file was rejected; nothing was imported."""

    def __init__(self, source: str, problems: Sequence[Problem], *, complete: bool = True) -> None:
        self.source = source
        self.problems = list(problems)
        self.complete = complete  #: False when reading stopped at the maximum number of problems
        super().__init__(self.problems[0].render(source))

    def lines(self) -> list[str]:
        """The first SHOWN_PROBLEMS problems, first one first, then a count when there is more than one."""
        out = [p.render(self.source) for p in self.problems[:SHOWN_PROBLEMS]]
        if len(self.problems) > 1:
            count = f"{len(self.problems)}" if self.complete else f"at least {len(self.problems)}"
            shown = f" (the first {SHOWN_PROBLEMS} shown)" if len(self.problems) > SHOWN_PROBLEMS else ""
            out.append(f"{self.source}: {count} problems{shown}; nothing imported")
        return out


def read_payments(path: str | Path, *, psp_names: Collection[str], merchant_account: str | None = None,
                  account_defaults: Mapping[str, str] | None = None, charge_check: ChargeCheck | None = None,
                  existing_func: ExistingFunc | None = None, capture_defaults: Mapping[str, str] | None = None,
                  max_problems: int = MAX_PROBLEMS_DEFAULT) -> list[NewPayment]:
    """The payments in the CSV file at ``path``, validated; raises ImportRejected naming what is wrong."""
    source = str(path)
    with open(path, "rb") as fh:
        return validate(_decoded_lines(fh, source), source=source, psp_names=psp_names,
                        merchant_account=merchant_account, account_defaults=account_defaults,
                        charge_check=charge_check, existing_func=existing_func, capture_defaults=capture_defaults,
                        max_problems=max_problems)


def validate(lines: Iterable[str], *, source: str, psp_names: Collection[str],
             merchant_account: str | None = None, account_defaults: Mapping[str, str] | None = None,
             charge_check: ChargeCheck | None = None, existing_func: ExistingFunc | None = None,
             capture_defaults: Mapping[str, str] | None = None,
             max_problems: int = MAX_PROBLEMS_DEFAULT) -> list[NewPayment]:
    """The payments in CSV ``lines`` (line endings kept, as from a file opened with ``newline=""``)."""
    check_token(merchant_account, "--merchant-account")
    for psp, account in (account_defaults or {}).items():
        check_token(account, f"[psp.{psp}] merchant_account")
    reader = csv.reader(lines, strict=True)
    try:
        header = next(reader, None)
    except csv.Error as exc:
        raise ImportRejected(source, [Problem(1, f"malformed CSV: {exc}")]) from None
    if header is None:
        empty = "the file is empty; expected a header row naming the columns " + ", ".join(REQUIRED_COLUMNS)
        raise ImportRejected(source, [Problem(None, empty)])
    columns = _check_header(header, source)
    rows = _RowChecker(columns, psp_names=frozenset(psp_names), merchant_account=merchant_account,
                       account_defaults=dict(account_defaults or {}), charge_check=charge_check,
                       existing_func=existing_func, capture_defaults=dict(capture_defaults or {}))
    for line, record in _records(reader, source):
        rows.check(line, record)
        if len(rows.problems) >= max_problems:
            break
    else:
        rows.flush()
        if rows.problems:
            raise ImportRejected(source, sorted(rows.problems, key=_line_order))
        return rows.payments
    rows.flush()
    raise ImportRejected(source, sorted(rows.problems, key=_line_order)[:max_problems], complete=False)


def _line_order(p: Problem) -> int:
    return p.line or 0


def _decoded_lines(fh: IO[bytes], source: str) -> Iterator[str]:
    """Lines as text, each checked as UTF-8 on its own so a bad byte is reported on its physical line."""
    for number, raw in enumerate(fh, start=1):
        if number == 1 and raw.startswith(b"\xef\xbb\xbf"):  # a BOM, as spreadsheets write it
            raw = raw[3:]
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            problem = Problem(number, f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column "
                                      f"{exc.start + 1}); save the file as UTF-8")
            raise ImportRejected(source, [problem]) from None


def _records(reader: Iterator[list[str]], source: str) -> Iterator[tuple[int, list[str]]]:
    """(first physical line, fields) per record; blank lines are skipped."""
    last = reader.line_num  # type: ignore[attr-defined]  # the header's last line
    while True:
        try:
            record = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise ImportRejected(source, [Problem(last + 1, f"malformed CSV: {exc}")]) from None
        first, last = last + 1, reader.line_num  # type: ignore[attr-defined]
        if record and any(cell.strip() for cell in record):
            yield first, record


def _check_header(header: list[str], source: str) -> list[str]:
    names = [h.strip().lower() for h in header]
    known = REQUIRED_COLUMNS + OPTIONAL_COLUMNS
    if not any(n in known for n in names):
        raise ImportRejected(source, [Problem(1, "no header row; the first line must name the columns "
                                                 + ", ".join(REQUIRED_COLUMNS) + " (optional: "
                                                 + ", ".join(OPTIONAL_COLUMNS) + ")")])
    problems = []
    unknown = [h for h, n in zip(header, names, strict=True) if n not in known]
    if unknown:
        problems.append(Problem(1, f"unknown column{'s' if len(unknown) > 1 else ''} "
                                   f"{', '.join(repr(u) for u in unknown)} (allowed: {', '.join(known)})"))
    repeated = sorted({n for n in names if n in known and names.count(n) > 1})
    if repeated:
        problems.append(Problem(1, f"column{'s' if len(repeated) > 1 else ''} "
                                   f"{', '.join(repr(r) for r in repeated)} named more than once"))
    missing = [c for c in REQUIRED_COLUMNS if c not in names]
    if missing:
        problems.append(Problem(1, f"missing required column{'s' if len(missing) > 1 else ''} "
                                   f"{', '.join(repr(m) for m in missing)}"))
    if problems:
        raise ImportRejected(source, problems)
    return names


class _FieldError(Exception):
    def __init__(self, message: str, field_name: str) -> None:
        super().__init__(message)
        self.field_name = field_name


@dataclass
class _RowChecker:
    """Validates records one at a time; keeps the payments and the problems found so far."""

    columns: list[str]
    psp_names: frozenset[str]
    merchant_account: str | None
    account_defaults: dict[str, str]
    charge_check: ChargeCheck | None
    existing_func: ExistingFunc | None
    capture_defaults: dict[str, str] = field(default_factory=dict)
    payments: list[NewPayment] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    _seen: dict[str, int] = field(default_factory=dict)  #: reference -> line
    _unchecked: list[str] = field(default_factory=list)  #: references not yet asked about

    def check(self, line: int, record: list[str]) -> None:
        if len(record) != len(self.columns):
            self.problems.append(Problem(line, f"expected {len(self.columns)} fields as in the header, "
                                               f"found {len(record)}"))
            return
        cells = dict(zip(self.columns, record, strict=True))
        try:
            payment = self._payment(cells)
        except _FieldError as exc:
            self.problems.append(Problem(line, str(exc), exc.field_name))
            return
        ref = payment.merchant_reference
        if ref in self._seen:
            self.problems.append(Problem(line, f"merchant_reference {ref!r} is also on line "
                                               f"{self._seen[ref]}", "merchant_reference"))
            return
        self._seen[ref] = line
        self.payments.append(payment)
        self._unchecked.append(ref)
        if len(self._unchecked) >= EXISTING_BATCH:
            self.flush()

    def flush(self) -> None:
        """Ask ``existing_func`` about the references read since the last call."""
        if self.existing_func is None or not self._unchecked:
            self._unchecked.clear()
            return
        for ref in sorted(self.existing_func(self._unchecked), key=self._seen.__getitem__):
            self.problems.append(Problem(self._seen[ref], f"merchant_reference {ref!r} already exists",
                                         "merchant_reference"))
        self._unchecked.clear()

    def _payment(self, cells: dict[str, str]) -> NewPayment:
        ref = _reference(cells["merchant_reference"])
        currency = _currency(cells["currency"])
        amount = _amount(cells["amount"], currency)
        psp = _psp(cells["psp"], self.psp_names)
        account = (_token(cells, "merchant_account") or self.merchant_account or self.account_defaults.get(psp)
                   or DEFAULT_ACCOUNT)
        payment = NewPayment(merchant_account=account, merchant_reference=ref, amount=amount, currency=currency,
                             psp=psp, created_at=_created_at(cells.get("created_at", "")),
                             payment_method=_token(cells, "payment_method"),
                             customer_reference=_token(cells, "customer_reference"),
                             capture_mode=_capture(cells.get("capture", ""), self.capture_defaults.get(psp)))
        if self.charge_check is not None:
            request = ChargeRequest(merchant_reference=ref, amount=amount, currency=currency,
                                    merchant_account="" if account == DEFAULT_ACCOUNT else account,
                                    payment_method=payment.payment_method,
                                    customer_reference=payment.customer_reference)
            for problem in self.charge_check(psp, request):
                raise _FieldError(f"{psp}: {problem.message}", problem.field)
        return payment


def _capture(text: str, default: str | None) -> str:
    mode = text.strip().lower() or default or "automatic"
    if mode not in CAPTURE_MODES:
        raise _FieldError(f"capture {text.strip()!r} is neither automatic nor manual", "capture")
    return mode


def _reference(text: str) -> str:
    ref = text.strip()
    if not ref:
        raise _FieldError("merchant_reference is empty", "merchant_reference")
    if len(ref) > MERCHANT_REFERENCE_MAX:
        raise _FieldError(f"merchant_reference is {len(ref)} characters long; at most "
                          f"{MERCHANT_REFERENCE_MAX} are allowed", "merchant_reference")
    if _CONTROL.search(ref):
        raise _FieldError(f"merchant_reference {ref!r} contains a control character", "merchant_reference")
    if _masked(ref):
        raise _FieldError(f"merchant_reference {_MASKED}", "merchant_reference")
    return ref


def check_token(value: str | None, what: str) -> None:
    """A merchant account (or token) given outside the file: no control characters, at most TOKEN_MAX long.
    Raises UsageError naming ``what``."""
    if value is None:
        return
    if len(value) > TOKEN_MAX:
        raise UsageError(f"{what}: {len(value)} characters long; at most {TOKEN_MAX} are allowed")
    if _CONTROL.search(value):
        raise UsageError(f"{what}: {value[:40]!r} contains a control character")
    if _masked(value):
        raise UsageError(f"{what}: {_MASKED}")


def _token(cells: dict[str, str], column: str) -> str | None:
    """An optional identifier cell: None when empty; no control characters, at most TOKEN_MAX long."""
    value = cells.get(column, "").strip()
    if not value:
        return None
    if len(value) > TOKEN_MAX:
        raise _FieldError(f"{column} is {len(value)} characters long; at most {TOKEN_MAX} are allowed", column)
    if _CONTROL.search(value):
        raise _FieldError(f"{column} {value[:40]!r} contains a control character", column)
    if _masked(value):
        raise _FieldError(f"{column} {_MASKED}", column)
    return value


def _currency(text: str) -> str:
    if not text.strip():
        raise _FieldError("currency is empty", "currency")
    try:
        return check_currency(text)
    except UsageError as exc:
        raise _FieldError(str(exc), "currency") from None


def _amount(text: str, currency: str) -> int:
    if not text.strip():
        raise _FieldError("amount is empty", "amount")
    if not _PLAIN_DECIMAL.fullmatch(text.strip()):
        raise _FieldError(f"amount {text!r} is not a plain decimal number "
                          "(digits, optionally '.' and decimals)", "amount")
    try:
        minor = parse_amount(text, currency)
    except UsageError as exc:
        raise _FieldError(str(exc), "amount") from None
    if minor > AMOUNT_MAX:
        raise _FieldError(f"amount {text!r} is too large", "amount")
    return minor


def _psp(text: str, known: frozenset[str]) -> str:
    name = text.strip().lower()
    if name not in known:
        what = f"psp {text.strip()!r} is not" if name else "psp is empty; expected"
        raise _FieldError(f"{what} one of {', '.join(sorted(known))}", "psp")
    return name


def _created_at(text: str) -> datetime | None:
    raw = text.strip()
    if not raw:
        return None
    try:
        return parse_instant(raw)
    except ValueError:
        raise _FieldError(f"created_at {text!r} is not an ISO-8601 timestamp "  # nor one in the years 1..9999
                          "(e.g. 2024-05-01T12:30:00Z; no offset means UTC)", "created_at") from None
