"""The rows of the PSP controls (``recon.db.control_store``): pause, cool-down, breaker and rate-limit
answers the PSP guard reads. A leaf, like ``recon.rows``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class Admission:
    """One admission statement's answer: the PSP's state and how many rate-limit tokens were taken."""

    paused: bool
    cooldown_until: datetime | None
    breaker_state: str  #: closed | open | half_open
    probe_at: datetime | None
    failures: int
    granted: int  #: tokens taken: the batch, the whole tokens the bucket held when fewer, 0 when blocked or empty
    tokens: float  #: tokens left in the bucket
    now: datetime


@dataclass(frozen=True, slots=True)
class FailureRecord:
    breaker_state: str
    failures: int
    probe_at: datetime | None
    opened: bool  #: this failure opened the breaker


@dataclass(frozen=True, slots=True)
class PspControl:
    """One PSP's controls as ``recon psp status`` shows them."""

    psp: str
    paused: bool = False
    paused_by: str | None = None
    paused_at: datetime | None = None
    pause_reason: str | None = None
    resumed_by: str | None = None  #: who resumed it last (the paused_* fields then describe the last pause;
    #: ``recon psp status --json`` shows them as ``last_pause`` then, recon.overview)
    resumed_at: datetime | None = None
    cooldown_until: datetime | None = None
    breaker_state: str = "closed"
    failures: int = 0
    opened_at: datetime | None = None
    probe_at: datetime | None = None
    breaker_reason: str | None = None
    updated_at: datetime | None = None
