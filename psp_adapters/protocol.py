"""The PspAdapter and WebhookReceiver protocols, their typed results, and what a PSP's package registers
(``PspPackage``): all an adapter author needs.

One method per question we ask a PSP, not one per endpoint. Amounts are integer minor units plus an
ISO-4217 currency code; conversion from a PSP's wire format happens only in that adapter's ``wire.py``.
A PSP is one package, ``psp_adapters/<name>/``, whose ``__init__`` exports ``PSP = PspPackage(...)``, and one
line in ``psp_adapters.registry``: recon finds its adapter, its charge rules, its webhooks and its defaults
there, and names no PSP itself.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any, ClassVar, Protocol, runtime_checkable


class Secret:
    """A credential. Its repr and str are masked, so it never lands in a log line or an error message."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The raw value; call it only where the credential goes on the wire."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __bool__(self) -> bool:
        return bool(self._value)


@dataclass(frozen=True, slots=True)
class ChargeRequest:
    """A charge to create. ``merchant_reference`` is our unique id for the payment."""

    merchant_reference: str
    amount: int  #: minor units
    currency: str  #: ISO-4217, upper case
    merchant_account: str | None = None  #: None or "": the adapter's configured default account
    payment_method: str | None = None  #: a PSP token of a stored payment method (never a card number)
    customer_reference: str | None = None  #: the PSP's customer (Stripe ``cus_…``) or shopper reference (Adyen)
    description: str | None = None
    #: authorise only: the PSP holds the amount until a capture (``CapturingAdapter``); the answer is Authorised
    manual_capture: bool = False


@dataclass(frozen=True, slots=True)
class FieldProblem:
    """Why a PSP would refuse a charge as given: ``field`` names the ChargeRequest field (or CSV column)."""

    field: str
    message: str


@dataclass(frozen=True, slots=True)
class PspRef:
    """How to find a payment at the PSP: its reference when we have one, else our merchant reference."""

    psp_reference: str | None = None
    merchant_reference: str | None = None
    merchant_account: str | None = None  #: where the payment was made (Adyen reads that account's reports)

    def __post_init__(self) -> None:
        if not (self.psp_reference or self.merchant_reference):
            raise ValueError("PspRef needs psp_reference or merchant_reference")


@dataclass(frozen=True, slots=True)
class _Outcome:
    psp_reference: str | None = None
    amount: int | None = None  #: minor units, as the PSP reports them
    currency: str | None = None
    raw_status: str | None = None  #: the PSP's own status string, kept for the audit trail
    merchant_reference: str | None = None


@dataclass(frozen=True, slots=True)
class Succeeded(_Outcome):
    """The PSP took the money (authorised and captured, or capture guaranteed)."""


@dataclass(frozen=True, slots=True)
class Authorised(_Outcome):
    """The PSP authorised the amount and holds it for a capture (a charge made with ``manual_capture``): no
    money taken yet. Stripe's ``requires_capture``; Adyen's ``Authorised`` for a manual-capture payment."""


@dataclass(frozen=True, slots=True)
class Pending(_Outcome):
    """The PSP has no final answer yet (processing, 3DS, async methods)."""


@dataclass(frozen=True, slots=True)
class ActionRequired(_Outcome):
    """The PSP needs the customer (3-D Secure, a redirect): a merchant-initiated charge cannot finish it.

    Never a success and never something to wait for: recon sends the payment to review with the reason.
    """


@dataclass(frozen=True, slots=True)
class Failed(_Outcome):
    """The PSP says no: declined, canceled, expired. ``reason`` is the PSP's refusal reason or code."""

    reason: str | None = None


@dataclass(frozen=True, slots=True)
class NotFound(_Outcome):
    """The PSP has no record of this payment."""


@dataclass(frozen=True, slots=True)
class Unknown(_Outcome):
    """The PSP answered with a status we do not recognise: never guessed into another outcome."""


PaymentOutcome = Succeeded | Authorised | Pending | ActionRequired | Failed | NotFound | Unknown


@dataclass(frozen=True, slots=True)
class Reversed(_Outcome):
    """After it succeeded, the PSP took money back (a webhook's news, never a ``fetch_payment`` answer):
    ``kind`` "refund" or "dispute" (a chargeback); ``amount`` is what was taken back; ``reason`` the PSP's."""

    kind: str = "refund"
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class PayoutNews(_Outcome):
    """News of a payout, not of a payment (a webhook's, never a ``fetch_payment`` answer): ``psp_reference`` is
    the PSP's payout id (Stripe's ``po_…``) or the report file that describes it (Adyen's Settlement details
    report), ``raw_status`` the PSP's word (paid, failed, …). recon fetches the payout again and stores what it
    says (``recon.close``): the news itself changes nothing."""


@dataclass(frozen=True, slots=True)
class RefundNews(_Outcome):
    """News about one refund (a webhook's): ``psp_reference`` is the refunded PAYMENT's PSP reference (as in any
    news: it finds the payment), ``refund_id`` the PSP's id of the refund, ``merchant_reference`` our refund
    reference when the PSP echoes it (Stripe's metadata, Adyen's merchantReference); ``amount`` the refund's.
    ``state``: succeeded, failed, pending, or reversed (Adyen's REFUNDED_REVERSED: the money came back)."""

    state: str = "pending"
    refund_id: str | None = None
    reason: str | None = None


#: a RefundNews' states
REFUND_STATES = ("succeeded", "failed", "pending", "reversed")


@dataclass(frozen=True, slots=True)
class DisputeNews(_Outcome):
    """News about one dispute (a chargeback) of a payment: ``psp_reference`` is the PAYMENT's PSP reference,
    ``dispute_id`` the PSP's id of the dispute (Stripe's ``dp_…``; Adyen has one chargeback per payment: the
    payment's reference), ``amount`` what was withdrawn, ``fee`` the PSP's dispute fee when it says (minor units
    of ``currency``), ``due_by`` the evidence deadline when it says. ``state``: opened (money withdrawn, or
    evidence asked for), won (reinstated), lost, reversed (Adyen's CHARGEBACK_REVERSED: the money came back)."""

    state: str = "opened"
    dispute_id: str | None = None
    reason: str | None = None
    due_by: datetime | None = None
    fee: int | None = None


#: a DisputeNews' states
DISPUTE_STATES = ("opened", "won", "lost", "reversed")


@dataclass(frozen=True, slots=True)
class ModificationNews(_Outcome):
    """News about one capture or cancel of an authorised payment (a webhook's: Adyen's CAPTURE, CAPTURE_FAILED,
    CANCELLATION): ``psp_reference`` is the PAYMENT's PSP reference (it finds the payment), ``modification_id``
    the PSP's id of the modification, ``merchant_reference`` our modification reference when the PSP echoes it;
    ``kind`` capture or cancel, ``state`` succeeded or failed; ``amount`` the modification's."""

    kind: str = "capture"
    state: str = "succeeded"
    modification_id: str | None = None
    reason: str | None = None


#: a ModificationNews' states
MODIFICATION_STATES = ("succeeded", "failed")
#: the modifications of an authorisation (``ModificationRequest.kind``, ``ModificationNews.kind``)
MODIFICATION_KINDS = ("capture", "cancel")

#: the word recon stores for each kind of news (``news_kind``); NotFound, which no webhook says, reads as unknown
_NEWS: dict[type, str] = {Succeeded: "succeeded", Authorised: "authorised", Failed: "failed", Pending: "pending",
                          ActionRequired: "action_required", Unknown: "unknown", NotFound: "unknown"}
_OUTCOMES: dict[str, type[PaymentOutcome]] = {"succeeded": Succeeded, "authorised": Authorised, "failed": Failed,
                                             "pending": Pending,
                                             "action_required": ActionRequired, "unknown": Unknown}
#: the kinds of ``Reversed`` news: money the PSP took back
REVERSAL_KINDS = ("refund", "dispute")
#: the word of ``PayoutNews``
PAYOUT_NEWS = "payout"


def news_kind(news: PaymentOutcome | Reversed | PayoutNews | RefundNews | DisputeNews | ModificationNews) -> str:
    """The word that names ``news`` where it is stored (recon's ``webhook_events.news``): succeeded, failed,
    pending, action_required, unknown, a reversal's kind (refund, dispute), ``payout``, or ``refund_<state>`` /
    ``dispute_<state>`` for news about one refund or dispute. ``news_from`` reads it back."""
    if isinstance(news, PayoutNews):
        return PAYOUT_NEWS
    if isinstance(news, RefundNews):
        return f"refund_{news.state}"
    if isinstance(news, DisputeNews):
        return f"dispute_{news.state}"
    if isinstance(news, ModificationNews):
        return f"{news.kind}_{news.state}"
    return news.kind if isinstance(news, Reversed) else _NEWS[type(news)]


def news_from(kind: str, *, psp_reference: str | None, merchant_reference: str | None, amount: int | None,
              currency: str | None, raw_status: str | None, reason: str | None,
              refund_id: str | None = None, due_by: datetime | None = None,
              fee: int | None = None
              ) -> PaymentOutcome | Reversed | PayoutNews | RefundNews | DisputeNews | ModificationNews:
    """The news ``kind`` (a ``news_kind`` word) stands for, with its fields: what a webhook module parsed, as it
    was stored. A word it does not know reads as Unknown, never as a guess; ``reason`` is kept where the news
    has one (Failed, Reversed, RefundNews); ``refund_id`` is a RefundNews' (stored apart from the payment's)."""
    common = {"psp_reference": psp_reference, "merchant_reference": merchant_reference, "amount": amount,
              "currency": currency, "raw_status": raw_status}
    state = kind.removeprefix("refund_")
    if kind.startswith("refund_") and state in REFUND_STATES:
        return RefundNews(**common, state=state, refund_id=refund_id, reason=reason)  # type: ignore[arg-type]
    state = kind.removeprefix("dispute_")
    if kind.startswith("dispute_") and state in DISPUTE_STATES:
        return DisputeNews(**common, state=state, dispute_id=refund_id, reason=reason, due_by=due_by,  # type: ignore[arg-type]
                           fee=fee)
    modification, _, state = kind.partition("_")
    if modification in MODIFICATION_KINDS and state in MODIFICATION_STATES:
        return ModificationNews(**common, kind=modification, state=state, modification_id=refund_id,  # type: ignore[arg-type]
                                reason=reason)
    if kind in REVERSAL_KINDS:
        return Reversed(**common, kind=kind, reason=reason)  # type: ignore[arg-type]
    if kind == PAYOUT_NEWS:
        return PayoutNews(**common)  # type: ignore[arg-type]
    cls = _OUTCOMES.get(kind, Unknown)
    if cls is Failed:
        return Failed(**common, reason=reason)  # type: ignore[arg-type]
    return cls(**common)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class WebhookEvent:
    """One event a PSP pushed, verified and parsed by that PSP's ``webhook`` module.

    ``event_id`` is unique per PSP and the same on every redelivery (Stripe's ``evt_…``; Adyen's event code with
    the item's PSP references). ``news`` is what it says about one payment (its ``psp_reference`` and
    ``merchant_reference`` find it), or ``PayoutNews`` about a payout; None for events that concern no payment
    (``report`` names an available report) or that recon does not act on. ``body`` is the event's own
    document, kept as evidence.
    """

    psp: str
    event_id: str
    event_type: str  #: the PSP's own name: payment_intent.succeeded, AUTHORISATION, ...
    occurred_at: datetime | None
    news: PaymentOutcome | Reversed | PayoutNews | RefundNews | DisputeNews | ModificationNews | None
    merchant_account: str | None = None
    report: str | None = None  #: REPORT_AVAILABLE: the report file's name
    body: dict[str, object] = field(default_factory=dict, compare=False)


@dataclass(frozen=True, slots=True)
class SettlementLine:
    """One row of a PSP's settlement/captured listing."""

    psp_reference: str
    merchant_reference: str | None
    amount: int  #: minor units
    currency: str
    status: str  #: "succeeded", "failed", "refunded", "partially_refunded", "chargeback", ... by the adapter
    settled_at: datetime  #: aware UTC
    raw: dict[str, object] = field(default_factory=dict, compare=False)
    fee: int | None = None  #: the PSP's fee, minor units of ``settlement_currency``, when the listing says
    net: int | None = None  #: what reaches the merchant after fees, same units, when the listing says
    settlement_currency: str | None = None  #: currency of ``fee`` and ``net``; None: the same as ``currency``
    payout: str | None = None  #: the payout (batch) that carries this line, when the listing says
    merchant_account: str | None = None  #: where the PSP booked it, when it has merchant accounts (Adyen)


@dataclass(frozen=True, slots=True)
class ListedPayment:
    """One payment of a PSP's listing (``PspAdapter.iter_payments``): what the PSP says about it now.

    ``outcome`` is the same answer ``fetch_payment`` would give (mapped by the same wire function);
    ``created_at`` is when the PSP first booked it (aware UTC), ``merchant_account`` where, when the PSP
    says (Adyen).
    """

    outcome: PaymentOutcome
    created_at: datetime
    merchant_account: str | None = None

    @property
    def merchant_reference(self) -> str | None:
        return self.outcome.merchant_reference

    @property
    def psp_reference(self) -> str | None:
        return self.outcome.psp_reference


#: one request's worth of a listing: each ``next()`` on ``iter_payments``' iterator is one call to the PSP
PaymentPage = tuple[ListedPayment, ...]


@runtime_checkable
class PspAdapter(Protocol):
    """A PSP as recon sees it.

    Every method raises only ``psp_adapters.errors.PspError`` subclasses; httpx exceptions never escape.
    ``create_payment`` sends ``idempotency_key`` with every attempt, so a retry after an unknown outcome
    can never charge twice.
    """

    name: ClassVar[str]
    #: how long the PSP keeps an idempotency key's saved answer; None: as long as recon needs
    idempotency_retention: ClassVar[timedelta | None]
    #: whether ``iter_payments`` answers: recon reconciles in bulk only where it does
    lists_payments: ClassVar[bool]
    #: how long after a charge the PSP may still not find it by our reference (its search lags): recon's grace
    #: period before "never reached the PSP" is at least this (``[reconcile]`` grace_period; zero: no lag)
    search_lag: ClassVar[timedelta]
    #: the bulk sweep's window that fits how the PSP lists (a daily report: a day); None: ``[reconcile] window``
    listing_window: ClassVar[timedelta | None]

    def create_payment(self, request: ChargeRequest, *, idempotency_key: str) -> PaymentOutcome: ...

    def fetch_payment(self, ref: PspRef) -> PaymentOutcome: ...

    def iter_settlements(
        self, since: datetime, until: datetime, *, merchant_accounts: Collection[str] = ()
    ) -> Iterator[SettlementLine]:
        """Settlement lines booked in ``[since, until)``; ``merchant_accounts``: the accounts to read where a
        PSP lists per account (Adyen), besides the configured default."""
        ...

    def iter_payments(
        self, since: datetime, until: datetime, *, merchant_accounts: Collection[str] = ()
    ) -> Iterator[PaymentPage]:
        """The payments the PSP booked (created) in ``[since, until)``, a page per ``next()``: each page is
        exactly one request to the PSP, so a caller can admit every call (rate limit, breaker) on its own.

        A page may be empty (Adyen: a report file that tells nothing new). ``merchant_accounts`` as for
        ``iter_settlements``. Raises ValueError at once for naive datetimes, PspRejectedError at once when
        the adapter cannot list (``lists_payments`` False); PspError subclasses from ``next()``.
        """
        ...

    def close(self) -> None: ...


#: a payout's states (Stripe's words: https://docs.stripe.com/api/payouts/object#payout_object-status)
PAYOUT_STATUSES = ("pending", "in_transit", "paid", "failed", "canceled")
#: what a payout line is: about a payment (charge, refund, dispute, dispute_reversal), or not (fee, adjustment,
#: the payout's own movement ``payout``, other)
PAYOUT_LINE_KINDS = ("charge", "refund", "dispute", "dispute_reversal", "fee", "adjustment", "payout", "other")


@dataclass(frozen=True, slots=True)
class PspPayout:
    """One payout as the PSP states it: a transfer of the merchant's balance to its bank (Stripe's ``po_…``,
    Adyen's payable batch of a merchant account).

    ``amount`` is minor units of ``currency`` reaching the bank (negative: the PSP takes money back);
    ``status`` one of ``PAYOUT_STATUSES`` (an unknown word is a PspProtocolError, never a guess);
    ``arrival_date`` the day the PSP expects it at the bank; ``trace_ref`` what the bank credit may carry
    (Stripe's ``trace_id``, Adyen's batch number); ``merchant_account`` where the PSP has accounts (Adyen).
    """

    payout_id: str
    amount: int
    currency: str
    status: str
    arrival_date: date
    trace_ref: str | None = None
    statement_descriptor: str | None = None
    merchant_account: str | None = None
    raw: dict[str, object] = field(default_factory=dict, compare=False)


@dataclass(frozen=True, slots=True)
class PspPayoutLine:
    """One movement a payout carries, amounts in minor units of ``currency``, signed as the balance moves
    (a refund's net is negative; the payout's own line, kind ``payout``, is minus the payout's amount).
    ``line_id`` is unique within its payout (Stripe's ``txn_…``)."""

    line_id: str
    kind: str  #: one of PAYOUT_LINE_KINDS
    gross: int
    fee: int
    net: int
    currency: str
    psp_reference: str | None = None
    merchant_reference: str | None = None
    #: the PSP's id of the refund or dispute the line carries, when it is one (Stripe's balance transaction
    #: ``source`` ``re_…``/``dp_…``; Adyen's ``Modification Reference``): recon links the line to its object
    movement_reference: str | None = None


@runtime_checkable
class PayoutSource(Protocol):
    """An adapter that also lists its payouts (an optional capability of a ``PspAdapter``: recon asks
    ``isinstance(adapter, PayoutSource)``). Raises only PspError subclasses, from ``next()`` too.
    """

    def iter_payouts(self, since: date, until: date, *, merchant_accounts: Collection[str] = (),
                     known: Collection[str] = (), files: Collection[str] = ()) -> Iterator[PspPayout]:
        """The payouts expected at the bank on a day of ``[since, until)``; ``merchant_accounts`` as for
        ``iter_settlements``; ``known``: payout ids recon has already (a PSP that cannot list by date, Adyen,
        walks on from them); ``files``: report files a webhook named (Adyen's ``REPORT_AVAILABLE``), read
        whatever their day."""
        ...

    def payout_lines(self, payout: PspPayout) -> Iterator[PspPayoutLine]:
        """Every movement ``payout`` carries, its own included."""
        ...


@dataclass(frozen=True, slots=True)
class RefundRequest:
    """A refund to ask for: ``amount`` minor units of ``currency`` (the payment's) back on the payment the PSP
    knows as ``payment_reference`` (Stripe's PaymentIntent id, Adyen's pspReference). ``refund_reference`` is
    ours, unique; the PSP echoes it (Stripe's metadata, Adyen's ``merchantReference``)."""

    payment_reference: str
    refund_reference: str
    amount: int  #: minor units, > 0
    currency: str  #: ISO-4217, upper case
    reason: str | None = None  #: one of the adapter's ``refund_reasons``
    merchant_account: str | None = None  #: the payment's; None or "": the configured default


@dataclass(frozen=True, slots=True)
class RefundRef:
    """How to find a refund at the PSP: its id there when we have one, else our reference on its payment."""

    payment_reference: str
    refund_reference: str
    psp_refund_id: str | None = None
    merchant_account: str | None = None


@runtime_checkable
class RefundingAdapter(Protocol):
    """A PSP that refunds (Stripe, Adyen). The answers are the charge's outcomes, about the refund:
    ``psp_reference`` is the PSP's id of the refund, ``merchant_reference`` our refund reference; Succeeded:
    the money went back; Pending: the PSP has it and no final word yet (Adyen's ``[received]``, always);
    Failed: refused or failed; NotFound: the PSP has no refund for it; Unknown: a status we do not know.

    ``create_refund`` sends ``idempotency_key`` with every attempt, so a retry after a lost answer never
    refunds twice. ``fetch_refund`` asks by the refund's id, else by our reference on the payment; a PSP that
    cannot say yet (Adyen: its reports tell, a day later) answers Pending; Reversed (kind refund): the PSP
    reversed the refund after it succeeded (Adyen's RefundedReversed report row).
    """

    #: the reason codes ``RefundRequest.reason`` may take (None: any text)
    refund_reasons: ClassVar[tuple[str, ...] | None]

    def create_refund(self, request: RefundRequest, *, idempotency_key: str) -> PaymentOutcome: ...

    def fetch_refund(self, ref: RefundRef) -> PaymentOutcome | Reversed: ...


@dataclass(frozen=True, slots=True)
class ModificationRequest:
    """A capture or a cancel of an authorised payment the PSP knows as ``payment_reference`` (Stripe's
    PaymentIntent id, Adyen's pspReference). ``amount``: a capture's, minor units of ``currency`` (the payment's),
    at most the authorised amount (less: a partial capture; the rest is released); a cancel's is the payment's
    and is not sent. ``modification_reference`` is ours, unique; the PSP echoes it where it can (Adyen's
    ``reference``, Stripe's metadata)."""

    kind: str  #: one of MODIFICATION_KINDS
    payment_reference: str
    modification_reference: str
    amount: int
    currency: str
    merchant_account: str | None = None  #: the payment's; None or "": the configured default
    #: the PSP's id of this modification once it named one (Adyen's modification pspReference); never sent
    modification_id: str | None = None


@runtime_checkable
class CapturingAdapter(Protocol):
    """A PSP that authorises now and captures later (Stripe, Adyen). Answers about the modification:
    Succeeded: done (``amount`` what was captured); Pending: the PSP has it and no final word yet (Adyen's
    ``[received]``, always: its CAPTURE / CAPTURE_FAILED / CANCELLATION webhooks and reports tell the end);
    Failed: refused; Unknown: a status we do not know. ``psp_reference`` is the PSP's id of the modification
    (Adyen's modification pspReference; Stripe's: the PaymentIntent's own id, which its capture and cancel
    answer with). Each call sends ``idempotency_key``, so a retry after a lost answer never captures twice.

    ``fetch_modification`` asks what became of it (Stripe: the PaymentIntent, ``succeeded`` with its
    ``amount_received`` after a capture, ``canceled`` after a cancel, ``requires_capture`` while neither;
    Adyen: its rows in the Payment accounting reports, by ``modification_id`` or our reference); a PSP that
    cannot say yet (Adyen: no report has a row of it) answers Pending."""

    def modify_payment(self, request: ModificationRequest, *, idempotency_key: str) -> PaymentOutcome: ...

    def fetch_modification(self, request: ModificationRequest) -> PaymentOutcome: ...


@dataclass(frozen=True, slots=True)
class ListedDispute:
    """One dispute of a PSP's listing (``DisputeSource.iter_disputes``): what the PSP says about it now, as the
    same ``DisputeNews`` its webhooks carry (mapped by the same wire function), with when the PSP opened it
    (aware UTC) and, where the PSP has accounts (Adyen), where."""

    news: DisputeNews
    created_at: datetime
    merchant_account: str | None = None


#: one request's worth of a dispute listing: each ``next()`` on ``iter_disputes``' iterator is one call
DisputePage = tuple[ListedDispute, ...]


@runtime_checkable
class DisputeSource(Protocol):
    """An adapter that also lists disputes (an optional capability of a ``PspAdapter``: recon asks
    ``isinstance(adapter, DisputeSource)``): the disputes a webhook may never have told. Raises only PspError
    subclasses, from ``next()`` too."""

    def iter_disputes(self, since: datetime, until: datetime, *,
                      merchant_accounts: Collection[str] = ()) -> Iterator[DisputePage]:
        """The disputes the PSP opened or moved in ``[since, until)`` (Stripe: created in it; Adyen: the report
        rows booked in it), a page per request. ValueError at once for naive datetimes."""
        ...


@dataclass(frozen=True, slots=True)
class WebhookAnswer:
    """What a PSP expects back once a request's events are stored (or were already: a redelivery); anything
    else makes it deliver the request again."""

    body: bytes
    media_type: str
    status: int = 200


@runtime_checkable
class WebhookReceiver(Protocol):
    """One PSP's webhooks as recon receives them (``psp_adapters/<name>/webhook.py``), built by its package's
    webhook factory from the configured secrets. ``recon serve`` answers ``POST`` on the PSP's path with it:
    ``verify``, store the events with one job each, then answer ``accepted``.

    ``verify`` is the only way to the events: nothing parses a request before it is verified. It raises only
    ``psp_adapters.errors.WebhookRejected``, whose ``reason`` recon counts: ``no_signature``, ``bad_signature``,
    ``stale_timestamp``, ``malformed`` (answered 400) or ``unauthorized`` (401); nothing of the request is stored.
    """

    name: ClassVar[str]
    #: the answer once the request's events are stored
    accepted: ClassVar[WebhookAnswer]

    def verify(self, headers: Mapping[str, str], body: bytes, *, now: float) -> list[WebhookEvent]:
        """The request's events, once ``headers`` and ``body`` (the raw bytes, as received) are verified against
        the configured secrets. ``headers`` is looked up by lower-case name; ``now`` is Unix seconds."""
        ...


class WebhookFactory(Protocol):
    """A PSP's webhook receiver from the environment (its secrets come from there only, never from a file): None
    when its secret is not set (the PSP has no endpoint). ``tolerance``: the seconds a signed timestamp may be
    from now (``[webhooks] tolerance``). ValueError names a variable that is set but wrong."""

    def __call__(self, environ: Mapping[str, str], *, tolerance: float) -> WebhookReceiver | None: ...


@dataclass(frozen=True, slots=True)
class PspPackage:
    """What a PSP's package gives recon: its ``__init__``'s ``PSP``, read through ``psp_adapters.registry``.

    - ``adapter``: the adapter class; recon reads its ClassVars (``search_lag``, ``listing_window``) without a key
    - ``create``: settings -> a ready adapter (``psp_adapters.settings`` reads them; ``MissingSetting`` names a
      required one that is missing)
    - ``base_url``: the API root when none is configured
    - ``check_charge``: what the PSP would refuse about a charge, checked at import (None: nothing to check)
    - ``webhook``: its webhook receiver's factory (None: no webhooks), with ``webhook_secrets``, the environment
      variables its secrets come from (the first turns the endpoint on; messages name them)
    """

    adapter: type[PspAdapter]
    create: Callable[[Mapping[str, Any]], PspAdapter]
    base_url: str | None = None
    check_charge: Callable[[ChargeRequest], Sequence[FieldProblem]] | None = None
    webhook: WebhookFactory | None = None
    webhook_secrets: tuple[str, ...] = ()
