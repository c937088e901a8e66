"""CSV export of the console's lists (``?format=csv`` on the review queue, payments and dead letters): one
header row, then a row per item, every text cell made safe for a spreadsheet (``recon.spreadsheet``: a cell
that would run as a formula is quoted, control characters escaped) and redacted like every page's text, but
for a PSP's identifiers marked as such (``recon.redact.Identifier``: the psp_reference column), kept exactly."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from typing import Any

from starlette.responses import Response

from recon.redact import Identifier, redact
from recon.spreadsheet import safe_cell


def csv_response(filename: str, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> Response:
    """The rows as a CSV attachment named ``filename``."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([safe_cell(redact(v) if isinstance(v, str) and not isinstance(v, Identifier) else v)
                         for v in row])
    return Response(out.getvalue(), media_type="text/csv; charset=utf-8",
                    headers={"content-disposition": f'attachment; filename="{filename}"'})
