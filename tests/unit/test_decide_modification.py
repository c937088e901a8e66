"""recon.reconcile.decide's captures and cancels: every row of ``modification_sent``'s table (the table and the
cases are checked to match, row for row), its expected decisions written out here, never computed by the module.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from psp_adapters.protocol import Authorised, Failed, NotFound, Pending, Succeeded, Unknown
from recon.modification_rows import Modification
from recon.reconcile.decide import ModificationHeal, modification_heal, modification_recheck, modification_sent
from recon.rows import PaymentStatus

P = PaymentStatus
MH = ModificationHeal
T = datetime(2026, 12, 1, tzinfo=UTC)


def mod(status: PaymentStatus, kind: str = "capture", psp_id: str | None = None) -> Modification:
    return Modification(id=4, payment_id=7, kind=kind, modification_reference="order-7-capture1", amount=600,
                        currency="EUR", psp="stripe", status=status, idempotency_key="recon-capture-k",
                        requested_by="alice", created_at=T, updated_at=T, psp_modification_id=psp_id)


CAPTURED = Succeeded(psp_reference="pi_A", amount=600, currency="EUR", raw_status="succeeded")
CAPTURED_LESS = Succeeded(psp_reference="pi_A", amount=500, currency="EUR", raw_status="succeeded")
CAPTURED_MORE = Succeeded(psp_reference="pi_A", amount=700, currency="EUR", raw_status="succeeded")
CAPTURED_USD = Succeeded(psp_reference="pi_A", amount=600, currency="usd", raw_status="succeeded")
REFUSED = Failed(psp_reference="8815", raw_status="CAPTURE_FAILED", reason="Insufficient balance")
#: a failed capture (no failure reason stored) the PSP says captured 6.00 EUR
LATE = "status_mismatch: ours failed (no reason), the PSP says succeeded 6.00 EUR for capture order-7-capture1"
CONFLICT = ("reference_conflict: ours is 8815, the PSP names 8816 for our capture order-7-capture1 (a second "
            "capture, or not ours: a person looks)")

TABLE: list[tuple[str, Callable[[], Any], Any]] = [
    ("anything naming another PSP id than the one stored | unfinished",
     lambda: modification_sent(mod(P.PENDING, psp_id="8815"), Pending(psp_reference="8816")),
     MH(P.NEEDS_REVIEW, review_reason=CONFLICT)),
    ("anything naming another PSP id than the one stored | unfinished",
     lambda: modification_heal(mod(P.PENDING, psp_id="8815"), Succeeded(psp_reference="8816")),
     MH(P.NEEDS_REVIEW, review_reason=CONFLICT)),
    ("succeeded, a capture of at most ours, same currency | unfinished",
     lambda: modification_sent(mod(P.PROCESSING), CAPTURED), MH(P.SUCCEEDED, psp_modification_id="pi_A", captured=600)),
    ("succeeded, a capture of at most ours, same currency | unfinished",
     lambda: modification_heal(mod(P.PENDING), CAPTURED_LESS),
     MH(P.SUCCEEDED, psp_modification_id="pi_A", captured=500)),
    ("succeeded, a capture of more, or another currency | unfinished",
     lambda: modification_sent(mod(P.PROCESSING), CAPTURED_MORE),
     MH(P.NEEDS_REVIEW, psp_modification_id="pi_A", review_reason="amount_mismatch: ours 600 EUR, PSP captured 700")),
    ("succeeded, a capture of more, or another currency | unfinished",
     lambda: modification_heal(mod(P.PENDING), CAPTURED_USD),
     MH(P.NEEDS_REVIEW, psp_modification_id="pi_A", review_reason="currency_mismatch: ours EUR, PSP USD")),
    ("succeeded, a cancel | unfinished",
     lambda: modification_sent(mod(P.PROCESSING, "cancel"), Succeeded(psp_reference="pi_A", raw_status="canceled")),
     MH(P.SUCCEEDED, psp_modification_id="pi_A")),
    ("failed | unfinished", lambda: modification_sent(mod(P.PROCESSING), REFUSED),
     MH(P.FAILED, psp_modification_id="8815", failure_reason="declined: Insufficient balance")),
    ("failed | unfinished", lambda: modification_heal(mod(P.PENDING, psp_id="8815"), REFUSED),
     MH(P.FAILED, psp_modification_id="8815", failure_reason="psp: Insufficient balance")),
    ("anything else | unfinished", lambda: modification_sent(mod(P.PROCESSING), Pending(psp_reference="8815")),
     MH(P.PENDING, psp_modification_id="8815")),
    ("anything else | unfinished", lambda: modification_sent(mod(P.PROCESSING), Unknown(raw_status="on_hold")),
     MH(P.PENDING)),
    ("anything else | unfinished", lambda: modification_heal(mod(P.PENDING), Pending(raw_status="requires_capture")),
     None),
    ("anything else | unfinished", lambda: modification_heal(mod(P.PENDING), NotFound()), None),
    ("anything else | unfinished", lambda: modification_heal(mod(P.PENDING), Authorised(psp_reference="pi_A")),
     None),
    ("succeeded, a capture, later (``late_capture``) | failed",
     lambda: modification_heal(mod(P.FAILED), CAPTURED),
     MH(P.NEEDS_REVIEW, psp_modification_id="pi_A", review_reason=LATE)),
    ("succeeded, a capture, later (``late_capture``) | failed",
     lambda: modification_heal(mod(P.FAILED, psp_id="8815"), Succeeded(psp_reference="8816")),
     MH(P.NEEDS_REVIEW, review_reason=CONFLICT)),
    ("anything else | final", lambda: modification_heal(mod(P.SUCCEEDED, psp_id="pi_A"), REFUSED), None),
    ("anything else | final", lambda: modification_heal(mod(P.FAILED, psp_id="8815"), REFUSED), None),
    ("anything else | final",
     lambda: modification_heal(mod(P.FAILED, "cancel"), Succeeded(psp_reference="pi_A", raw_status="canceled")),
     None),
    ("anything else | final",
     lambda: modification_heal(mod(P.NEEDS_REVIEW, psp_id="8815"), Succeeded(psp_reference="9")), None),
]


def docstring_rows(func: Callable[..., Any] = modification_sent) -> list[str]:
    rows = []
    for line in (func.__doc__ or "").splitlines():
        line = line.strip()
        if line.startswith("| ") and set(line) - set("|- "):
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            rows.append(" | ".join(cells[:-1]))
    return [row for row in rows if row != "the PSP says | ours"]


def test_decide__the_modification_table_and_its_cases_match_row_for_row() -> None:
    rows = docstring_rows()
    assert len(rows) == 8 and len(set(rows)) == len(rows)
    assert sorted({row for row, _, _ in TABLE}) == sorted(rows)


@pytest.mark.parametrize(("row", "call", "expected"), TABLE, ids=[f"{i}: {row}" for i, (row, _, _) in enumerate(TABLE)])
def test_decide__every_row_of_the_modification_table(row: str, call: Callable[[], Any], expected: Any) -> None:
    assert call() == expected


# --- modification_recheck: a final capture or cancel asked about again (``recon review recheck MOD_REF``) ----------

CANCELED = Failed(psp_reference="pi_A", raw_status="canceled", reason="fraudulent")
MISMATCH = "status_mismatch: the PSP says canceled for capture order-7-capture1, ours succeeded, reason fraudulent"

RECHECK: list[tuple[str, Callable[[], Any], Any]] = [
    ("anything naming another PSP id than the one stored | succeeded",
     lambda: modification_recheck(mod(P.SUCCEEDED, psp_id="8815"), Succeeded(psp_reference="8816"), captured=600),
     MH(P.NEEDS_REVIEW, review_reason=CONFLICT)),
    ("failed (a capture: canceled; a cancel: captured) | succeeded",
     lambda: modification_recheck(mod(P.SUCCEEDED, psp_id="pi_A"), CANCELED, captured=600),
     MH(P.NEEDS_REVIEW, review_reason=MISMATCH)),
    ("failed (a capture: canceled; a cancel: captured) | succeeded",
     lambda: modification_recheck(mod(P.SUCCEEDED, "cancel"), Failed(raw_status="succeeded"), captured=0),
     MH(P.NEEDS_REVIEW, review_reason="status_mismatch: the PSP says succeeded for cancel order-7-capture1, ours "
                                      "succeeded")),
    ("succeeded, a capture of another amount or currency | succeeded",
     lambda: modification_recheck(mod(P.SUCCEEDED), CAPTURED_LESS, captured=600),
     MH(P.NEEDS_REVIEW, review_reason="amount_mismatch: ours captured 600 EUR, PSP captured 500")),
    ("succeeded, a capture of another amount or currency | succeeded",
     lambda: modification_recheck(mod(P.SUCCEEDED), CAPTURED_USD, captured=600),
     MH(P.NEEDS_REVIEW, review_reason="currency_mismatch: ours EUR, PSP USD")),
    ("anything else (agreeing, pending, cannot say, not found) | succeeded",
     lambda: modification_recheck(mod(P.SUCCEEDED, psp_id="pi_A"), CAPTURED_LESS, captured=500), None),
    ("anything else (agreeing, pending, cannot say, not found) | succeeded",
     lambda: modification_recheck(mod(P.SUCCEEDED, "cancel"), Succeeded(psp_reference="pi_A"), captured=0), None),
    ("anything else (agreeing, pending, cannot say, not found) | succeeded",
     lambda: modification_recheck(mod(P.SUCCEEDED), Pending(raw_status="[received]"), captured=600), None),
    ("anything else (agreeing, pending, cannot say, not found) | succeeded",
     lambda: modification_recheck(mod(P.SUCCEEDED, psp_id="pi_A"), NotFound(), captured=600), None),
    ("succeeded, a capture (``late_capture``) | failed",
     lambda: modification_recheck(mod(P.FAILED), CAPTURED, captured=0),
     MH(P.NEEDS_REVIEW, psp_modification_id="pi_A", review_reason=LATE)),
    ("anything else | failed, needs_review",
     lambda: modification_recheck(mod(P.FAILED, psp_id="pi_A"), CANCELED, captured=0), None),
    ("anything else | failed, needs_review",
     lambda: modification_recheck(mod(P.FAILED, "cancel"), Succeeded(psp_reference="pi_A"), captured=0), None),
    ("anything else | failed, needs_review",
     lambda: modification_recheck(mod(P.NEEDS_REVIEW, psp_id="8815"), CANCELED, captured=0), None),
]


def test_decide__the_recheck_table_and_its_cases_match_row_for_row() -> None:
    rows = docstring_rows(modification_recheck)
    assert len(rows) == 6 and len(set(rows)) == len(rows)
    assert sorted({row for row, _, _ in RECHECK}) == sorted(rows)


@pytest.mark.parametrize(("row", "call", "expected"), RECHECK,
                         ids=[f"{i}: {row}" for i, (row, _, _) in enumerate(RECHECK)])
def test_decide__every_row_of_the_recheck_table(row: str, call: Callable[[], Any], expected: Any) -> None:
    assert call() == expected
