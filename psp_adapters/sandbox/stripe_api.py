"""The Stripe flavour: Stripe's v1 API as the sandbox speaks it (form-encoded requests, JSON answers).

Auth (docs.stripe.com/api/authentication): ``Authorization: Bearer sk_…`` (or HTTP basic with the key as user
name) when the server has an api key; 401 otherwise. Errors: Stripe's error object (``stripe_wire.error``).

    POST /v1/payment_intents               amount, currency, payment_method, customer, confirm=true, off_session,
                                           metadata[…], description (docs.stripe.com/api/payment_intents/create):
                                           200 PaymentIntent (succeeded | processing) | 402 card_error with the
                                           PaymentIntent embedded (requires_payment_method) | 400
    GET  /v1/payment_intents/{id}          200 PaymentIntent | 404 resource_missing  (expand[]=latest_charge)
    GET  /v1/payment_intents?created[gte|gt|lte|lt]=&limit=&starting_after=
                                           200 list, newest first (docs.stripe.com/api/payment_intents/list,
                                           docs.stripe.com/api/pagination); an unknown starting_after is 400
                                           resource_missing
    GET  /v1/payment_intents/search?query=metadata['KEY']:'VALUE'[&limit=&page=]   200 search_result, newest
                                           first (docs.stripe.com/search#query-fields-for-payment-intents); any
                                           other query is 400
    GET  /v1/balance_transactions?created[gte|gt|lte|lt]=&limit=&starting_after=&type=&expand[]=data.source
                                           200 list, newest first (docs.stripe.com/api/balance_transactions/list)

Outcomes: a decline is 402 ``card_error`` (``card_declined`` + ``decline_code``; docs.stripe.com/declines/codes);
``rate_requires_action`` is answered as Stripe answers an off-session payment that needs 3-D Secure
(docs.stripe.com/payments/save-and-reuse, "charge the saved payment method later"): 402 ``card_error`` with code
and decline_code ``authentication_required``, the intent in ``requires_payment_method`` with that
``last_payment_error`` (never ``requires_action``: an off-session charge cannot authenticate); slow settlement
is ``processing``, later ``succeeded`` or ``requires_payment_method`` with a ``last_payment_error``.

Idempotency (docs.stripe.com/api/idempotent_requests, docs.stripe.com/error-low-level#idempotency): the key is
optional (without one a create simply executes); keys up to 255 characters, kept 24 hours by the server's clock
(an older key is forgotten and runs anew). Once the endpoint began executing its result is saved, 500s
included: an injected ``rate_500`` on a create is rolled after the key is claimed, saved, and replayed with
``Stripe-Should-Retry: false`` (the header Stripe's SDKs defer to; a saved 500 would only replay). The same key
with the same parameters replays the saved status and body byte for byte with ``Idempotent-Replayed: true``;
with other parameters it is 400 ``idempotency_error``; while the first still executes, 409
``idempotency_key_in_use``. 429s, 503s, auth and validation failures are not saved. A 429 carries
``Retry-After`` from the fault: a sandbox choice (Stripe does not document one).

Not simulated: ``confirm`` other than true (400), manual capture (400), on-session ``requires_action`` with a
``next_action``, and a PaymentIntent being created by a confirm that lacks a payment method (the sandbox answers
Stripe's 400 ``payment_intent_unexpected_state`` but records nothing). Search is immediately consistent (Stripe's
may lag by a minute). Fees: ``records.sandbox_fee`` (2.9 % + 30); disputes cost ``records.DISPUTE_FEE``.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from psp_adapters.protocol import ChargeRequest
from psp_adapters.sandbox import stripe_wire as sw
from psp_adapters.sandbox.core import CreateCall, IdempotencyPolicy, Request, Response, json_response
from psp_adapters.sandbox.ledger import Ledger
from psp_adapters.sandbox.records import Adjustment, PaymentRecord, random_id

MAX_AMOUNT = 99_999_999
LIST_LIMIT_MAX = 100
_INTENT_PATH = re.compile(r"^/v1/payment_intents/(?P<id>[A-Za-z0-9_]+)$")
_QUERY = re.compile(r"^\s*metadata\['((?:[^'\\]|\\.)*)'\]:'((?:[^'\\]|\\.)*)'\s*$")
#: PaymentIntent create parameters (docs.stripe.com/api/payment_intents/create) accepted and not simulated
_IGNORED = frozenset(
    {
        "amount_details", "application_fee_amount", "automatic_payment_methods", "confirmation_method",
        "confirmation_token", "error_on_requires_action", "excluded_payment_method_types", "expand", "hooks",
        "mandate", "mandate_data", "on_behalf_of", "payment_details", "payment_method_configuration",
        "payment_method_data", "payment_method_options", "payment_method_types", "radar_options",
        "receipt_email", "return_url", "setup_future_usage", "shipping", "statement_descriptor",
        "statement_descriptor_suffix", "transfer_data", "transfer_group", "use_stripe_sdk",
    }
)  # fmt: skip
_KNOWN = _IGNORED | {
    "amount", "currency", "payment_method", "customer", "confirm", "off_session", "metadata", "description",
    "capture_method",
}  # fmt: skip
_REQUEST = "invalid_request_error"
_KINDS: dict[str, tuple[int, str, str | None, str]] = {
    "unauthorized": (401, _REQUEST, None, "Invalid API Key provided."),
    "not_found": (404, _REQUEST, None, "Unrecognized request URL."),
    "method_not_allowed": (404, _REQUEST, None, "Unrecognized request URL."),
    "rate_limited": (
        429,
        _REQUEST,
        "rate_limit",
        "Request rate limit exceeded. You can learn more about rate limits here https://stripe.com/docs/rate-limits.",
    ),
    "internal_error": (500, "api_error", None, "An unknown error occurred"),
    "service_unavailable": (503, "api_error", None, "The service is temporarily unavailable."),
    "bad_request": (400, _REQUEST, None, "Bad request."),
    "idempotency_key_invalid": (400, _REQUEST, None, "Idempotency-Key is too long (at most 255 characters)."),
    "idempotency_in_flight": (
        409,
        _REQUEST,
        "idempotency_key_in_use",
        "There is currently another in-progress "
        "request using this idempotent key (that probably means you submitted twice, and the "
        "other request is still going through). Please try again later.",
    ),
    "idempotency_mismatch": (
        400,
        "idempotency_error",
        None,
        "Keys for idempotent requests can only be used with "
        "the same parameters they were first used with. Try using a key other than the one "
        "you sent if you meant to execute a different request.",
    ),
}


def _invalid(message: str, *, code: str | None = None, param: str | None = None) -> Response:
    return sw.error(400, _REQUEST, message, code=code, param=param)


class StripeFlavor:
    """Stripe's wire (see the module docstring)."""

    name = "stripe"
    idempotency = IdempotencyPolicy(
        required=False,
        max_length=255,
        retention=timedelta(hours=24),
        compares_body=True,
        saves_server_errors=True,
        scope="stripe:",
    )
    create_paths = frozenset({"/v1/payment_intents"})

    def __init__(self, ledger: Ledger, *, api_key: bytes | None, now_func: Callable[[], datetime]) -> None:
        self._ledger = ledger
        self._api_key = api_key
        self._now = now_func

    def serves(self, path: str) -> bool:
        return path.startswith("/v1/")

    def authorized(self, req: Request) -> bool:
        if self._api_key is None:
            return True
        scheme, _, token = (req.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() == "basic":
            try:
                token = base64.b64decode(token.strip(), validate=True).decode().partition(":")[0]
            except (binascii.Error, UnicodeDecodeError):
                return False
        elif scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(token.strip().encode(), self._api_key)

    def error(
        self, kind: str, message: str | None = None, *, retry_after: int | None = None, saved: bool = False
    ) -> Response:
        status, type_, code, default = _KINDS.get(kind, (500, "api_error", None, "An unknown error occurred"))
        headers = [("Retry-After", str(retry_after))] if retry_after is not None else []
        if saved:
            headers.append(("Stripe-Should-Retry", "false"))
        return sw.error(status, type_, message or default, code=code, headers=headers)

    def replay_headers(self, status: int) -> tuple[tuple[str, str], ...]:
        replayed = (("Idempotent-Replayed", "true"),)
        return (*replayed, ("Stripe-Should-Retry", "false")) if status >= 500 else replayed

    def decorate(self, req: Request, response: Response) -> Response:
        headers = [("Request-Id", random_id("req_", 14))]
        key = req.headers.get("Idempotency-Key")
        if req.method == "POST" and key:
            headers.append(("Idempotency-Key", key))
        return response._replace(headers=(*response.headers, *headers))

    # -- create --------------------------------------------------------------------------------------------

    def parse_create(self, req: Request, key: str | None) -> CreateCall | Response:
        try:
            text = req.body.decode()
            params = sw.parse_form(text)
        except (UnicodeDecodeError, sw.FormError) as exc:
            return _invalid(f"Invalid request body: {exc}")
        unknown = sorted(set(params) - _KNOWN)
        if unknown:
            return _invalid(f"Received unknown parameter: {unknown[0]}", code="parameter_unknown", param=unknown[0])
        scalars: dict[str, str | None] = {}
        for name in (
            "amount",
            "currency",
            "payment_method",
            "customer",
            "confirm",
            "off_session",
            "description",
            "capture_method",
        ):
            value = params.get(name)
            if value is not None and not isinstance(value, str):
                return _invalid(f"Invalid {name}: must be a string", code="parameter_invalid_string", param=name)
            scalars[name] = value or None
        metadata = params.get("metadata", {})
        if (
            not isinstance(metadata, dict)
            or len(metadata) > 50
            or any(len(k) > 40 or len(v) > 500 for k, v in metadata.items())
        ):
            return _invalid("Invalid metadata: at most 50 keys of 40 characters, values of 500", param="metadata")
        problem = self._check(scalars)
        if problem is not None:
            return problem
        assert scalars["amount"] is not None and scalars["currency"] is not None  # nosec B101
        charge = ChargeRequest(
            merchant_reference=metadata.get("merchant_reference", ""),
            amount=int(scalars["amount"]),
            currency=scalars["currency"].upper(),
            payment_method=scalars["payment_method"],
            customer_reference=scalars["customer"],
            description=scalars["description"],
        )
        return CreateCall(
            key=key,
            fingerprint=sw.fingerprint(req.method, req.path, text),
            charge=charge,
            psp_reference=random_id("pi_"),
            metadata=metadata,
        )

    @staticmethod
    def _check(p: dict[str, str | None]) -> Response | None:
        amount, currency = p["amount"], p["currency"]
        if amount is None:
            return _invalid("Missing required param: amount.", code="parameter_missing", param="amount")
        if not (amount.isascii() and amount.isdigit()):
            return _invalid(f"Invalid integer: {amount}", code="parameter_invalid_integer", param="amount")
        if not 0 < int(amount) <= MAX_AMOUNT:
            code = "amount_too_small" if int(amount) <= 0 else "amount_too_large"
            return _invalid(f"Amount must be 1 to {MAX_AMOUNT} minor units.", code=code, param="amount")
        if currency is None:
            return _invalid("Missing required param: currency.", code="parameter_missing", param="currency")
        if len(currency) != 3 or not currency.isalpha():
            return _invalid(f"Invalid currency: {currency}.", code="parameter_invalid_string", param="currency")
        if p["confirm"] != "true":
            return _invalid("The sandbox only creates confirmed PaymentIntents: send confirm=true.", param="confirm")
        if p["capture_method"] not in (None, "automatic", "automatic_async"):
            return _invalid("The sandbox only captures automatically.", param="capture_method")
        if p["off_session"] not in (None, "true", "false", "one_off", "recurring"):
            return _invalid(f"Invalid off_session: {p['off_session']}", param="off_session")
        if p["payment_method"] is None:
            return _invalid(
                "You cannot confirm this PaymentIntent because it's missing a payment method. You can either "
                "update the PaymentIntent with a payment method and then confirm it again, or confirm it again "
                "directly with a payment method.",
                code="payment_intent_unexpected_state",
            )
        return None

    def render_create(self, call: CreateCall, record: PaymentRecord) -> Response:
        intent = sw.payment_intent(record, ())
        declined = sw.decline(record)
        if declined is None:
            return json_response(200, intent)
        code, decline_code, message = declined
        return sw.error(
            402,
            "card_error",
            message,
            code=code,
            decline_code=decline_code,
            charge="ch_" + sw.suffix(record),
            payment_intent=intent,
        )

    # -- reads ---------------------------------------------------------------------------------------------

    def route(self, req: Request) -> Response:
        if req.path == "/v1/payment_intents/search":
            return self._search(req)
        if req.path == "/v1/payment_intents":
            return self._list_intents(req)
        if match := _INTENT_PATH.match(req.path):
            record = self._ledger.get_payment(match["id"])
            if record is None or record.flavor != self.name:
                missing = f"No such payment_intent: '{match['id']}'"
                return sw.error(404, _REQUEST, missing, code="resource_missing", param="intent")
            adjustments = self._ledger.adjustments_of([record.psp_reference])[record.psp_reference]
            expand = "latest_charge" in _expand(req)
            return json_response(200, sw.payment_intent(record, adjustments, expand_charge=expand))
        if req.path == "/v1/balance_transactions":
            return self._balance_transactions(req)
        return self.error("not_found", f"Unrecognized request URL (GET: {req.path}).")

    def _search(self, req: Request) -> Response:
        match = _QUERY.match(req.param("query") or "")
        if match is None:
            return _invalid("The sandbox supports exactly the query metadata['KEY']:'VALUE'.", param="query")
        key, value = (re.sub(r"\\(.)", r"\1", group) for group in match.groups())
        limit = _limit(req)
        page = req.param("page")
        if limit is None or (page is not None and not (page.isascii() and page.isdigit())):
            return _invalid("Invalid limit (1 to 100) or page.", param="limit" if limit is None else "page")
        start = int(page or 0)
        found = self._ledger.search_metadata(key, value, flavor=self.name)
        chunk = found[start : start + limit]
        adjustments = self._ledger.adjustments_of([r.psp_reference for r in chunk])
        more = start + limit < len(found)
        return json_response(
            200,
            {
                "object": "search_result",
                "data": [sw.payment_intent(r, adjustments[r.psp_reference]) for r in chunk],
                "has_more": more,
                "next_page": str(start + limit) if more else None,
                "url": "/v1/payment_intents/search",
            },
        )

    def _list_intents(self, req: Request) -> Response:
        """``GET /v1/payment_intents``: newest first by ``created``, ``starting_after`` the last id of the
        previous page (docs.stripe.com/api/pagination). ``customer`` and ``ending_before`` are not simulated
        (400), so a client that needs them learns it."""
        unknown = sorted({name.partition("[")[0] for name in req.query} - {"created", "limit", "starting_after"})
        if unknown:
            return _invalid(f"Received unknown parameter: {unknown[0]}", code="parameter_unknown", param=unknown[0])
        window = _created_window(req)
        limit = _limit(req)
        if window is None or limit is None:
            return _invalid("Invalid created[…] (unix seconds) or limit (1 to 100).")
        after = None
        if starting_after := req.param("starting_after"):
            after = self._ledger.position(starting_after, flavor=self.name)
            if after is None:
                return _invalid(
                    f"No such payment_intent: '{starting_after}'", code="resource_missing", param="starting_after"
                )
        lo, hi = window
        page, more = self._ledger.created_page(lo, hi, flavor=self.name, after=after, limit=limit, newest_first=True)
        adjustments = self._ledger.adjustments_of([r.psp_reference for r in page])
        data = [sw.payment_intent(r, adjustments[r.psp_reference]) for r in page]
        return json_response(
            200, {"object": "list", "data": data, "has_more": more is not None, "url": "/v1/payment_intents"}
        )

    def _balance_transactions(self, req: Request) -> Response:
        unknown = sorted(
            {name.partition("[")[0] for name in req.query} - {"created", "limit", "starting_after", "expand", "type"}
        )
        if unknown:
            return _invalid(f"Received unknown parameter: {unknown[0]}", code="parameter_unknown", param=unknown[0])
        window = _created_window(req)
        limit = _limit(req)
        expand = _expand(req)
        if window is None or limit is None or not expand <= {"data.source"}:
            return _invalid("Invalid created[…] (unix seconds), limit (1 to 100) or expand (data.source only).")
        lo, hi = window
        entries = self._entries(lo, hi, req.param("type"))
        start = 0
        after = req.param("starting_after")
        if after:
            ids = [txn_id for *_, txn_id, _ in entries]
            if after not in ids:
                return _invalid(
                    f"No such balance_transaction: '{after}'", code="resource_missing", param="starting_after"
                )
            start = ids.index(after) + 1
        page = entries[start : start + limit]
        payments = [record for *_, (_, record) in page]
        adjustments = self._ledger.adjustments_of(sorted({r.psp_reference for r in payments}))
        data = [
            sw.balance_transaction(
                item, record, adjustments[record.psp_reference], expand_source="data.source" in expand
            )
            for *_, (item, record) in page
        ]
        more = start + limit < len(entries)
        return json_response(200, {"object": "list", "data": data, "has_more": more, "url": "/v1/balance_transactions"})

    def _entries(
        self, lo: datetime, hi: datetime, type_filter: str | None
    ) -> list[tuple[datetime, int, str, tuple[PaymentRecord | Adjustment, PaymentRecord]]]:
        """Balance transactions in ``[lo, hi)``, newest first: (at, order, txn id, (item, its payment))."""
        entries: list[tuple[datetime, int, str, tuple[PaymentRecord | Adjustment, PaymentRecord]]] = []
        if type_filter in (None, "charge"):
            for record in self._ledger.succeeded_between(lo, hi, flavor=self.name):
                assert record.settled_at is not None  # nosec B101  # type narrowing, not a check
                entries.append((record.settled_at, 0, "txn_" + sw.suffix(record), (record, record)))
        for adjustment, record in self._ledger.adjustments_between(lo, hi, flavor=self.name):
            kind = "refund" if adjustment.kind == "refund" else "adjustment"
            if type_filter in (None, kind):
                txn = "txn_" + adjustment.id.split("_", 1)[1]
                entries.append((adjustment.created_at, 1, txn, (adjustment, record)))
        entries.sort(key=lambda entry: (entry[0], entry[1], entry[2]), reverse=True)
        return entries

    # -- admin renderings ----------------------------------------------------------------------------------

    def render_payment(self, record: PaymentRecord) -> object:
        adjustments = self._ledger.adjustments_of([record.psp_reference])[record.psp_reference]
        return sw.payment_intent(record, adjustments)

    def adjustment_id(self, kind: str) -> str:
        return random_id("re_" if kind == "refund" else "dp_")

    def render_adjustment(self, adjustment: Adjustment, record: PaymentRecord) -> object:
        if adjustment.kind == "refund":
            return sw.refund_object(adjustment, record)
        return sw.dispute_object(adjustment, record)


def _expand(req: Request) -> set[str]:
    return {value for name, values in req.query.items() if name.partition("[")[0] == "expand" for value in values}


def _limit(req: Request) -> int | None:
    raw = req.param("limit") or "10"
    return int(raw) if raw.isascii() and raw.isdigit() and 0 < int(raw) <= LIST_LIMIT_MAX else None


def _created_window(req: Request) -> tuple[datetime, datetime] | None:
    """``created[gte|gt|lte|lt]`` / ``created`` (unix seconds) as a ``[lo, hi)`` range of instants."""
    lo, hi = 0, 253402300799  # 9999-12-31
    for name, values in req.query.items():
        if name.partition("[")[0] != "created":
            continue
        raw = values[0]
        if not (raw.isascii() and raw.lstrip("-").isdigit()):
            return None
        n = int(raw)
        if name in ("created", "created[gte]"):
            lo = max(lo, n)
        if name in ("created", "created[lte]"):
            hi = min(hi, n + 1)
        if name == "created[gt]":
            lo = max(lo, n + 1)
        if name == "created[lt]":
            hi = min(hi, n)
        if name not in ("created", "created[gte]", "created[lte]", "created[gt]", "created[lt]"):
            return None
    return datetime.fromtimestamp(max(lo, 0), UTC), datetime.fromtimestamp(max(hi, 0), UTC)
