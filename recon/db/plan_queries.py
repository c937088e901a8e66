"""The statements that change how PostgreSQL plans, for a part of one transaction (``Database.index_plans``); they
read no table. Only ``recon.db.database`` executes these.

recon's sessions force a custom plan for every execution (``recon.db.database.PG_SESSION_OPTIONS``): a cached
generic plan made while a table was small or empty was kept for the session's life (a sequential scan of a
table that then grew). That also re-plans, for every row inserted, the foreign-key check PostgreSQL runs for it
(``SELECT 1 FROM ONLY payments x WHERE id = $1 FOR KEY SHARE OF x``, one SPI plan per constraint and session):
under a webhook load that planning was an eighth of the finishing sessions' CPU, its execution a fiftieth
(docs/benchmarks.md, "Webhook intake, fourth pass"). ``index_plans`` lets such statements keep a generic plan
and guards it: the plan is made with sequential scans off, so a lookup by a key is planned as an index scan
however small the table is when the plan is made (on an ANALYZEd empty ``payments`` the generic plan is a
sequential scan without the guard). Only statements whose every plan under the guard is a lookup by a key run
inside it: single-table statements by primary key (the foreign-key check), and inserts that read no table.
"""

from __future__ import annotations

from recon.db.sql import Query

#: the settings ``index_plans`` changes, in the order ``plans_keep_indexed`` returns their values before
GUARDED = ("plan_cache_mode", "enable_seqscan")

plans_keep_indexed = Query(
    "plans_keep_indexed",
    "Run by Database.index_plans first: until plans_restore (or the transaction's end: SET LOCAL), prepared "
    "statements and foreign-key checks keep one generic plan, made with sequential scans off; returns the "
    "settings as they were, to restore.",
    # the CTE is evaluated before the select list that changes the settings
    postgresql="""
        WITH before AS MATERIALIZED (
            SELECT current_setting('plan_cache_mode') AS plan_cache_mode,
                   current_setting('enable_seqscan') AS enable_seqscan
        )
        SELECT before.plan_cache_mode, before.enable_seqscan,
               set_config('plan_cache_mode', 'force_generic_plan', true),
               set_config('enable_seqscan', 'off', true)
        FROM before
    """,
)

plans_restore = Query(
    "plans_restore",
    "Run by Database.index_plans last: the settings plans_keep_indexed found, for the rest of the transaction.",
    postgresql="""
        SELECT set_config('plan_cache_mode', :plan_cache_mode, true),
               set_config('enable_seqscan', :enable_seqscan, true)
    """,
)
