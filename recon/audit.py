"""The audit trail: who did what, when, with what outcome and on what evidence, tamper-evident.

**What is recorded.** Every write by a person or the system is one row: ``audit_log`` for resolutions,
rechecks, replays, retries and cancels, PSP pauses and resumes, four-eyes requests and decisions, operator
changes, console logins (and their failures and lockouts), and the configuration a worker started with; and
``payment_events`` for every payment transition (the event each compare-and-set writes already: its source,
job, attempt and the PSP's evidence). Both are only ever inserted into (``recon audit prune`` aside).

**The chain.** Rows are inserted *unchained*: no write path takes a lock or reads the previous row's hash, so
payment transitions (thousands a second) cost nothing more than before. The **sealer** (``Sealer.run_once``: a
``Periodic`` in every worker, every ``[audit] seal_interval``, and ``recon audit seal``) chains each stream in id
order into ``audit_seals``, under one lock of its own (PostgreSQL's advisory lock; SQLite's single writer):

    row_hash   = SHA-256("recon-audit-v1\\n" + stream + "\\n" + canonical(row))
    chain_hash = SHA-256(previous chain_hash + row_hash)       (bytes; the first from SHA-256("genesis:" + stream))

``canonical(row)``: the row's columns as JSON, keys sorted, no spaces, UTF-8, times as ISO 8601 UTC with
microseconds. **Gaps**: ids come from a sequence, and a transaction that took one may commit after a higher id
did, or roll back and never commit it. The sealer stops at a missing id until the row after it is
``gap_grace`` old (2 minutes), then seals the id as a ``gap``: an id that never committed. So a row is sealed at
the latest ``seal_interval`` after it commits, or ``gap_grace`` after the next one when an id before it is
missing; a row that commits later than ``gap_grace`` under a gap's id (no recon transaction lives that long) is
reported by verify as inserted.

**Verify** (``verify``, ``recon audit verify [--since]``) walks each stream's seals and rows together and names
the first that does not match: a sealed row whose hash differs (**edited**), a sealed row that is gone
(**deleted**), a row where a gap was sealed, or an unsealed row below the head (**inserted**), a seal whose
chain does not follow from the one before (a seal edited or deleted). It prints each stream's head
(``chain_hash`` of the last seal): recorded elsewhere, it also proves later that nothing was rewritten from the
start, seals included. Rows above the head are not yet sealed; verify counts them.

**Retention.** ``[audit] retention`` (default 400 days; at least 365, PCI DSS 10.5.1: a year, three months at
hand): ``recon audit prune`` refuses a cut-off younger than it; it deletes only sealed rows and their seals, and
the first seal left becomes the anchor (verify prints it).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from recon.config import unknown
from recon.db.audit_store import STREAMS, AuditStore
from recon.durations import parse_duration
from recon.errors import ConfigError, UsageError
from recon.operator_rows import AuditEntry, AuditRecord, Seal

log = logging.getLogger(__name__)

RETENTION_DEFAULT = timedelta(days=400)
#: PCI DSS v4.0.1 10.5.1: audit logs kept at least twelve months
RETENTION_MIN = timedelta(days=365)
SEAL_INTERVAL_DEFAULT = timedelta(seconds=10)
GAP_GRACE_DEFAULT = timedelta(minutes=2)
#: rows read and sealed per transaction
SEAL_BATCH = 2000
_KEYS = {"retention", "seal_interval", "gap_grace"}
_PREFIX = b"recon-audit-v1\n"


@dataclass(frozen=True, slots=True)
class AuditConfig:
    """``[audit]``: ``retention`` (365 days to 100 years), ``seal_interval`` (1 s to 1 h), ``gap_grace`` (10 s to
    1 h)."""

    retention: timedelta = RETENTION_DEFAULT
    seal_interval: timedelta = SEAL_INTERVAL_DEFAULT
    gap_grace: timedelta = GAP_GRACE_DEFAULT

    @classmethod
    def load(cls, table: Mapping[str, Any] | None, *, source: str = "config") -> AuditConfig:
        table = dict(table or {})
        where = f"{source}: audit"
        for key in table:
            if key not in _KEYS:
                raise unknown("key", key, _KEYS, f"{where}.")
        retention = _duration(table, "retention", RETENTION_DEFAULT, where)
        if not RETENTION_MIN <= retention <= timedelta(days=36_500):
            raise ConfigError(f"{where}.retention: must be at least 365d (PCI DSS 10.5.1: a year), got "
                              f"{table['retention']!r}")
        interval = _duration(table, "seal_interval", SEAL_INTERVAL_DEFAULT, where)
        if not timedelta(seconds=1) <= interval <= timedelta(hours=1):
            raise ConfigError(f"{where}.seal_interval: must be between 1s and 1h, got {table['seal_interval']!r}")
        grace = _duration(table, "gap_grace", GAP_GRACE_DEFAULT, where)
        if not timedelta(seconds=10) <= grace <= timedelta(hours=1):
            raise ConfigError(f"{where}.gap_grace: must be between 10s and 1h, got {table['gap_grace']!r}")
        return cls(retention=retention, seal_interval=interval, gap_grace=grace)


def _duration(table: Mapping[str, Any], key: str, default: timedelta, where: str) -> timedelta:
    if key not in table:
        return default
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConfigError(f'{where}.{key}: expected a duration such as "400d", got {value!r}')
    try:
        return parse_duration(str(value))
    except UsageError as exc:
        raise ConfigError(f"{where}.{key}: {str(exc).removeprefix('duration: ')}") from None


# --- the encoding and the chain --------------------------------------------------------------------------------


def canonical(fields: Mapping[str, Any]) -> bytes:
    """A row's columns as canonical JSON (module docstring)."""
    return json.dumps(dict(fields), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=_iso).encode("utf-8")


def _iso(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat(timespec="microseconds")
    raise TypeError(f"{type(value).__name__} in an audit row")


def row_hash(record: AuditRecord) -> str:
    return hashlib.sha256(_PREFIX + record.stream.encode() + b"\n" + canonical(record.fields)).hexdigest()


def gap_hash(stream: str, row_id: int) -> str:
    return hashlib.sha256(_PREFIX + f"{stream}\ngap:{row_id}".encode()).hexdigest()


def genesis(stream: str) -> str:
    return hashlib.sha256(f"genesis:{stream}".encode()).hexdigest()


def chain(previous: str, row: str) -> str:
    return hashlib.sha256(bytes.fromhex(previous) + bytes.fromhex(row)).hexdigest()


# --- the sealer ------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class SealResult:
    sealed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STREAMS, 0))  #: rows sealed per stream
    gaps: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STREAMS, 0))  #: ids sealed as gaps
    waiting: dict[str, int | None] = field(default_factory=lambda: dict.fromkeys(STREAMS))  #: a gap not yet old


class Sealer:
    """Chains unsealed rows into ``audit_seals`` (module docstring); ``run_once`` is the pass."""

    def __init__(self, store: AuditStore, *, gap_grace: timedelta = GAP_GRACE_DEFAULT, batch: int = SEAL_BATCH):
        self.store = store
        self.gap_grace = gap_grace
        self.batch = batch

    def run_once(self, stop: threading.Event | None = None) -> SealResult:
        result = SealResult()
        for stream in STREAMS:
            while not (stop is not None and stop.is_set()):
                sealed, gaps, waiting = self._seal_batch(stream)
                result.sealed[stream] += sealed
                result.gaps[stream] += gaps
                result.waiting[stream] = waiting
                if sealed + gaps < self.batch:
                    break
        return result

    def _seal_batch(self, stream: str) -> tuple[int, int, int | None]:
        """One transaction: up to ``batch`` rows and gaps sealed. (rows, gaps, the id it waits for or None)."""
        with self.store.db.begin() as conn:
            self.store.lock_sealer(conn)
            last = self.store.last_seal(conn, stream)
            head, previous = (last.row_id, last.chain_hash) if last else (0, genesis(stream))
            rows, read_at = self.store.rows_after(conn, stream, head, self.batch)
            seals: list[Seal] = []
            waiting = None
            gaps = 0
            expected = head + 1
            for record in rows:
                if record.id > expected:
                    if read_at - record.fields["at"] < self.gap_grace:
                        waiting = expected
                        break
                    for missing in range(expected, record.id):
                        previous = self._add(seals, stream, missing, "gap", gap_hash(stream, missing), previous)
                        gaps += 1
                previous = self._add(seals, stream, record.id, "row", row_hash(record), previous)
                expected = record.id + 1
            self.store.insert_seals(conn, seals)
        if seals:
            log.debug("audit: sealed %d %s rows (%d gaps) up to %d", len(seals) - gaps, stream, gaps, seals[-1].row_id)
        return len(seals) - gaps, gaps, waiting

    @staticmethod
    def _add(seals: list[Seal], stream: str, row_id: int, kind: str, digest: str, previous: str) -> str:
        link = chain(previous, digest)
        seals.append(Seal(stream=stream, row_id=row_id, kind=kind, row_hash=digest, chain_hash=link,
                          sealed_at=datetime.min))
        return link


# --- verify ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StreamCheck:
    """One stream's walk: how many seals matched, the first mismatch (None: all matched), the anchor and head."""

    stream: str
    checked: int
    mismatch: str | None
    anchor: str  #: the chain hash the walk started from (the genesis, or the seal before --since / a prune)
    from_start: bool
    head: str | None  #: the last seal's chain hash
    head_row: int
    unsealed: int  #: rows above the head, not yet sealed

    def to_dict(self) -> dict[str, Any]:
        return {"stream": self.stream, "checked": self.checked, "ok": self.mismatch is None,
                "mismatch": self.mismatch, "anchor": self.anchor, "from_start": self.from_start,
                "head": self.head, "head_row": self.head_row, "unsealed": self.unsealed}


def verify(store: AuditStore, *, since: datetime | None = None, page: int = 5000) -> list[StreamCheck]:
    """Each stream's chain checked against its rows (module docstring)."""
    return [_verify_stream(store, stream, since=since, page=page) for stream in STREAMS]


def _verify_stream(store: AuditStore, stream: str, *, since: datetime | None, page: int) -> StreamCheck:
    with store.db.autocommit() as conn:
        head_seal = store.last_seal(conn, stream)
        anchor_seal: Seal | None = None
        if since is not None:
            first = store.first_at_or_after(conn, stream, since)
            if first is not None:
                anchor_seal = store.seal_before(conn, stream, first)
            elif head_seal is not None:
                anchor_seal = head_seal
    seals = _pages(lambda after: _seals(store, stream, after, page), start=anchor_seal.row_id if anchor_seal else 0)
    rows = _pages(lambda after: _rows(store, stream, after, page), start=anchor_seal.row_id if anchor_seal else 0)
    previous = anchor_seal.chain_hash if anchor_seal else None
    anchor, from_start = (previous, False) if previous else (genesis(stream), True)
    checked = 0
    row = next(rows, None)
    mismatch: str | None = None
    for seal in seals:
        if previous is None:  # the first seal: from the genesis, or (pruned) the anchor itself
            from_start = chain(genesis(stream), seal.row_hash) == seal.chain_hash
            if not from_start:
                anchor = seal.chain_hash
        elif chain(previous, seal.row_hash) != seal.chain_hash:
            mismatch = f"{stream} seal {seal.row_id}: its chain hash does not follow from the seal before it " \
                       "(a seal was edited, inserted or deleted)"
            break
        previous = seal.chain_hash
        while row is not None and row.id < seal.row_id:  # a row the chain skipped
            mismatch = f"{stream} row {row.id}: not in the chain below its head (an inserted row)"
            break
        if mismatch:
            break
        if seal.kind == "gap":
            if row is not None and row.id == seal.row_id:
                mismatch = f"{stream} row {row.id}: sealed as an id that never committed (an inserted row)"
                break
        elif row is None or row.id != seal.row_id:
            mismatch = f"{stream} row {seal.row_id}: sealed but missing (a deleted row)"
            break
        else:
            if row_hash(row) != seal.row_hash:
                mismatch = f"{stream} row {row.id}: does not match its seal (an edited row)"
                break
            row = next(rows, None)
        checked += 1
    unsealed = 0
    if mismatch is None:
        for _ in ([] if row is None else [row]):
            unsealed += 1
        unsealed += sum(1 for _ in rows)
    head = head_seal.chain_hash if head_seal else None
    return StreamCheck(stream=stream, checked=checked, mismatch=mismatch, anchor=anchor, from_start=from_start,
                       head=head, head_row=head_seal.row_id if head_seal else 0, unsealed=unsealed)


def _seals(store: AuditStore, stream: str, after: int, page: int) -> list[Seal]:
    with store.db.autocommit() as conn:
        return store.seals_after(conn, stream, after, page)


def _rows(store: AuditStore, stream: str, after: int, page: int) -> list[AuditRecord]:
    with store.db.autocommit() as conn:
        return store.rows_after(conn, stream, after, page)[0]


def _pages(fetch: Callable[[int], list[Any]], *, start: int) -> Iterator[Any]:
    after = start
    while True:
        batch = fetch(after)
        yield from batch
        if not batch:
            return
        after = batch[-1].row_id if isinstance(batch[-1], Seal) else batch[-1].id


# --- writing ---------------------------------------------------------------------------------------------------


def entry(actor: str, action: str, subject: str, outcome: str = "done", **evidence: Any) -> AuditEntry:
    """An AuditEntry with its evidence from keywords (None when there are none)."""
    return AuditEntry(actor=actor, action=action, subject=subject, outcome=outcome, evidence=evidence or None)
