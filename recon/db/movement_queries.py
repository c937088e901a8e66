"""The SQL statements refunds and captures/cancels share, one set per movement kind (``recon.movement_rows``):
lookups, compare-and-set transitions, notes and the audit trail, the sweep's reads. Each set is built once
from its kind's table and column names (module constants, never input) and named as a statement of that table
is, ``<table>_<verb>[_<guard>]`` (``refund_get``, ``modification_transition_if_status``); only
``recon.db.movement_store`` executes them. Each kind's own statements (its bound on the payment, its creation,
its counts) stay in ``recon.db.refund_queries`` and ``recon.db.modification_queries``. Placeholders as in
``recon.db.sql``.
"""

from __future__ import annotations

from dataclasses import dataclass

from recon.db.sql import Query
from recon.movement_rows import MovementKind

# Bandit: every "nosec B608" here marks an f-string that interpolates a MovementKind's constant table and
# column names only; values always travel as bound parameters.
UNFINISHED = "status IN ('created', 'processing', 'pending')"


@dataclass(frozen=True)
class MovementQueries:
    event_insert: Query
    get: Query
    get_by_reference: Query
    get_by_psp_id: Query
    list_for_payment: Query
    events_for: Query
    transition_if_status: Query
    touch_if_status: Query
    set_psp_id_if_null: Query
    mark_sent_if_unfinished: Query
    list_stale: Query
    existing_references: Query
    job_unfinished: Query


def movement_queries(k: MovementKind) -> MovementQueries:
    """The shared statements of kind ``k``'s tables."""
    one = k.table.removesuffix("s")  # the statements' prefix: refund_, modification_
    cols, t, ref, psp_id = k.columns, k.table, k.reference_field, k.psp_id_field
    return MovementQueries(
        event_insert=Query(
            f"{one}_event_insert", f"Run with every {k.noun} change: the audit trail, one row per change or note.",
            sql=f"""INSERT INTO {k.events_table} ({k.id_field}, from_status, to_status, source, job_id, attempt,
                                                   details, at)
                    VALUES (:movement_id, :from_status, :to_status, :source, :job_id, :attempt, {{json:details}},
                            {{now}})"""),  # nosec B608
        get=Query(f"{one}_get", f"Run by the {k.noun}'s jobs: one {k.noun}.",
                  sql=f"SELECT {cols} FROM {t} WHERE id = :id"),  # nosec B608
        get_by_reference=Query(
            f"{one}_get_by_reference", f"Run by the commands and by webhooks naming our {k.noun} reference.",
            sql=f"SELECT {cols} FROM {t} WHERE {ref} = :ref"),  # nosec B608
        get_by_psp_id=Query(
            f"{one}_get_by_psp_id", f"Run by the webhook job: the {k.noun} an event names by the PSP's id of it.",
            sql=f"SELECT {cols} FROM {t} WHERE psp = :psp AND {psp_id} = :psp_id ORDER BY id LIMIT 1"),  # nosec B608
        list_for_payment=Query(
            f"{one}_list_for_payment", f"Run by `recon payments show` and the webhook job: a payment's {t}.",
            sql=f"SELECT {cols} FROM {t} WHERE payment_id = :payment_id ORDER BY id"),  # nosec B608
        events_for=Query(
            f"{one}_events_for", f"Run by the commands' --json and the tests: a {k.noun}'s audit trail.",
            sql=f"""SELECT id, {k.id_field} AS movement_id, from_status, to_status, source, job_id, attempt, details,
                           at
                    FROM {k.events_table} WHERE {k.id_field} = :id ORDER BY id"""),  # nosec B608
        transition_if_status=Query(
            f"{one}_transition_if_status",
            f"Run by the {k.noun}'s jobs, the webhook job and review: compare-and-set of a {k.noun}'s status (no "
            "row: it changed, or the transition names another PSP id than the one stored, which is never replaced).",
            sql=f"""
                UPDATE {t} SET status = :to_status, updated_at = {{now}},
                    {psp_id} = coalesce({psp_id}, :psp_id),
                    failure_reason = coalesce(:failure_reason, failure_reason),
                    review_reason = coalesce(:review_reason, review_reason)
                WHERE id = :id AND status = :from_status
                  AND ({psp_id} IS NULL OR CAST(:psp_id AS TEXT) IS NULL OR {psp_id} = :psp_id)
                RETURNING {cols}
            """),  # nosec B608
        touch_if_status=Query(
            f"{one}_touch_if_status",
            "Run before an audit event without a status change: proves the status is still :status (and locks the "
            "row).",
            sql=f"UPDATE {t} SET updated_at = {{now}} WHERE id = :id AND status = :status RETURNING id"),  # nosec B608
        set_psp_id_if_null=Query(
            f"{one}_set_psp_id_if_null",
            f"Run by the {k.noun}'s job the moment the PSP names its id (a pending answer): stored where none is.",
            sql=f"""UPDATE {t} SET {psp_id} = :psp_id, updated_at = {{now}}
                    WHERE id = :id AND status = :status AND {psp_id} IS NULL RETURNING id"""),  # nosec B608
        mark_sent_if_unfinished=Query(
            f"{one}_mark_sent_if_unfinished",
            f"Run by the {k.noun}'s job right before each send: locks the row, proves it is still unfinished (so a "
            "'never reached the PSP' heal and a send cannot both happen) and stamps when the request first went out.",
            sql=f"""UPDATE {t} SET updated_at = {{now}}, sent_at = coalesce(sent_at, {{now}})
                    WHERE id = :id AND {UNFINISHED} RETURNING status"""),  # nosec B608
        list_stale=Query(
            f"{one}_list_stale",
            f"Run by `recon sweep`: unfinished {t} not changed since :cutoff, a page after an id cursor.",
            sql=f"""SELECT {cols} FROM {t}
                    WHERE {UNFINISHED} AND updated_at < :cutoff AND (CAST(:psp AS TEXT) IS NULL OR psp = :psp)
                      AND id > :after_id
                    ORDER BY id LIMIT :n"""),  # nosec B608
        existing_references=Query(
            f"{one}_existing_references",
            f"Run by {k.noun} creation before inserting: which of the references are taken already.",
            sql=f"SELECT {ref} FROM {t} WHERE {ref} IN :refs", expanding=("refs",)),  # nosec B608
        job_unfinished=Query(
            f"{one}_job_unfinished",
            f"Run by the {k.noun}'s reconcile job before 'never reached the PSP': may its own job still send?",
            sql="SELECT id FROM jobs WHERE unique_key = :key AND state NOT IN ('succeeded', 'dead', 'canceled')"),
    )
