"""The bank side of the sandbox's payouts: the credit each payout (Stripe) or settlement batch (Adyen) makes on
the merchant's bank account, and the faults a bank statement may show (``recon psp-sandbox-statement`` writes
them in camt.053, MT940 or BAI2 with recon's statement writers).

A credit is booked and valued on the payout's arrival date (Stripe: ``arrival_date``; Adyen: the day after the
batch closed), for the payout's amount, from the PSP (``counterparty``), with the PSP's reference where its
bank puts it: Stripe's ``trace_id`` as the end-to-end id and ``STRIPE PAYOUT po_…`` as the remittance; Adyen's
batch number in the remittance (``ADYEN PAYOUT <merchant account> BATCH <n>``: "the batch number in the
settlement to your bank corresponds to the batch number in the Settlement details report", docs.adyen.com). The
bank's own reference is 16 characters derived from the payout (re-writing a statement gives the same
references). A failed payout makes no credit.

Faults (``apply_faults``), each applied in the order given to the earliest credit (value date, then payout)
no earlier fault touched:

- ``missing-credit``: that credit is not on the statement;
- ``bank-fee=AMOUNT``: the bank deducts AMOUNT (minor units, less than the credit) from it;
- ``two-in-one``: it and the next untouched credit of the same currency arrive as one credit of their sum, on
  the later one's date, naming neither payout (bank reference of its own, no end-to-end id, remittance
  ``COLLECTIVE CREDIT``);
- ``late=DAYS``: it arrives DAYS (1 to 60) days late (booking and value date);
- ``foreign-credit``: a credit nobody expects is added (4242 minor units of the statement's currency, from
  ``ACME GMBH``, remittance ``INVOICE 2026-117``) on the statement's first day.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta

import httpx

FAULT_NAMES = ("missing-credit", "bank-fee", "two-in-one", "late", "foreign-credit")
LATE_MAX_DAYS = 60
FOREIGN_AMOUNT = 4242


@dataclass(frozen=True, slots=True)
class BankCredit:
    """One credit on the bank statement. ``payouts``: the PSP payouts (Stripe ``po_…``; Adyen ``ACCOUNT:N``) it
    carries (none for a foreign credit)."""

    amount: int  #: minor units, > 0
    currency: str  #: ISO 4217, upper case
    booking_date: date
    value_date: date
    bank_reference: str  #: at most 16 characters (MT940's limit)
    end_to_end_id: str | None  #: at most 16 characters
    counterparty: str
    remittance: str
    payouts: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {"amount": self.amount, "currency": self.currency, "booking_date": self.booking_date.isoformat(),
                "value_date": self.value_date.isoformat(), "bank_reference": self.bank_reference,
                "end_to_end_id": self.end_to_end_id, "counterparty": self.counterparty,
                "remittance": self.remittance, "payouts": list(self.payouts)}

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> BankCredit:
        """A credit as ``to_json`` wrote it; KeyError, TypeError or ValueError when it is not one."""
        amount, payouts, e2e = doc["amount"], doc["payouts"], doc["end_to_end_id"]
        if isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
            raise ValueError(f"credit amount {amount!r} is not a positive integer")
        if not isinstance(payouts, list) or not all(isinstance(p, str) for p in payouts):
            raise TypeError("payouts must be a list of strings")
        return cls(amount=amount, currency=str(doc["currency"]),
                   booking_date=date.fromisoformat(str(doc["booking_date"])),
                   value_date=date.fromisoformat(str(doc["value_date"])),
                   bank_reference=str(doc["bank_reference"]), end_to_end_id=None if e2e is None else str(e2e),
                   counterparty=str(doc["counterparty"]), remittance=str(doc["remittance"]), payouts=tuple(payouts))


def bank_reference(*about: str) -> str:
    """The bank's own reference for a credit: 16 characters, the same for the same payouts."""
    return "B" + hashlib.sha256("|".join(("bank", *about)).encode()).hexdigest()[:15].upper()


@dataclass(frozen=True, slots=True)
class Fault:
    name: str  #: one of FAULT_NAMES
    value: int | None = None  #: bank-fee: the amount; late: the days


def parse_fault(text: str) -> Fault:
    """``missing-credit``, ``bank-fee=AMOUNT``, ``two-in-one``, ``late=DAYS``, ``foreign-credit``; ValueError
    naming the problem otherwise."""
    name, sep, raw = text.strip().partition("=")
    if name not in FAULT_NAMES:
        raise ValueError(f"unknown fault {name!r} (known: {', '.join(FAULT_NAMES)})")
    needs_value = name in ("bank-fee", "late")
    if needs_value != bool(sep):
        raise ValueError(f"fault {name} {'needs =N' if needs_value else 'takes no value'}")
    if not needs_value:
        return Fault(name)
    if not (raw.isascii() and raw.isdigit()):
        raise ValueError(f"fault {name}={raw!r}: not a whole number")
    value = int(raw)
    if name == "late" and not 1 <= value <= LATE_MAX_DAYS:
        raise ValueError(f"fault late={value}: between 1 and {LATE_MAX_DAYS} days")
    if name == "bank-fee" and value < 1:
        raise ValueError("fault bank-fee must be at least 1 (minor units)")
    return Fault(name, value)


def apply_faults(
    credits: Sequence[BankCredit], faults: Sequence[Fault], *, first_day: date, currency: str = "EUR"
) -> list[BankCredit]:
    """The credits as the faulty bank books them (see the module docstring), in booking order. ValueError when a
    fault finds no credit to apply to, or a bank fee is not less than its credit."""
    ordered = sorted(credits, key=lambda c: (c.value_date, c.payouts, c.bank_reference))
    slots: list[BankCredit | None] = list(ordered)
    touched: set[int] = set()
    extra: list[BankCredit] = []

    def next_untouched(currency: str | None = None, after: int = -1) -> int:
        for i, credit in enumerate(slots):
            if i > after and i not in touched and credit is not None and currency in (None, credit.currency):
                return i
        raise ValueError("no credit left for the fault")

    for fault in faults:
        if fault.name == "foreign-credit":
            reference = bank_reference("foreign", str(len(extra)))
            extra.append(BankCredit(FOREIGN_AMOUNT, currency, first_day, first_day, reference, None, "ACME GMBH",
                                    "INVOICE 2026-117"))
            continue
        i = next_untouched()
        credit = slots[i]
        assert credit is not None  # nosec B101  # next_untouched skips the removed ones
        touched.add(i)
        if fault.name == "missing-credit":
            slots[i] = None
        elif fault.name == "bank-fee":
            fee = fault.value or 0
            if fee >= credit.amount:
                raise ValueError(f"bank-fee={fee} is not less than the credit of {credit.amount}")
            slots[i] = dataclasses.replace(credit, amount=credit.amount - fee)
        elif fault.name == "late":
            days = timedelta(days=fault.value or 0)
            slots[i] = dataclasses.replace(credit, booking_date=credit.booking_date + days,
                                           value_date=credit.value_date + days)
        else:  # two-in-one
            j = next_untouched(credit.currency, after=i)
            other = slots[j]
            assert other is not None  # nosec B101
            touched.add(j)
            both = (*credit.payouts, *other.payouts)
            slots[i], slots[j] = None, BankCredit(
                credit.amount + other.amount, credit.currency, other.booking_date, other.value_date,
                bank_reference("collective", *both), None, credit.counterparty, "COLLECTIVE CREDIT", both)
    found = [c for c in slots if c is not None] + extra
    return sorted(found, key=lambda c: (c.booking_date, c.value_date, c.bank_reference))


def fetch(url: str, since: date, until: date, *, timeout: float = 10.0) -> tuple[str, list[BankCredit]]:
    """The flavour of the sandbox at ``url`` and the bank credits its payouts arriving in ``[since, until]`` make
    (``GET /_admin/bank-credits``). httpx's errors when it cannot be read; ValueError for an answer that is not
    the sandbox's."""
    answer = httpx.get(f"{url.rstrip('/')}/_admin/bank-credits", timeout=timeout,
                       params={"since": since.isoformat(), "until": until.isoformat()})
    answer.raise_for_status()
    doc = answer.json()
    if not isinstance(doc, dict) or not isinstance(doc.get("credits"), list):
        raise ValueError(f"{url} did not answer like the PSP sandbox")
    try:
        return str(doc.get("flavor")), [BankCredit.from_json(c) for c in doc["credits"]]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{url} did not answer like the PSP sandbox: {exc}") from None
