"""Query.for_driver: the statements the worker's dedicated connection sends to psycopg directly."""

from __future__ import annotations

import pytest

from recon.db import lease_queries as q


def test_for_driver__renders_psycopg_placeholders_and_expands_lists() -> None:
    sql = q.job_claim_available.for_driver("postgresql", queues=3)
    assert "queue IN (%(queues_0)s, %(queues_1)s, %(queues_2)s)" in sql
    assert "LIMIT %(n)s" in sql and "lease_owner = %(worker)s" in sql
    assert "coalesce(CAST(%(now)s AS timestamptz), now())" in sql
    assert ":" not in sql.replace("::", "")  # no SQLAlchemy-style bind left behind
    assert q.job_claim_available.for_driver("postgresql", queues=3) is sql  # cached


def test_for_driver__leaves_casts_alone_and_needs_every_expanding_length() -> None:
    sql = q.job_finish_many_if_owner.for_driver("postgresql")
    assert "CAST(%(rows)s AS jsonb)" in sql and "CAST(%(ids)s AS bigint[])" in sql
    with pytest.raises(ValueError, match="expanding parameter 'queues'"):
        q.job_claim_available.for_driver("postgresql")


def test_for_driver__refuses_a_literal_percent_and_a_missing_dialect() -> None:
    like = q.Query("t", "a test statement", sql="SELECT 1 WHERE 'a' LIKE 'a%' AND 1 = :x")
    with pytest.raises(ValueError, match="literal %"):
        like.for_driver("postgresql")
    sqlite_only = q.Query("t2", "a test statement", sqlite="SELECT :x")
    with pytest.raises(NotImplementedError):
        sqlite_only.for_driver("postgresql")
    assert q.Query("t3", "a test statement", sql="SELECT CAST(:x AS int)").for_driver("postgresql") == \
        "SELECT CAST(%(x)s AS int)"


def test_minor_thresholds__exact_per_exponent_never_rounded_the_wrong_way() -> None:
    from recon.db.review_queries import minor_thresholds

    assert minor_thresholds("high_min", 10_000_000, at_least=True) == {  # 1,000 major units
        "high_min_0": 1_000, "high_min_2": 100_000, "high_min_3": 1_000_000, "high_min_4": 10_000_000}
    # 1.2345 major units: at least it means the next minor unit up, at most the one below
    assert minor_thresholds("min", 12_345, at_least=True) == {"min_0": 2, "min_2": 124, "min_3": 1_235,
                                                              "min_4": 12_345}
    assert minor_thresholds("max", 12_345, at_least=False) == {"max_0": 1, "max_2": 123, "max_3": 1_234,
                                                               "max_4": 12_345}
    assert minor_thresholds("max", None, at_least=False) == {"max_0": None, "max_2": None, "max_3": None,
                                                             "max_4": None}
