"""The claim loop reads its rows by unpacking them into the names of ``lease_queries.CLAIM_FIELDS`` (its hot path:
recon.db.lease_store.claimed_job): every value of a row built from those names lands in the Job field its column
names, on the PostgreSQL and the SQLite path, so a column added, dropped or moved in the list breaks here, not
silently in a worker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from recon.db.lease_queries import CLAIM_COLUMNS, CLAIM_COLUMNS_PG, CLAIM_FIELDS
from recon.db.lease_store import _claimed_sqlite, claimed_job
from recon.rows import Job, JobState

RUN_AFTER = datetime(2026, 12, 1, 9, tzinfo=UTC)
LEASE_UNTIL = datetime(2026, 12, 1, 10, tzinfo=UTC)
CREATED_AT = datetime(2026, 11, 30, 8, tzinfo=UTC)
VALUES: dict[str, Any] = {
    "id": 41, "queue": "charges", "kind": "charge", "payload": '{"payment_id":7}', "priority": 3,
    "run_after": RUN_AFTER, "attempts": 2, "max_attempts": 12, "lease_until": LEASE_UNTIL, "unique_key": "charge:7",
    "tenant": "ShopECOM", "progress": '{"checks":1}', "created_at": CREATED_AT, "last_error_kind": "network",
    "free_attempts": 1,
}
EXPECTED = Job(id=41, queue="charges", kind="charge", payload={"payment_id": 7}, state=JobState.LEASED, priority=3,
               run_after=RUN_AFTER, attempts=2, max_attempts=12, created_at=CREATED_AT, lease_owner="w1",
               lease_until=LEASE_UNTIL, unique_key="charge:7", last_error_kind="network", tenant="ShopECOM",
               progress={"checks": 1}, free_attempts=1)


def test_claim_rows__the_statement_returns_the_fields_in_their_order() -> None:
    assert sorted(VALUES) == sorted(CLAIM_FIELDS) and len(CLAIM_FIELDS) == 15
    assert CLAIM_COLUMNS == ", ".join(CLAIM_FIELDS)
    assert [c.split(" AS ")[-1] for c in CLAIM_COLUMNS_PG.split(", ")] == list(CLAIM_FIELDS)


def test_claim_rows__a_postgresql_row_lands_field_by_field() -> None:
    row = tuple(VALUES[name] for name in CLAIM_FIELDS)
    assert claimed_job(row, "w1") == EXPECTED


def test_claim_rows__a_sqlite_row_lands_field_by_field_its_times_in_microseconds() -> None:
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    micros = {name: (VALUES[name] - epoch) // timedelta(microseconds=1)
              for name in ("run_after", "lease_until", "created_at")}
    row = tuple(micros.get(name, VALUES[name]) for name in CLAIM_FIELDS)
    assert _claimed_sqlite([row], "w1") == [EXPECTED]


def test_claim_rows__a_sqlite_batch_comes_back_in_claim_order() -> None:
    """Priority first (highest), then run_after, then id, whatever order RETURNING gave; equal times are one
    datetime (converted once per batch)."""
    at = {"run_after": 1_000, "lease_until": 9_000, "created_at": 500}
    # (id, priority, run_after)
    spec = [(7, 0, 2_000), (3, 0, 1_000), (9, 5, 3_000), (1, 0, 2_000), (4, 5, 1_000), (8, -1, 0)]
    rows = [tuple({**VALUES, **at, "id": i, "priority": p, "run_after": r, "payload": f'{{"i":{i}}}'}[name]
                  for name in CLAIM_FIELDS) for i, p, r in spec]
    jobs = _claimed_sqlite(rows, "w1")
    assert [j.id for j in jobs] == [4, 9, 3, 1, 7, 8]
    assert [j.payload for j in jobs] == [{"i": 4}, {"i": 9}, {"i": 3}, {"i": 1}, {"i": 7}, {"i": 8}]
    assert len({id(j.lease_until) for j in jobs}) == 1 and len({id(j.created_at) for j in jobs}) == 1


def test_claim_rows__a_sqlite_payload_not_starting_with_its_value_is_read_as_json() -> None:
    row = tuple({**VALUES, "run_after": 0, "lease_until": 0, "created_at": 0, "payload": ' {"a": [1, 2]} '}[name]
                for name in CLAIM_FIELDS)
    assert _claimed_sqlite([row], "w1")[0].payload == {"a": [1, 2]}
