"""psp_adapters._wire: the JSON validators every wire module shares (bool-safe, errors naming PSP and field)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime

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
    assert FIELDS.amount({"net": -70}, "net", signed=True) == -70
    assert FIELDS.amount({"amount": 2**63 - 1}) == 2**63 - 1  # BIGINT's largest
    assert FIELDS.amount({"net": -(2**63 - 1)}, "net", signed=True) == -(2**63 - 1)


@pytest.mark.parametrize(("raw", "signed", "message"), [
    ('{"amount": 9223372036854775816}', False, "acme: field 'amount' is an amount outside 64 bits"),  # 2^63 + 8
    ('{"amount": 9223372036854775808}', False, "acme: field 'amount' is an amount outside 64 bits"),  # 2^63
    ('{"amount": 18446744073709551615}', True, "acme: field 'amount' is an amount outside 64 bits"),  # 2^64 - 1
    ('{"amount": -9223372036854775808}', True, "acme: field 'amount' is an amount outside 64 bits"),  # -2^63
    ('{"amount": 100000000000000000000000000000}', True, "acme: field 'amount' is an amount outside 64 bits"),
    ('{"amount": -1}', False, "acme: field 'amount' is a negative amount"),
])
def test_amount__refuses_what_no_64_bit_column_holds_and_a_negative_where_none_can_be(
        raw: str, signed: bool, message: str) -> None:
    error = protocol_error(lambda: FIELDS.amount(json.loads(raw), signed=signed))
    assert (error.psp, str(error)) == ("acme", message)


@pytest.mark.parametrize("raw", ['{"amount": NaN}', '{"amount": Infinity}', '{"amount": 1e400}', '{"amount": 1e2}'])
def test_amount__a_json_float_is_never_an_amount_even_where_the_parser_takes_it(raw: str) -> None:
    doc = json.loads(raw)  # the standard library (httpx's .json()) reads NaN, Infinity and 1e400 as floats
    assert isinstance(doc["amount"], float)
    assert str(protocol_error(lambda: FIELDS.amount(doc))) == "acme: field 'amount' missing or not an integer amount"


# --- times ---------------------------------------------------------------------------------------------------


def test_unix_time__integer_seconds_as_aware_utc_within_1970_to_9999() -> None:
    assert FIELDS.unix_time({"created": 1714651200}, "created") == datetime(2024, 5, 2, 12, 0, tzinfo=UTC)
    assert FIELDS.unix_time({"created": 0}, "created") == datetime(1970, 1, 1, tzinfo=UTC)
    assert FIELDS.unix_time({"created": 253402300799}, "created") == datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
    assert FIELDS.optional_unix_time({}, "created") is None
    assert FIELDS.optional_unix_time({"created": None}, "created") is None


@pytest.mark.parametrize("value", [253402300800, 10**15, 2**63 + 8, -1, -(10**12)])
def test_unix_time__refuses_an_instant_no_datetime_holds(value: int) -> None:
    error = protocol_error(lambda: FIELDS.unix_time({"created": value}, "created"))
    assert str(error) == "acme: field 'created' is a Unix time outside 1970..9999"


@pytest.mark.parametrize("value", [True, 1.5, "1714651200", None])
def test_unix_time__refuses_anything_but_an_integer(value: object) -> None:
    error = protocol_error(lambda: FIELDS.unix_time({"created": value}, "created"))
    assert str(error) == "acme: field 'created' missing or not int"


def test_instant__an_iso_date_time_with_an_offset_as_utc() -> None:
    assert FIELDS.instant("2026-12-01T12:00:00+01:00", "eventDate") == datetime(2026, 12, 1, 11, 0, tzinfo=UTC)
    assert FIELDS.instant("9999-12-31T23:59:59+00:00", "eventDate").year == 9999


@pytest.mark.parametrize(("value", "message"), [
    ("2026-12-01T12:00:00", "acme: eventDate has no UTC offset"),
    ("yesterday", "acme: eventDate is not an ISO-8601 date-time"),
    ("10000-01-01T00:00:00+00:00", "acme: eventDate is not an ISO-8601 date-time"),
    ("0001-01-01T00:00:00+01:00", "acme: eventDate is outside the years 1..9999 in UTC"),
    ("9999-12-31T23:00:00-05:00", "acme: eventDate is outside the years 1..9999 in UTC"),
])
def test_instant__refuses_a_wall_clock_time_and_one_outside_datetimes_range(value: str, message: str) -> None:
    assert str(protocol_error(lambda: FIELDS.instant(value, "eventDate"))) == message


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


# --- numbers from outside are bounded where they enter (issue 22, item 7) -------------------------------------

#: 2^63 + 8: the amount that made a signed Stripe event answer 500 (OverflowError in the BIGINT column)
TOO_LARGE = 2**63 + 8

OUT_OF_RANGE: list[tuple[str, Callable[[], object]]] = [
    ("sandbox", lambda: sandbox_wire.to_outcome(sandbox_payment(amount=TOO_LARGE))),
    ("sandbox", lambda: sandbox_wire.to_outcome(sandbox_payment(amount=-1))),
    ("stripe", lambda: stripe_wire.to_outcome(stripe_intent(amount=TOO_LARGE))),
    ("stripe", lambda: stripe_wire.to_outcome(stripe_intent(amount=-2000))),
    ("stripe", lambda: stripe_wire.to_outcome(stripe_intent(amount_received=TOO_LARGE))),
    ("stripe", lambda: stripe_wire.to_listed(stripe_intent(created=10**15))),  # year 31,690,708
    ("stripe", lambda: stripe_wire.to_listed(stripe_intent(created=-1))),
    ("stripe", lambda: stripe_balance.to_settlement_line(stripe_balance_txn(fee=TOO_LARGE))),
    ("stripe", lambda: stripe_balance.to_settlement_line(stripe_balance_txn(net=-TOO_LARGE))),
    ("stripe", lambda: stripe_balance.to_settlement_line(stripe_balance_txn(created=2**63 + 8))),
    # MGA: zero-decimal at Stripe, two decimals in ISO: x100 on the way in passes 64 bits
    ("stripe", lambda: stripe_wire.to_outcome(stripe_intent(amount=2**62, currency="mga"))),
    ("template", lambda: template_wire.to_outcome(template_payment(amount=TOO_LARGE))),
    ("adyen", lambda: adyen_wire.payment_to_outcome(adyen_answer(amount={"value": TOO_LARGE, "currency": "EUR"}),
                                                    request=ADYEN_REQUEST)),
    ("adyen", lambda: adyen_wire.payment_to_outcome(adyen_answer(amount={"value": -5, "currency": "EUR"}),
                                                    request=ADYEN_REQUEST)),
]


@pytest.mark.parametrize(("psp", "call"), OUT_OF_RANGE)
def test_wire_modules__refuse_a_number_outside_64_bits_or_a_negative_amount_naming_their_psp(
        psp: str, call: Callable[[], object]) -> None:
    error = protocol_error(call)  # not an OverflowError later, in a column, a sum or a date
    assert error.psp == psp and str(error).startswith(f"{psp}: ")


def test_wire_modules__a_balance_transactions_fee_and_net_may_be_negative() -> None:
    line = stripe_balance.to_settlement_line(stripe_balance_txn(fee=-88, net=-2088))
    assert line is not None and (line.fee, line.net) == (-88, -2088)


def test_units__a_conversion_that_leaves_64_bits_is_refused_both_ways() -> None:
    from psp_adapters.errors import PspRejectedError
    from psp_adapters.units import AMOUNT_MAX, from_psp_units, to_psp_units

    shifts = {"ISK": 2, "MGA": -2}
    assert to_psp_units(AMOUNT_MAX // 100, "ISK", shifts=shifts, psp="acme", label="Acme") == AMOUNT_MAX // 100 * 100
    with pytest.raises(PspRejectedError, match="too large for Acme"):
        to_psp_units(AMOUNT_MAX // 100 + 1, "ISK", shifts=shifts, psp="acme", label="Acme")
    assert from_psp_units(AMOUNT_MAX // 100, "MGA", shifts=shifts, psp="acme") == AMOUNT_MAX // 100 * 100
    assert str(protocol_error(lambda: from_psp_units(AMOUNT_MAX // 100 + 1, "MGA", shifts=shifts, psp="acme"))) \
        == "acme: MGA amount outside 64 bits in minor units"


@pytest.mark.parametrize("cell", ["1e3", "NaN", "Infinity", "1_000.00", "\u0661\u0660.00", "12,50", " ", "0x10",
                                  "92233720368547758.08", "-92233720368547758.08", "9" * 500])
def test_adyen_report__an_amount_cell_that_is_no_plain_64_bit_decimal_is_malformed(cell: str) -> None:
    from psp_adapters.adyen import report

    error = protocol_error(lambda: report.major_to_minor(cell, "EUR"))
    assert error.psp == "adyen" and len(str(error)) < 200


def test_adyen_report__plain_decimals_either_sign_up_to_64_bits() -> None:
    from psp_adapters.adyen import report

    assert report.major_to_minor("92233720368547758.07", "EUR") == 2**63 - 1
    assert report.major_to_minor("-0.35", "EUR") == -35
    assert report.major_to_minor("+12", "JPY") == 12


@pytest.mark.parametrize(("booked", "zone"), [("0001-01-01 00:30:00", "CET"), ("9999-12-31 23:30:00", "EST")])
def test_adyen_report__a_booking_date_outside_datetimes_range_in_utc_is_malformed(booked: str, zone: str) -> None:
    from zoneinfo import ZoneInfo

    from psp_adapters.adyen import report

    header = ",".join(report.REPORT_COLUMNS)
    cells = {"Merchant Account": "AcmeShopEU", "Psp Reference": "QFQTPCQ8HXSKGK82", "Booking Date": booked,
             "TimeZone": zone, "Main Currency": "EUR", "Main Amount": "12.50", "Record Type": "Settled"}
    text = header + "\n" + ",".join(cells.get(c, "") for c in report.REPORT_COLUMNS) + "\n"
    error = protocol_error(lambda: report.parse_report(text, tz=ZoneInfo("UTC")))
    assert "outside the years 1..9999" in str(error)


@pytest.mark.parametrize("value", ["\u00b2", "\u0661\u0662", "12\u00b2"])
def test_retry_after__digits_of_other_scripts_are_no_delay_not_a_crash(value: str) -> None:
    from psp_adapters.http import parse_retry_after

    assert parse_retry_after(value, datetime(2024, 5, 2, tzinfo=UTC)) is None
    assert parse_retry_after("120", datetime(2024, 5, 2, tzinfo=UTC)) == 120.0
