"""Console sessions: the server's record of a login, judged on every request (OWASP Session Management Cheat
Sheet; PCI DSS v4.0.1 8.2.8).

**The id.** A login draws 32 random bytes (``secrets.token_urlsafe``: 43 characters, 256 bits) and sends them in
the ``recon_session`` cookie; ``console_sessions`` keeps only their SHA-256, so a copy of the table opens no
session. Every login draws a new id and revokes the session the browser came with, so an id planted before the
login (session fixation) never becomes a logged-in one. A cookie value of any other shape is not looked up.

**Its state** (``state_of``, the one table; ``now`` is the time the store read the row, by the database's clock
on PostgreSQL):

| the row                                                        | state    | the request                |
| -------------------------------------------------------------- | -------- | -------------------------- |
| none (never issued, or pruned after it ended)                  | unknown  | 401                        |
| revoked_at set (logout, a newer login from that browser)       | revoked  | 401                        |
| principal not the one this console accepts (the token changed) | foreign  | 401, and it is revoked     |
| its operator disabled (at once: read with the session)         | disabled | 401                        |
| now >= expires_at, or >= created_at + absolute_timeout         | expired  | 401                        |
| now >= last_seen_at + idle_timeout                             | idle     | 401                        |
| otherwise                                                      | live     | served                     |

The absolute deadline is stored at login and also re-read from the current ``absolute_timeout``, so lowering
it ends the sessions already open; the idle timeout is always the current one. Every ended state answers 401
with the login form saying why, and the response clears the cookie.

**last_seen_at** is written only when it is at least ``touch_interval`` old (a minute, or a tenth of the idle
timeout if that is shorter): a busy session costs one write a minute, not one per request, and the idle timeout
may end a session up to that much early, never late.

**Its CSRF token** (``csrf_token``) is HMAC-SHA256 keyed by the session id over a fixed label: the OWASP CSRF
Prevention Cheat Sheet's synchronizer token, one per session, derived instead of stored. It is unguessable
without the HttpOnly cookie, the same in every console process and after a restart, and gone with the session:
a token of another session, of the login page or of a session that ended fails (recon.console.security).

**Who.** Every session is an operator's (``operator_id``; recon.operators). ``principal`` says how they logged in:
``operator/<name>`` with their password (and TOTP code), or ``access-token/`` and a scrypt fingerprint of the
access token (memory-hard, so the stored fingerprint does not make a weak token cheap to guess) for the token's
own operator: a session opened with a token the console was since restarted without is refused. The operator is
read with the session on every request: disabling them (which also revokes their sessions) ends every session of
theirs at the next request, and a changed role applies at once.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import re
import secrets
from collections.abc import Collection
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from recon.console.config import ConsoleConfig
from recon.console_rows import ConsoleSession
from recon.db.console_session_store import ConsoleSessionStore
from recon.operator_rows import Operator

log = logging.getLogger("recon.console")

SESSION_COOKIE = "recon_session"
#: the principal of a session opened with an operator's password: this and the operator's name
OPERATOR_PRINCIPAL = "operator/"
#: a session id as ``secrets.token_urlsafe(32)`` writes it
_SID_SHAPE = re.compile(r"[A-Za-z0-9_-]{43}")
#: the label the session's CSRF token signs (a new label would retire every token at once)
_CSRF_LABEL = b"recon console csrf v1"
#: scrypt's cost for the token's fingerprint: 16 MiB (128 * n * r bytes) and a noticeable pause, once per
#: console process (docs/benchmarks.md)
_SCRYPT = {"n": 2**14, "r": 8, "p": 1, "dklen": 16}


class SessionState(StrEnum):
    LIVE = "live"  #: served
    UNKNOWN = "unknown"  #: no such session (never issued, or pruned after it ended)
    REVOKED = "revoked"  #: logged out, or replaced by a newer login from the same browser
    FOREIGN = "foreign"  #: opened with another access token than the console's
    EXPIRED = "expired"  #: past its absolute deadline
    IDLE = "idle"  #: no request for the idle timeout
    DISABLED = "disabled"  #: its operator was disabled


def state_of(row: ConsoleSession | None, *, principals: Collection[str], config: ConsoleConfig) -> SessionState:
    """The table of the module docstring, in its order (the first line that holds wins)."""
    if row is None:
        return SessionState.UNKNOWN
    if row.revoked_at is not None:
        return SessionState.REVOKED
    if row.principal not in principals and not row.principal.startswith(OPERATOR_PRINCIPAL):
        return SessionState.FOREIGN
    if row.operator_disabled:
        return SessionState.DISABLED
    now = row.checked_at
    if now >= min(row.expires_at, row.created_at + config.absolute_timeout):
        return SessionState.EXPIRED
    if now >= row.last_seen_at + config.idle_timeout:
        return SessionState.IDLE
    return SessionState.LIVE


def ended_message(state: SessionState, config: ConsoleConfig) -> str:
    """What the login form says to someone whose session is in ``state`` (not LIVE)."""
    match state:
        case SessionState.IDLE:
            return f"your session ended: idle for {words(config.idle_timeout)}; log in again"
        case SessionState.EXPIRED:
            return f"your session ended: {words(config.absolute_timeout)} after its login; log in again"
        case SessionState.FOREIGN:
            return "your session ended: the console's access token changed; log in with the new one"
        case SessionState.DISABLED:
            return "your session ended: your operator was disabled"
        case _:
            return "your session has ended (logged out, or replaced by a newer login); log in again"


def words(duration: timedelta) -> str:
    """15 minutes -> "15 minutes", 90 minutes -> "1 hour 30 minutes"."""
    hours, minutes = divmod(int(duration.total_seconds()) // 60, 60)
    parts = [f"{n} {unit}{'s' if n != 1 else ''}" for n, unit in ((hours, "hour"), (minutes, "minute")) if n]
    return " ".join(parts) or f"{int(duration.total_seconds())} seconds"


def sid_hash(sid: str) -> bytes:
    """What the database keeps of a session id: its SHA-256."""
    return hashlib.sha256(sid.encode()).digest()


def csrf_token(sid: str) -> str:
    """The session's CSRF token (see the module docstring)."""
    return hmac.new(sid.encode(), _CSRF_LABEL, hashlib.sha256).hexdigest()


def token_principal(token: str) -> str:
    """``access-token/`` and the access token's fingerprint (see the module docstring), in lower-case base32:
    no run of 13 digits, no ``=``, ``:``, ``_`` or space, so no redaction pattern (a card number, a key, a
    ``token: value``) ever matches it and the stored principal is the one compared."""
    digest = hashlib.scrypt(token.encode(), salt=b"recon console principal", **_SCRYPT)
    return "access-token/" + base64.b32encode(digest).decode().rstrip("=").lower()


@dataclass(frozen=True, slots=True)
class Resumed:
    """A request's session: its state, the row when live, and then its CSRF token."""

    state: SessionState
    session: ConsoleSession | None = None
    csrf: str | None = None

    @property
    def live(self) -> bool:
        return self.state is SessionState.LIVE


class Sessions:
    """Open, resume and end operators' sessions on the store; ``principal`` is the access token's (None: the
    console has no token), the one token principal it accepts."""

    def __init__(self, store: ConsoleSessionStore, *, principal: str | None, config: ConsoleConfig) -> None:
        self.store = store
        self.principal = principal
        self.config = config

    def open(self, *, operator: Operator, by_token: bool, replacing: ConsoleSession | None) -> str:
        """A new session of ``operator`` (ended ones pruned first), opened with the token (``by_token``) or their
        password; ``replacing``, the browser's live session, is revoked. Returns the id for the cookie."""
        if replacing is not None:
            self.store.revoke(replacing.id)
        principal = self.principal if by_token and self.principal else OPERATOR_PRINCIPAL + operator.name
        sid = secrets.token_urlsafe(32)
        row_id = self.store.open(sid_hash=sid_hash(sid), principal=principal, operator_id=operator.id,
                                 absolute=self.config.absolute_timeout, idle=self.config.idle_timeout)
        log.info("console: session %d opened for %s%s", row_id, operator.name,
                 f" (session {replacing.id} replaced)" if replacing else "")
        return sid

    def resume(self, sid: str) -> Resumed:
        """The session of cookie value ``sid``, judged now; a live one's last_seen_at moved on when stale, a
        foreign one revoked."""
        row = self.store.find(sid_hash(sid)) if _SID_SHAPE.fullmatch(sid) else None
        state = state_of(row, principals=(self.principal,) if self.principal else (), config=self.config)
        if row is None or state is not SessionState.LIVE:
            if row is not None and state is SessionState.FOREIGN:
                self.store.revoke(row.id)
            return Resumed(state)
        if row.checked_at - row.last_seen_at >= self.config.touch_interval:
            self.store.touch(row.id, older_than=self.config.touch_interval)
        return Resumed(state, row, csrf_token(sid))

    def end(self, session: ConsoleSession) -> None:
        """Logout: the session is revoked; its cookie opens nothing any more, in any console process."""
        self.store.revoke(session.id)
        log.info("console: session %d ended by logout", session.id)
