"""The Stripe flavour: Stripe's v1 API as the sandbox speaks it (form-encoded requests, JSON answers).

Auth (docs.stripe.com/api/authentication): ``Authorization: Bearer sk_…`` (or HTTP basic with the key as user
name) when the server has an api key; 401 otherwise. Errors: Stripe's error object (``stripe_form.error``).
Every write is a POST; every answer carries ``Request-Id`` and ``Stripe-Version``::

    POST /v1/payment_intents, /v1/payment_intents/{id}[/confirm|/capture|/cancel]      (stripe_intents)
    GET  /v1/payment_intents/{id}, /v1/payment_intents, /v1/payment_intents/search
    POST /v1/refunds, /v1/refunds/{id}[/cancel];   GET /v1/refunds/{id}, /v1/refunds      (stripe_money)
    GET  /v1/charges/{id}, /v1/charges, /v1/charges/search
    GET  /v1/disputes, /v1/disputes/{id}                                                    (stripe_disputes)
    GET  /v1/balance, /v1/balance_transactions/{id}, /v1/balance_transactions[?payout=po_…]
    GET  /v1/payouts, /v1/payouts/{id}                                                      (stripe_payouts)
    POST /v1/customers, /v1/customers/{id};   GET /v1/customers/{id}, /v1/customers, /v1/customers/search
    GET  /v1/payment_methods/{id}, /v1/payment_methods?customer=, /v1/customers/{id}/payment_methods
    POST /v1/payment_methods/{id}/attach, /v1/payment_methods/{id}/detach                (stripe_account)
    GET  /v1/events/{id}, /v1/events

``expand[]`` works on every one of them (``stripe_expand``), search takes Stripe's query language
(``stripe_search``), lists page by id either way (``stripe_lists``).

``Stripe-Version`` (docs.stripe.com/api/versioning): a request may name one, ``YYYY-MM-DD`` with an optional
``.name``, a real date; anything else is 400 ``Invalid Stripe API version``, and search needs 2020-08-27 or later
(docs.stripe.com/search, "Minimum API version"). The answer names the version it was served with: the request's,
else the account's default (``stripe_objects.STRIPE_API_VERSION``, the one stripe-python 16 pins). The shapes do
not change with the version: the sandbox serves the latest ones.

Idempotency (docs.stripe.com/api/idempotent_requests, docs.stripe.com/error-low-level#idempotency): every POST
may carry a key (without one a write simply executes); keys up to 255 characters, kept 24 hours by the server's
clock. Once the endpoint began executing its result is saved, 500s and state errors included: an injected
``rate_500`` on a write is rolled after the key is claimed, saved, and replayed with ``Stripe-Should-Retry:
false``. The same key with the same parameters replays the saved status and body byte for byte with
``Idempotent-Replayed: true``; with other parameters (or another endpoint) it is 400 ``idempotency_error``; while
the first still executes, 409 ``idempotency_key_in_use``. 429s, 503s, auth and parameter errors are not saved. A
429 carries ``Retry-After`` from the fault (a sandbox choice: Stripe does not document one).

Not simulated: on-session ``requires_action`` with a usable ``next_action`` (a charge that needs authentication
is the off-session ``authentication_required`` decline), charges of several attempts (an intent confirmed again
after a decline keeps one charge id), deleting objects, and Stripe's search lag. A ``payment_method`` or
``customer`` the sandbox does not know is taken as a Visa card and a customer id as given. Fees:
``records.sandbox_fee`` (2.9 % + 30); disputes cost ``records.DISPUTE_FEE``.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
from collections.abc import Callable
from datetime import date, datetime, timedelta
from urllib.parse import parse_qsl

from psp_adapters.sandbox import stripe_account as account
from psp_adapters.sandbox import stripe_disputes as disputes
from psp_adapters.sandbox import stripe_intents as intents
from psp_adapters.sandbox import stripe_money as money
from psp_adapters.sandbox import stripe_payouts as payouts
from psp_adapters.sandbox.bank_credits import BankCredit
from psp_adapters.sandbox.core import IdempotencyPolicy, Request, Response, Scope, WriteCall, json_response
from psp_adapters.sandbox.ledger import Ledger
from psp_adapters.sandbox.movements import Adjustment
from psp_adapters.sandbox.records import PaymentRecord, random_id
from psp_adapters.sandbox.stripe_books import StripeBooks
from psp_adapters.sandbox.stripe_form import REQUEST, Invalid, Params, error, fingerprint, invalid
from psp_adapters.sandbox.stripe_lists import created_window
from psp_adapters.sandbox.stripe_objects import STRIPE_API_VERSION
from psp_adapters.sandbox.stripe_wire import AUTHORIZATION_VALIDITY

_ID = r"(?P<id>[A-Za-z0-9_]+)"
_VERSION = re.compile(r"^(?P<date>\d{4}-\d{2}-\d{2})(?:\.[a-z]+)?$")
_SEARCH_SINCE = date(2020, 8, 27)
Writer = Callable[[StripeBooks, Params, str], Callable[[Scope], Response]]
Reader = Callable[[StripeBooks, Params, str], dict[str, object]]
#: (path pattern, handler taking the id in the path, or "" for none)
_WRITES: tuple[tuple[re.Pattern[str], Writer], ...] = tuple((re.compile(p), w) for p, w in (
    (r"^/v1/payment_intents$", lambda b, p, _: intents.create(b, p)),
    (rf"^/v1/payment_intents/{_ID}$", intents.update),
    (rf"^/v1/payment_intents/{_ID}/confirm$", intents.confirm),
    (rf"^/v1/payment_intents/{_ID}/capture$", intents.capture),
    (rf"^/v1/payment_intents/{_ID}/cancel$", intents.cancel),
    (r"^/v1/refunds$", lambda b, p, _: money.create_refund(b, p)),
    (rf"^/v1/refunds/{_ID}$", money.update_refund),
    (rf"^/v1/refunds/{_ID}/cancel$", money.cancel_refund),
    (r"^/v1/customers$", lambda b, p, _: account.create_customer(b, p)),
    (rf"^/v1/customers/{_ID}$", account.update_customer),
    (rf"^/v1/payment_methods/{_ID}/attach$", account.attach_method),
    (rf"^/v1/payment_methods/{_ID}/detach$", account.detach_method),
))  # fmt: skip
_READS: tuple[tuple[re.Pattern[str], Reader], ...] = tuple((re.compile(p), r) for p, r in (
    (r"^/v1/payment_intents/search$", lambda b, p, _: intents.search(b, p)),
    (r"^/v1/payment_intents$", lambda b, p, _: intents.list_intents(b, p, created_window(p))),
    (rf"^/v1/payment_intents/{_ID}$", intents.retrieve),
    (r"^/v1/refunds$", lambda b, p, _: money.list_refunds(b, p)),
    (rf"^/v1/refunds/{_ID}$", money.retrieve_refund),
    (r"^/v1/disputes$", lambda b, p, _: disputes.list_disputes(b, p)),
    (rf"^/v1/disputes/{_ID}$", disputes.retrieve_dispute),
    (r"^/v1/charges/search$", lambda b, p, _: money.search_charges(b, p)),
    (r"^/v1/charges$", lambda b, p, _: money.list_charges(b, p)),
    (rf"^/v1/charges/{_ID}$", money.retrieve_charge),
    (r"^/v1/balance$", lambda b, p, _: money.balance(b, p)),
    (r"^/v1/balance_transactions$", lambda b, p, _: money.list_transactions(b, p)),
    (rf"^/v1/balance_transactions/{_ID}$", money.retrieve_transaction),
    (r"^/v1/payouts$", lambda b, p, _: payouts.list_payouts(b, p)),
    (rf"^/v1/payouts/{_ID}$", payouts.retrieve_payout),
    (r"^/v1/customers/search$", lambda b, p, _: account.search_customers(b, p)),
    (r"^/v1/customers$", lambda b, p, _: account.list_customers(b, p)),
    (rf"^/v1/customers/{_ID}$", account.retrieve_customer),
    (rf"^/v1/customers/{_ID}/payment_methods$", lambda b, p, i: account.list_methods(b, p, i)),
    (r"^/v1/payment_methods$", lambda b, p, _: account.list_methods(b, p)),
    (rf"^/v1/payment_methods/{_ID}$", account.retrieve_method),
    (r"^/v1/events$", lambda b, p, _: account.list_events(b, p)),
    (rf"^/v1/events/{_ID}$", account.retrieve_event),
))  # fmt: skip
_KINDS: dict[str, tuple[int, str, str | None, str]] = {
    "unauthorized": (401, REQUEST, None, "Invalid API Key provided."),
    "not_found": (404, REQUEST, None, "Unrecognized request URL."),
    "forbidden": (403, REQUEST, None, "Requests from a web page of another site are refused."),
    "method_not_allowed": (404, REQUEST, None, "Unrecognized request URL."),
    "rate_limited": (429, REQUEST, "rate_limit", "Request rate limit exceeded. You can learn more about rate limits "
                     "here https://stripe.com/docs/rate-limits."),
    "internal_error": (500, "api_error", None, "An unknown error occurred"),
    "service_unavailable": (503, "api_error", None, "The service is temporarily unavailable."),
    "bad_request": (400, REQUEST, None, "Bad request."),
    "idempotency_key_invalid": (400, REQUEST, None, "Idempotency-Key is too long (at most 255 characters)."),
    "idempotency_in_flight": (409, REQUEST, "idempotency_key_in_use", "There is currently another in-progress "
                              "request using this idempotent key (that probably means you submitted twice, and the "
                              "other request is still going through). Please try again later."),
    "idempotency_mismatch": (400, "idempotency_error", None, "Keys for idempotent requests can only be used with the "
                             "same parameters they were first used with. Try using a key other than the one you sent "
                             "if you meant to execute a different request."),
}  # fmt: skip


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
    #: an uncaptured authorisation is released this long after it was made
    authorization_validity = AUTHORIZATION_VALIDITY

    def __init__(self, ledger: Ledger, *, api_key: bytes | None, now_func: Callable[[], datetime]) -> None:
        self.books = StripeBooks(ledger, now_func=now_func)
        self._api_key = api_key

    def serves(self, path: str) -> bool:
        return path.startswith("/v1/")

    def writes(self, req: Request) -> bool:
        return req.method == "POST"

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
        return error(status, type_, message or default, code=code, headers=headers)

    def replay_headers(self, status: int) -> tuple[tuple[str, str], ...]:
        replayed = (("Idempotent-Replayed", "true"),)
        return (*replayed, ("Stripe-Should-Retry", "false")) if status >= 500 else replayed

    def decorate(self, req: Request, response: Response) -> Response:
        headers = [("Request-Id", random_id("req_", 14)), ("Stripe-Version", _version(req) or STRIPE_API_VERSION)]
        key = req.headers.get("Idempotency-Key")
        if req.method == "POST" and key:
            headers.append(("Idempotency-Key", key))
        return response._replace(headers=(*response.headers, *headers))

    def parse_write(self, req: Request) -> WriteCall | Response:
        try:
            _check_version(req)
            text = req.body.decode()
            pairs = parse_qsl(text, keep_blank_values=True)
            params = Params(pairs)
            for pattern, writer in _WRITES:
                if match := pattern.match(req.path):
                    run = writer(self.books, params, match.groupdict().get("id") or "")
                    return WriteCall(fingerprint=fingerprint(req.method, req.path, pairs), run=_saving(run))
        except UnicodeDecodeError:
            return error(400, REQUEST, "Invalid request body: not UTF-8")
        except Invalid as refused:
            return refused.response
        return self.error("not_found", f"Unrecognized request URL (POST: {req.path}).")

    def route(self, req: Request) -> Response:
        try:
            _check_version(req, search=req.path.endswith("/search"))
            params = Params((name, value) for name, values in req.query.items() for value in values)
            for pattern, reader in _READS:
                if match := pattern.match(req.path):
                    return json_response(200, reader(self.books, params, match.groupdict().get("id") or ""))
        except Invalid as refused:
            return refused.response
        return self.error("not_found", f"Unrecognized request URL (GET: {req.path}).")

    def tick(self, scope: Scope) -> None:
        """Payouts (``stripe_payouts``): formed at each UTC midnight, paid at their arrival date; the dispatcher
        settles, moves refunds and expires authorisations before."""
        payouts.tick(self.books, scope)

    def fail_payout(self, scope: Scope, payout_id: str, code: str) -> object | str:
        return payouts.fail(self.books, scope, payout_id, code)

    def run_payouts(self, scope: Scope) -> list[object]:
        return list(payouts.pay_out_now(self.books, scope))

    def bank_credits(self, since: date, until: date) -> list[BankCredit]:
        return payouts.bank_credits(self.books, since, until)

    # -- admin renderings ----------------------------------------------------------------------------------

    def render_payment(self, record: PaymentRecord) -> object:
        return self.books.intent(record)

    def adjustment_id(self, kind: str) -> str:
        return random_id("re_" if kind == "refund" else "dp_")

    def render_adjustment(self, adjustment: Adjustment, record: PaymentRecord) -> object:
        return self.books.refund(adjustment) if adjustment.kind == "refund" else self.books.dispute(adjustment)


def _saving(run: Callable[[Scope], Response]) -> Callable[[Scope], Response]:
    """A write whose errors found while it executes are answered (and saved), not raised."""

    def saving(scope: Scope) -> Response:
        try:
            return run(scope)
        except Invalid as refused:
            return refused.response

    return saving


def _version(req: Request) -> str | None:
    value = req.headers.get("Stripe-Version")
    return value.strip() if value else None


def _check_version(req: Request, *, search: bool = False) -> None:
    """Refuse (Invalid) a ``Stripe-Version`` that is not one, or too old for search."""
    version = _version(req)
    if version is None:
        return
    match = _VERSION.match(version)
    try:
        day = date.fromisoformat(match["date"]) if match else None
    except ValueError:
        day = None
    if day is None:
        raise invalid(f"Invalid Stripe API version: {version}. Versions look like 2026-10-28.endive "
                      "(docs.stripe.com/api/versioning).")
    if search and day < _SEARCH_SINCE:
        raise invalid(f"Search is not supported on api version {version}: it needs 2020-08-27 or later "
                      "(docs.stripe.com/search, Minimum API version).")
