"""What the webhook job does alike with a refund's news (``RefundNews``, recon.reconcile.webhook) and a capture's
or cancel's (``ModificationNews``, recon.reconcile.modification_webhook), inside its finish, one event at a time:
find our movement the news names (by the PSP's id of it, else by our reference), then write the decision its
kind's table makes of the news as read:

| the decision      | the movement                                   | the event                            |
| ----------------- | ---------------------------------------------- | ------------------------------------ |
| a move            | moved (compare-and-set)                        | applied                              |
| none; it is final, not in review | unchanged                       | stale: a redelivery, or older news   |
| none; otherwise   | the PSP's id stored once known; the news noted | applied                              |

A compare-and-set that finds the movement changed writes nothing (False): the caller reads and decides again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import sqlalchemy as sa

from recon.db.movement_store import MovementStore
from recon.db.webhook_store import WebhookStore
from recon.movement_rows import Movement, MovementTransition
from recon.reconcile.movement import Decision
from recon.rows import PaymentStatus
from recon.webhook_rows import WebhookRecord, WebhookState

M = TypeVar("M", bound=Movement)
T = TypeVar("T", bound=MovementTransition)


def find_ours(store: MovementStore[M, Any], conn: sa.Connection, record: WebhookRecord, *,
              psp_id: str | None, reference: str | None) -> M | None:
    """Our movement of the event's PSP the news names: by the PSP's id of it, else by our reference."""
    found = store.by_psp_id(conn, psp=record.psp, psp_id=psp_id) if psp_id else None
    if found is None and reference:
        found = store.by_reference(reference, conn)
    return found if found is not None and found.psp == record.psp else None


def write_news(store: MovementStore[M, T], webhooks: WebhookStore, conn: sa.Connection, record: WebhookRecord,
               m: M, decision: Decision | None, *, transition_func: Callable[[Decision], T],
               note_func: Callable[[], bool], psp_id: str | None) -> bool:
    """The decision for ``m`` as read, written, and the event marked (the module's table); False when ``m``
    changed meanwhile (nothing written)."""
    state = WebhookState.APPLIED
    if decision is not None:
        if not store.apply(conn, transition_func(decision)):
            return False
    elif m.status.final and m.status is not PaymentStatus.NEEDS_REVIEW:
        state = WebhookState.STALE  # a redelivery, or older news than its end
    else:
        if psp_id and not m.psp_id:
            store.remember_psp_id(conn, m.id, status=m.status, psp_id=psp_id)
        if not note_func():
            return False
    webhooks.mark(conn, record.id, state, payment_id=m.payment_id)
    return True
