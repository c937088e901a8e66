"""Where the third-party statement files live: ``<repo>/../shared/samples/`` (never in the repository; their
sources and licences: ``/work/shared/samples/README.md``). Tests that need one skip, saying why, when absent."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO.parent / "shared" / "samples"
BANK = SAMPLES / "bank"
MT940 = BANK / "wolph-mt940"
BAI2 = BANK / "ministryofjustice-bai2"
CAMT = BANK / "viafintech-camt_parser"
CAMT08_XSD = SAMPLES / "iso20022" / "camt.053.001.08.xsd"
#: defusedxml's own hostile test files (billion laughs, quadratic blow-up, external entities, DTDs)
XML_HOSTILE = SAMPLES / "xml" / "defusedxml-xmltestdata"


def sample(path: Path) -> Path:
    """``path``, or the test is skipped naming it."""
    if not path.is_file():
        pytest.skip(f"third-party sample {path} is absent (see shared/samples/README.md)")
    return path
