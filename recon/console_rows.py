"""The rows of the console's logins (``recon.db.console_session_store``). A leaf, like ``recon.rows``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class ConsoleSession:
    """One row of ``console_sessions``: a console login, as the store read it (recon.console.session decides
    whether it still serves). ``checked_at`` is the time of that read, by the clock the store's SQL uses."""

    id: int
    principal: str  #: who logged in: "access-token/<fingerprint>" (the access token's holder)
    operator_id: int | None  #: a named operator (issue 27); None until they exist
    created_at: datetime
    last_seen_at: datetime
    expires_at: datetime  #: the absolute deadline set at login
    revoked_at: datetime | None
    checked_at: datetime


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
