"""The rows of the console's logins (``recon.db.console_session_store``). A leaf, like ``recon.rows``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class ConsoleSession:
    """One row of ``console_sessions``: a console login, as the store read it (recon.console.session decides
    whether it still serves). ``checked_at`` is the time of that read, by the clock the store's SQL uses."""

    id: int
    principal: str  #: how they logged in: "operator/<name>" (a password), or "access-token/<fingerprint>"
    operator_id: int | None  #: the operator who acts (the token's own operator for an access-token session)
    created_at: datetime
    last_seen_at: datetime
    expires_at: datetime  #: the absolute deadline set at login
    revoked_at: datetime | None
    checked_at: datetime
    operator_name: str | None = None  #: the operator's name (read with the session on every request)
    operator_role: str | None = None  #: their role now: a role changed applies at the next request
    operator_disabled: bool = False  #: a disabled operator's session serves no request


@dataclass(frozen=True, slots=True)
class PaymentListFilter:
    """The console's payments list filter (``recon.db.payment_list_store``). None: any."""

    status: str | None = None  #: a payment status, or "unfinished" (created, processing, pending)
    psp: str | None = None
    currency: str | None = None
    created_before: datetime | None = None
    created_after: datetime | None = None
    min_scaled: int | None = None  #: the amount range in ten-thousandths of a major unit
    max_scaled: int | None = None
    reference_prefix: str | None = None  #: matched case-insensitively
    #: "open": payments with an open dispute; "due_soon": one whose evidence is due before ``evidence_before``
    dispute: str | None = None
    evidence_before: datetime | None = None
