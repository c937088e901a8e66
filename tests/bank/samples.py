"""Where the third-party bank-format samples live. Never in the repository: tests/bank/get_samples.py fetches
them from package registries (exact versions, sha256-pinned archives) into ``<repo>/.samples/`` (gitignored), whose
README.md names each source, its version and licence. ``.ci/run`` runs it before the tests.

What comes from where (all test-time data, no runtime dependency of recon):

- ``bank/wolph-mt940/<bank>/*.sta`` + ``*.yml``: the mt-940 sdist 4.23.0's ``mt940_tests/`` (many banks' MT940
  files with the results the mt-940 parser gives for them);
- ``bank/ministryofjustice-bai2/*.bai2``: the bai2 sdist's ``tests/data/``;
- ``bank/oca-account_statement_import_camt/``: the OCA Odoo camt importer's test statements (camt.053.001.02 and
  .001.04) with that importer's results (``golden-*.pydata``);
- ``bank/okane/*.xml``: okane's camt.053.001.02 test statements;
- ``xml/defusedxml-xmltestdata/``: defusedxml's hostile XML files;
- ``iso20022/camt.053.001.0{2,8}.xsd``: ISO 20022's XSDs as the camt053 package ships them.

A directory is looked up in ``<repo>/.samples`` first, then in ``<repo>/../shared/samples`` (where an earlier,
hand-made copy lives on some machines, with viafintech/camt_parser's examples, ``bank/viafintech-camt_parser``, which
no registry we reach carries: rubygems is not one of them).

A test that needs an absent sample skips, naming it and how to fetch it; with ``RECON_BANK_SAMPLES=required`` (set
by ``.ci/run``) it fails instead, except for the samples no registry carries (``FETCHED`` says which are fetched).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: where tests/bank/get_samples.py puts them, then the hand-made copy beside the clone
ROOTS = (REPO / ".samples", REPO.parent / "shared" / "samples")
#: the directories tests/bank/get_samples.py fills (its SOURCES' ``dest``): absent in required mode = failure
FETCHED = ("bank/wolph-mt940", "bank/ministryofjustice-bai2", "bank/oca-account_statement_import_camt", "bank/okane",
           "xml/defusedxml-xmltestdata", "iso20022")


def _located(relative: str) -> Path:
    """``relative`` under the first root that has it (else under ``.samples``, where it would be fetched to)."""
    for root in ROOTS:
        if (root / relative).is_dir():
            return root / relative
    return ROOTS[0] / relative


MT940 = _located("bank/wolph-mt940")
BAI2 = _located("bank/ministryofjustice-bai2")
OCA_CAMT = _located("bank/oca-account_statement_import_camt")
OKANE = _located("bank/okane")
#: viafintech/camt_parser's examples (camt.053.001.02/.04/.08/.10): only in the hand-made ../shared/samples copy
CAMT = _located("bank/viafintech-camt_parser")
ISO20022 = _located("iso20022")
#: defusedxml's own hostile test files (billion laughs, quadratic blow-up, external entities, DTDs)
XML_HOSTILE = _located("xml/defusedxml-xmltestdata")


def _fetched(path: Path) -> bool:
    return any(path.is_relative_to(root / relative) for root in ROOTS for relative in FETCHED)


def sample(path: Path) -> Path:
    """``path``, or the test is skipped naming it (fails instead under RECON_BANK_SAMPLES=required, for a sample
    tests/bank/get_samples.py fetches)."""
    if path.is_file():
        return path
    if _fetched(path):
        reason = (f"third-party sample {path} is absent: run `python tests/bank/get_samples.py` "
                  f"(.ci/run does, and sets RECON_BANK_SAMPLES=required)")
        if os.environ.get("RECON_BANK_SAMPLES") == "required":
            pytest.fail(reason)
    else:
        reason = (f"third-party sample {path} is absent: no package registry carries it, only a hand-made "
                  f"../shared/samples copy (tests/bank/samples.py)")
    pytest.skip(reason)
