"""A payment's captures and cancels in `recon payments show`, and `recon capture` / `recon cancel`'s lines, for
people (printed through ``recon.render.output``)."""

from __future__ import annotations

from collections.abc import Sequence

from recon.modification_rows import Modification
from recon.payments.money import format_amount
from recon.redact import identifier, kept_text
from recon.render.output import FoldTable, stdout_console, timestamp


def modifications_table(modifications: Sequence[Modification], *, title: str) -> None:
    table = FoldTable(title=title)
    for col in ("id", "kind", "reference", "amount", "status", "PSP id", "by", "created", "why"):
        table.add_column(col, justify="right" if col in ("id", "amount") else "left")
    for m in modifications:
        table.add_row(str(m.id), m.kind, m.modification_reference, format_amount(m.amount, m.currency),
                      str(m.status), identifier(m.psp_modification_id) if m.psp_modification_id else "",
                      m.requested_by, timestamp(m.created_at),
                      kept_text((m.review_reason or m.failure_reason or "")[:120], (m.psp_modification_id,)))
    stdout_console().print(table)
