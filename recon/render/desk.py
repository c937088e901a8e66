"""Tables of ``recon operators``, ``recon approvals`` and ``recon audit`` (printed literally, as every table:
``recon.render.output``)."""

from __future__ import annotations

from collections.abc import Sequence

from recon.operator_rows import Approval, Operator
from recon.render.output import FoldTable, stdout_console, timestamp


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    t = FoldTable(title=title)
    for col in columns:
        t.add_column(col)
    for row in rows:
        t.add_row(*row)
    stdout_console().print(t)


def operators_table(found: Sequence[Operator]) -> None:
    _table(f"{len(found)} operators", ["name", "role", "state", "totp", "failed logins", "locked until", "since"],
           [[o.name, str(o.role), "enabled" if o.enabled else "disabled", o.totp_at_rest or "-",
             str(o.failed_logins), timestamp(o.locked_until) if o.locked_until else "-", timestamp(o.created_at)]
            for o in found])


def approvals_table(found: Sequence[Approval], *, state: str) -> None:
    _table(f"{len(found)} {state} requests", ["id", "action", "subject", "requested by", "at", "expires",
                                               "decided by", "result"],
           [[str(a.id), a.action, a.subject, a.requested_by, timestamp(a.requested_at), timestamp(a.expires_at),
             a.decided_by or "-", a.result or "-"] for a in found])
