"""Every SQL statement about per-PSP controls, named ``<table>_<verb>[_<guard>]``, with who runs it and why.

Placeholders as in ``recon.db.sql`` (``{now}``, ``{secs:…}``, ``{json:…}``); only
``recon.db.control_store`` executes these. Every change is one conditional statement on the PSP's row, so
workers on many hosts can race on it safely: PostgreSQL locks the row for the UPDATE and re-evaluates the
SET expressions on the latest version; SQLite runs each statement under ``BEGIN IMMEDIATE``.

The rate-limit bucket lives in the same row: ``tokens`` as of ``tokens_at``, refilled at ``:rate`` per second
up to ``:cap``. An admission takes ``:k`` tokens (the caller's batch), or as many whole tokens as the bucket
holds when fewer (several statements of one process in flight each take what has come since the last: all
or nothing, each found less than its batch and took none), and says how many it took in ``last_grant``
(RETURNING sees only the new row, and SET expressions see only the old one).
``tokens_at`` never moves back: a statement whose ``now`` is older than the row's (stamped before it waited
for SQLite's write lock or the row's lock behind a later one) refills nothing, where moving it back would
let the next statement refill, and grant again, the tokens of the time in between.
"""

from __future__ import annotations

# Bandit: every "nosec B608" here marks an f-string that interpolates module constants only (column
# lists, state predicates); values always travel as bound parameters.
from recon.db.sql import Query

_COLUMNS = ("psp, paused, paused_by, paused_at, pause_reason, resumed_by, resumed_at, cooldown_until, "
            "breaker_state, failures, opened_at, probe_at, breaker_reason, updated_at")

# The bucket arithmetic, per dialect: seconds since tokens_at, tokens available now, and what is granted.
_PG = {
    "rate": "CAST(:rate AS double precision)",
    "cap": "CAST(:cap AS double precision)",
    "k": "CAST(:k AS integer)",
    "elapsed": "CAST(extract(epoch FROM ({now} - tokens_at)) AS double precision)",
    "least": "least",
    "greatest": "greatest",
    "whole": "CAST(floor({}) AS integer)",
}
_LITE = {
    "rate": ":rate",
    "cap": ":cap",
    "k": ":k",
    "elapsed": "((:now - tokens_at) / 1000000.0)",
    "least": "min",
    "greatest": "max",
    "whole": "CAST({} AS INTEGER)",  # truncates: the tokens available are never negative
}
_BLOCKED = "(paused OR breaker_state <> 'closed' OR (cooldown_until IS NOT NULL AND cooldown_until > {now}))"


def _admit(d: dict[str, str]) -> str:
    avail = (f"(CASE WHEN tokens_at IS NULL THEN {d['cap']} ELSE {d['least']}({d['cap']}, "
             f"tokens + {d['greatest']}(0, {d['elapsed']}) * {d['rate']}) END)")
    grant = (f"(CASE WHEN {_BLOCKED} THEN 0 WHEN {d['rate']} IS NULL THEN {d['k']} "
             f"WHEN {avail} >= {d['k']} THEN {d['k']} ELSE {d['whole'].format(avail)} END)")
    return f"""
        UPDATE psp_controls SET
            tokens = CASE WHEN {d['rate']} IS NULL THEN 0 ELSE {avail} - {grant} END,
            tokens_at = CASE WHEN tokens_at IS NULL OR tokens_at < {{now}} THEN {{now}} ELSE tokens_at END,
            last_grant = {grant}
        WHERE psp = :psp
        RETURNING paused, cooldown_until, breaker_state, probe_at, failures, last_grant, tokens, {{now}} AS db_now
    """  # nosec B608  # constant SQL, values bound


psp_control_ensure = Query(
    "psp_control_ensure",
    "Run by a guard the first time it meets a PSP, and by `recon psp` commands: the PSP's row exists.",
    sql="INSERT INTO psp_controls (psp, updated_at) VALUES (:psp, {now}) ON CONFLICT (psp) DO NOTHING",
)

psp_control_admit = Query(
    "psp_control_admit",
    "Run by a guard before PSP calls: reads pause, cool-down and breaker, and takes :k tokens if admitted.",
    postgresql=_admit(_PG),
    sqlite=_admit(_LITE),
)

psp_control_claim_probe = Query(
    "psp_control_claim_probe",
    "Run by a guard when the breaker's probe time has come: one worker wins the half-open probe slot.",
    sql="""
        UPDATE psp_controls SET breaker_state = 'half_open', probe_at = {now} + {secs:probe_for},
            updated_at = {now}
        WHERE psp = :psp AND breaker_state IN ('open', 'half_open') AND probe_at <= {now}
        RETURNING probe_at
    """,
)

_OPENS = ("(breaker_state = 'closed' AND (:force = 1 OR failures + 1 >= :threshold)) "
          "OR (breaker_state = 'half_open' AND :force = 1)")

psp_control_record_failure = Query(
    "psp_control_record_failure",
    "Run by a guard after a transient or auth failure: counts it, and opens the breaker at the threshold.",
    sql=f"""
        UPDATE psp_controls SET
            failures = failures + 1,
            breaker_state = CASE WHEN {_OPENS} THEN 'open' ELSE breaker_state END,
            opened_at = CASE WHEN {_OPENS} THEN {{now}} ELSE opened_at END,
            probe_at = CASE WHEN {_OPENS} THEN {{now}} + {{secs:open_for}} ELSE probe_at END,
            breaker_reason = CASE WHEN {_OPENS} THEN :reason ELSE breaker_reason END,
            updated_at = {{now}}
        WHERE psp = :psp
        RETURNING breaker_state, failures, probe_at, opened_at, {{now}} AS db_now
    """,  # nosec B608  # constant SQL, values bound
)

psp_control_reopen_if_probe = Query(
    "psp_control_reopen_if_probe",
    "Run by a guard whose half-open probe failed: re-opens the breaker, if the probe slot is still its own.",
    sql="""
        UPDATE psp_controls SET breaker_state = 'open', failures = failures + 1, opened_at = {now},
            probe_at = {now} + {secs:open_for}, breaker_reason = :reason, updated_at = {now}
        WHERE psp = :psp AND breaker_state = 'half_open' AND probe_at = :token
        RETURNING probe_at
    """,
)

psp_control_close_if_probe = Query(
    "psp_control_close_if_probe",
    "Run by a guard whose half-open probe succeeded: closes the breaker, only if the probe slot is its own.",
    sql="""
        UPDATE psp_controls SET breaker_state = 'closed', failures = 0, opened_at = NULL, probe_at = NULL,
            breaker_reason = NULL, updated_at = {now}
        WHERE psp = :psp AND breaker_state = 'half_open' AND probe_at = :token
        RETURNING psp
    """,
)

psp_control_reset_failures = Query(
    "psp_control_reset_failures",
    "Run by a guard after a success while failures were counted: they are no longer consecutive.",
    sql="""UPDATE psp_controls SET failures = 0
           WHERE psp = :psp AND breaker_state = 'closed' AND failures > 0 RETURNING psp""",
)

psp_control_cool_down = Query(
    "psp_control_cool_down",
    "Run by a guard after a 429: every worker backs off until now + :seconds (an existing later end stands).",
    sql="""
        UPDATE psp_controls SET
            cooldown_until = CASE WHEN cooldown_until IS NULL OR cooldown_until < {now} + {secs:seconds}
                                  THEN {now} + {secs:seconds} ELSE cooldown_until END,
            updated_at = {now}
        WHERE psp = :psp
        RETURNING cooldown_until
    """,
)

psp_control_pause = Query(
    "psp_control_pause",
    "Run by `recon psp pause`: stops all traffic to the PSP; jobs for it snooze until it is resumed.",
    sql="""
        INSERT INTO psp_controls (psp, paused, paused_by, paused_at, pause_reason, updated_at)
        VALUES (:psp, TRUE, :by, {now}, :reason, {now})
        ON CONFLICT (psp) DO UPDATE SET paused = TRUE, paused_by = excluded.paused_by,
            paused_at = excluded.paused_at, pause_reason = excluded.pause_reason,
            updated_at = excluded.updated_at
    """,
)

psp_control_resume = Query(
    "psp_control_resume",
    "Run by `recon psp resume`: lets traffic to the PSP flow again, by whom and when (no row: it was not "
    "paused). The pause's who, when and why are kept: the last pause and its resume read side by side.",
    sql="""
        UPDATE psp_controls SET paused = FALSE, resumed_by = :by, resumed_at = {now}, updated_at = {now}
        WHERE psp = :psp AND paused
        RETURNING psp
    """,
)

job_wake_snoozed_for = Query(
    "job_wake_snoozed_for",
    "Run by `recon psp resume` with the resume: jobs snoozed by the pause (their reason) become due now.",
    sql="""UPDATE jobs SET run_after = {now}
           WHERE state = 'pending' AND last_error = :reason AND run_after > {now}""",
)

psp_control_list = Query(
    "psp_control_list",
    "Run by `recon psp status` and `recon stats`: every PSP's controls, with the database's now.",
    sql=f"SELECT {_COLUMNS}, {{now}} AS db_now FROM psp_controls ORDER BY psp",  # nosec B608  # constant SQL, values bound
)

psp_control_db_now = Query(
    "psp_control_db_now", "Run by `recon psp status` when no PSP has a row yet: the database's now.",
    sql="SELECT {now}",
)
