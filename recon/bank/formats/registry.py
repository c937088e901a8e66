"""Format name -> format: the one place that lists them. Adding a format is a package and a line here.

Detection reads only the content (a file's first ``HEAD_BYTES``), never its name; formats are asked in the
order below, and the first that recognises the head reads the file.
"""

from __future__ import annotations

from recon.bank.formats.bai2 import Bai2
from recon.bank.formats.camt053 import Camt053
from recon.bank.formats.mt940 import Mt940
from recon.bank.formats.protocol import StatementFormat

HEAD_BYTES = 4096

FORMATS: dict[str, StatementFormat] = {
    "camt053": Camt053(),
    "mt940": Mt940(),
    "bai2": Bai2(),
}


def detect(head: bytes) -> StatementFormat | None:
    """The format whose ``detect`` recognises ``head``, or None."""
    return next((fmt for fmt in FORMATS.values() if fmt.detect(head)), None)


def writer(name: str, *, camt_version: str = "08") -> StatementFormat:
    """A format to write with; camt053 writes ``camt_version`` (02 or 08). KeyError for an unknown name."""
    return Camt053(camt_version) if name == "camt053" else FORMATS[name]
