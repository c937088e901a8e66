"""A capture's or cancel's webhook news (``ModificationNews``: Adyen's CAPTURE, CAPTURE_FAILED, CANCELLATION),
applied by the webhook job (recon.reconcile.webhook) inside its finish, one event at a time:

| the news                                       | action                                                     |
| ---------------------------------------------- | ---------------------------------------------------------- |
| about our modification (its PSP id, else our reference) | ``decide.modification_heal``, else a note; final: stale |
| a cancel succeeded we did not ask for          | for its payment, Failed ("cancelled"), as any cancellation |
| anything else we did not ask for               | stale (kept as evidence)                                   |

A PSP that tells the end of a capture or cancel only as news of the payment (Stripe: ``payment_intent.succeeded``
after a capture, ``payment_intent.canceled`` after a cancel) reaches its one unfinished capture or cancel the
same way (``apply_payment_news``): succeeded ends a capture (a cancel: failed, it was captured), canceled ends a
cancel (a capture: failed, and the payment ends failed as any cancellation). Without one unfinished, succeeded
reaches the payment's last capture when we hold it as failed (``decide.late_capture``: it and its payment go to
review); otherwise the news is its payment's as any other.

A failed capture the PSP says succeeded (Adyen's CAPTURE after our "never reached the PSP", Stripe's
payment_intent.succeeded after a failed capture) goes to review with its payment, as a failed charge the PSP
says succeeded does: money moved that we think did not.

A modification moved here acts on its payment in the same transaction (``ModificationStore.apply``): a capture
succeeded makes it succeeded with the captured amount, a cancel failed, a failure gives its claim back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from psp_adapters.protocol import Failed, ModificationNews, PaymentOutcome, Succeeded
from recon.db.modification_store import ModificationStore
from recon.db.payment_store import PaymentStore
from recon.db.webhook_store import WebhookStore
from recon.errors import PaymentKeptMoving
from recon.modification_rows import Modification, ModificationSource, ModificationTransition
from recon.reconcile.decide import accounts_agree, modification_heal
from recon.reconcile.movement_webhook import find_ours, write_news
from recon.rows import Job, Payment, PaymentStatus
from recon.webhook_rows import WebhookRecord, WebhookState

#: how often a modification is read and decided again when it changes under the decision
ROUNDS = 3
#: the webhook job's ``_apply``: one payment event, as if the PSP had said ``news`` about the payment
ApplyFunc = Callable[[sa.Connection, WebhookRecord, PaymentOutcome, Job], None]


def news_outcome(news: ModificationNews) -> PaymentOutcome:
    """The news as the answer ``modification_heal`` reads (about the modification: its id, our reference)."""
    common: dict[str, Any] = {"psp_reference": news.modification_id, "amount": news.amount,
                              "currency": news.currency, "raw_status": news.raw_status,
                              "merchant_reference": news.merchant_reference}
    if news.state == "succeeded":
        return Succeeded(**common)
    return Failed(**common, reason=news.reason)


class ModificationNewsApplier:
    def __init__(self, modifications: ModificationStore, payments: PaymentStore, webhooks: WebhookStore) -> None:
        self.modifications = modifications
        self.payments = payments
        self.webhooks = webhooks

    def apply(self, conn: sa.Connection, record: WebhookRecord, news: ModificationNews, job: Job,
              details: dict[str, Any], *, apply_func: ApplyFunc) -> None:
        details = {**details, "modification_news": f"{news.kind}_{news.state}",
                   "modification_id": news.modification_id}
        for _ in range(ROUNDS):
            mod = self._ours(conn, record, news)
            if mod is None:
                self._not_ours(conn, record, news, job, apply_func=apply_func)
                return
            if self._write(conn, record, mod, news, details, job):
                return
        raise PaymentKeptMoving(f"webhook event {record.event_id}: its {news.kind} changed under {ROUNDS} "
                                "decisions; retrying")

    def apply_payment_news(self, conn: sa.Connection, record: WebhookRecord, payment: Payment,
                           news: PaymentOutcome, job: Job, details: dict[str, Any]) -> bool:
        """News of an authorised payment applied to its one unfinished capture or cancel (module docstring);
        False when it has none (the news is then the payment's)."""
        mods = self.modifications.for_payment(payment.id, conn)
        live = [m for m in mods if not m.status.final]
        if not live and mods and mods[-1].kind == "capture" and mods[-1].status is PaymentStatus.FAILED \
                and isinstance(news, Succeeded):
            live = mods[-1:]  # the PSP captured what we hold as failed: decide.late_capture
        if len(live) != 1:
            return False
        mod = live[0]
        done = isinstance(news, Succeeded) == (mod.kind == "capture")
        said = ModificationNews(psp_reference=news.psp_reference, amount=news.amount, currency=news.currency,
                                raw_status=news.raw_status, merchant_reference=mod.modification_reference,
                                kind=mod.kind, state="succeeded" if done else "failed",
                                modification_id=mod.psp_modification_id or news.psp_reference,
                                reason=None if done else (getattr(news, "reason", None) or news.raw_status))
        for _ in range(ROUNDS):
            current = self.modifications.get(mod.id, conn)
            if current is None or (current.status.final and current.status is not mod.status):
                return False
            if self._write(conn, record, current, said, {**details, "payment_news": True}, job):
                # a capture the PSP canceled instead (Stripe: expired, canceled elsewhere): the payment ends too
                return done or mod.kind != "capture"
        raise PaymentKeptMoving(f"webhook event {record.event_id}: its {mod.kind} changed under {ROUNDS} "
                                "decisions; retrying")

    def _ours(self, conn: sa.Connection, record: WebhookRecord, news: ModificationNews) -> Modification | None:
        found = find_ours(self.modifications, conn, record, psp_id=news.modification_id,
                          reference=news.merchant_reference)
        return found if found is not None and found.kind == news.kind else None

    def _write(self, conn: sa.Connection, record: WebhookRecord, mod: Modification, news: ModificationNews,
               details: dict[str, Any], job: Job) -> bool:
        """The decision for our modification as read, written (recon.reconcile.movement_webhook); False when it
        changed meanwhile."""
        return write_news(
            self.modifications, self.webhooks, conn, record, mod, modification_heal(mod, news_outcome(news)),
            transition_func=lambda d: ModificationTransition(mod.id, mod.status, d.target, ModificationSource.WEBHOOK,
                                                             details=details, job_id=job.id, attempt=job.attempts,
                                                             **d.fields()),
            note_func=lambda: self.modifications.note(conn, mod.id, status=mod.status,
                                                      source=ModificationSource.WEBHOOK, details=details,
                                                      job_id=job.id, attempt=job.attempts),
            psp_id=news.modification_id)

    def _not_ours(self, conn: sa.Connection, record: WebhookRecord, news: ModificationNews, job: Job, *,
                  apply_func: ApplyFunc) -> None:
        """A capture or cancel we did not ask for (made at the PSP's dashboard): a cancel that succeeded ends its
        payment as any cancellation does; the rest is kept as evidence, stale."""
        payment = self.payments.for_psp_event(conn, psp=record.psp, psp_reference=news.psp_reference,
                                              merchant_reference=None)
        if payment is None or not accounts_agree(payment.merchant_account, record.merchant_account):
            self.webhooks.mark(conn, record.id, WebhookState.UNKNOWN_PAYMENT, payment_id=None)
            return
        if news.kind == "cancel" and news.state == "succeeded":
            apply_func(conn, record, Failed(psp_reference=news.psp_reference, amount=news.amount,
                                            currency=news.currency, raw_status=news.raw_status, reason="cancelled"),
                       job)
            return
        self.webhooks.mark(conn, record.id, WebhookState.STALE, payment_id=payment.id)



