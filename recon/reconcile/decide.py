"""What the PSP's word means for one of our payments: every rule that turns PSP evidence into a transition, one
room for the charge, reconciliation, listings and webhooks (docs/design.md). Its callers add only when to ask
and what to do while the PSP cannot say yet (schedules, grace periods: recon.reconcile.handler).

First, whether the evidence is about the payment at all, and whether it agrees with what we hold:

- ``accounts_agree``: evidence is about a payment only when the merchant accounts agree. A PSP with merchant
  accounts (Adyen) may see one merchant reference in two accounts (Adyen recommends unique references but
  does not require them); evidence from another account is not ours. A side that names no account (Stripe's
  events and listings; a payment stored without one, ``recon.rows.NO_ACCOUNT``) agrees with any.
- ``conflict``: a PSP reference, once stored, is never replaced. Evidence naming another PSP reference than
  the one the payment holds (a second PaymentIntent carrying our reference, a listing with another charge under
  it) is kept as evidence naming both, and resolved visibly, never healed from (``reference_conflict`` words
  its review reason).

Then ``heal`` is the part of the table that ends an unfinished payment (``mismatch``: amount or currency;
``authentication_reason``: the customer must act); ``reversal`` and ``late_news`` are what a webhook adds
about a payment that is final already. They return the target status with the fields its transition sets,
or None when nothing changes. ``outcome_details`` is how every answer joins the audit trail.

| the PSP says                              | ours               | becomes                                         |
| ----------------------------------------- | ------------------ | ----------------------------------------------- |
| anything, from another merchant account   | any                | nothing: not ours (1)                           |
| anything under another PSP reference (4), pushed or listed | unfinished | evidence naming both; reconcile now (2) |
| anything under another PSP reference, answering our question (3) | unfinished | needs_review (reference_conflict) |
| succeeded, refunded, disputed under another PSP reference | succeeded, failed | needs_review (reference_conflict) |
| anything else under another PSP reference | final              | evidence naming both                            |
| succeeded, same amount and currency       | unfinished         | succeeded                                       |
| succeeded, other amount or currency       | unfinished         | needs_review (amount_mismatch / currency_mismatch) |
| customer action required                  | unfinished         | needs_review (authentication_required)          |
| authorised or succeeded, a manual-capture payment, same amount | unfinished | authorised (our capture moves it on) |
| authorised or succeeded, other amount or currency | unfinished, manual | needs_review (amount_mismatch)     |
| authorised, an automatic-capture payment  | unfinished         | nothing: not money yet (pending)                |
| failed / canceled                         | unfinished         | failed ("psp: " and the PSP's reason)           |
| failed / canceled (the authorisation expired: Stripe's automatic) | authorised | failed ("psp: …")          |
| refunded by no more than our own refunds  | succeeded          | nothing: ours (recon.db.refund_store)           |
| refunded or disputed                      | unfinished, succeeded, failed | needs_review (psp_reversed)          |
| succeeded                                 | failed             | needs_review (status_mismatch)                  |
| anything else                             | final              | nothing (a redelivery, or older news)           |

(1) a webhook is kept as unknown_payment (``recon report``: missing_locally); a listing has not listed it; the
report's line is missing_locally. (2) ``reconcile:<id>``: it asks the PSP about the reference we hold. (3) the
answer to our charge, or to the reconcile job's lookup: no later job would settle it. A succeeded payment
hearing of a success under another reference may have been charged twice: a person looks. (4) "under another
PSP reference": naming our merchant reference and a PSP reference other than the one we hold (``conflict``).

The answer to our own charge (``charged``, recon.payments.charge), once ``conflict`` found it names the
reference we hold or none:

| our charge's answer                       | becomes                                                          |
| ----------------------------------------- | ---------------------------------------------------------------- |
| succeeded, same amount and currency       | succeeded                                                        |
| succeeded, other amount or currency       | needs_review (amount_mismatch / currency_mismatch)               |
| authorised or succeeded, a manual-capture payment | authorised (or needs_review: amount_mismatch)            |
| customer action required                  | needs_review (authentication_required)                           |
| declined                                  | failed ("declined: " and the PSP's reason)                       |
| pending, cannot say, not found            | pending: reconciliation decides                                  |
| authorised for an automatic-capture payment | pending: held for a capture never asked for (reconciliation)  |

The first rows come first: a transition built from evidence naming another PSP reference would not move the
payment anyway (``PaymentStore.apply`` refuses it: PspReferenceConflict), but the decision never builds one.
tests/unit/test_decide.py has a case for every row of both tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psp_adapters.protocol import (
    ActionRequired,
    Authorised,
    DisputeNews,
    Failed,
    ModificationNews,
    NotFound,
    PaymentOutcome,
    Pending,
    RefundNews,
    Reversed,
    Succeeded,
    Unknown,
)
from recon.modification_rows import Modification
from recon.payments.money import format_amount
from recon.refund_rows import Refund
from recon.rows import NO_ACCOUNT, Payment, PaymentStatus


@dataclass(frozen=True, slots=True)
class Heal:
    target: PaymentStatus
    psp_reference: str | None = None
    failure_reason: str | None = None
    review_reason: str | None = None

    def fields(self) -> dict[str, str | None]:
        return {"psp_reference": self.psp_reference, "failure_reason": self.failure_reason,
                "review_reason": self.review_reason}


@dataclass(frozen=True, slots=True)
class Conflict:
    """Evidence naming ``theirs`` about a payment that holds ``ours``. ``review``: the transition to
    needs_review the table gives (never carrying ``theirs``); None: the evidence is kept as a note naming both
    (``details``), and an unfinished payment gets its reconcile job now."""

    ours: str
    theirs: str
    review: Heal | None = None

    def details(self) -> dict[str, Any]:
        return conflict_details(self.ours, [self.theirs])


def conflict_details(ours: str, theirs: Sequence[str]) -> dict[str, Any]:
    """The audit trail's record of evidence naming other PSP references than ours: both sides, by name."""
    return {"psp_reference_conflict": {"ours": ours, "theirs": sorted(set(theirs))}}


AUTHENTICATION_REQUIRED = "authentication_required: customer authentication required"


def outcome_details(outcome: PaymentOutcome | Reversed | RefundNews | DisputeNews | ModificationNews
                    ) -> dict[str, Any]:
    """A snapshot of the PSP's answer for the audit trail (no card data ever reaches us)."""
    details: dict[str, Any] = {"psp_outcome": type(outcome).__name__.lower(), "psp_status": outcome.raw_status,
                               "psp_reference": outcome.psp_reference, "psp_amount": outcome.amount,
                               "psp_currency": outcome.currency}
    if isinstance(outcome, Failed | RefundNews | DisputeNews | ModificationNews):
        details["reason"] = outcome.reason
    if isinstance(outcome, DisputeNews):
        details.update(dispute=outcome.state, dispute_id=outcome.dispute_id, fee=outcome.fee,
                       evidence_due_by=outcome.due_by.isoformat() if outcome.due_by else None)
    return details


def authentication_reason(outcome: PaymentOutcome) -> str:
    """The review reason of an ActionRequired answer."""
    return f"{AUTHENTICATION_REQUIRED} (PSP status {outcome.raw_status or 'unknown'})"


def mismatch(payment: Payment, outcome: PaymentOutcome) -> str | None:
    """Why the PSP's amount or currency differs from ours, or None when they agree (or it did not say)."""
    if outcome.currency is not None and outcome.currency.upper() != payment.currency:
        return f"currency_mismatch: ours {payment.currency}, PSP {outcome.currency.upper()}"
    if outcome.amount is not None and outcome.amount != payment.amount:
        return f"amount_mismatch: ours {payment.amount} {payment.currency}, PSP {outcome.amount}"
    return None


def reference_conflict(payment: Payment, named: str | None, *, what: str) -> str | None:
    """The review reason when ``named`` (a PSP reference some evidence gives) is not the PSP reference the
    payment holds; None when it holds none, the evidence names none, or they agree. ``what``: the evidence and
    what it says, for the reason ("the PSP's webhook says succeeded")."""
    if not (payment.psp_reference and named) or named == payment.psp_reference:
        return None
    return (f"reference_conflict: ours is {payment.psp_reference}, {what} about {named} under our reference "
            f"(a second charge, or not ours: a person looks)")


def accounts_agree(ours: str | None, theirs: str | None) -> bool:
    """Whether evidence from merchant account ``theirs`` may be about a payment of account ``ours``: they are
    the same, or either side names no account (None, or one of ``NO_ACCOUNT``)."""
    return ours is None or ours in NO_ACCOUNT or theirs is None or theirs in NO_ACCOUNT or ours == theirs


def conflict(payment: Payment, news: PaymentOutcome | Reversed, *, asked: bool = False) -> Conflict | None:
    """None unless ``news`` names another PSP reference than the one ``payment`` holds; then the table's
    answer (see the module docstring). ``asked``: the news answers our own question about the payment (its
    charge, its reconcile lookup by the reference we hold): no later job would settle it, so an unfinished
    payment goes to review."""
    theirs = news.psp_reference
    said = _what(news)
    reason = reference_conflict(payment, theirs, what=f"the PSP {said}")
    if reason is None or theirs is None or payment.psp_reference is None:
        return None
    money_moved = isinstance(news, Succeeded | Reversed)
    to_review = (asked and not payment.status.final) or (
        payment.status in (PaymentStatus.SUCCEEDED, PaymentStatus.FAILED) and money_moved)
    review = Heal(PaymentStatus.NEEDS_REVIEW, review_reason=reason) if to_review else None
    return Conflict(payment.psp_reference, theirs, review)


def _what(news: PaymentOutcome | Reversed) -> str:
    if isinstance(news, Reversed):
        return "reports a refund" if news.kind == "refund" else "reports a dispute"
    return f"says {news.raw_status or type(news).__name__.lower()}"


def heal(payment: Payment, answer: PaymentOutcome) -> Heal | None:
    """The final status the PSP's answer gives an unfinished payment; None: no final answer yet. The caller
    has checked ``conflict`` first: the answer names the reference we hold, or we hold none."""
    ref = answer.psp_reference
    match answer:
        case Succeeded() | Authorised() if payment.capture_mode == "manual":
            # the PSP holds it: only our own capture, confirmed, makes a manual payment succeeded (Adyen's
            # AUTHORISATION event and report record say Succeeded for an authorisation: they cannot tell)
            problem = mismatch(payment, answer)
            if problem:
                return Heal(PaymentStatus.NEEDS_REVIEW, psp_reference=ref, review_reason=problem)
            return Heal(PaymentStatus.AUTHORISED, psp_reference=ref)
        case Succeeded():
            problem = mismatch(payment, answer)
            if problem:
                return Heal(PaymentStatus.NEEDS_REVIEW, psp_reference=ref, review_reason=problem)
            return Heal(PaymentStatus.SUCCEEDED, psp_reference=ref)
        case ActionRequired():
            return Heal(PaymentStatus.NEEDS_REVIEW, psp_reference=ref, review_reason=authentication_reason(answer))
        case Failed(reason=reason):
            return Heal(PaymentStatus.FAILED, psp_reference=ref,
                        failure_reason=f"psp: {reason or answer.raw_status or 'failed'}")
    return None


def charged(payment: Payment, answer: PaymentOutcome) -> Heal:
    """What the answer to our own charge makes of the payment (the second table): ``heal``'s, but a refusal is
    "declined", and an answer that is not final leaves the payment pending for reconciliation. The caller has
    checked ``conflict`` first."""
    ref = answer.psp_reference
    match answer:
        case Failed(reason=reason):
            return Heal(PaymentStatus.FAILED, psp_reference=ref,
                        failure_reason=f"declined: {reason or answer.raw_status or 'no reason'}")
        case Pending() | Unknown() | NotFound():
            return Heal(PaymentStatus.PENDING, psp_reference=ref)
        case Authorised() if payment.capture_mode != "manual":
            return Heal(PaymentStatus.PENDING, psp_reference=ref)  # held for a capture we never asked for
    decision = heal(payment, answer)
    assert decision is not None  # nosec B101  # succeeded, authorised, action required end it: type narrowing
    return decision


def reversal(payment: Payment, news: Reversed) -> Heal:
    """A refund or dispute: money the PSP took back. Never healed: a person looks."""
    taken = format_amount(news.amount, news.currency) if news.amount is not None and news.currency else "an amount"
    what = "refunded" if news.kind == "refund" else "disputed (chargeback)"
    why = f", reason {news.reason}" if news.reason else ""
    return Heal(PaymentStatus.NEEDS_REVIEW, psp_reference=news.psp_reference,
                review_reason=f"psp_reversed: {what} {taken} at the PSP while ours was {payment.status}{why}")


def our_refunds(payment: Payment, news: Reversed) -> bool:
    """Whether a refund the PSP reports on a succeeded payment (Stripe's charge.refunded: all refunded so far) is no
    more than the refunds we asked for and have not seen fail (``Payment.refunded_amount``): ours, each a refund
    of its own (recon.db.refund_store), not a surprise."""
    return (news.kind == "refund" and payment.status is PaymentStatus.SUCCEEDED and news.amount is not None
            and 0 < news.amount <= payment.refunded_amount
            and (news.currency is None or news.currency.upper() == payment.currency))


def late_news(payment: Payment, news: PaymentOutcome | Reversed) -> Heal | None:
    """What news about a payment that is final already changes: a reversal of it, or a success of one we
    hold as failed, goes to review; anything else is a redelivery or older news (None)."""
    if isinstance(news, Reversed) and our_refunds(payment, news):
        return None
    if isinstance(news, Reversed) and payment.status in (PaymentStatus.SUCCEEDED, PaymentStatus.FAILED):
        return reversal(payment, news)
    if isinstance(news, Failed) and payment.status is PaymentStatus.AUTHORISED:
        # the PSP canceled the authorisation (Stripe: cancellation_reason automatic, expired uncaptured)
        return Heal(PaymentStatus.FAILED, psp_reference=news.psp_reference,
                    failure_reason=f"psp: {news.reason or news.raw_status or 'canceled'} (authorisation ended "
                                   "uncaptured)")
    if isinstance(news, Succeeded) and payment.status is PaymentStatus.FAILED:
        return Heal(PaymentStatus.NEEDS_REVIEW, psp_reference=news.psp_reference,
                    review_reason=f"status_mismatch: ours failed ({payment.failure_reason or 'no reason'}), the "
                                  f"PSP says {news.raw_status or 'succeeded'}")
    return None


# --- refunds --------------------------------------------------------------------------------------------------
#
# A refund's evidence, in the same room. The answer to our own refund request (``refund_sent``, the refund job):
#
# | the PSP answers                           | the refund                                              |
# | ----------------------------------------- | ------------------------------------------------------- |
# | anything naming another PSP refund id than the one stored | needs_review (reference_conflict)     |
# | succeeded, same amount and currency       | succeeded                                               |
# | succeeded, other amount or currency       | needs_review (amount_mismatch / currency_mismatch)      |
# | failed                                    | failed ("declined: " and the PSP's reason)              |
# | pending, action required, cannot say, not found | pending: reconciliation and webhooks decide        |
#
# The PSP's word about a refund later (``refund_heal``: its reconcile job's lookup, a webhook):
#
# | the PSP says                              | ours               | becomes                                   |
# | ----------------------------------------- | ------------------ | ----------------------------------------- |
# | anything naming another PSP refund id     | not failed/review  | needs_review (reference_conflict)         |
# | succeeded, same amount and currency       | unfinished         | succeeded                                 |
# | succeeded, other amount or currency       | unfinished         | needs_review (amount_mismatch)            |
# | failed                                    | unfinished         | failed ("psp: " and the PSP's reason)     |
# | failed, or reversed (Adyen REFUNDED_REVERSED) | succeeded      | needs_review (refund_reversed): a person looks |
# | reversed                                  | unfinished         | needs_review (refund_reversed)            |
# | anything else                             | any                | nothing (redelivery, older, not final)    |
#
# Failed is a refund's end (recon.refund_rows): its amount went back to the payment's captured amount.


@dataclass(frozen=True, slots=True)
class RefundHeal:
    target: PaymentStatus
    psp_refund_id: str | None = None
    failure_reason: str | None = None
    review_reason: str | None = None

    def fields(self) -> dict[str, str | None]:
        return {"psp_refund_id": self.psp_refund_id, "failure_reason": self.failure_reason,
                "review_reason": self.review_reason}


def refund_news_outcome(news: RefundNews) -> tuple[PaymentOutcome, bool]:
    """A refund's webhook news as the answer ``refund_heal`` reads (about the refund: its id, our reference), and
    whether it says the refund was reversed."""
    common: dict[str, Any] = {"psp_reference": news.refund_id, "amount": news.amount, "currency": news.currency,
                              "raw_status": news.raw_status, "merchant_reference": news.merchant_reference}
    if news.state == "succeeded":
        return Succeeded(**common), False
    if news.state == "failed":
        return Failed(**common, reason=news.reason), False
    return Pending(**common), news.state == "reversed"


def refund_answer(answer: PaymentOutcome | Reversed) -> tuple[PaymentOutcome, bool]:
    """A ``fetch_refund`` answer as the answer ``refund_heal`` reads, and whether it says the refund was reversed
    (Reversed: the PSP reversed it after success, Adyen's RefundedReversed; read as Pending plus that flag, as
    ``refund_news_outcome`` reads the REFUNDED_REVERSED webhook)."""
    if not isinstance(answer, Reversed):
        return answer, False
    return Pending(psp_reference=answer.psp_reference, amount=answer.amount, currency=answer.currency,
                   raw_status=answer.raw_status, merchant_reference=answer.merchant_reference), True


def refund_mismatch(refund: Refund, outcome: PaymentOutcome) -> str | None:
    """Why the PSP's refund amount or currency differs from ours, or None when they agree (or it did not say)."""
    if outcome.currency is not None and outcome.currency.upper() != refund.currency:
        return f"currency_mismatch: ours {refund.currency}, PSP {outcome.currency.upper()}"
    if outcome.amount is not None and outcome.amount != refund.amount:
        return f"amount_mismatch: ours {refund.amount} {refund.currency}, PSP {outcome.amount}"
    return None


def refund_conflict(refund: Refund, named: str | None) -> RefundHeal | None:
    """The review the table gives when ``named`` (the refund id some evidence gives) is not the one the refund
    holds; None when it holds none, the evidence names none, or they agree (or the refund is past changing)."""
    if not (refund.psp_refund_id and named) or named == refund.psp_refund_id:
        return None
    if refund.status not in (PaymentStatus.CREATED, PaymentStatus.PROCESSING, PaymentStatus.PENDING,
                             PaymentStatus.SUCCEEDED):
        return None
    return RefundHeal(PaymentStatus.NEEDS_REVIEW, review_reason=(
        f"reference_conflict: ours is {refund.psp_refund_id}, the PSP names {named} for our refund "
        f"{refund.refund_reference} (a second refund, or not ours: a person looks)"))


def refund_sent(refund: Refund, answer: PaymentOutcome) -> RefundHeal:
    """What the answer to our own refund request makes of the refund (the first refund table)."""
    ref = answer.psp_reference
    clash = refund_conflict(refund, ref)
    if clash is not None:
        return clash
    match answer:
        case Succeeded():
            problem = refund_mismatch(refund, answer)
            if problem:
                return RefundHeal(PaymentStatus.NEEDS_REVIEW, psp_refund_id=ref, review_reason=problem)
            return RefundHeal(PaymentStatus.SUCCEEDED, psp_refund_id=ref)
        case Failed(reason=reason):
            return RefundHeal(PaymentStatus.FAILED, psp_refund_id=ref,
                              failure_reason=f"declined: {reason or answer.raw_status or 'no reason'}")
    return RefundHeal(PaymentStatus.PENDING, psp_refund_id=ref)


def refund_heal(refund: Refund, answer: PaymentOutcome, *, reversed_: bool = False) -> RefundHeal | None:
    """What the PSP's later word about a refund changes (the second refund table); None: nothing.
    ``reversed_``: the PSP reversed the refund (Adyen's REFUNDED_REVERSED: the money came back)."""
    ref = answer.psp_reference
    clash = refund_conflict(refund, ref)
    if clash is not None:
        return clash
    unfinished = not refund.status.final
    said = answer.raw_status or type(answer).__name__.lower()
    if reversed_ or (isinstance(answer, Failed) and refund.status is PaymentStatus.SUCCEEDED):
        if unfinished or refund.status is PaymentStatus.SUCCEEDED:
            why = f", reason {answer.reason}" if isinstance(answer, Failed) and answer.reason else ""
            return RefundHeal(PaymentStatus.NEEDS_REVIEW, psp_refund_id=ref, review_reason=(
                f"refund_reversed: the PSP says {said} for a refund ours was {refund.status}{why}"))
        return None
    if not unfinished:
        return None
    match answer:
        case Succeeded():
            problem = refund_mismatch(refund, answer)
            if problem:
                return RefundHeal(PaymentStatus.NEEDS_REVIEW, psp_refund_id=ref, review_reason=problem)
            return RefundHeal(PaymentStatus.SUCCEEDED, psp_refund_id=ref)
        case Failed(reason=reason):
            return RefundHeal(PaymentStatus.FAILED, psp_refund_id=ref,
                              failure_reason=f"psp: {reason or answer.raw_status or 'failed'}")
    return None


# --- captures and cancels ---------------------------------------------------------------------------------------
#
# A modification of an authorised payment (recon.modification_rows), in the same room: ``modification_sent`` (the
# answer to our own capture or cancel) and ``modification_heal`` (the PSP's later word: the reconcile job's
# lookup, a webhook). Their table is ``modification_sent``'s docstring (tests/unit/test_decide_modification.py).


@dataclass(frozen=True, slots=True)
class ModificationHeal:
    target: PaymentStatus
    psp_modification_id: str | None = None
    failure_reason: str | None = None
    review_reason: str | None = None
    captured: int | None = None

    def fields(self) -> dict[str, Any]:
        return {"psp_modification_id": self.psp_modification_id, "failure_reason": self.failure_reason,
                "review_reason": self.review_reason, "captured": self.captured}


def _modification_conflict(mod: Modification, named: str | None) -> ModificationHeal | None:
    if not (mod.psp_modification_id and named) or named == mod.psp_modification_id or mod.status.final:
        return None
    return ModificationHeal(PaymentStatus.NEEDS_REVIEW, review_reason=(
        f"reference_conflict: ours is {mod.psp_modification_id}, the PSP names {named} for our {mod.kind} "
        f"{mod.modification_reference} (a second {mod.kind}, or not ours: a person looks)"))


def _modification_done(mod: Modification, answer: Succeeded) -> ModificationHeal:
    ref = answer.psp_reference
    if mod.kind != "capture":
        return ModificationHeal(PaymentStatus.SUCCEEDED, psp_modification_id=ref)
    if answer.currency is not None and answer.currency.upper() != mod.currency:
        return ModificationHeal(PaymentStatus.NEEDS_REVIEW, psp_modification_id=ref, review_reason=(
            f"currency_mismatch: ours {mod.currency}, PSP {answer.currency.upper()}"))
    if answer.amount is not None and answer.amount > mod.amount:
        return ModificationHeal(PaymentStatus.NEEDS_REVIEW, psp_modification_id=ref, review_reason=(
            f"amount_mismatch: ours {mod.amount} {mod.currency}, PSP captured {answer.amount}"))
    return ModificationHeal(PaymentStatus.SUCCEEDED, psp_modification_id=ref,
                            captured=answer.amount if answer.amount is not None else mod.amount)


def modification_sent(mod: Modification, answer: PaymentOutcome) -> ModificationHeal:
    """What the answer to our own capture or cancel makes of it; ``modification_heal``: what the PSP's later word
    changes. The PSP's answer is already about the modification (psp_adapters' ``CapturingAdapter``).

    | the PSP says                                   | ours         | becomes                                  |
    | ---------------------------------------------- | ------------ | ---------------------------------------- |
    | anything naming another PSP id than the one stored | unfinished | needs_review (reference_conflict)       |
    | succeeded, a capture of at most ours, same currency | unfinished | succeeded (captured: the PSP's amount) |
    | succeeded, a capture of more, or another currency | unfinished | needs_review (amount or currency mismatch) |
    | succeeded, a cancel                            | unfinished   | succeeded                                |
    | failed                                         | unfinished   | failed ("declined: " answering us, else "psp: ") |
    | anything else                                  | unfinished   | pending (answering us); nothing (later)  |
    | succeeded, a capture, later (``late_capture``) | failed       | needs_review (status_mismatch)           |
    | anything else                                  | final        | nothing (a redelivery, older news)       |

    Stripe captures once, at most what was asked: a captured amount below ours is what the PSP took, and the
    payment's captured amount follows it."""
    clash = _modification_conflict(mod, answer.psp_reference)
    if clash is not None:
        return clash
    match answer:
        case Succeeded():
            return _modification_done(mod, answer)
        case Failed(reason=reason):
            return ModificationHeal(PaymentStatus.FAILED, psp_modification_id=answer.psp_reference,
                                    failure_reason=f"declined: {reason or answer.raw_status or 'no reason'}")
    return ModificationHeal(PaymentStatus.PENDING, psp_modification_id=answer.psp_reference)


def late_capture(mod: Modification, answer: PaymentOutcome) -> ModificationHeal | None:
    """A capture we hold as failed that the PSP says succeeded (a CAPTURE webhook after our "never reached the
    PSP", Stripe's payment_intent.succeeded after a failed capture, a recheck): money moved that we think did not.
    It goes to review, as a charge we hold as failed does (``late_news``), never to succeeded: evidence never
    overwrites a final state we hold (its payment follows it to review: ``ModificationStore.apply``). None for
    anything else. A PSP id other than the one stored is a reference_conflict, and the stored id stays."""
    if mod.kind != "capture" or mod.status is not PaymentStatus.FAILED or not isinstance(answer, Succeeded):
        return None
    named = answer.psp_reference
    if mod.psp_modification_id and named and named != mod.psp_modification_id:
        return ModificationHeal(PaymentStatus.NEEDS_REVIEW, review_reason=(
            f"reference_conflict: ours is {mod.psp_modification_id}, the PSP names {named} for our capture "
            f"{mod.modification_reference} (a second capture, or not ours: a person looks)"))
    took = (f" {format_amount(answer.amount, answer.currency)}" if answer.amount is not None and answer.currency
            else "")
    return ModificationHeal(PaymentStatus.NEEDS_REVIEW, psp_modification_id=named, review_reason=(
        f"status_mismatch: ours failed ({mod.failure_reason or 'no reason'}), the PSP says "
        f"{answer.raw_status or 'succeeded'}{took} for capture {mod.modification_reference}"))


def modification_heal(mod: Modification, answer: PaymentOutcome) -> ModificationHeal | None:
    """What the PSP's later word about a capture or cancel changes (``modification_sent``'s table); None:
    nothing."""
    if mod.status.final:
        return late_capture(mod, answer)
    clash = _modification_conflict(mod, answer.psp_reference)
    if clash is not None:
        return clash
    match answer:
        case Succeeded():
            return _modification_done(mod, answer)
        case Failed(reason=reason):
            return ModificationHeal(PaymentStatus.FAILED, psp_modification_id=answer.psp_reference,
                                    failure_reason=f"psp: {reason or answer.raw_status or 'failed'}")
    return None


def modification_recheck(mod: Modification, answer: PaymentOutcome, *, captured: int) -> ModificationHeal | None:
    """What the PSP's word, asked again about a *final* capture or cancel (``recon review recheck MOD_REF``),
    changes; None: nothing (the answer joins its audit trail). ``captured``: what its payment holds as captured
    (the amount a capture is compared with).
    Only a succeeded modification, or a failed capture (``late_capture``), can move; it moves to review, never to
    another final status, and never takes a PSP id other than the one stored.

    | the PSP says                                             | ours         | becomes                             |
    | -------------------------------------------------------- | ------------ | ----------------------------------- |
    | anything naming another PSP id than the one stored       | succeeded    | needs_review (reference_conflict)   |
    | failed (a capture: canceled; a cancel: captured)         | succeeded    | needs_review (status_mismatch)      |
    | succeeded, a capture of another amount or currency       | succeeded    | needs_review (amount_mismatch, …)   |
    | anything else (agreeing, pending, cannot say, not found) | succeeded    | nothing                             |
    | succeeded, a capture (``late_capture``)                  | failed       | needs_review (status_mismatch)      |
    | anything else                                            | failed, needs_review | nothing                     |
    """
    if mod.status is PaymentStatus.FAILED:
        return late_capture(mod, answer)
    if mod.status is not PaymentStatus.SUCCEEDED:
        return None
    named = answer.psp_reference
    if mod.psp_modification_id and named and named != mod.psp_modification_id:
        return ModificationHeal(PaymentStatus.NEEDS_REVIEW, review_reason=(
            f"reference_conflict: ours is {mod.psp_modification_id}, the PSP names {named} for our {mod.kind} "
            f"{mod.modification_reference} (a second {mod.kind}, or not ours: a person looks)"))
    said = answer.raw_status or type(answer).__name__.lower()
    match answer:
        case Failed(reason=reason):
            why = f", reason {reason}" if reason else ""
            return ModificationHeal(PaymentStatus.NEEDS_REVIEW, review_reason=(
                f"status_mismatch: the PSP says {said} for {mod.kind} {mod.modification_reference}, ours "
                f"succeeded{why}"))
        case Succeeded() if mod.kind == "capture":
            if answer.currency is not None and answer.currency.upper() != mod.currency:
                return ModificationHeal(PaymentStatus.NEEDS_REVIEW, review_reason=(
                    f"currency_mismatch: ours {mod.currency}, PSP {answer.currency.upper()}"))
            if answer.amount is not None and answer.amount != captured:
                return ModificationHeal(PaymentStatus.NEEDS_REVIEW, review_reason=(
                    f"amount_mismatch: ours captured {captured} {mod.currency}, PSP captured {answer.amount}"))
    return None
