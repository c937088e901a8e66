"""`recon psp-sandbox-statement`: the bank statement the PSP sandbox's payouts would produce, with the bank's faults.

The sandbox (``recon psp-sandbox --flavor stripe|adyen``) knows its payouts and the credit each makes on the
merchant's account (``psp_adapters.sandbox.bank_credits``); this command asks it for those arriving in
``[--since, --until]``, applies the faults asked for, and writes them with recon's own statement writers
(``recon.bank.formats``) in camt.053, MT940 or BAI2, so that ``recon bank import`` and the payout matching can be
tested against a bank that behaves like one. A credit a fault pushes past ``--until`` belongs to the next
statement and is left out (the summary says so).
"""

from __future__ import annotations

import os
from datetime import date
from pathlib import Path

import click

from psp_adapters.sandbox import SANDBOX_PORT_DEFAULT
from psp_adapters.sandbox.bank_credits import FAULT_NAMES, BankCredit, Fault, apply_faults, fetch, parse_fault
from recon.bank.formats.protocol import EntryToWrite, StatementToWrite
from recon.bank.formats.registry import writer
from recon.errors import UsageError
from recon.params import say
from recon.payments.money import MINOR_UNITS

WRITABLE = ("camt053", "mt940", "bai2")


@click.command("psp-sandbox-statement")
@click.option("--psp", type=click.Choice(["stripe", "adyen"]), required=True,
              help="The sandbox flavour whose payouts the statement carries (checked against the sandbox).")
@click.option("--format", "format_name", type=click.Choice(WRITABLE), required=True)
@click.option("--camt-version", type=click.Choice(["02", "08"]), default="08", show_default=True,
              help="camt053: camt.053.001.02 or .001.08.")
@click.option("--iban", "--account", "account", required=True,
              help="The account the statement is for: an IBAN or an account number (BAI2).")
@click.option("--currency", default="EUR", show_default=True,
              help="The account's currency: credits in other currencies are not on its statement.")
@click.option("--since", "since_text", required=True, metavar="YYYY-MM-DD", help="The statement's first day.")
@click.option("--until", "until_text", required=True, metavar="YYYY-MM-DD", help="Its last day (inclusive).")
@click.option("--opening", type=click.IntRange(-(10**15), 10**15), default=0, show_default=True,
              help="The opening balance, in minor units.")
@click.option("--output", required=True, type=click.Path(dir_okay=False), help="The file to write.")
@click.option("--fault", "faults", multiple=True, metavar="FAULT",
              help=f"Repeatable, applied in order: {', '.join(FAULT_NAMES)} (bank-fee=AMOUNT in minor units, "
                   "late=DAYS). Each hits the earliest credit no earlier fault touched (docs/psps.md).")
@click.option("--url", default=f"http://127.0.0.1:{SANDBOX_PORT_DEFAULT}", show_default=True,
              help="The running sandbox.")
def psp_sandbox_statement(psp: str, format_name: str, camt_version: str, account: str, currency: str,
                          since_text: str, until_text: str, opening: int, output: str, faults: tuple[str, ...],
                          url: str) -> None:
    """Write the bank statement of the PSP sandbox's payouts (camt.053, MT940 or BAI2), with bank faults."""
    since, until = _day("--since", since_text), _day("--until", until_text)
    if until < since:
        raise UsageError(f"psp-sandbox-statement: --until {until} is before --since {since}")
    currency = currency.strip().upper()
    if currency not in MINOR_UNITS:
        raise UsageError(f"psp-sandbox-statement: --currency {currency!r} is not an ISO 4217 code")
    parsed: list[Fault] = []
    for text in faults:
        try:
            parsed.append(parse_fault(text))
        except ValueError as exc:
            raise UsageError(f"psp-sandbox-statement: --fault {exc}") from None
    flavor, credits = fetch(url, since, until)
    if flavor != psp:
        raise UsageError(f"psp-sandbox-statement: the sandbox at {url} speaks {flavor}, not {psp}")
    mine = [c for c in credits if c.currency == currency]
    try:
        booked = apply_faults(mine, parsed, first_day=since, currency=currency)
    except ValueError as exc:
        raise UsageError(f"psp-sandbox-statement: {exc} ({len(mine)} {currency} credits from {since} to {until})") \
            from None
    on_statement = [c for c in booked if c.booking_date <= until]
    statement = StatementToWrite(
        account=account.strip(), currency=currency, exponent=MINOR_UNITS[currency],
        statement_id=f"{psp[:2].upper()}{since:%y%m%d}{until:%m%d}{currency}", opening=opening,
        period_start=since, period_end=until, entries=[_entry(c) for c in on_statement])
    _write(Path(output), format_name, camt_version, statement)
    later = len(booked) - len(on_statement)
    n = len(on_statement)
    say(f"{output} ({format_name}): {n} credit{'' if n == 1 else 's'} to {account.strip()} in {currency}, "
        f"{since}..{until}"
        + (f"; faults: {', '.join(faults)}" if faults else "")
        + (f"; {later} arriving after {until} left for the next statement" if later else ""))


def _day(option: str, text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise UsageError(f"psp-sandbox-statement: {option} {text!r} is not a date (YYYY-MM-DD)") from None


def _entry(credit: BankCredit) -> EntryToWrite:
    return EntryToWrite(amount=credit.amount, direction="credit", booking_date=credit.booking_date,
                        value_date=credit.value_date, bank_reference=credit.bank_reference,
                        end_to_end_id=credit.end_to_end_id, counterparty=credit.counterparty,
                        remittance=credit.remittance)


def _write(path: Path, format_name: str, camt_version: str, statement: StatementToWrite) -> None:
    """Write whole or not at all: a temporary file beside ``path``, renamed over it once complete."""
    part = path.with_name(path.name + ".part")
    try:
        with part.open("wb") as out:
            writer(format_name, camt_version=camt_version).write(out, [statement])
        os.replace(part, path)
    except ValueError as exc:  # a field over the format's limit (e.g. an account too long for MT940's :25:)
        raise UsageError(f"psp-sandbox-statement: {exc}") from None
    finally:
        part.unlink(missing_ok=True)
