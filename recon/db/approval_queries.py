"""Every SQL statement about ``approvals``, the four-eyes requests (migration 0019); only
``recon.db.approval_store`` executes these."""

from __future__ import annotations

from recon.db.sql import Query

_COLUMNS = ("id, action, subject, payload, state, requested_by, requested_at, expires_at, decided_by, decided_at, "
            "result")

approval_insert = Query(
    "approval_insert",
    "Run by a four-eyes action (an override, a bulk resolve or replay above the threshold, a PSP pause): the "
    "request, pending until another operator decides or it expires.",
    sql=f"""INSERT INTO approvals (action, subject, payload, state, requested_by, requested_at, expires_at)
            VALUES (:action, :subject, {{json:payload}}, 'pending', :requested_by, {{now}}, {{now}} + {{secs:ttl}})
            RETURNING {_COLUMNS}""",  # nosec B608  # a module constant
)

approval_get = Query(
    "approval_get",
    "Run by approve, reject and show: one request.",
    sql=f"SELECT {_COLUMNS} FROM approvals WHERE id = :id",  # nosec B608  # a module constant
)

approval_list = Query(
    "approval_list",
    "Run by `recon approvals list` and the console's approvals page: the newest requests in a state.",
    sql=f"""SELECT {_COLUMNS} FROM approvals WHERE state = :state
            ORDER BY id DESC LIMIT :n""",  # nosec B608  # a module constant
)

approval_expire = Query(
    "approval_expire",
    "Run before every read or decision: pending requests past their time become expired (returned, to audit).",
    sql=f"""UPDATE approvals SET state = 'expired', decided_at = {{now}}
            WHERE state = 'pending' AND expires_at <= {{now}}
            RETURNING {_COLUMNS}""",  # nosec B608  # a module constant
)

approval_decide = Query(
    "approval_decide",
    "Run by approve and reject: the compare-and-set that makes one decision win; never by the requester (the "
    "table's check says so too), never after expiry.",
    sql=f"""UPDATE approvals SET state = :state, decided_by = :by, decided_at = {{now}}
            WHERE id = :id AND state = 'pending' AND expires_at > {{now}} AND requested_by <> :by
            RETURNING {_COLUMNS}""",  # nosec B608  # a module constant
)

approval_result = Query(
    "approval_result",
    "Run after an approved request's action ran: what it did, or (state failed) why it failed.",
    sql="UPDATE approvals SET state = :state, result = :result WHERE id = :id AND state = 'approved'",
)
