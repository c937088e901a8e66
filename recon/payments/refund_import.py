"""Reading a refunds CSV for ``recon refunds import``, and checking one refund for ``recon refund``: parsing and
validation, no SQL.

All or nothing, like the payments import (``recon.payments.importer``, whose problems and their rendering this
shares): the whole file is read and checked before anything is written, and a file with any problem imports
nothing. Problems name the physical line (the header is line 1) and the field, e.g.
``refunds.csv:3: amount '12.345' has more decimals than EUR allows (2) (field amount)``.

Columns (all required): ``merchant_reference`` (the payment's), ``refund_reference`` (the refund's own, unique),
``amount`` (major units of the payment's currency, converted exactly), ``reason`` (the PSP's reason code: each
adapter names the codes it sends, ``refund_reasons``; empty: none). A payment is refunded only once it
succeeded and holds its PSP reference, and never beyond what it captured: the refunds of the file and those
stored already (every one that has not failed) together. The store checks the bound again in the database,
under concurrency (``recon.db.refund_queries``); this check only names the line.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from recon.errors import UsageError
from recon.payments.importer import ImportRejected, Problem, _decoded_lines, _masked, _records
from recon.payments.money import format_amount, parse_amount
from recon.refund_rows import NewRefund
from recon.rows import Payment, PaymentStatus

COLUMNS = ("merchant_reference", "refund_reference", "amount", "reason")
#: Adyen's modification ``reference`` is at most 80 characters (CheckoutService-v72: PaymentRefundRequest)
REFUND_REFERENCE_MAX = 80
MAX_PROBLEMS_DEFAULT = 20
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

PaymentFunc = Callable[[str], Payment | None]
ExistingFunc = Callable[[Sequence[str]], Collection[str]]
#: a PSP's name -> the reason codes its adapter sends (None: any text)
ReasonsFunc = Callable[[str], Collection[str] | None]


class RefundProblem(Exception):
    """One field of one refund is wrong: ``field`` names the column (or the command's option)."""

    def __init__(self, message: str, field_name: str) -> None:
        super().__init__(message)
        self.field_name = field_name


@dataclass
class RefundChecker:
    """Checks refunds one at a time against their payments and the refunds before them (of the file, and
    stored: a payment's ``refunded_amount``)."""

    payment_func: PaymentFunc
    reasons_func: ReasonsFunc
    requested_by: str
    _asked: dict[int, int] = field(default_factory=dict)  #: payment id -> minor units asked so far

    def check(self, merchant_reference: str, refund_reference: str, amount: str, reason: str) -> NewRefund:
        """The refund, or RefundProblem naming the field."""
        payment = self._payment(merchant_reference.strip())
        ref = _refund_reference(refund_reference)
        minor = _amount(amount, payment.currency)
        code = _reason(reason, self.reasons_func(payment.psp))
        asked = self._asked.get(payment.id, 0) + minor
        left = payment.captured_amount - payment.refunded_amount
        if asked > left:
            before = asked - minor
            earlier = f" after {format_amount(before, payment.currency)} asked above" if before else ""
            raise RefundProblem(f"amount {amount.strip()} is more than the {format_amount(left, payment.currency)} "
                                f"payment {payment.merchant_reference!r} has captured and not refunded{earlier}",
                                "amount")
        self._asked[payment.id] = asked
        return NewRefund(payment_id=payment.id, refund_reference=ref, amount=minor, reason=code,
                         requested_by=self.requested_by)

    def _payment(self, ref: str) -> Payment:
        if not ref:
            raise RefundProblem("merchant_reference is empty", "merchant_reference")
        payment = self.payment_func(ref)
        if payment is None:
            raise RefundProblem(f"payment {ref!r} not found", "merchant_reference")
        if payment.status is not PaymentStatus.SUCCEEDED:
            raise RefundProblem(f"payment {ref!r} is {payment.status}; only a succeeded payment is refunded",
                                "merchant_reference")
        if not payment.psp_reference:
            raise RefundProblem(f"payment {ref!r} holds no PSP reference to refund", "merchant_reference")
        return payment


def read_refunds(path: str | Path, *, payment_func: PaymentFunc, existing_func: ExistingFunc,
                 reasons_func: ReasonsFunc, requested_by: str,
                 max_problems: int = MAX_PROBLEMS_DEFAULT) -> list[NewRefund]:
    """The refunds in the CSV file at ``path``, checked; raises ImportRejected naming what is wrong."""
    source = str(path)
    with open(path, "rb") as fh:
        return validate(_decoded_lines(fh, source), source=source, payment_func=payment_func,
                        existing_func=existing_func, reasons_func=reasons_func, requested_by=requested_by,
                        max_problems=max_problems)


def validate(lines: Iterable[str], *, source: str, payment_func: PaymentFunc, existing_func: ExistingFunc,
             reasons_func: ReasonsFunc, requested_by: str, max_problems: int = MAX_PROBLEMS_DEFAULT
             ) -> list[NewRefund]:
    reader = csv.reader(lines, strict=True)
    try:
        header = next(reader, None)
    except csv.Error as exc:
        raise ImportRejected(source, [Problem(1, f"malformed CSV: {exc}")]) from None
    names = [h.strip().lower() for h in header or []]
    if sorted(names) != sorted(COLUMNS):
        raise ImportRejected(source, [Problem(1, f"the header must name the columns {', '.join(COLUMNS)}, "
                                                 f"each once (found: {', '.join(names) or 'nothing'})")])
    checker = RefundChecker(payment_func, reasons_func, requested_by)
    refunds: list[NewRefund] = []
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    for line, record in _records(reader, source):
        if len(problems) >= max_problems:
            raise ImportRejected(source, problems, complete=False)
        if len(record) != len(names):
            problems.append(Problem(line, f"expected {len(names)} fields as in the header, found {len(record)}"))
            continue
        cells: Mapping[str, str] = dict(zip(names, record, strict=True))
        try:
            refund = checker.check(cells["merchant_reference"], cells["refund_reference"], cells["amount"],
                                   cells["reason"])
        except RefundProblem as exc:
            problems.append(Problem(line, str(exc), exc.field_name))
            continue
        if refund.refund_reference in seen:
            problems.append(Problem(line, f"refund_reference {refund.refund_reference!r} is also on line "
                                          f"{seen[refund.refund_reference]}", "refund_reference"))
            continue
        seen[refund.refund_reference] = line
        refunds.append(refund)
    for start in range(0, len(refunds), 1000):
        for ref in existing_func([r.refund_reference for r in refunds[start:start + 1000]]):
            problems.append(Problem(seen[ref], f"refund_reference {ref!r} already exists", "refund_reference"))
    if problems:
        raise ImportRejected(source, sorted(problems, key=lambda p: p.line or 0))
    if not refunds:
        raise ImportRejected(source, [Problem(None, "no refunds in the file")])
    return refunds


def _refund_reference(text: str) -> str:
    ref = text.strip()
    if not ref:
        raise RefundProblem("refund_reference is empty", "refund_reference")
    if len(ref) > REFUND_REFERENCE_MAX:
        raise RefundProblem(f"refund_reference is {len(ref)} characters long; at most {REFUND_REFERENCE_MAX} are "
                            "allowed", "refund_reference")
    if _CONTROL.search(ref):
        raise RefundProblem(f"refund_reference {ref!r} contains a control character", "refund_reference")
    if _masked(ref):
        raise RefundProblem("refund_reference holds what recon masks as a card number or a secret (it would be "
                            "stored, printed and sent to the PSP)", "refund_reference")
    return ref


def _amount(text: str, currency: str) -> int:
    if not text.strip():
        raise RefundProblem("amount is empty", "amount")
    try:
        return parse_amount(text, currency)
    except UsageError as exc:
        raise RefundProblem(str(exc), "amount") from None


def _reason(text: str, reasons: Collection[str] | None) -> str | None:
    code = text.strip()
    if not code:
        return None
    if _CONTROL.search(code) or len(code) > REFUND_REFERENCE_MAX:
        raise RefundProblem(f"reason {code[:40]!r} is not a reason code", "reason")
    if reasons is not None and code not in reasons:
        raise RefundProblem(f"reason {code!r} is not one of the PSP's reason codes: {', '.join(sorted(reasons))}",
                            "reason")
    return code
