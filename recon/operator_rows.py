"""The rows of operators, the audit trail and four-eyes approvals (``recon.db.operator_store``,
``recon.db.audit_store``, ``recon.db.approval_store``). A leaf, like ``recon.rows``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any


class Role(StrEnum):
    """What an operator may do; each role may do what the ones before it may (``Role.allows``)."""

    VIEWER = "viewer"  #: reads
    OPERATOR = "operator"  #: resolves, rechecks, replays, pauses (four-eyes ones as requests)
    APPROVER = "approver"  #: approves or rejects another operator's four-eyes request
    ADMIN = "admin"  #: manages operators

    @property
    def rank(self) -> int:
        return list(Role).index(self)

    def allows(self, needed: Role) -> bool:
        return self.rank >= needed.rank


@dataclass(frozen=True, slots=True)
class Operator:
    """One row of ``operators``, without its password hash and TOTP seed (``has_password``, ``has_totp``;
    ``totp_sealed``: the seed is sealed with the TOTP key, not plain from before sealing)."""

    id: int
    name: str
    role: Role
    has_password: bool
    has_totp: bool
    totp_sealed: bool
    disabled_at: datetime | None
    failed_logins: int
    locked_until: datetime | None
    created_at: datetime
    updated_at: datetime

    @property
    def enabled(self) -> bool:
        return self.disabled_at is None

    @property
    def totp_at_rest(self) -> str | None:
        """How the TOTP seed is stored: "sealed", "plain" (written before sealing: recon operators seal-totp), or
        None when not enrolled."""
        return None if not self.has_totp else "sealed" if self.totp_sealed else "plain"

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "role": str(self.role), "enabled": self.enabled,
                "totp": self.has_totp, "totp_at_rest": self.totp_at_rest, "disabled_at": _iso(self.disabled_at),
                "failed_logins": self.failed_logins,
                "locked_until": _iso(self.locked_until), "created_at": _iso(self.created_at),
                "updated_at": _iso(self.updated_at)}


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a login checks: the operator, their argon2id hash and stored TOTP seed (sealed, or plain from before
    sealing: recon.totp_key), and the database's time."""

    operator: Operator
    password_hash: str | None
    totp_secret: str | None
    checked_at: datetime
    totp_last_step: int | None = None  #: the RFC 6238 time step of the last accepted code


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One row of ``audit_log`` to write: who did what to which subject, how it ended, and on what evidence."""

    actor: str
    action: str
    subject: str
    outcome: str
    evidence: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One row of ``audit_log`` or ``payment_events`` as stored (``fields``: its columns by name, as the sealer
    encodes them), with its seal when it has one."""

    stream: str
    id: int
    fields: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Seal:
    """One row of ``audit_seals``."""

    stream: str
    row_id: int
    kind: str  #: 'row' or 'gap'
    row_hash: str
    chain_hash: str
    sealed_at: datetime


class ApprovalState(StrEnum):
    PENDING = "pending"  #: waiting for another operator
    APPROVED = "approved"  #: approved, and its action ran (``result``)
    REJECTED = "rejected"  #: refused by another operator
    EXPIRED = "expired"  #: nobody decided before ``expires_at``
    FAILED = "failed"  #: approved, but its action failed when it ran (``result`` says why)


@dataclass(frozen=True, slots=True)
class Approval:
    """One row of ``approvals``: a four-eyes request."""

    id: int
    action: str
    subject: str
    payload: dict[str, Any]
    state: ApprovalState
    requested_by: str
    requested_at: datetime
    expires_at: datetime
    decided_by: str | None
    decided_at: datetime | None
    result: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "action": self.action, "subject": self.subject, "payload": self.payload,
                "state": str(self.state), "requested_by": self.requested_by,
                "requested_at": _iso(self.requested_at), "expires_at": _iso(self.expires_at),
                "decided_by": self.decided_by, "decided_at": _iso(self.decided_at), "result": self.result}


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
