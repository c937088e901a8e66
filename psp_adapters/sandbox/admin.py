"""The sandbox's admin API (never faulted, answered in the native error shape whatever the flavour).

Reads are open; a POST (a change) must say ``Content-Type: application/json`` (415 otherwise, even without a body),
must not come from another origin (``Origin`` or ``Sec-Fetch-Site`` naming another site: 403
``cross_origin_forbidden``: a browser page must not drive it) and needs the PSP API's own credentials when the
server has an api key (the flavour's scheme: ``Authorization: Bearer`` or ``X-API-Key``; 401)::

    GET|POST /_admin/faults                read / partially update the Faults (JSON object of fields)
    GET  /_admin/charges[?idempotency_key=]  {"keys", "charges", "max_per_key", "per_key": {key: n}}, this
                                           flavour's payments; "without_key": n when some came without a key
    POST /_admin/payments/{ref}/settle|fail|cancel   optional {"reason": "…"}; 200 payment | 404
    POST /_admin/payments/{ref}/amount     {"amount": int, "currency"?: str}; 200 payment | 404
    POST /_admin/payments/{ref}/refund     optional {"amount": int} (default: what is left); 200 refund | 400 | 404
    POST /_admin/payments/{ref}/dispute    the whole amount, once; optional {"reason", "notify_first": true (Adyen:
                                           NOTIFICATION_OF_CHARGEBACK before CHARGEBACK)}; 200 dispute | 400 | 404
    POST /_admin/disputes/{id}/close       {"outcome": "won"|"lost"} (``admin_movements``)
    POST /_admin/refunds/{id}/reverse      a succeeded refund reversed after it was sent (``admin_movements``)
    POST /_admin/modifications/{id}/fail   adyen: a processed capture rejected after it was sent (CAPTURE_FAILED);
                                           optional {"reason": "…"} (``admin_movements``)
    POST /_admin/payouts/run               pay out now (stripe: a payout per currency; adyen: a batch per account
                                           and currency) what is unpaid, paid at once: {"payouts": [...]}
    POST /_admin/payouts/{id}/fail         stripe: optional {"failure_code": "…"} (default could_not_process);
                                           200 the failed payout | 400 | 404 (``stripe_payouts``)
    GET  /_admin/bank-credits?since=YYYY-MM-DD&until=YYYY-MM-DD
                                           the bank credits the payouts (stripe) or settlement batches (adyen)
                                           arriving in [since, until] make: {"flavor", "credits": [...]}
                                           (``bank_credits``)
    POST /_admin/reset                     forget all payments, keys and objects, restore the start-up faults
    GET  /_admin/webhooks[?psp_reference=] the webhook messages sent and their fate ({"url", "waiting",
                                           "webhooks": [{event_id, type, state, attempts, last_status, …}]})

Admin changes are told like the PSP's own (settle/fail/cancel, refund, dispute: webhooks and Stripe's events);
amount changes send nothing. Payments are answered in the flavour's shape (a native payment, a Stripe
PaymentIntent, an Adyen PaymentResponse); refunds and disputes likewise (a Stripe Refund/Dispute; an Adyen
modification).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from datetime import date, datetime
from typing import Protocol

from psp_adapters.sandbox import admin_movements as movements
from psp_adapters.sandbox.core import Flavor, Request, Response, json_response
from psp_adapters.sandbox.faults import FaultInjector, Faults
from psp_adapters.sandbox.ledger import Ledger
from psp_adapters.sandbox.movements import DISPUTE_NEEDS_RESPONSE, REFUND_SUCCEEDED, Adjustment
from psp_adapters.sandbox.native_api import native_error
from psp_adapters.sandbox.records import DISPUTE_FEE, PaymentRecord
from psp_adapters.sandbox.webhook_events import Change, Renderer
from psp_adapters.sandbox.webhooks import WebhookSender
from psp_adapters.sandbox.wire import PaymentStatus
from psp_adapters.units import AMOUNT_MAX

_PAYMENT_PATH = re.compile(r"^/_admin/payments/(?P<ref>[^/]+)/(?P<action>settle|fail|cancel|amount|refund|dispute)$")
_PAYOUT_PATH = re.compile(r"^/_admin/payouts/(?P<id>[^/]+)/fail$")
_STATUS = {"settle": PaymentStatus.SUCCEEDED, "fail": PaymentStatus.FAILED, "cancel": PaymentStatus.CANCELED}


class Host(Protocol):
    """What the admin API reads and changes of the dispatcher (``api._SandboxApp``)."""

    ledger: Ledger
    flavor: Flavor
    injector: FaultInjector
    initial_faults: Faults
    renderer: Renderer | None
    webhooks: WebhookSender | None
    origins: frozenset[str]
    now: Callable[[], datetime]

    def tick(self) -> None: ...

    def tell(self, changes: list[Change]) -> None: ...

    def fail_payout(self, payout_id: str, code: str) -> object | str: ...

    def run_payouts(self) -> list[object]: ...


def handle_admin(host: Host, req: Request) -> Response:
    if req.method == "POST":
        refused = _change_refused(host, req)
        if refused is not None:
            return refused
    try:
        payload = json.loads(req.body) if req.body else {}
    except ValueError:
        return native_error("invalid_json")
    if not isinstance(payload, Mapping):
        return native_error("parameter_invalid", "the body must be a JSON object")
    route = (req.method, req.path)
    if route == ("GET", "/_admin/faults"):
        return json_response(200, host.injector.faults.to_json())
    if route == ("POST", "/_admin/faults"):
        try:
            host.injector.replace(host.injector.faults.merged(payload))
        except (ValueError, TypeError) as exc:
            return native_error("faults_invalid", str(exc))
        return json_response(200, host.injector.faults.to_json())
    if route == ("GET", "/_admin/charges"):
        return json_response(200, _charges(host, req.param("idempotency_key")))
    if route == ("GET", "/_admin/webhooks"):
        doc = host.webhooks.to_json(req.param("psp_reference")) if host.webhooks else {"url": None, "webhooks": []}
        return json_response(200, doc)
    if route == ("POST", "/_admin/reset"):
        return _reset(host)
    if route == ("GET", "/_admin/bank-credits"):
        return _bank_credits(host, req)
    if route == ("POST", "/_admin/payouts/run"):
        host.tick()
        return json_response(200, {"payouts": host.run_payouts()})
    if req.method == "POST" and (match := _PAYOUT_PATH.match(req.path)):
        return _fail_payout(host, match["id"], payload)
    if req.method == "POST" and (match := _PAYMENT_PATH.match(req.path)):
        return _payment(host, match["ref"], match["action"], payload)
    if req.method == "POST" and (match := movements.DISPUTE_PATH.match(req.path)):
        return movements.close_dispute(host, match["id"], payload)
    if req.method == "POST" and (match := movements.REFUND_PATH.match(req.path)):
        return movements.reverse_refund(host, match["id"])
    if req.method == "POST" and (match := movements.MODIFICATION_PATH.match(req.path)):
        return movements.fail_capture(host, match["id"], payload)
    return native_error("not_found")


def _change_refused(host: Host, req: Request) -> Response | None:
    """Why an admin change is refused, if it is: a foreign origin (403), not JSON (415), a wrong key (401).

    A browser sends a cross-site POST without asking first only as a "simple" request (no body, or text/plain, a
    form encoding), always with an ``Origin`` (the Fetch standard); so a change must say ``Content-Type:
    application/json``, which a browser sends cross-site only after a CORS preflight the sandbox never grants, and
    any ``Origin`` or ``Sec-Fetch-Site`` must be the sandbox's own (OWASP, CSRF cheat sheet: "Verifying origin with
    standard headers"). Scripts and SDKs send no Origin. This holds with or without an api key: a keyless sandbox
    on 127.0.0.1 is reachable from every page the user opens.
    """
    if cross_site(req, host.origins):
        return native_error("cross_origin_forbidden")
    content_type = (req.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
    if content_type != "application/json":
        return native_error("unsupported_media_type")
    if not host.flavor.authorized(req):
        return native_error("invalid_api_key", "admin changes need the sandbox's api key")
    return None


def cross_site(req: Request, origins: frozenset[str]) -> bool:
    """Whether a browser sent ``req`` from a page of another site: an ``Origin`` that is not one of the sandbox's
    ``origins``, or ``Sec-Fetch-Site`` saying so. Scripts and SDKs send neither."""
    origin = req.headers.get("Origin")
    fetch_site = (req.headers.get("Sec-Fetch-Site") or "").strip().lower()
    foreign = origin is not None and origin.strip().rstrip("/") not in origins
    return foreign or fetch_site not in ("", "same-origin", "none")


def _fail_payout(host: Host, payout_id: str, payload: Mapping[str, object]) -> Response:
    code = payload.get("failure_code", "could_not_process")
    if not isinstance(code, str):
        return native_error("parameter_invalid", "failure_code must be a string")
    host.tick()
    result = host.fail_payout(payout_id, code)
    if result == "resource_missing":
        return native_error("resource_missing")
    if isinstance(result, str):
        return native_error("parameter_invalid", f"cannot fail {payout_id}: {result}")
    return json_response(200, result)


def _bank_credits(host: Host, req: Request) -> Response:
    try:
        since, until = date.fromisoformat(req.param("since") or ""), date.fromisoformat(req.param("until") or "")
    except ValueError:
        return native_error("parameter_invalid", "since and until must be dates (YYYY-MM-DD)")
    if until < since:
        return native_error("parameter_invalid", "until is before since")
    host.tick()
    credits = host.flavor.bank_credits(since, until)
    return json_response(200, {"flavor": host.flavor.name, "credits": [credit.to_json() for credit in credits]})


def _reset(host: Host) -> Response:
    host.ledger.reset()
    host.injector.reset(host.initial_faults)
    if host.renderer is not None:
        host.renderer.reset()
    if host.webhooks is not None:
        host.webhooks.reset()
    return json_response(200, {"reset": True, "faults": host.initial_faults.to_json()})


def _charges(host: Host, key: str | None) -> dict[str, object]:
    counts = host.ledger.charge_counts(host.flavor.name)
    without_key = counts.pop("", 0)
    if key is not None:
        counts = {key: counts.get(key, 0)}
    total, most = sum(counts.values()), max(counts.values(), default=0)
    doc: dict[str, object] = {"keys": len(counts), "charges": total, "max_per_key": most, "per_key": counts}
    if without_key and key is None:
        doc["without_key"] = without_key
    return doc


def _payment(host: Host, ref: str, action: str, payload: Mapping[str, object]) -> Response:
    host.tick()
    existing = host.ledger.get_payment(ref)
    if existing is None or existing.flavor != host.flavor.name:
        return native_error("resource_missing")
    if action in ("refund", "dispute"):
        return _adjust(host, existing, action, payload)
    now = host.now()
    if action == "amount":
        amount, currency = payload.get("amount"), payload.get("currency")
        if isinstance(amount, bool) or not isinstance(amount, int) or not 0 < amount <= AMOUNT_MAX:
            return native_error("amount_invalid")
        if currency is not None and not isinstance(currency, str):
            return native_error("currency_invalid")
        record = host.ledger.set_amount(ref, amount=amount, currency=currency, now=now)
    else:
        status, reason = _STATUS[action], payload.get("reason")
        if reason is not None and not isinstance(reason, str):
            return native_error("parameter_invalid", "reason must be a string")
        reason = None if status is PaymentStatus.SUCCEEDED else (reason or f"admin_{action}")
        record = host.ledger.set_status(ref, status, reason=reason, now=now)
        if record is not None:
            host.tell([Change("status", record)])
    return json_response(200, host.flavor.render_payment(record)) if record else native_error("resource_missing")


def _adjust(host: Host, payment: PaymentRecord, kind: str, payload: Mapping[str, object]) -> Response:
    amount, reason = payload.get("amount"), payload.get("reason")
    if kind == "refund" and amount is not None and (isinstance(amount, bool) or not isinstance(amount, int)):
        return native_error("amount_invalid")
    if reason is not None and not isinstance(reason, str):
        return native_error("parameter_invalid", "reason must be a string")
    notify = payload.get("notify_first", False)
    if not isinstance(notify, bool):
        return native_error("parameter_invalid", "notify_first must be true or false")
    refund = kind == "refund"
    adjustment = Adjustment(
        id=host.flavor.adjustment_id(kind), kind=kind, psp_reference=payment.psp_reference,
        amount=(amount if isinstance(amount, int) else host.ledger.refundable(payment)) if refund else payment.captured,
        currency=payment.currency, fee=0 if refund else DISPUTE_FEE,
        reason=reason or ("requested_by_customer" if refund else "general"), created_at=host.now(),
        updated_at=host.now(), status=REFUND_SUCCEEDED if refund else DISPUTE_NEEDS_RESPONSE,
        metadata={"notify_first": "true"} if notify and not refund else {},
    )  # fmt: skip
    result = host.ledger.add_adjustment(adjustment)
    if isinstance(result, str):
        code = "resource_missing" if result == "resource_missing" else "parameter_invalid"
        return native_error(code, f"cannot {kind} {payment.psp_reference}: {result}")
    host.tell([Change(kind, payment, result)])
    return json_response(200, host.flavor.render_adjustment(result, payment))
