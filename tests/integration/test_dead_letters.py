"""The dead-letter set: `recon jobs list --state dead` with filters, and `recon jobs replay`."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from recon import Client, FixedClock, JobState, JobStore, Settings, connect
from recon.db.database import Database
from recon.rows import Finish, JobFilter
from tests.cli import Runner, run

DEFAULT_BUDGET = Settings().engine.default_max_attempts


def recon_json(url: str, *args: str) -> Any:
    r = run(*args, "--json", db_url=url, log_level="WARNING")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def make_dead(store: JobStore, *, queue: str = "default", kind: str = "charge", error_kind: str = "bug",
              attempts: int = 1, unique_key: str | None = None) -> int:
    """A job that ran ``attempts`` times (retried in between) and died of ``error_kind`` on the last."""
    job_id = Client(store, Settings()).enqueue(kind, {"q": queue}, queue=queue, unique_key=unique_key)
    for attempt in range(1, attempts + 1):
        [job] = store.claim(worker="w", queues=[queue], n=1, ttl=30)
        assert (job.id, job.attempts) == (job_id, attempt)
        last = attempt == attempts
        store.finish(worker="w", finishes=[Finish(
            id=job_id, attempt=attempt, state="dead" if last else "retryable",
            outcome="dead" if last else "retried", delay=None if last else 0.0, error_kind=error_kind,
            error=f"{error_kind} on attempt {attempt}")])
    return job_id


def states(store: JobStore, ids: list[int]) -> dict[int, JobState]:
    return {j.id: j.state for j in store.get_many(ids)}


def test_dead_letters__list_filters_by_queue_kind_error_kind_and_since(db: Database, db_url: str,
                                                                       recon: Runner) -> None:
    store = JobStore(db)
    a = make_dead(store, queue="charges", error_kind="validation")
    b = make_dead(store, queue="charges", kind="refund", error_kind="psp_unavailable")
    c = make_dead(store, queue="reconcile", error_kind="psp_unavailable")
    old_db = connect(db_url, clock=FixedClock(datetime.now(UTC) - timedelta(days=3)))
    try:
        old = make_dead(JobStore(old_db), queue="charges", error_kind="psp_unavailable")
    finally:
        old_db.dispose()
    Client(store, Settings()).enqueue("charge", queue="charges")  # runnable: never in the dead-letter set

    def listed(*args: str) -> list[int]:
        return [j["id"] for j in recon_json(db_url, "jobs", "list", *args)["jobs"]]

    assert listed("--state", "dead") == [a, b, c, old]
    assert listed("--state", "dead", "--queue", "charges") == [a, b, old]
    assert listed("--state", "dead", "--queue", "charges", "--kind", "refund") == [b]
    assert listed("--state", "dead", "--error-kind", "psp_unavailable") == [b, c, old]
    assert listed("--state", "dead", "--error-kind", "psp_unavailable", "--since", "1d") == [b, c]
    since = (datetime.now(UTC) - timedelta(days=4)).strftime("%Y-%m-%dT%H:%M:%S")  # ISO, no offset: UTC
    assert listed("--state", "dead", "--since", since, "--limit", "2") == [a, b]
    assert listed("--state", "runnable", "--since", "1d") == []  # --since means finished since
    human = recon("jobs", "list", "--state", "dead", "--error-kind", "validation", db_url=db_url, log_level="WARNING")
    assert human.returncode == 0 and "validation" in human.stdout


def test_dead_letters__replay_moves_exactly_the_filtered_set_and_keeps_attempts(db: Database, db_url: str,
                                                                               staff: object, recon: Runner) -> None:
    store = JobStore(db)
    target = [make_dead(store, queue="charges", error_kind="psp_unavailable", attempts=3),
              make_dead(store, queue="charges", kind="refund", error_kind="psp_unavailable", attempts=1)]
    others = [make_dead(store, queue="charges", error_kind="validation"),
              make_dead(store, queue="reconcile", error_kind="psp_unavailable"),
              make_dead(store, queue="charges", kind="other", error_kind="bug")]
    runnable = Client(store, Settings()).enqueue("charge", queue="charges")
    before = {j.id: j for j in store.get_many(target)}

    doc = recon_json(db_url, "jobs", "replay", "--by", "ann", "--queue", "charges", "--error-kind",
                     "psp_unavailable")

    assert doc == {"dry_run": False, "attempts_added": DEFAULT_BUDGET, "batches": 1, "skipped": [],
                   "replayed": 2, "job_ids": target}
    assert states(store, target) == dict.fromkeys(target, JobState.RUNNABLE)
    assert states(store, others) == dict.fromkeys(others, JobState.DEAD)
    assert states(store, [runnable]) == {runnable: JobState.RUNNABLE}
    for job_id in target:
        job = store.get(job_id)
        assert job is not None and job.finished_at is None
        assert job.attempts == before[job_id].attempts  # the fencing token is never reset
        assert job.max_attempts == before[job_id].attempts + DEFAULT_BUDGET
        [replay] = store.dead_letters.replays(job_id)
        assert (replay.attempt, replay.max_attempts_before, replay.max_attempts_after, replay.error_kind) == (
            before[job_id].attempts, before[job_id].max_attempts, job.max_attempts, "psp_unavailable")
        assert replay.replayed_by == "ann"  # the operator of --by
    assert all(store.dead_letters.replays(i) == [] for i in others)

    # the next claim is the next attempt: history stays one row per claim, the replay sits between
    three = target[0]
    [job] = [j for j in store.claim(worker="w2", queues=["charges"], n=10, ttl=30) if j.id == three]
    assert job.attempts == 4
    store.finish(worker="w2", finishes=[Finish(id=three, attempt=4, state="succeeded", outcome="succeeded")])
    shown = recon_json(db_url, "jobs", "show", str(three))
    assert [(a["attempt"], a["outcome"]) for a in shown["attempts"]] == [
        (1, "retried"), (2, "retried"), (3, "dead"), (4, "succeeded")]
    assert [(r["attempt"], r["max_attempts_before"], r["max_attempts_after"], r["error_kind"])
            for r in shown["replays"]] == [(3, 10, 3 + DEFAULT_BUDGET, "psp_unavailable")]
    human = recon("jobs", "show", str(three), db_url=db_url, log_level="WARNING")
    assert human.returncode == 0
    lines = human.stdout.splitlines()
    died = next(i for i, line in enumerate(lines) if "psp_unavailable on attempt 3" in line)
    replayed = next(i for i, line in enumerate(lines) if "after 3" in line)
    assert died < replayed < next(i for i, line in enumerate(lines) if re.match(r"^│ 4\s+│", line))
    assert "replayed" in lines[replayed]
    assert f"max_attempts 10 -> {3 + DEFAULT_BUDGET} (was psp_unavailable)" in lines[replayed]


def test_dead_letters__dry_run_lists_and_changes_nothing(db: Database, db_url: str, recon: Runner) -> None:
    store = JobStore(db)
    ids = [make_dead(store, error_kind="bug") for _ in range(3)]
    make_dead(store, error_kind="validation")
    before = store.get_many(ids)

    doc = recon_json(db_url, "jobs", "replay", "--error-kind", "bug", "--attempts", "2", "--dry-run")

    assert doc["dry_run"] is True and doc["would_replay"] == 3 and doc["attempts_added"] == 2
    assert [j["id"] for j in doc["jobs"]] == ids and {j["state"] for j in doc["jobs"]} == {"dead"}
    assert store.get_many(ids) == before
    assert all(store.dead_letters.replays(i) == [] for i in ids)
    human = recon("jobs", "replay", "--error-kind", "bug", "--dry-run", db_url=db_url, log_level="WARNING")
    assert human.returncode == 0
    assert "would replay 3 dead jobs" in human.stdout and "nothing changed" in human.stdout
    assert store.get_many(ids) == before


def test_dead_letters__replay_limit_batches_and_attempts(db: Database, db_url: str, staff: object) -> None:
    store = JobStore(db)
    ids = [make_dead(store) for _ in range(7)]

    doc = recon_json(db_url, "jobs", "replay", "--by", "ann", "--limit", "5", "--batch", "2", "--attempts", "3")

    assert (doc["replayed"], doc["job_ids"], doc["batches"]) == (5, ids[:5], 3)
    assert states(store, ids) == {**dict.fromkeys(ids[:5], JobState.RUNNABLE),
                                  **dict.fromkeys(ids[5:], JobState.DEAD)}
    assert {j.max_attempts for j in store.get_many(ids[:5])} == {1 + 3}
    rest = recon_json(db_url, "jobs", "replay", "--by", "ann")  # a second run continues with what is still dead
    assert rest["job_ids"] == ids[5:]
    assert recon_json(db_url, "jobs", "replay", "--by", "ann")["replayed"] == 0


def test_dead_letters__replay_skips_jobs_whose_unique_key_is_taken(db: Database, db_url: str, staff: object,
                                                                  recon: Runner) -> None:
    store = JobStore(db)
    held = make_dead(store, unique_key="payment:1")
    # allowed: the first is finished (another queue, so that make_dead's claims leave it alone)
    holder = Client(store, Settings()).enqueue("charge", queue="later", unique_key="payment:1")
    first = make_dead(store, unique_key="payment:2")
    second = make_dead(store, unique_key="payment:2")  # enqueued after the first died, died too
    free = make_dead(store, unique_key="payment:3")

    dry = recon_json(db_url, "jobs", "replay", "--dry-run")
    doc = recon_json(db_url, "jobs", "replay", "--by", "ann", "--batch", "1")

    assert dry["skipped"] == doc["skipped"] == [held, second]
    assert [j["id"] for j in dry["jobs"]] == doc["job_ids"] == [first, free]
    assert states(store, [held, holder, first, second, free]) == {
        held: JobState.DEAD, holder: JobState.RUNNABLE, first: JobState.RUNNABLE, second: JobState.DEAD,
        free: JobState.RUNNABLE}
    human = recon("jobs", "replay", "--by", "ann", db_url=db_url, log_level="WARNING")
    assert "2 left dead: an unfinished job holds their unique key" in human.stdout


def test_dead_letters__replay_clears_a_cancel_request_that_came_too_late(db: Database) -> None:
    store = JobStore(db)
    job_id = Client(store, Settings()).enqueue("charge")
    assert [j.id for j in store.claim(worker="w", queues=["default"], n=1, ttl=30)] == [job_id]
    assert store.cancel(job_id) == "requested"
    store.finish(worker="w", finishes=[Finish(id=job_id, attempt=1, state="dead", outcome="dead",
                                              error_kind="validation", error="no")])
    dead = store.get(job_id)
    assert dead is not None and dead.state is JobState.DEAD and dead.cancel_requested

    batch = store.dead_letters.replay_dead(filters=JobFilter(), after_id=0, limit=10, budget=1)

    assert batch.replayed == [job_id]
    [claimed] = store.claim(worker="w", queues=["default"], n=1, ttl=30)  # claimable again
    assert (claimed.id, claimed.attempts, claimed.max_attempts) == (job_id, 2, 2)


@pytest.mark.parametrize(("args", "message"), [
    (["jobs", "replay", "--since", "last week"],
     "Invalid value for '--since': 'last week' is neither a duration"),
    (["jobs", "list", "--state", "dead", "--since", "2026-13-40"], "Invalid value for '--since'"),
    (["jobs", "list", "--since", "0001-01-01T00:30:00+01:00"], "Invalid value for '--since'"),  # year 0 in UTC
    (["jobs", "replay", "--since", "9999-12-31T23:00:00-05:00"], "Invalid value for '--since'"),  # year 10000
    (["jobs", "replay", "--limit", "0"], "Invalid value for '--limit'"),
    (["jobs", "replay", "--attempts", "0"], "Invalid value for '--attempts'"),
])
def test_dead_letters__bad_usage_exits_2_with_one_error_line(db_url: str, args: list[str],
                                                            message: str, recon: Runner) -> None:
    r = recon(*args, db_url=db_url, log_level="WARNING")
    assert r.returncode == 2
    errors = r.stderr.strip().splitlines()  # one line: "recon jobs …: Invalid value for …"
    assert len(errors) == 1 and errors[0].startswith("recon jobs ") and message in errors[0], r.stderr
    assert "Traceback" not in r.stderr
