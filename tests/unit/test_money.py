from __future__ import annotations

import pytest

from recon.errors import UsageError
from recon.payments.money import MINOR_UNITS, check_currency, format_amount, parse_amount


@pytest.mark.parametrize(("text", "currency", "minor"), [
    ("12.34", "EUR", 1234),
    ("12", "EUR", 1200),
    ("12.3", "EUR", 1230),
    ("0.01", "EUR", 1),
    (" 12.30 ", "EUR", 1230),
    ("12.30", "eur", 1230),
    ("1000", "JPY", 1000),
    ("1000.0", "JPY", 1000),
    ("1.234", "KWD", 1234),
    ("0.001", "KWD", 1),
    ("0.0001", "CLF", 1),
    ("92233720368547758.07", "EUR", 2**63 - 1),
])
def test_parse_amount__exact_by_the_currency_exponent(text: str, currency: str, minor: int) -> None:
    assert parse_amount(text, currency) == minor


@pytest.mark.parametrize(("text", "currency", "message"), [
    ("12.345", "EUR", "amount '12.345' has more decimals than EUR allows (2)"),
    ("0.1", "JPY", "amount '0.1' has more decimals than JPY allows (0)"),
    ("1.2345", "KWD", "amount '1.2345' has more decimals than KWD allows (3)"),
    ("0.005", "eur", "amount '0.005' has more decimals than EUR allows (2)"),
])
def test_parse_amount__refuses_to_round(text: str, currency: str, message: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_amount(text, currency)
    assert str(info.value) == message


@pytest.mark.parametrize("text", ["1e3", "1E3", "12,30", "12.30.1", "abc", "", " ", "NaN", "Infinity", "€12"])
def test_parse_amount__rejects_what_is_not_a_plain_decimal(text: str) -> None:
    with pytest.raises(UsageError, match=r"not a (plain )?decimal number"):
        parse_amount(text, "EUR")


@pytest.mark.parametrize("text", ["0", "0.00", "-1", "-0.01"])
def test_parse_amount__rejects_zero_and_negative(text: str) -> None:
    with pytest.raises(UsageError, match="must be positive"):
        parse_amount(text, "EUR")


@pytest.mark.parametrize("currency", ["EURO", "XYZ", "", "€"])
def test_parse_amount__unknown_currency(currency: str) -> None:
    with pytest.raises(UsageError, match="is not an ISO-4217 currency code"):
        parse_amount("1.00", currency)


def test_check_currency__normalises_case_and_space() -> None:
    assert check_currency(" eur ") == "EUR"
    assert check_currency("Jpy") == "JPY"


def test_check_currency__names_the_bad_code() -> None:
    with pytest.raises(UsageError) as info:
        check_currency("eurx")
    assert str(info.value) == "currency 'eurx' is not an ISO-4217 currency code"


@pytest.mark.parametrize(("minor", "currency", "text"), [
    (1234, "EUR", "12.34 EUR"),
    (5, "EUR", "0.05 EUR"),
    (1200, "eur", "12.00 EUR"),
    (1000, "JPY", "1000 JPY"),
    (1234, "KWD", "1.234 KWD"),
    (1, "KWD", "0.001 KWD"),
    (1, "CLF", "0.0001 CLF"),
    (2**63 - 1, "EUR", "92233720368547758.07 EUR"),
])
def test_format_amount__by_the_currency_exponent(minor: int, currency: str, text: str) -> None:
    assert format_amount(minor, currency) == text


@pytest.mark.parametrize("currency", ["EUR", "JPY", "KWD", "CLF"])
def test_format_amount__round_trips_through_parse_amount(currency: str) -> None:
    for minor in (1, 7, 10, 999, 123456789):
        text, code = format_amount(minor, currency).split()
        assert (parse_amount(text, code), code) == (minor, currency)


def test_minor_units__exponents_of_well_known_currencies() -> None:
    assert {c: MINOR_UNITS[c] for c in ("EUR", "USD", "GBP", "JPY", "KRW", "KWD", "BHD", "CLF")} == {
        "EUR": 2, "USD": 2, "GBP": 2, "JPY": 0, "KRW": 0, "KWD": 3, "BHD": 3, "CLF": 4}


@pytest.mark.parametrize("text", ["1_000", ".5", "12.", "١٢", "NaN", "Infinity", "1e3"])
def test_parse_amount__only_plain_decimals(text: str) -> None:
    with pytest.raises(UsageError, match="not a plain decimal number"):
        parse_amount(text, "EUR")
