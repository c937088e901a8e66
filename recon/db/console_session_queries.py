"""Every SQL statement about ``console_sessions`` (migration 0013); only ``recon.db.console_session_store``
executes these. ``{now}`` is the database's clock on PostgreSQL (one clock for every console process), the
process's on SQLite."""

from __future__ import annotations

from recon.db.sql import Query

console_session_prune = Query(
    "console_session_prune",
    "Run by a login, before it opens its session: deletes the sessions that can never serve again (revoked, past "
    "their absolute deadline, or idle longer than the idle timeout). The table stays about as small as the number "
    "of live sessions.",
    sql="""DELETE FROM console_sessions
           WHERE revoked_at IS NOT NULL OR expires_at <= {now} OR last_seen_at <= {now} - {secs:idle}""",
)

console_session_open = Query(
    "console_session_open",
    "Run by a login: a new session, only the SHA-256 of its id stored; its absolute deadline set now.",
    sql="""INSERT INTO console_sessions (sid_hash, principal, operator_id, created_at, last_seen_at, expires_at)
           VALUES (:sid_hash, :principal, :operator_id, {now}, {now}, {now} + {secs:absolute})
           RETURNING id""",
)

console_session_find = Query(
    "console_session_find",
    "Run on every console request that carries a session cookie: the session with that id's hash (unique index), "
    "with the time of the read, which recon.console.session judges it by, and its operator as they are now "
    "(name, role, disabled).",
    sql="""SELECT s.id, s.principal, s.operator_id, s.created_at, s.last_seen_at, s.expires_at, s.revoked_at,
                  {now} AS checked_at, o.name AS operator_name, o.role AS operator_role,
                  o.disabled_at IS NOT NULL AS operator_disabled
           FROM console_sessions s LEFT JOIN operators o ON o.id = s.operator_id
           WHERE s.sid_hash = :sid_hash""",
)

console_session_touch = Query(
    "console_session_touch",
    "Run on a request of a live session whose last_seen_at is older than the touch interval (at most a minute): "
    "moves it to now. The guard makes concurrent requests write once, and never a revoked session.",
    sql="""UPDATE console_sessions SET last_seen_at = {now}
           WHERE id = :id AND revoked_at IS NULL AND last_seen_at <= {now} - {secs:touch}""",
)

console_session_revoke = Query(
    "console_session_revoke",
    "Run by logout, by a login that replaces the browser's session, and when a session's principal is no longer "
    "accepted: ends it now. A session already revoked keeps its first revocation time.",
    sql="UPDATE console_sessions SET revoked_at = {now} WHERE id = :id AND revoked_at IS NULL",
)

console_session_revoke_operator = Query(
    "console_session_revoke_operator",
    "Run when an operator is disabled or their password reset, in that transaction: every session of theirs ends "
    "now (the next request of each is refused).",
    sql="UPDATE console_sessions SET revoked_at = {now} WHERE operator_id = :operator_id AND revoked_at IS NULL",
)
