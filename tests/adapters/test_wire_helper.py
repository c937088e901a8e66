"""psp_adapters._wire: the JSON validators every wire module shares (bool-safe, errors naming PSP and field)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from psp_adapters import _wire
from psp_adapters._template import wire as template_wire
from psp_adapters.adyen import wire as adyen_wire
from psp_adapters.errors import PspProtocolError
from psp_adapters.protocol import ChargeRequest
from psp_adapters.sandbox import wire as sandbox_wire
from psp_adapters.stripe import balance as stripe_balance
from psp_adapters.stripe import wire as stripe_wire

FIELDS = _wire.JsonFields("acme")
DOC = json.loads('{"id": "p_1", "amount": 1250, "paid": true, "count": 0, "ratio": 0.5, "note": null,'
                 ' "nested": {"a": 1}, "items": [1, 2]}')


def protocol_error(call: Callable[[], object]) -> PspProtocolError:
    with pytest.raises(PspProtocolError) as caught:
        call()
    return caught.value


# --- as_object -----------------------------------------------------------------------------------------------


def test_as_object__returns_a_mapping_as_is() -> None:
    nested = DOC["nested"]
    assert FIELDS.as_object(nested, "nested") is nested


@pytest.mark.parametrize("value", [None, [], "x", 1, True, 1.5])
def test_as_object__refuses_anything_else_naming_the_psp_and_what(value: object) -> None:
    error = protocol_error(lambda: FIELDS.as_object(value, "payment"))
    assert error.psp == "acme"
    assert str(error) == "acme: payment is not a JSON object"


# --- require / optional --------------------------------------------------------------------------------------


def test_require__returns_a_field_of_the_kind() -> None:
    assert FIELDS.require(DOC, "id", str) == "p_1"
    assert FIELDS.require(DOC, "amount", int) == 1250
    assert FIELDS.require(DOC, "count", int) == 0  # falsy is not missing
    assert FIELDS.require(DOC, "paid", bool) is True
    assert FIELDS.require(DOC, "ratio", float) == 0.5
    assert FIELDS.require(DOC, "items", list) == [1, 2]


@pytest.mark.parametrize(("name", "kind"), [
    ("missing", str),  # absent
    ("note", str),  # null
    ("amount", str),  # another type
    ("id", int),
    ("paid", int),  # the bool guard: JSON true is not an integer
    ("count", bool),  # nor is 0 a bool
    ("ratio", int),  # a float is not an int
])
def test_require__refuses_a_missing_null_or_mistyped_field_naming_psp_and_field(name: str, kind: type) -> None:
    error = protocol_error(lambda: FIELDS.require(DOC, name, kind))
    assert error.psp == "acme"
    assert str(error) == f"acme: field {name!r} missing or not {kind.__name__}"


def test_require__a_bool_is_not_a_float_either() -> None:
    assert protocol_error(lambda: FIELDS.require({"x": False}, "x", float)).psp == "acme"


def test_optional__absent_or_null_is_none_and_present_is_checked() -> None:
    assert FIELDS.optional(DOC, "missing", str) is None
    assert FIELDS.optional(DOC, "note", str) is None
    assert FIELDS.optional(DOC, "id", str) == "p_1"
    assert FIELDS.optional(DOC, "count", int) == 0
    assert FIELDS.optional(DOC, "paid", bool) is True


@pytest.mark.parametrize(("name", "kind"), [("id", int), ("paid", int), ("amount", str), ("ratio", int)])
def test_optional__refuses_a_present_field_of_another_type(name: str, kind: type) -> None:
    error = protocol_error(lambda: FIELDS.optional(DOC, name, kind))
    assert error.psp == "acme" and str(error).startswith("acme: ") and repr(name) in str(error)


# --- amounts -------------------------------------------------------------------------------------------------


def test_amount__an_integer_in_the_psps_units() -> None:
    assert FIELDS.amount(DOC) == 1250
    assert FIELDS.amount({"fee": 0}, "fee") == 0
    assert FIELDS.amount({"net": -70}, "net") == -70


@pytest.mark.parametrize("raw", ['{"amount": true}', '{"amount": false}', '{"amount": 12.5}', '{"amount": 12.0}',
                                 '{"amount": "1250"}', '{"amount": null}', '{}'])
def test_amount__refuses_bools_floats_strings_and_missing(raw: str) -> None:
    error = protocol_error(lambda: FIELDS.amount(json.loads(raw)))
    assert error.psp == "acme"
    assert str(error) == "acme: field 'amount' missing or not an integer amount"


def test_optional_amount() -> None:
    assert FIELDS.optional_amount({}, "amount_received") is None
    assert FIELDS.optional_amount({"amount_received": None}, "amount_received") is None
    assert FIELDS.optional_amount({"amount_received": 5}, "amount_received") == 5
    assert protocol_error(lambda: FIELDS.optional_amount({"amount_received": True}, "amount_received")).psp == "acme"


def test_error__names_the_psp() -> None:
    error = FIELDS.error("list page without data")
    assert isinstance(error, PspProtocolError) and error.psp == "acme" and str(error) == "acme: list page without data"


# --- every wire module uses it, with its own PSP name and the bool guard -----------------------------------


def sandbox_payment(**changes: object) -> dict[str, object]:
    return {"object": "payment", "psp_reference": "psp_1", "merchant_reference": "order-1", "amount": 1250,
            "currency": "EUR", "status": "succeeded", **changes}


def stripe_intent(**changes: object) -> dict[str, object]:
    return {"id": "pi_1", "object": "payment_intent", "amount": 2000, "amount_received": 2000, "currency": "usd",
            "status": "succeeded", "metadata": {"merchant_reference": "order-1"}, **changes}


def stripe_balance_txn(**changes: object) -> dict[str, object]:
    source = {"id": "ch_1", "object": "charge", "payment_intent": "pi_1", "amount": 2000, "currency": "usd",
              "status": "succeeded"}
    return {"id": "txn_1", "object": "balance_transaction", "amount": 2000, "fee": 88, "net": 1912,
            "currency": "usd", "created": 1714651200, "reporting_category": "charge", "source": source, **changes}


def template_payment(**changes: object) -> dict[str, object]:
    return {"id": "pay_1", "reference": "order-1", "amount": 1250, "currency": "EUR", "status": "authorised",
            **changes}


ADYEN_REQUEST = ChargeRequest(merchant_reference="order-1", amount=1000, currency="EUR")


def adyen_answer(**changes: object) -> dict[str, object]:
    return {"pspReference": "psp_1", "resultCode": "Authorised", "merchantReference": "order-1",
            "amount": {"value": 1000, "currency": "EUR"}, **changes}


VALID: list[tuple[str, Callable[[], object]]] = [
    ("sandbox", lambda: sandbox_wire.to_outcome(sandbox_payment())),
    ("stripe", lambda: stripe_wire.to_outcome(stripe_intent())),
    ("stripe", lambda: stripe_balance.to_settlement_line(stripe_balance_txn())),
    ("template", lambda: template_wire.to_outcome(template_payment())),
    ("adyen", lambda: adyen_wire.payment_to_outcome(adyen_answer(), request=ADYEN_REQUEST)),
]

BOOL_AMOUNTS: list[tuple[str, Callable[[], object]]] = [
    ("sandbox", lambda: sandbox_wire.to_outcome(sandbox_payment(amount=True))),
    ("sandbox", lambda: sandbox_wire.to_settlement_line({**sandbox_payment(amount=True),
                                                         "settled_at": "2024-05-01T12:00:00+00:00"})),
    ("stripe", lambda: stripe_wire.to_outcome(stripe_intent(amount=True))),
    ("stripe", lambda: stripe_wire.to_outcome(stripe_intent(amount_received=True))),
    ("stripe", lambda: stripe_balance.to_settlement_line(stripe_balance_txn(fee=True))),
    ("stripe", lambda: stripe_balance.to_settlement_line(stripe_balance_txn(created=True))),
    ("template", lambda: template_wire.to_outcome(template_payment(amount=True))),
    ("adyen", lambda: adyen_wire.payment_to_outcome(adyen_answer(amount={"value": True, "currency": "EUR"}),
                                                    request=ADYEN_REQUEST)),
]


@pytest.mark.parametrize(("psp", "call"), VALID)
def test_wire_modules__read_a_valid_document(psp: str, call: Callable[[], object]) -> None:
    assert call() is not None


@pytest.mark.parametrize(("psp", "call"), BOOL_AMOUNTS)
def test_wire_modules__refuse_a_json_true_as_a_number_naming_their_psp(psp: str, call: Callable[[], object]) -> None:
    error = protocol_error(call)
    assert error.psp == psp
    assert str(error).startswith(f"{psp}: field ")


@pytest.mark.parametrize(("psp", "call"), [
    ("sandbox", lambda: sandbox_wire.to_outcome([])),
    ("sandbox", lambda: sandbox_wire.error_fields({"error": "boom"})),
    ("stripe", lambda: stripe_wire.to_outcome("x")),
    ("stripe", lambda: stripe_wire.parse_error({})),
    ("stripe", lambda: stripe_balance.to_settlement_line(None)),
    ("template", lambda: template_wire.to_outcome(None)),
    ("adyen", lambda: adyen_wire.parse_error([])),
    ("adyen", lambda: adyen_wire.payment_to_outcome(1, request=ADYEN_REQUEST)),
])
def test_wire_modules__refuse_a_non_object_naming_their_psp(psp: str, call: Callable[[], object]) -> None:
    error = protocol_error(call)
    assert error.psp == psp
    assert str(error).startswith(f"{psp}: ") and "is not a JSON object" in str(error)


def test_wire_modules__keep_no_copy_of_the_validators() -> None:
    for module in (sandbox_wire, stripe_wire, stripe_balance, template_wire, adyen_wire):
        copies = {"_object", "_require", "_optional", "_require_object", "_require_amount", "as_object", "require",
                  "optional", "require_amount"} & set(vars(module))
        assert not copies, f"{module.__name__}: {sorted(copies)}"
