"""Bulk resolve: every payment a queue filter matches resolved at once, after a preview of exactly what will
change, all or nothing (``recon review bulk-resolve``, the console's review queue).

``preview`` lists the payments the filter matches now (at most ``[review] bulk_max``), their count and their
amount per currency, and a digest of the set (SHA-256 over the sorted ids, their review_since and the target
status). ``apply`` takes that digest back and refuses when the filter now matches anything else (a payment
joined, left, or re-entered review): what is written is exactly what was previewed. It asks the PSP about every
payment first, as a single resolve does, and refuses the whole batch, naming the payments, if any answer
contradicts the decision or a PSP could not be asked; then it writes every transition in one transaction, so a
payment changed meanwhile rolls all of them back. Overrides are not offered in bulk.

Four eyes: ``apply`` calls ``approval_func(preview, by)`` before anything is written, and writes nothing if it
raises. The default approves; ``recon.actions`` plugs the four-eyes rule in there (above ``[four_eyes]
bulk_resolve_count`` the bulk resolve becomes a request another operator approves).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from recon.errors import ReviewRefused, UsageError
from recon.redact import grouped
from recon.review import OPERATOR_MAX, REASON_MAX, ReviewDesk, target_status, typed_text
from recon.review_rows import CurrencyTotal, QueueFilter
from recon.rows import Payment, PaymentStatus, Transition

#: the refusal names at most this many payments
NAMED_MAX = 5


@dataclass(frozen=True, slots=True)
class BulkPreview:
    """What a bulk resolve of ``where`` to ``to`` would change, now."""

    where: QueueFilter
    to: PaymentStatus
    payments: list[Payment]
    by_currency: list[CurrencyTotal]
    digest: str
    too_many: bool  #: the filter matches more than bulk_max: narrow it first

    @property
    def count(self) -> int:
        return len(self.payments)


#: the four-eyes hook: raises to refuse (nothing is written then)
ApprovalFunc = Callable[[BulkPreview, str], None]


def preview(desk: ReviewDesk, where: QueueFilter, *, to: str) -> BulkPreview:
    """The payments ``where`` matches now (up to bulk_max), with their totals and the set's digest."""
    target = target_status(to)
    limit = desk.config.bulk_max
    found = desk.queue_store.page(where, desk.config.rules(desk.clock.now()), limit=limit + 1)
    chosen = found[:limit]
    sums: dict[str, tuple[int, int]] = {}
    for p in chosen:
        n, amount = sums.get(p.currency, (0, 0))
        sums[p.currency] = (n + 1, amount + p.amount)
    return BulkPreview(where=where, to=target, payments=chosen,
                       by_currency=[CurrencyTotal(c, n, a) for c, (n, a) in sorted(sums.items())],
                       digest=digest(chosen, target), too_many=len(found) > limit)


def apply(desk: ReviewDesk, where: QueueFilter, *, to: str, reason: str, by: str, expect: str,
          approval_func: ApprovalFunc | None = None) -> BulkPreview:
    """Resolve what ``preview`` showed (its digest ``expect``) as ``to``, all or nothing. Returns what was
    resolved. UsageError: the set changed since the preview, too many, nothing matched; ReviewRefused: a PSP
    contradicts or could not be asked for some payment (named); nothing written either way."""
    reason, by = typed_text(reason, "--reason", REASON_MAX), typed_text(by, "--by", OPERATOR_MAX)
    now = preview(desk, where, to=to)
    if now.too_many:
        raise UsageError(f"the filter matches more than {desk.config.bulk_max} payments (bulk_max); narrow it")
    if not now.payments:
        raise UsageError("no payment in review matches the filter; nothing resolved")
    if now.digest != expect.strip():
        raise UsageError(f"the queue changed since the preview: the filter now matches {now.count} payments that "
                         f"differ from those previewed; nothing resolved (preview again)")
    (approval_func or _approve)(now, by)
    transitions: list[Transition] = []
    refused: list[str] = []
    extra = {"bulk": {"size": now.count, "digest": now.digest}}
    for payment in now.payments:
        try:
            transitions.append(desk.decide(payment, now.to, reason=reason, by=by, override=False, extra=extra))
        except ReviewRefused as exc:
            refused.append(str(exc).split("; resolving", 1)[0].split("; nothing changed", 1)[0])
    if refused:
        named = "; ".join(refused[:NAMED_MAX]) + (f"; and {len(refused) - NAMED_MAX} more" if len(refused) >
                                                   NAMED_MAX else "")
        raise ReviewRefused(f"{len(refused)} of {now.count} payments cannot be resolved as {now.to} ({named}); "
                            f"nothing resolved (resolve those one by one, or leave them out of the filter)")
    with desk.payments.db.begin() as conn:
        for t in transitions:
            if not desk.payments.apply(conn, t):
                raise UsageError(f"payment id {t.payment_id} changed while the batch was being resolved; nothing "
                                 f"resolved (preview again)")
    return now


def digest(payments: list[Payment], to: PaymentStatus) -> str:
    """SHA-256 over the target and each payment's id and review_since, in id order: the identity of a set. Written
    ``grouped`` (eight groups of eight hex digits joined by dots): a run of 13 or more digits in the plain form can
    be a Luhn-valid number, which the audit trail's redaction would mask as a card number."""
    h = hashlib.sha256(f"to={to.value}".encode())
    for p in sorted(payments, key=lambda p: p.id):
        h.update(f";{p.id}@{p.review_since.isoformat() if p.review_since else '-'}".encode())
    return grouped(h.hexdigest())


def _approve(preview: BulkPreview, by: str) -> None:
    """The default approval: none needed (``recon.actions.Actions.bulk_resolve`` passes the four-eyes one)."""

