"""The ReconError tree: everything recon itself raises on purpose.

```
ReconError
├── ConfigError             bad configuration file, key, value or database URL (CLI exit 2)
│   ├── TotpKeyError        the TOTP key file missing, unreadable, open to others, not 32 bytes, or not set
│   └── TotpSealError       a stored TOTP seed does not open with the configured key (another key, altered,
│                           or another operator's)
├── UsageError              bad input from a user: a duration, a file row, a filter (CLI exit 2)
│   ├── DuplicateReference  a merchant reference of the new payments exists already: nothing written
│   ├── ReviewRefused       the PSP's answer contradicts a resolution by hand (or it could not be asked)
│   ├── BankImportRejected  a bank statement file rejected (unreadable, not ours, not adding up): nothing written
│   ├── BankEvidenceConflict a bank statement contradicts a stored statement or entry: nothing written
│   ├── RefundRefused       a refund the payment cannot take (not succeeded, no PSP reference, more than
│                           its captured amount has left, a reference taken): nothing written
│   ├── ModificationRefused a capture or cancel the payment cannot take (not authorised for a manual capture,
│                           more than its authorisation has left, one under way, a reference taken)
│   ├── NotAllowed          no such enabled operator, or their role does not allow it: nothing done
│   └── ImportRejected      a payments file rejected, every problem named (recon.payments.importer: it
│                           carries the importer's problems and their display rule)
├── PspReferenceConflict    a payment write named another PSP reference than the one stored: refused
├── IllegalTransition       the payment state machine (recon.rows) has no such move
├── ChargeInFlight          reconciliation was about to fail a payment whose charge job just started
├── PaymentKeptMoving       a payment changed under every decision of one webhook finish
├── EngineError
│   ├── UnknownJobKind      no handler is registered for a job's kind
│   ├── QueueFull           enqueue past a queue's max depth (backpressure)
│   ├── JobNotFound         no job with that id
│   ├── InvalidJobState     the operation does not apply to the job's current state
│   └── LeaseLost           a fenced write matched no row: another worker owns the job now
└── StoreError              the database failed
    └── DatabaseTransientError  deadlock, serialization failure, lost connection, busy: retry shortly
        └── DatabaseUnavailable no server takes our writes now (connection lost, shutdown, failover,
                                read-only): retry on a new connection, after a pause
```

Each class docstring is its default message.
"""

from __future__ import annotations


class ReconError(Exception):
    """recon failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip().splitlines()[0])


class ConfigError(ReconError):
    """The configuration is invalid."""


class TotpKeyError(ConfigError):
    """The TOTP key file is not usable."""


class TotpSealError(ConfigError):
    """A stored TOTP seed does not open with the configured key."""


class UsageError(ReconError):
    """The input is invalid."""


class PspReferenceConflict(ReconError):
    """A payment write named another PSP reference than the one the payment holds; nothing was written.

    A PSP reference, once stored, is never replaced (``recon.db.payment_store``): evidence naming another one
    is a discrepancy to reconcile or review (``recon.reconcile.decide``), never a write. Raised inside a job's
    finish, it rolls the finish back and the job runs again, deciding on what is stored now."""


class DuplicateReference(UsageError):
    """A merchant reference of the new payments exists already."""


class BankImportRejected(UsageError):
    """The statement file was rejected; nothing was imported."""


class BankEvidenceConflict(UsageError):
    """The file contradicts what is stored; nothing was imported."""


class RefundRefused(UsageError):
    """The payment cannot take this refund; nothing was written."""


class ModificationRefused(UsageError):
    """The payment cannot take this capture or cancel; nothing was written."""


class NotAllowed(UsageError):
    """The operator may not do this (unknown, disabled, or their role does not allow it); nothing was done."""


class ReviewRefused(UsageError):
    """The PSP's answer contradicts the chosen resolution (or the PSP could not be asked); nothing changed."""


class IllegalTransition(ReconError):
    """The payment cannot move between these states."""


class ChargeInFlight(ReconError):
    """A charge job for this payment started while reconciliation was about to mark it failed."""


class PaymentKeptMoving(ReconError):
    """The payment changed under every decision of one finish; the job retries."""


class EngineError(ReconError):
    """The job engine refused the operation."""


class UnknownJobKind(EngineError):
    """No handler is registered for this job kind."""


class QueueFull(EngineError):
    """The queue is at its maximum depth; try again later."""


class JobNotFound(EngineError):
    """No such job."""


class InvalidJobState(EngineError):
    """The job is not in a state that allows this operation."""


class LeaseLost(EngineError):
    """The lease on this job was lost; another worker may own it now."""


class StoreError(ReconError):
    """The database operation failed."""


class DatabaseTransientError(StoreError):
    """The database failed transiently (deadlock, serialization failure, lost connection, busy)."""


class DatabaseUnavailable(DatabaseTransientError):
    """The database is unavailable (connection lost or refused, server shut down, failing over, read-only)."""
