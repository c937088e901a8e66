"""The PspError tree: what can go wrong when we talk to a PSP, decided by type alone.

```
PspError
├── PspTransientError      retry with backoff: connect error/timeout, 5xx, 408/421/423/425, 409 in-flight
│   ├── PspRateLimited     429; ``retry_after`` seconds when the PSP said so
│   └── PspUnknownOutcome  the request may have taken effect (read timeout after send): retry, same key
├── PspRejectedError       4xx the PSP will never accept (400, 422, ...)
│   └── PspIdempotencyError  same idempotency key reused with different parameters
├── PspAuthError           401/403: configuration, not luck
└── PspProtocolError       unparseable body, schema drift, missing fields
```

Adapters raise these at their boundary (translating httpx exceptions with ``raise ... from exc``);
``recon.classify`` turns them into engine outcomes. Messages never contain credentials.
"""

from __future__ import annotations


class PspError(Exception):
    """The PSP call failed."""

    def __init__(
        self,
        message: str | None = None,
        *,
        psp: str | None = None,
        status_code: int | None = None,
        code: str | None = None,
        should_retry: bool | None = None,
        saved: bool = False,
        replayed: bool = False,
    ) -> None:
        self.psp = psp
        self.status_code = status_code
        #: the PSP's own error code (Stripe ``error.code``, Adyen ``errorCode``), when it sent one
        self.code = code
        #: an explicit hint from the PSP (Stripe's ``Stripe-Should-Retry``); overrides the type's default
        self.should_retry = should_retry
        #: the PSP saved this answer under the request's idempotency key (Stripe saves 500s for 24 h): the
        #: same key will only replay it, so retrying the request is futile; reconciliation finds the truth
        self.saved = saved
        #: this answer is a replay of a saved one (``Idempotent-Replayed: true``): no news about the PSP's
        #: health, so it must not feed the circuit breaker
        self.replayed = replayed
        super().__init__(message or (self.__doc__ or "").strip())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r}, psp={self.psp!r}, status_code={self.status_code!r})"


class PspTransientError(PspError):
    """The PSP could not answer now; the same request may succeed later."""


class PspRateLimited(PspTransientError):
    """The PSP is rate limiting us (HTTP 429)."""

    def __init__(self, message: str | None = None, *, retry_after: float | None = None, **kw: object) -> None:
        #: seconds to wait, parsed from Retry-After (seconds or HTTP-date); None when absent
        self.retry_after = retry_after
        super().__init__(message, **kw)  # type: ignore[arg-type]


class PspUnknownOutcome(PspTransientError):
    """The request was sent but no answer came back: it may have taken effect. Retry with the same key."""


class PspRejectedError(PspError):
    """The PSP rejected the request as invalid; sending it again will not help."""


class PspIdempotencyError(PspRejectedError):
    """The idempotency key was reused with different parameters: a bug on our side."""


class PspAuthError(PspError):
    """The PSP refused our credentials (HTTP 401/403)."""


class PspProtocolError(PspError):
    """The PSP answered with something we cannot parse."""


class WebhookRejected(Exception):
    """An inbound webhook that must not be trusted or cannot be read; nothing of it is stored.

    ``reason`` is a short code for metrics and the one log line: ``no_signature``, ``bad_signature``,
    ``stale_timestamp``, ``unauthorized``, ``malformed``. The message never quotes the payload.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
