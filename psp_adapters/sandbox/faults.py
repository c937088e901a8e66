"""Fault injection for the sandbox PSP: what goes wrong, how often, and the seeded dice that decide.

``Faults`` is an immutable, validated configuration; the server swaps it whole at run time
(``POST /_admin/faults``), so a request never sees half of an update. ``FaultInjector`` owns the
``random.Random`` (seeded: the same seed and the same request sequence give the same faults) and the
token bucket of the global rate limit. Faults apply to the PSP API only, never to ``/_admin``.

Recommended CLI flags (``recon psp-sandbox``), each mapping to a field through ``Faults.from_options``::

    --rate-429 P  --retry-after S  --rate-500 P  --rate-503 P  --rate-hang P  --hang-seconds S
    --latency-ms MS  --pending-fraction P  --settle-after S  --pending-fail-fraction P
    --rate-decline P  --decline-suffix DIGITS  --rate-requires-action P  --rate-limit RPS  --seed N
    --webhook-drop-fraction P  --webhook-duplicate-fraction P  --webhook-delay-seconds S  --webhook-reorder P
    --refund-pending-fraction P  --refund-fail-fraction P  --modification-delay S

``FAULT_FLAGS`` lists them with their types and help texts, so the CLI can declare them in a loop.
"""

from __future__ import annotations

import dataclasses
import math
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from psp_adapters.sandbox.cards import AUTHENTICATION_REQUIRED as _AUTHENTICATION_REQUIRED
from psp_adapters.sandbox.cards import TestCard
from psp_adapters.sandbox.wire import PaymentStatus

# re-exported: older code imports it from here
AUTHENTICATION_REQUIRED = _AUTHENTICATION_REQUIRED


@dataclass(frozen=True, slots=True, kw_only=True)
class Faults:
    """The sandbox's fault configuration. Every rate is a probability in [0, 1], rolled once per request.

    Invariants (checked by ``validate()`` on construction): rates in [0, 1]; durations >= 0;
    ``rate_limit`` > 0 when set; ``decline_amount_suffix`` is digits. Request-level faults (rate limit,
    429, 500, 503) answer before anything is recorded, so a retry is always safe (except in the Stripe flavour,
    where an injected 500 on a write is decided once the key is claimed and saved for it, as Stripe saves 500s;
    see ``FaultInjector.server_error``). ``rate_hang`` is the unknown-outcome case: the write (a charge, a
    refund, a capture) is recorded and its idempotent response stored, then the answer is held back
    ``hang_seconds`` (longer than the client's read timeout).
    """

    rate_429: float = 0.0  #: answer 429 with ``Retry-After: retry_after_seconds``
    retry_after_seconds: int = 1
    rate_500: float = 0.0
    rate_503: float = 0.0
    rate_hang: float = 0.0  #: of writes (a charge, a refund, a capture…): record it, then delay the response
    hang_seconds: float = 30.0
    latency_ms: int = 0  #: added to every API request (for a create: while its idempotency key is in flight)
    #: each request's latency is ``latency_ms`` times a factor drawn uniformly from [1 - j, 1 + j] (its median
    #: stays ``latency_ms``); 0: every request waits exactly ``latency_ms``
    latency_jitter: float = 0.0
    pending_fraction: float = 0.0  #: of accepted payments: stay pending, then settle
    settle_after_seconds: float = 5.0
    pending_fail_fraction: float = 0.0  #: of pending payments: settle to failed instead of succeeded
    rate_decline: float = 0.0  #: of payments: decline at random (HTTP 402)
    #: amounts whose digits end like this decline (e.g. "402"); None (the default): no amount declines by itself,
    #: so that an integration's own amounts never surprise it; the PSPs' documented test cards decline anyway
    decline_amount_suffix: str | None = None
    #: of payments that are not declined: the customer must authenticate (3-D Secure), which an off-session
    #: charge cannot do; each flavour answers it as its PSP does (see the flavour modules)
    rate_requires_action: float = 0.0
    rate_limit: float | None = None  #: requests/s over the whole API (token bucket); None: unlimited
    #: of refunds: pending at first, then succeeded ``settle_after_seconds`` later
    refund_pending_fraction: float = 0.0
    #: of refunds: succeeded at first, then failed ``settle_after_seconds`` later (the card network returned the
    #: money: Stripe's ``refund.failed``, Adyen's ``REFUND_FAILED``)
    refund_fail_fraction: float = 0.0
    #: Adyen: how long a modification (capture, cancel, refund, reversal) answered ``received`` waits before it is
    #: processed and its webhook sent
    modification_delay_seconds: float = 0.0
    #: of webhook messages (``webhooks``; only when the server sends webhooks): never delivered, so that only
    #: polling can heal the payment
    webhook_drop_fraction: float = 0.0
    webhook_duplicate_fraction: float = 0.0  #: of webhook messages: delivered twice (the same event id)
    webhook_delay_seconds: float = 0.0  #: every webhook message waits this long before its first delivery
    #: of webhook messages: swap places with the next message (held back until another is queued, at most
    #: ``webhooks.REORDER_HOLD_SECONDS``), e.g. a ``processing`` delivered after its ``succeeded``
    webhook_reorder: float = 0.0
    seed: int | None = None  #: seed of the fault dice; None: unpredictable

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the first bad field."""
        for name in (
            "rate_429",
            "rate_500",
            "rate_503",
            "rate_hang",
            "pending_fraction",
            "pending_fail_fraction",
            "rate_decline",
            "rate_requires_action",
            "webhook_drop_fraction",
            "webhook_duplicate_fraction",
            "webhook_reorder",
            "refund_pending_fraction",
            "refund_fail_fraction",
            "latency_jitter",
        ):
            value = getattr(self, name)
            if not _is_number(value) or not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
        for name in (
            "retry_after_seconds",
            "hang_seconds",
            "latency_ms",
            "settle_after_seconds",
            "webhook_delay_seconds",
            "modification_delay_seconds",
        ):
            value = getattr(self, name)
            if not _is_number(value) or value < 0 or not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        for name in ("retry_after_seconds", "latency_ms"):
            if not isinstance(getattr(self, name), int):
                raise ValueError(f"{name} must be an integer, got {getattr(self, name)!r}")
        if self.rate_limit is not None and (not _is_number(self.rate_limit) or self.rate_limit <= 0):
            raise ValueError(f"rate_limit must be > 0 requests/s or None, got {self.rate_limit!r}")
        suffix = self.decline_amount_suffix
        if suffix is not None and not (isinstance(suffix, str) and suffix.isdigit()):
            raise ValueError(f"decline_amount_suffix must be digits or None, got {suffix!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise ValueError(f"seed must be an integer or None, got {self.seed!r}")

    @classmethod
    def from_options(cls, **options: object) -> Faults:
        """Build from CLI options: flag names (``retry_after``, ``settle_after``, ``decline_suffix``) or field
        names; ``None`` means "flag not given" and keeps the default; ``decline_suffix`` "off" disables it.
        Raises ValueError on an unknown name or a bad value."""
        fields: dict[str, object] = {}
        for name, value in options.items():
            if value is not None:
                fields[_FLAG_ALIASES.get(name, name)] = value
        if str(fields.get("decline_amount_suffix", "x")).lower() in ("", "none", "off"):
            fields["decline_amount_suffix"] = None  # --decline-suffix off: no magic declining amounts
        return cls.from_json(fields)

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Faults:
        """Build from a JSON object of field names; raises ValueError on unknown fields or bad values."""
        return cls().merged(data)

    def merged(self, patch: Mapping[str, object]) -> Faults:
        """A copy with the fields in ``patch`` replaced (the admin endpoint's partial update)."""
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(patch) - known)
        if unknown:
            raise ValueError(f"unknown fault field(s): {', '.join(unknown)}")
        return dataclasses.replace(self, **patch)  # type: ignore[arg-type]

    def to_json(self) -> dict[str, object]:
        """The JSON object served by ``GET /_admin/faults``."""
        return dataclasses.asdict(self)


class FaultFlag(NamedTuple):
    """One recommended CLI flag: ``--rate-429`` -> ``Faults.rate_429``."""

    flag: str
    type: type
    help: str


FAULT_FLAGS: tuple[FaultFlag, ...] = (
    FaultFlag("--rate-429", float, "probability of HTTP 429 with Retry-After"),
    FaultFlag("--retry-after", int, "Retry-After seconds sent with an injected 429"),
    FaultFlag("--rate-500", float, "probability of HTTP 500 (before anything is recorded; stripe: saved for the key)"),
    FaultFlag("--rate-503", float, "probability of HTTP 503 (before anything is recorded)"),
    FaultFlag("--rate-hang", float, "probability that a write (charge, refund) is recorded, then its answer delayed"),
    FaultFlag("--hang-seconds", float, "how long a hanging answer is delayed"),
    FaultFlag("--latency-ms", int, "latency added to every API request"),
    FaultFlag("--latency-jitter", float, "each request's latency is --latency-ms x uniform(1 - J, 1 + J)"),
    FaultFlag("--pending-fraction", float, "fraction of payments that stay pending, then settle"),
    FaultFlag("--settle-after", float, "seconds until a pending payment settles"),
    FaultFlag("--pending-fail-fraction", float, "fraction of pending payments that settle to failed"),
    FaultFlag("--rate-decline", float, "probability of a random card decline (HTTP 402)"),
    FaultFlag("--decline-suffix", str, "amounts whose digits end like this decline, e.g. 402 (default: off)"),
    FaultFlag("--rate-requires-action", float, "probability that a payment needs customer authentication (3DS)"),
    FaultFlag("--rate-limit", float, "global rate limit in requests/s; beyond it, 429"),
    FaultFlag("--refund-pending-fraction", float, "fraction of refunds pending, then succeeded after --settle-after"),
    FaultFlag("--refund-fail-fraction", float, "fraction of refunds that succeed, then fail after --settle-after"),
    FaultFlag("--modification-delay", float, "adyen: seconds before a received capture/cancel/refund is processed"),
    FaultFlag("--webhook-drop-fraction", float, "fraction of webhook messages never delivered"),
    FaultFlag("--webhook-duplicate-fraction", float, "fraction of webhook messages delivered twice"),
    FaultFlag("--webhook-delay-seconds", float, "seconds every webhook message waits before its first delivery"),
    FaultFlag("--webhook-reorder", float, "fraction of webhook messages that swap places with the next one"),
    FaultFlag("--seed", int, "seed of the fault dice, for reproducible runs"),
)

_FLAG_ALIASES = {
    "retry_after": "retry_after_seconds",
    "settle_after": "settle_after_seconds",
    "decline_suffix": "decline_amount_suffix",
    "modification_delay": "modification_delay_seconds",
}


class Rejection(NamedTuple):
    """An injected error answer: HTTP status, error code, and Retry-After seconds when rate limited."""

    status: int
    code: str
    retry_after: int | None = None


class WebhookFate(NamedTuple):
    """What the webhook faults do to one message."""

    drop: bool = False
    duplicate: bool = False
    reorder: bool = False
    delay_seconds: float = 0.0


class Decision(NamedTuple):
    """What happens to an accepted charge request."""

    status: PaymentStatus
    reason: str | None = None  #: decline code or failure reason
    settle_to: PaymentStatus | None = None  #: for PENDING: the final status it settles to
    settle_after_seconds: float = 0.0


class FaultInjector:
    """Rolls the fault dice for each request. Thread-safe; ``faults`` can be swapped at any time."""

    def __init__(self, faults: Faults, *, monotonic_func: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._monotonic = monotonic_func
        self._faults = faults
        self._rng = random.Random(faults.seed)  # nosec B311  # jitter and simulation, not security
        self._bucket = _TokenBucket(faults.rate_limit, monotonic_func) if faults.rate_limit else None

    @property
    def faults(self) -> Faults:
        return self._faults

    def replace(self, faults: Faults) -> None:
        """Swap the configuration. A new seed reseeds the dice; a new rate limit starts a full bucket."""
        with self._lock:
            old, self._faults = self._faults, faults
            if faults.seed is not None and faults.seed != old.seed:
                self._rng.seed(faults.seed)
            if faults.rate_limit != old.rate_limit:
                self._bucket = _TokenBucket(faults.rate_limit, self._monotonic) if faults.rate_limit else None

    def reset(self, faults: Faults) -> None:
        """Swap the configuration and restart the dice from its seed."""
        with self._lock:
            self._faults = faults
            self._rng = random.Random(faults.seed)  # nosec B311  # jitter and simulation, not security
            self._bucket = _TokenBucket(faults.rate_limit, self._monotonic) if faults.rate_limit else None

    def reject(self, *, include_500: bool = True) -> Rejection | None:
        """The request-level fault for this request, if any: rate limit first, then 429, 500, 503.

        ``include_500=False`` leaves the 500 out, for a write whose 500 is decided later by ``server_error``.
        """
        with self._lock:
            f = self._faults
            if self._bucket is not None:
                wait = self._bucket.take()
                if wait > 0:
                    return Rejection(429, "rate_limited", max(1, math.ceil(wait)))
            if self._roll(f.rate_429):
                return Rejection(429, "rate_limited", f.retry_after_seconds)
            if include_500 and self._roll(f.rate_500):
                return Rejection(500, "internal_error")
            if self._roll(f.rate_503):
                return Rejection(503, "service_unavailable")
            return None

    def server_error(self) -> bool:
        """For a write that already executes (its key claimed): whether it fails with an injected 500."""
        with self._lock:
            return self._roll(self._faults.rate_500)

    def latency_seconds(self) -> float:
        f = self._faults
        if not f.latency_jitter or not f.latency_ms:
            return f.latency_ms / 1000.0
        with self._lock:
            factor = self._rng.uniform(1.0 - f.latency_jitter, 1.0 + f.latency_jitter)
        return f.latency_ms * factor / 1000.0

    def hang_seconds(self) -> float | None:
        """For a write that is recorded: how long to hold back the answer, or None."""
        with self._lock:
            f = self._faults
            return f.hang_seconds if self._roll(f.rate_hang) else None

    def decide(self, *, amount: int, card: TestCard | None) -> Decision:
        """Decline, authentication needed, pending or success for a charge of ``card`` (None: no test card);
        what the test card does wins over the amount rule and the dice."""
        with self._lock:
            f = self._faults
            if card is not None and card.decline is not None:
                return Decision(PaymentStatus.FAILED, card.decline)
            suffix = f.decline_amount_suffix
            if suffix is not None and str(amount).endswith(suffix):
                return Decision(PaymentStatus.FAILED, "card_declined")
            if self._roll(f.rate_decline):
                return Decision(PaymentStatus.FAILED, "card_declined")
            if (card is not None and card.authentication) or self._roll(f.rate_requires_action):
                # an off-session attempt that needed authentication failed (as Stripe books it)
                return Decision(PaymentStatus.FAILED, AUTHENTICATION_REQUIRED)
            settle_to = card.pending if card is not None else None
            if settle_to is None and self._roll(f.pending_fraction):
                fail = self._roll(f.pending_fail_fraction)
                settle_to = PaymentStatus.FAILED if fail else PaymentStatus.SUCCEEDED
            if settle_to is not None:
                return Decision(PaymentStatus.PENDING, None, settle_to, f.settle_after_seconds)
            return Decision(PaymentStatus.SUCCEEDED)

    def refund_fate(self, *, card: TestCard | None) -> str | None:
        """What happens to a new refund: "pending" (then succeeds), "fail" (succeeds, then fails), or None
        (succeeds for good). ``card.refund_fails`` wins over the dice."""
        with self._lock:
            if card is not None and card.refund_fails:
                return "fail"
            if self._roll(self._faults.refund_pending_fraction):
                return "pending"
            return "fail" if self._roll(self._faults.refund_fail_fraction) else None

    def webhook_fate(self) -> WebhookFate:
        """Roll the webhook faults for one message (no draw for a fault that is off)."""
        with self._lock:
            f = self._faults
            if self._roll(f.webhook_drop_fraction):
                return WebhookFate(drop=True)
            return WebhookFate(
                duplicate=self._roll(f.webhook_duplicate_fraction),
                reorder=self._roll(f.webhook_reorder),
                delay_seconds=f.webhook_delay_seconds,
            )

    def _roll(self, probability: float) -> bool:
        # no draw for a disabled fault, so that enabling nothing keeps the dice untouched
        if probability <= 0.0:
            return False
        return probability >= 1.0 or self._rng.random() < probability


class _TokenBucket:
    """``rate`` tokens per second, a burst of max(1, rate). Not thread-safe: the injector's lock guards it."""

    def __init__(self, rate: float, monotonic_func: Callable[[], float]) -> None:
        self._rate = rate
        self._capacity = max(1.0, rate)
        self._tokens = self._capacity
        self._monotonic = monotonic_func
        self._at = monotonic_func()

    def take(self) -> float:
        """Take one token; return 0, or the seconds until one is available (nothing taken then)."""
        now = self._monotonic()
        self._tokens = min(self._capacity, self._tokens + (now - self._at) * self._rate)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self._rate


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
