"""Writing camt.053.001.08 or .001.02: one ``Document`` holding the statements, written as it goes.

Elements in the schema's order (ReportEntry10 / ReportEntry2 and their parts), only those recon reads plus the
mandatory ones (``BkTxCd``, ``GrpHdr``, ``Stmt/CreDtTm`` in .02). Texts are XML-escaped and held to the
schema's lengths: a reference over 35 characters is an error (ValueError), a name is cut at 140, and a
remittance is split into ``Ustrd`` lines of 140. ``CreDtTm`` is the end of the statement's period, so the
same statements always write the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import BinaryIO
from xml.sax.saxutils import escape, quoteattr  # nosec B406  # escaping what we write; nothing is parsed

from recon.bank.formats.camt053.reader import VERSIONS
from recon.bank.formats.protocol import EntryToWrite, StatementToWrite

MAX35 = 35
MAX140 = 140


def write(out: BinaryIO, statements: Sequence[StatementToWrite], *, version: str = "08") -> None:
    """``statements`` as one camt.053.001.<version> document."""
    if version not in VERSIONS:
        raise ValueError(f"camt.053 version {version!r}: write 02 or 08")
    first = statements[0] if statements else None
    message_id = _ref(first.statement_id if first else "EMPTY", "MsgId")
    created = f"{first.period_end.isoformat()}T23:59:59" if first else "1970-01-01T00:00:00"
    out.write(f'<?xml version="1.0" encoding="UTF-8"?>\n<Document xmlns="{VERSIONS[version]}">\n'
              f"<BkToCstmrStmt>\n<GrpHdr><MsgId>{escape(message_id)}</MsgId><CreDtTm>{created}</CreDtTm></GrpHdr>\n"
              .encode())
    for statement in statements:
        _statement(out, statement, version)
    out.write(b"</BkToCstmrStmt>\n</Document>\n")


def _statement(out: BinaryIO, s: StatementToWrite, version: str) -> None:
    account = f"<IBAN>{escape(s.account)}</IBAN>" if _is_iban(s.account) \
        else f"<Othr><Id>{escape(_ref(s.account, 'Acct/Id/Othr/Id', 34))}</Id></Othr>"
    end = f"{s.period_end.isoformat()}T23:59:59"
    out.write(f"<Stmt><Id>{escape(_ref(s.statement_id, 'Stmt/Id'))}</Id>"
              f"<ElctrncSeqNb>{int(s.sequence or '1')}</ElctrncSeqNb><CreDtTm>{end}</CreDtTm>"
              f"<FrToDt><FrDtTm>{s.period_start.isoformat()}T00:00:00</FrDtTm><ToDtTm>{end}</ToDtTm></FrToDt>"
              f"<Acct><Id>{account}</Id><Ccy>{s.currency}</Ccy></Acct>\n".encode())
    out.write(_balance("OPBD", s.opening, s, s.period_start.isoformat()).encode())
    out.write(_balance("CLBD", s.closing_balance(), s, s.period_end.isoformat()).encode())
    for entry in s.entries:
        out.write(_entry(entry, s, version).encode())
    out.write(b"</Stmt>\n")


def _balance(code: str, minor: int, s: StatementToWrite, day: str) -> str:
    indicator = "DBIT" if minor < 0 else "CRDT"
    return (f"<Bal><Tp><CdOrPrtry><Cd>{code}</Cd></CdOrPrtry></Tp>{_amt(abs(minor), s)}"
            f"<CdtDbtInd>{indicator}</CdtDbtInd><Dt><Dt>{day}</Dt></Dt></Bal>\n")


def _entry(e: EntryToWrite, s: StatementToWrite, version: str) -> str:
    if e.amount < 0:
        raise ValueError(f"entry amount {e.amount} is negative; give the direction instead")
    credit = e.direction == "credit"
    status = "<Sts><Cd>BOOK</Cd></Sts>" if version == "08" else "<Sts>BOOK</Sts>"
    value = f"<ValDt><Dt>{e.value_date.isoformat()}</Dt></ValDt>" if e.value_date else ""
    ref = f"<AcctSvcrRef>{escape(_ref(e.bank_reference, 'AcctSvcrRef'))}</AcctSvcrRef>" if e.bank_reference else ""
    family = "RCDT" if credit else "ICDT"
    code = f"<BkTxCd><Domn><Cd>PMNT</Cd><Fmly><Cd>{family}</Cd><SubFmlyCd>ESCT</SubFmlyCd></Fmly></Domn></BkTxCd>"
    return (f"<Ntry>{_amt(e.amount, s)}<CdtDbtInd>{'CRDT' if credit else 'DBIT'}</CdtDbtInd>{status}"
            f"<BookgDt><Dt>{e.booking_date.isoformat()}</Dt></BookgDt>{value}{ref}{code}"
            f"{_details(e, s, version)}</Ntry>\n")


def _details(e: EntryToWrite, s: StatementToWrite, version: str) -> str:
    if not (e.end_to_end_id or e.counterparty or e.remittance):
        return ""
    refs = f"<Refs><EndToEndId>{escape(_ref(e.end_to_end_id, 'EndToEndId'))}</EndToEndId></Refs>" \
        if e.end_to_end_id else ""
    amount = f"{_amt(e.amount, s)}<CdtDbtInd>{'CRDT' if e.direction == 'credit' else 'DBIT'}</CdtDbtInd>" \
        if version == "08" else ""
    parties = ""
    if e.counterparty:
        role = "Dbtr" if e.direction == "credit" else "Cdtr"
        name = f"<Nm>{escape(e.counterparty[:MAX140])}</Nm>"
        parties = f"<RltdPties><{role}>{f'<Pty>{name}</Pty>' if version == '08' else name}</{role}></RltdPties>"
    remittance = ""
    if e.remittance:
        lines = [e.remittance[i:i + MAX140] for i in range(0, len(e.remittance), MAX140)]
        remittance = "<RmtInf>" + "".join(f"<Ustrd>{escape(line)}</Ustrd>" for line in lines) + "</RmtInf>"
    return f"<NtryDtls><TxDtls>{refs}{amount}{parties}{remittance}</TxDtls></NtryDtls>"


def _amt(minor: int, s: StatementToWrite) -> str:
    value = Decimal(minor).scaleb(-s.exponent)
    return f"<Amt Ccy={quoteattr(s.currency)}>{value:.{s.exponent}f}</Amt>"


def _ref(value: str | None, name: str, limit: int = MAX35) -> str:
    text = value or ""
    if not text or len(text) > limit:
        raise ValueError(f"{name} {text!r}: camt.053 needs 1 to {limit} characters")
    return text


def _is_iban(account: str) -> bool:
    return len(account) >= 5 and account[:2].isalpha() and account[:2].isupper() and account[2:4].isdigit() \
        and account[4:].isalnum()
