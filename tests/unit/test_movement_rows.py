"""recon.movement_rows: one audit event row for refunds and modifications, named by its kind when printed."""

from __future__ import annotations

from datetime import UTC, datetime

from recon.modification_rows import MODIFICATION
from recon.movement_rows import MovementEvent
from recon.refund_rows import REFUND

AT = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def test_movement_event__to_dict_names_the_movement_id_as_its_kind_does() -> None:
    event = MovementEvent(id=3, movement_id=7, from_status="processing", to_status="succeeded", source="webhook",
                          at=AT, job_id=11, attempt=2, details={"psp_reference": "re_1"})
    rest = {"from_status": "processing", "to_status": "succeeded", "source": "webhook",
            "at": "2026-12-05T12:00:00+00:00", "job_id": 11, "attempt": 2, "details": {"psp_reference": "re_1"}}
    assert event.to_dict(REFUND) == {"id": 3, "refund_id": 7, **rest}
    assert list(event.to_dict(MODIFICATION))[:2] == ["id", "modification_id"]
    assert event.to_dict(MODIFICATION)["modification_id"] == 7
