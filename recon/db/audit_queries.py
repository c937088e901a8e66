"""Every SQL statement about the audit trail: ``audit_log`` and ``audit_seals`` (migration 0019), and the reads of
``payment_events`` the sealer chains; only ``recon.db.audit_store`` executes these. ``audit_log`` and
``audit_seals`` are only ever inserted into, but by ``recon audit prune`` (rows past the retention).
"""

from __future__ import annotations

from recon.db.sql import Query

audit_insert = Query(
    "audit_insert",
    "Run with every write by a person or the system (resolutions, replays, pauses, operator changes, logins, a "
    "worker's start): one row, unchained (the sealer chains it), in the caller's transaction.",
    sql="""INSERT INTO audit_log (at, actor, action, subject, outcome, evidence)
           VALUES ({now}, :actor, :action, :subject, :outcome, {json:evidence})""",
)

audit_seal_lock = Query(
    "audit_seal_lock",
    "Run by the sealer first, in its transaction: one sealer at a time across the pool (PostgreSQL; SQLite's "
    "BEGIN IMMEDIATE serialises it already). Never taken on a path that writes audit rows or payment events.",
    postgresql="SELECT pg_advisory_xact_lock(7270027)",
    sqlite="SELECT 1",
)

audit_seal_last = Query(
    "audit_seal_last",
    "Run by the sealer and by verify: the newest seal of a stream (the chain's head).",
    sql="""SELECT stream, row_id, kind, row_hash, chain_hash, sealed_at FROM audit_seals
           WHERE stream = :stream ORDER BY row_id DESC LIMIT 1""",
)

audit_seal_before = Query(
    "audit_seal_before",
    "Run by `recon audit verify --since`: the last seal of a stream before the first row at or after the time, "
    "the anchor the walk starts from.",
    sql="""SELECT stream, row_id, kind, row_hash, chain_hash, sealed_at FROM audit_seals
           WHERE stream = :stream AND row_id < :row_id ORDER BY row_id DESC LIMIT 1""",
)

audit_seals_after = Query(
    "audit_seals_after",
    "Run by verify: a page of a stream's seals, in row order.",
    sql="""SELECT stream, row_id, kind, row_hash, chain_hash, sealed_at FROM audit_seals
           WHERE stream = :stream AND row_id > :after ORDER BY row_id LIMIT :n""",
)

audit_seal_insert = Query(
    "audit_seal_insert",
    "Run by the sealer, under its lock: one seal.",
    sql="""INSERT INTO audit_seals (stream, row_id, kind, row_hash, chain_hash, sealed_at)
           VALUES (:stream, :row_id, :kind, :row_hash, :chain_hash, {now})""",
)

audit_seal_insert_many = Query(
    "audit_seal_insert_many",
    "Run by the sealer on PostgreSQL, under its lock: a batch's seals in one statement (five arrays, one item a "
    "seal), where audit_seal_insert's executemany sent one statement a seal.",
    postgresql="""
        INSERT INTO audit_seals (stream, row_id, kind, row_hash, chain_hash, sealed_at)
        SELECT v.stream, v.row_id, v.kind, v.row_hash, v.chain_hash, {now}
        FROM unnest(CAST(:streams AS text[]), CAST(:row_ids AS bigint[]), CAST(:kinds AS text[]),
                    CAST(:row_hashes AS text[]), CAST(:chain_hashes AS text[]))
             AS v(stream, row_id, kind, row_hash, chain_hash)
    """,
)

audit_rows_after = Query(
    "audit_rows_after",
    "Run by the sealer, verify and export: a page of audit rows in id order, with the time of the read.",
    sql="""SELECT id, at, actor, action, subject, outcome, evidence, {now} AS read_at FROM audit_log
           WHERE id > :after ORDER BY id LIMIT :n""",
)

payment_events_after = Query(
    "payment_events_after",
    "Run by the sealer and verify: a page of payment events (each payment transition's audit row) in id order.",
    sql="""SELECT id, payment_id, from_status, to_status, source, job_id, attempt, details, at, {now} AS read_at
           FROM payment_events WHERE id > :after ORDER BY id LIMIT :n""",
)

audit_first_at_or_after = Query(
    "audit_first_at_or_after",
    "Run by verify --since and export: the first audit row at or after a time.",
    sql="SELECT min(id) FROM audit_log WHERE at >= :since",
)

payment_events_first_at_or_after = Query(
    "payment_events_first_at_or_after",
    "Run by verify --since: the first payment event at or after a time.",
    sql="SELECT min(id) FROM payment_events WHERE at >= :since",
)

audit_between = Query(
    "audit_between",
    "Run by `recon audit export`: a page of the audit rows of [since, until), in id order.",
    sql="""SELECT id, at, actor, action, subject, outcome, evidence FROM audit_log
           WHERE at >= :since AND at < :until AND id > :after ORDER BY id LIMIT :n""",
)

audit_prune_rows = Query(
    "audit_prune_rows",
    "Run by `recon audit prune`: the audit rows older than the cut-off (never younger than [audit] retention: "
    "recon.audit checks it first).",
    sql="DELETE FROM audit_log WHERE at < :before AND id <= :max_id",
)

audit_prune_seals = Query(
    "audit_prune_seals",
    "Run by `recon audit prune`, with the rows: the seals of the pruned audit rows; the first seal left is the "
    "chain's anchor from then on.",
    sql="DELETE FROM audit_seals WHERE stream = 'audit' AND row_id <= :max_id",
)

audit_prune_bound = Query(
    "audit_prune_bound",
    "Run by `recon audit prune`: the newest sealed audit row older than the cut-off (only sealed rows go).",
    sql="""SELECT max(a.id) FROM audit_log a JOIN audit_seals s ON s.stream = 'audit' AND s.row_id = a.id
           WHERE a.at < :before""",
)
