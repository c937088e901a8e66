"""recon: payment reconciliation on a fenced, lease-based job engine (PostgreSQL and SQLite)."""

from __future__ import annotations

from recon.clock import Clock, FixedClock, ProcessClock, SystemClock
from recon.config import Settings, load_settings
from recon.db.database import Database, connect, upgrade
from recon.db.jobs_store import JobStore
from recon.engine.client import Client
from recon.engine.handlers import Handlers
from recon.engine.jobs import JobSpec
from recon.engine.lease import Lease
from recon.engine.outcome import BatchWrite, Cancel, Complete, Dead, Outcome, Retry, Snooze
from recon.engine.retry import RetryPolicy
from recon.engine.watcher import Watcher, WatchResult
from recon.engine.worker import Worker, WorkerStats
from recon.errors import (
    ConfigError,
    InvalidJobState,
    JobNotFound,
    LeaseLost,
    QueueFull,
    ReconError,
    UnknownJobKind,
    UsageError,
)
from recon.rows import AttemptRecord, Job, JobState

__all__ = [
    "AttemptRecord",
    "BatchWrite",
    "Cancel",
    "Client",
    "Clock",
    "Complete",
    "ConfigError",
    "Database",
    "Dead",
    "FixedClock",
    "Handlers",
    "InvalidJobState",
    "Job",
    "JobNotFound",
    "JobSpec",
    "JobState",
    "JobStore",
    "Lease",
    "LeaseLost",
    "Outcome",
    "ProcessClock",
    "QueueFull",
    "ReconError",
    "Retry",
    "RetryPolicy",
    "Settings",
    "Snooze",
    "SystemClock",
    "UnknownJobKind",
    "UsageError",
    "WatchResult",
    "Watcher",
    "Worker",
    "WorkerStats",
    "connect",
    "load_settings",
    "upgrade",
]
