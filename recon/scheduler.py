"""Periodic jobs inside the pool: ``[schedule.NAME]`` in the config file, run by every ``recon worker``.

```toml
[schedule.sweep]
every = "15m"                 # slots at multiples of 15 minutes since the Unix epoch (UTC)
kind = "sweep"                # the job each slot queues: sweep, report, or any handler kind the workers have
payload = { older_than = "15m" }

[schedule.daily-report]
cron = "30 6 * * *"           # a cron expression (cronsim), read in `timezone`
timezone = "Europe/Berlin"
kind = "report"
payload = { psp = "stripe", directory = "reports" }
catch_up = "once"             # after downtime: "once" runs the latest missed slot once; "skip" skips it
```

**Each slot runs exactly once**, across any number of workers on any number of hosts, and never again after
its job finished: a slot is claimed by inserting ``(schedule, slot_at)`` into ``schedule_slots``, whose primary
key lets one insert win; the winner queues the job in the same transaction (recon.db.schedule_store). No
leader is elected. A scheduler only ever claims the **latest** due slot, so after downtime the missed slots
collapse into one: a slot later than ``misfire_grace`` (default 1 minute) runs once (``catch_up = "once"``) or
is recorded as skipped (``"skip"``); never N times. ``every`` slots are aligned to the epoch in UTC; ``cron``
slots follow the expression in ``timezone`` (DST handled by cronsim).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from recon.clock import Clock, SystemClock
from recon.config import unknown
from recon.db.schedule_store import ScheduleStore
from recon.durations import parse_duration
from recon.errors import ConfigError, UsageError
from recon.schedule_rows import ClaimedSlot, SlotJob

log = logging.getLogger(__name__)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_KEYS = {"every", "cron", "timezone", "kind", "queue", "payload", "catch_up", "misfire_grace", "max_attempts"}
CATCH_UP = ("once", "skip")
MISFIRE_GRACE_DEFAULT = timedelta(minutes=1)
TICK_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class Schedule:
    name: str
    kind: str
    queue: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    every: timedelta | None = None
    cron: str | None = None
    timezone: str = "UTC"
    catch_up: str = "once"
    misfire_grace: timedelta = MISFIRE_GRACE_DEFAULT
    max_attempts: int = 3

    def latest_slot(self, now: datetime) -> datetime:
        """The latest slot at or before ``now`` (aware UTC)."""
        if self.every is not None:
            periods = (now - _EPOCH) // self.every
            return _EPOCH + periods * self.every
        local = now.astimezone(ZoneInfo(self.timezone)) + timedelta(microseconds=1)
        return next(CronSim(self._cron(), local, reverse=True)).astimezone(UTC)

    def next_slot(self, now: datetime) -> datetime:
        """The first slot after ``now``."""
        if self.every is not None:
            return self.latest_slot(now) + self.every
        return next(CronSim(self._cron(), now.astimezone(ZoneInfo(self.timezone)))).astimezone(UTC)

    def _cron(self) -> str:
        if self.cron is None:
            raise ConfigError(f"schedule.{self.name}: neither every nor cron is set")
        return self.cron

    def describe(self) -> str:
        return f"every {self.every}" if self.every else f"cron {self.cron!r} in {self.timezone}"


def load_schedules(table: Mapping[str, Any] | None, *, source: str = "config",
                   default_queue: str = "default") -> list[Schedule]:
    """``[schedule.NAME]`` tables, each checked; ConfigError naming the file, schedule and key."""
    out = []
    for name, t in (table or {}).items():
        where = f"{source}: schedule.{name}"
        if not isinstance(t, Mapping):
            raise ConfigError(f"{where}: must be a table")
        for key in t:
            if key not in _KEYS:
                raise unknown("key", key, _KEYS, f"{where}.")
        if ("every" in t) == ("cron" in t):
            raise ConfigError(f"{where}: set exactly one of every (e.g. \"15m\") or cron (e.g. \"*/15 * * * *\")")
        kind = t.get("kind")
        if not isinstance(kind, str) or not kind.strip():
            raise ConfigError(f"{where}.kind: required, the job kind each slot queues (e.g. \"sweep\")")
        every = _every(t, where) if "every" in t else None
        tz = t.get("timezone", "UTC")
        try:
            ZoneInfo(tz) if isinstance(tz, str) else None
        except (ZoneInfoNotFoundError, ValueError):
            raise ConfigError(f"{where}.timezone: {tz!r} is not an IANA time zone (e.g. \"Europe/Berlin\")") from None
        if not isinstance(tz, str):
            raise ConfigError(f"{where}.timezone: must be a string")
        cron = t.get("cron")
        if cron is not None:
            if not isinstance(cron, str):
                raise ConfigError(f"{where}.cron: must be a string")
            try:
                CronSim(cron, datetime.now(ZoneInfo(tz)))
            except CronSimError as exc:
                raise ConfigError(f"{where}.cron: {cron!r} is not a cron expression ({exc})") from None
        catch_up = t.get("catch_up", "once")
        if catch_up not in CATCH_UP:
            raise ConfigError(f"{where}.catch_up: must be \"once\" or \"skip\" (got {catch_up!r})")
        payload = t.get("payload", {})
        if not isinstance(payload, Mapping):
            raise ConfigError(f"{where}.payload: must be a table")
        grace = _duration(t.get("misfire_grace"), where, "misfire_grace") or MISFIRE_GRACE_DEFAULT
        attempts = t.get("max_attempts", 3)
        if isinstance(attempts, bool) or not isinstance(attempts, int) or not 1 <= attempts <= 1000:
            raise ConfigError(f"{where}.max_attempts: must be an integer from 1 to 1000")
        queue = t.get("queue", default_queue)
        if not isinstance(queue, str) or not queue.strip():
            raise ConfigError(f"{where}.queue: must be a non-empty string")
        out.append(Schedule(name=name, kind=kind.strip(), queue=queue.strip(), payload=dict(payload), every=every,
                            cron=cron, timezone=tz, catch_up=catch_up, misfire_grace=grace, max_attempts=attempts))
    return out


def _every(t: Mapping[str, Any], where: str) -> timedelta:
    every = _duration(t["every"], where, "every")
    if every is None or every < timedelta(seconds=1):
        raise ConfigError(f"{where}.every: must be at least 1s")
    return every


def _duration(value: Any, where: str, key: str) -> timedelta | None:
    if value is None:
        return None
    try:
        return parse_duration(str(value))
    except UsageError as exc:
        raise ConfigError(f"{where}.{key}: {exc}") from None


@dataclass(frozen=True, slots=True)
class Fired:
    schedule: str
    slot_at: datetime
    job_id: int | None  #: None: skipped (late, catch_up skip)


class Scheduler:
    """One per worker process. ``run_once`` claims each schedule's latest due slot it has not seen claimed; the
    worker's ``scheduler`` loop (recon.engine.periodic, built by ``App.worker``; not in a burst run) calls it
    every ``TICK_SECONDS`` (a tick that finds nothing new reads nothing)."""

    def __init__(self, store: ScheduleStore, schedules: Sequence[Schedule], *, scheduler_id: str,
                 clock: Clock | None = None, max_depth: Mapping[str, int] | None = None) -> None:
        self.store = store
        self.schedules = list(schedules)
        self.scheduler_id = scheduler_id
        self.clock = clock or SystemClock()
        self.max_depth = dict(max_depth or {})
        self._seen: dict[str, datetime] | None = None  #: per schedule: the latest slot known to be claimed

    def run_once(self) -> list[Fired]:
        if self._seen is None:
            self._seen = {name: slot.slot_at for name, slot in self.store.latest().items()}
        now = self.clock.now()
        fired = []
        for s in self.schedules:
            slot = s.latest_slot(now)
            seen = self._seen.get(s.name)
            if seen is not None and slot <= seen:
                continue
            late = (now - slot).total_seconds()
            skip = late > s.misfire_grace.total_seconds() and s.catch_up == "skip"
            job = None if skip else SlotJob(queue=s.queue, kind=s.kind, payload=dict(s.payload),
                                            max_attempts=s.max_attempts)
            result = self.store.claim(s.name, slot, scheduler=self.scheduler_id, job=job,
                                      max_depth=self.max_depth.get(s.queue, 0))
            self._seen[s.name] = slot
            if result is False:
                continue  # another scheduler claimed it
            job_id = result if isinstance(result, int) and not isinstance(result, bool) else None
            fired.append(Fired(s.name, slot, job_id))
            if job_id is None:
                log.info("schedule %s: slot %s skipped (%.0fs late, catch_up skip)", s.name, slot.isoformat(), late)
            else:
                log.info("schedule %s: slot %s queued job %s (%s)", s.name, slot.isoformat(), job_id, s.kind)
        return fired


def status(schedules: Sequence[Schedule], latest: Mapping[str, ClaimedSlot], now: datetime) -> list[dict[str, Any]]:
    """``recon schedule list``: each schedule with its last claimed slot, its job's outcome, and the next slot."""
    out = []
    for s in schedules:
        last = latest.get(s.name)
        out.append({
            "name": s.name, "kind": s.kind, "queue": s.queue, "every_seconds": s.every.total_seconds()
            if s.every else None, "cron": s.cron, "timezone": s.timezone, "catch_up": s.catch_up,
            "payload": dict(s.payload), "next_slot": s.next_slot(now).isoformat(),
            "last_slot": last.slot_at.isoformat() if last else None,
            "last_enqueued_at": last.enqueued_at.isoformat() if last else None,
            "last_lag_seconds": round((last.enqueued_at - last.slot_at).total_seconds(), 3) if last else None,
            "last_job_id": last.job_id if last else None, "last_outcome": _outcome(last),
            "last_error": last.job_error if last else None,
        })
    return out


def _outcome(last: ClaimedSlot | None) -> str | None:
    """The last slot's job state; "skipped" for a slot skipped after downtime, "pruned" when its job is gone."""
    if last is None:
        return None
    if last.job_id is None:
        return "skipped"
    return last.job_state or "pruned"
