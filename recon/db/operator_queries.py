"""Every SQL statement about ``operators`` (migration 0019); only ``recon.db.operator_store`` executes these.
``{now}`` is the database's clock on PostgreSQL, the process's on SQLite."""

from __future__ import annotations

from recon.db.sql import Query

#: ``totp_sealed``: the seed is in recon.totp_key's sealed form (``v1.``...), not plain base32 written before it
_COLUMNS = """id, name, role, password_hash IS NOT NULL AS has_password, totp_secret IS NOT NULL AS has_totp,
              CASE WHEN substr(totp_secret, 1, 3) = 'v1.' THEN 1 ELSE 0 END AS totp_sealed,
              disabled_at, failed_logins, locked_until, created_at, updated_at"""

operator_insert = Query(
    "operator_insert",
    "Run by `recon operators add` (and the console's token operator, once): a new operator; the name is unique.",
    sql="""INSERT INTO operators (name, role, password_hash, totp_secret, created_at, updated_at)
           VALUES (:name, :role, :password_hash, :totp_secret, {now}, {now})
           RETURNING id""",
)

operator_by_name = Query(
    "operator_by_name",
    "Run by every check of an operator (`--by`, a console action, a login): the row, without its secrets.",
    sql=f"SELECT {_COLUMNS} FROM operators WHERE name = :name",  # nosec B608  # a module constant
)

operator_credentials = Query(
    "operator_credentials",
    "Run by a console login: the operator with the password hash and TOTP secret it checks, and the time of the "
    "read (the lockout is judged by it).",
    sql=f"""SELECT {_COLUMNS}, password_hash AS password_hash_value, totp_secret AS totp_secret_value,
                   totp_last_step, {{now}} AS checked_at
            FROM operators WHERE name = :name""",  # nosec B608  # a module constant
)

operator_list = Query(
    "operator_list",
    "Run by `recon operators list` and the console's operators page: every operator, by name.",
    sql=f"SELECT {_COLUMNS} FROM operators ORDER BY name",  # nosec B608  # a module constant
)

operator_count = Query(
    "operator_count",
    "Run by `recon operators add`: whether this is the first operator (the bootstrap admin).",
    sql="SELECT count(*) FROM operators",
)

operator_disable = Query(
    "operator_disable",
    "Run by `recon operators disable`: the operator can no longer log in or act; an already disabled one keeps "
    "its first time.",
    sql="UPDATE operators SET disabled_at = {now}, updated_at = {now} WHERE name = :name AND disabled_at IS NULL",
)

operator_enable = Query(
    "operator_enable",
    "Run by `recon operators enable`: a disabled operator may log in and act again; the lockout is cleared.",
    sql="""UPDATE operators SET disabled_at = NULL, failed_logins = 0, locked_until = NULL, updated_at = {now}
           WHERE name = :name AND disabled_at IS NOT NULL""",
)

operator_set_password = Query(
    "operator_set_password",
    "Run by `recon operators reset-password`: a new argon2id hash (and TOTP secret, when given); the lockout "
    "is cleared.",
    sql="""UPDATE operators SET password_hash = :password_hash,
                  totp_secret = CASE WHEN :reset_totp THEN :totp_secret ELSE totp_secret END,
                  totp_last_step = CASE WHEN :reset_totp THEN NULL ELSE totp_last_step END,
                  failed_logins = 0, locked_until = NULL, updated_at = {now}
           WHERE name = :name""",
)

operator_set_role = Query(
    "operator_set_role",
    "Run by `recon operators add` for the console's token operator when its configured role changed.",
    sql="UPDATE operators SET role = :role, updated_at = {now} WHERE name = :name AND role <> :role",
)

operator_login_failed = Query(
    "operator_login_failed",
    "Run by a console login that failed: one more failure; at the limit, locked for the lockout time (a login "
    "while locked counts too, but never moves locked_until). Returns the count and the lock.",
    sql="""UPDATE operators SET failed_logins = failed_logins + 1,
                  locked_until = CASE WHEN failed_logins + 1 >= :limit
                                       AND (locked_until IS NULL OR locked_until <= {now})
                                      THEN {now} + {secs:lockout} ELSE locked_until END
           WHERE id = :id
           RETURNING failed_logins, locked_until""",
)

operator_accept_totp_step = Query(
    "operator_accept_totp_step",
    "Run by a console login whose TOTP code matched time step :step: accepted only when no code of that step or "
    "a later one was accepted before (a compare-and-set: of two logins with one code, one wins).",
    sql="""UPDATE operators SET totp_last_step = :step
           WHERE id = :id AND (totp_last_step IS NULL OR totp_last_step < :step)""",
)

operator_login_succeeded = Query(
    "operator_login_succeeded",
    "Run by a console login that succeeded: the failures are forgotten.",
    sql="UPDATE operators SET failed_logins = 0, locked_until = NULL WHERE id = :id AND failed_logins <> 0",
)

operator_totp_secrets = Query(
    "operator_totp_secrets",
    "Run by `recon operators seal-totp` and `rotate-totp-key`, in their one transaction: every stored TOTP seed "
    "(sealed or plain) with its operator's name, which the seal binds.",
    sql="SELECT id, name, totp_secret FROM operators WHERE totp_secret IS NOT NULL ORDER BY id",
)

operator_replace_totp_secret = Query(
    "operator_replace_totp_secret",
    "Run by `recon operators seal-totp` and `rotate-totp-key`: one seed's new stored form, only if the row still "
    "holds the one read (a compare-and-set: an enrolment or reset meanwhile makes the command fail, not lose it).",
    sql="""UPDATE operators SET totp_secret = :new, updated_at = {now}
           WHERE id = :id AND totp_secret = :old""",
)
