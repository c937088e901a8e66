"""`recon refunds …` and the movements of `recon payments show` for people (printed through
``recon.render.output``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from recon.dispute_rows import Dispute, DisputeEvent
from recon.movement_rows import MovementEvent
from recon.payments.money import format_amount
from recon.redact import PSP_IDENTIFIER_FIELDS, identifier, kept_text
from recon.refund_rows import Refund
from recon.render.output import FoldTable, stdout_console, timestamp


def refunds_table(refunds: Sequence[Refund], *, title: str | None = None) -> None:
    table = FoldTable(title=title or f"{len(refunds)} refunds")
    for col in ("id", "refund", "amount", "status", "PSP refund id", "reason", "by", "created", "why"):
        table.add_column(col, justify="right" if col in ("id", "amount") else "left")
    for r in refunds:
        table.add_row(str(r.id), r.refund_reference, format_amount(r.amount, r.currency), str(r.status),
                      identifier(r.psp_refund_id) if r.psp_refund_id else "", r.reason or "", r.requested_by,
                      timestamp(r.created_at),
                      kept_text((r.review_reason or r.failure_reason or "")[:120], (r.psp_refund_id,)))
    stdout_console().print(table)


def refund_detail(refund: Refund, events: Sequence[MovementEvent], *, payment_reference: str) -> None:
    console = stdout_console()
    table = FoldTable("", "", show_header=False, title=f"refund {refund.refund_reference}")
    table.add_row("payment", payment_reference)
    for key, value in refund.to_dict().items():
        if key == "amount":
            value = f"{format_amount(refund.amount, refund.currency)} ({refund.amount} minor units)"
        if value is not None:
            table.add_row(key, identifier(value) if key in PSP_IDENTIFIER_FIELDS and isinstance(value, str)
                          else str(value))
    console.print(table)
    history = FoldTable(title="events")
    for col in ("at", "from", "to", "source", "job", "attempt", "details"):
        history.add_column(col)
    for e in events:
        history.add_row(timestamp(e.at), e.from_status or "", e.to_status, e.source,
                        str(e.job_id) if e.job_id is not None else "",
                        str(e.attempt) if e.attempt is not None else "",
                        json.dumps(e.details, sort_keys=True)[:160] if e.details else "")
    console.print(history)


def disputes_table(disputes: Sequence[Dispute], *, title: str, payments: Mapping[int, str] | None = None) -> None:
    """Disputes with their evidence deadline (`recon payments show`, `recon review show`, `recon disputes`);
    ``payments``: payment id -> merchant reference, for a column of their payments."""
    table = FoldTable(title=title)
    cols = ("dispute", "status", "amount", "fee", "reason", "evidence due by", "PSP says", "opened")
    for col in (("psp", "payment", *cols) if payments is not None else cols):
        table.add_column(col, justify="right" if col in ("amount", "fee") else "left")
    for d in disputes:
        money = format_amount(d.amount, d.currency) if d.amount is not None and d.currency else ""
        fee = format_amount(d.fee, d.currency) if d.fee is not None and d.currency else ""
        cells = (identifier(d.psp_dispute_id), str(d.status), money, fee, d.reason or "",
                 timestamp(d.evidence_due_by) if d.evidence_due_by else "", d.psp_status or "", timestamp(d.opened_at))
        table.add_row(*((d.psp, payments.get(d.payment_id, str(d.payment_id)), *cells) if payments is not None
                        else cells))
    stdout_console().print(table)


def dispute_events_table(events: Sequence[DisputeEvent]) -> None:
    """A dispute's audit trail (`recon disputes show`)."""
    history = FoldTable(title="events")
    for col in ("at", "from", "to", "source", "job", "details"):
        history.add_column(col)
    for e in events:
        history.add_row(timestamp(e.at), str(e.from_status or ""), str(e.to_status), e.source,
                        str(e.job_id) if e.job_id is not None else "",
                        json.dumps(e.details, sort_keys=True)[:160] if e.details else "")
    stdout_console().print(history)
