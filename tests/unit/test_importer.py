from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from recon.payments.importer import EXISTING_BATCH, ImportRejected, Problem, read_payments, validate
from recon.rows import NewPayment

PSPS = ("adyen", "sandbox", "stripe")
HEADER = "merchant_reference,amount,currency,psp\n"


def check(text: str, **kwargs: object) -> list[NewPayment]:
    return validate(text.splitlines(keepends=True), source="in.csv", psp_names=PSPS, **kwargs)  # type: ignore[arg-type]


def rejected(text: str, **kwargs: object) -> ImportRejected:
    with pytest.raises(ImportRejected) as info:
        check(text, **kwargs)
    return info.value


def test_validate__converts_and_normalises_every_column() -> None:
    text = ("merchant_reference,amount,currency,psp,created_at,merchant_account\n"
            "r-1, 12.34 ,eur, Stripe ,2024-05-01T10:00:00,shop-a\n"
            "r-2,1000,JPY,adyen,2024-05-01T12:00:00+02:00,\n"
            "  r-3  ,1.234,KWD,sandbox,,\n")
    assert check(text, merchant_account="fallback") == [
        NewPayment("shop-a", "r-1", 1234, "EUR", "stripe", datetime(2024, 5, 1, 10, tzinfo=UTC)),
        NewPayment("fallback", "r-2", 1000, "JPY", "adyen", datetime(2024, 5, 1, 10, tzinfo=UTC)),
        NewPayment("fallback", "r-3", 1234, "KWD", "sandbox", None),
    ]


def test_validate__columns_in_any_order_and_case() -> None:
    [p] = check("PSP,Currency,Amount,Merchant_Reference\nstripe,EUR,1.00,r-1\n")
    assert (p.merchant_reference, p.amount, p.currency, p.psp) == ("r-1", 100, "EUR", "stripe")


def test_validate__header_only_is_no_payments() -> None:
    assert check(HEADER) == []


def test_validate__blank_lines_are_skipped_and_lines_stay_physical() -> None:
    text = HEADER + "\n" + 'r-1,1,EUR,stripe\n"multi\nline note",1,EUR,stripe\n\n,1,EUR,stripe\n'
    assert rejected(text).lines() == [
        "in.csv:4: merchant_reference 'multi\\nline note' contains a control character "
        "(field merchant_reference)",
        "in.csv:7: merchant_reference is empty (field merchant_reference)",
        "in.csv: 2 problems; nothing imported",
    ]


NOT_PLAIN = "is not a plain decimal number (digits, optionally '.' and decimals) (field amount)"


@pytest.mark.parametrize(("row", "message"), [
    (",1.00,EUR,stripe", "merchant_reference is empty (field merchant_reference)"),
    (f"{'x' * 201},1.00,EUR,stripe",
     "merchant_reference is 201 characters long; at most 200 are allowed (field merchant_reference)"),
    ('"a\tb",1.00,EUR,stripe',
     "merchant_reference 'a\\tb' contains a control character (field merchant_reference)"),
    ("r-1,12.345,EUR,stripe", "amount '12.345' has more decimals than EUR allows (2) (field amount)"),
    ("r-1,0.1,JPY,stripe", "amount '0.1' has more decimals than JPY allows (0) (field amount)"),
    ("r-1,1.2345,KWD,stripe", "amount '1.2345' has more decimals than KWD allows (3) (field amount)"),
    ("r-1,0,EUR,stripe", "amount '0' must be positive (field amount)"),
    ("r-1,-5.00,EUR,stripe", "amount '-5.00' must be positive (field amount)"),
    ("r-1,,EUR,stripe", "amount is empty (field amount)"),
    ("r-1,1e3,EUR,stripe", f"amount '1e3' {NOT_PLAIN}"),
    ('r-1,"12,30",EUR,stripe', f"amount '12,30' {NOT_PLAIN}"),
    ("r-1,1_000,EUR,stripe", f"amount '1_000' {NOT_PLAIN}"),
    ("r-1,.5,EUR,stripe", f"amount '.5' {NOT_PLAIN}"),
    ("r-1,99999999999999999999,EUR,stripe", "amount '99999999999999999999' is too large (field amount)"),
    ("r-1,1.00,EURO,stripe", "currency 'EURO' is not an ISO-4217 currency code (field currency)"),
    ("r-1,1.00,,stripe", "currency is empty (field currency)"),
    ("r-1,1.00,EUR,paypal", "psp 'paypal' is not one of adyen, sandbox, stripe (field psp)"),
    ("r-1,1.00,EUR,", "psp is empty; expected one of adyen, sandbox, stripe (field psp)"),
    ("r-1,1.00,EUR", "expected 4 fields as in the header, found 3"),
    ("r-1,1.00,EUR,stripe,extra", "expected 4 fields as in the header, found 5"),
    ('"r-1"x,1.00,EUR,stripe', "malformed CSV: ',' expected after '\"'"),
])
def test_validate__a_bad_row_names_line_and_field(row: str, message: str) -> None:
    err = rejected(HEADER + "r-0,1.00,EUR,stripe\n" + row + "\n")
    assert str(err) == f"in.csv:3: {message}"
    assert err.lines() == [f"in.csv:3: {message}"]


#: what an identifier cell may not hold: a card number in each of its forms, a key, recon's own masks
MASKED_CELLS = ["4242424242424242", "order-4242424242424242", "order 4242 4242 4242 4242", "x-4242-4242-4242-4242",
                "sk_live_51HxYzAbCdEfGhIjKlMnOpQr", "order-[card]", "ref [redacted]", "ref***"]
MASKED_PROBLEM = ("holds what recon masks as a card number or a secret, or one of its masks (it would be stored, "
                  "printed and sent to the PSP)")


@pytest.mark.parametrize("cell", MASKED_CELLS)
@pytest.mark.parametrize("column", ["merchant_reference", "merchant_account", "payment_method",
                                    "customer_reference"])
def test_validate__an_identifier_holding_a_card_number_a_key_or_a_mask_is_refused_unrepeated(
        column: str, cell: str) -> None:
    columns = ["merchant_reference", "amount", "currency", "psp", "merchant_account", "payment_method",
               "customer_reference"]
    cells = {"merchant_reference": "r-1", "amount": "1.00", "currency": "EUR", "psp": "sandbox", column: cell}
    err = rejected(",".join(columns) + "\n" + ",".join(cells.get(c, "") for c in columns) + "\n")
    assert str(err) == f"in.csv:2: {column} {MASKED_PROBLEM} (field {column})"


@pytest.mark.parametrize("cell", MASKED_CELLS)
def test_validate__a_merchant_account_given_outside_the_file_is_refused_alike(cell: str) -> None:
    from recon.errors import UsageError

    with pytest.raises(UsageError) as info:
        check(HEADER + "r-1,1.00,EUR,sandbox\n", merchant_account=cell)
    assert str(info.value) == f"--merchant-account: {MASKED_PROBLEM}"
    with pytest.raises(UsageError) as info:
        check(HEADER + "r-1,1.00,EUR,sandbox\n", account_defaults={"sandbox": cell})
    assert str(info.value) == f"[psp.sandbox] merchant_account: {MASKED_PROBLEM}"


@pytest.mark.parametrize("created", ["0001-01-01T00:30:00+01:00", "9999-12-31T23:00:00-05:00"])
def test_validate__a_created_at_outside_the_years_1_to_9999_in_utc_is_a_bad_row_not_a_crash(created: str) -> None:
    err = rejected(f"merchant_reference,amount,currency,psp,created_at\nr-1,1.00,EUR,stripe,{created}\n")
    assert str(err) == (f"in.csv:2: created_at {created!r} is not an ISO-8601 timestamp "
                        "(e.g. 2024-05-01T12:30:00Z; no offset means UTC) (field created_at)")


def test_validate__bad_created_at() -> None:
    err = rejected("merchant_reference,amount,currency,psp,created_at\nr-1,1.00,EUR,stripe,yesterday\n")
    assert str(err) == ("in.csv:2: created_at 'yesterday' is not an ISO-8601 timestamp "
                        "(e.g. 2024-05-01T12:30:00Z; no offset means UTC) (field created_at)")


@pytest.mark.parametrize(("text", "message"), [
    ("", "in.csv: the file is empty; expected a header row naming the columns "
         "merchant_reference, amount, currency, psp"),
    ("r-1,1.00,EUR,stripe\n",
     "in.csv:1: no header row; the first line must name the columns merchant_reference, amount, currency, "
     "psp (optional: created_at, merchant_account, payment_method, customer_reference, capture)"),
    ("merchant_reference,amount,currency\n", "in.csv:1: missing required column 'psp'"),
    ("merchant_reference,amount\n", "in.csv:1: missing required columns 'currency', 'psp'"),
    (HEADER.strip() + ",note,Fee\n", "in.csv:1: unknown columns 'note', 'Fee' (allowed: merchant_reference, "
                                     "amount, currency, psp, created_at, merchant_account, payment_method, "
                                     "customer_reference, capture)"),
    (HEADER.strip() + ",amount\n", "in.csv:1: column 'amount' named more than once"),
])
def test_validate__a_bad_header(text: str, message: str) -> None:
    assert str(rejected(text)) == message


def test_validate__duplicate_reference_within_the_file() -> None:
    err = rejected(HEADER + "r-1,1.00,EUR,stripe\nr-2,1.00,EUR,stripe\nr-1,2.00,EUR,stripe\n")
    assert str(err) == "in.csv:4: merchant_reference 'r-1' is also on line 2 (field merchant_reference)"


def test_validate__reference_that_exists_already() -> None:
    asked: list[list[str]] = []

    def existing(refs: Sequence[str]) -> set[str]:
        asked.append(list(refs))
        return {"r-2"} & set(refs)

    err = rejected(HEADER + "r-1,1.00,EUR,stripe\nr-2,1.00,EUR,stripe\n", existing_func=existing)
    assert str(err) == "in.csv:3: merchant_reference 'r-2' already exists (field merchant_reference)"
    assert asked == [["r-1", "r-2"]]


def test_validate__asks_about_existing_references_in_batches() -> None:
    sizes: list[int] = []

    def existing(refs: Sequence[str]) -> set[str]:
        sizes.append(len(refs))
        return set()

    rows = "".join(f"r-{i},1.00,EUR,stripe\n" for i in range(EXISTING_BATCH * 2 + 3))
    assert len(check(HEADER + rows, existing_func=existing)) == EXISTING_BATCH * 2 + 3
    assert sizes == [EXISTING_BATCH, EXISTING_BATCH, 3]


def test_validate__collects_problems_in_line_order_with_a_count() -> None:
    text = HEADER + "r-1,1.00,EUR,stripe\nr-2,x,EUR,stripe\nr-1,1.00,EUR,stripe\nr-4,1.00,EUR,mollie\n"
    err = rejected(text, existing_func=lambda refs: {"r-1"} & set(refs))
    assert err.lines() == [
        "in.csv:2: merchant_reference 'r-1' already exists (field merchant_reference)",
        f"in.csv:3: amount 'x' {NOT_PLAIN}",
        "in.csv:4: merchant_reference 'r-1' is also on line 2 (field merchant_reference)",
        "in.csv:5: psp 'mollie' is not one of adyen, sandbox, stripe (field psp)",
        "in.csv: 4 problems; nothing imported",
    ]


def test_validate__stops_reading_at_max_problems() -> None:
    rows = "".join(f"r-{i},bad,EUR,stripe\n" for i in range(50))
    err = rejected(HEADER + rows, max_problems=5)
    assert [p.line for p in err.problems] == [2, 3, 4, 5, 6]
    assert err.lines()[-1] == "in.csv: at least 5 problems; nothing imported"


def test_problem__render_with_and_without_line_and_field() -> None:
    assert Problem(3, "bad", "amount").render("f.csv") == "f.csv:3: bad (field amount)"
    assert Problem(None, "empty").render("f.csv") == "f.csv: empty"


def test_read_payments__skips_a_byte_order_mark_and_keeps_crlf_lines(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_bytes(b"\xef\xbb\xbfmerchant_reference,amount,currency,psp\r\nr-1,1.00,EUR,stripe\r\n"
                     b"r-\xc3\xa9,2.00,EUR,stripe\r\n")
    assert [(p.merchant_reference, p.amount) for p in read_payments(path, psp_names=PSPS)] == [
        ("r-1", 100), ("r-\u00e9", 200)]


def test_read_payments__not_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_bytes(HEADER.encode() + b"r-1,1.00,EUR,stripe\nr-\xe9,1.00,EUR,stripe\n")
    with pytest.raises(ImportRejected) as info:
        read_payments(path, psp_names=PSPS)
    assert str(info.value) == f"{path}:3: not valid UTF-8 (byte 0xe9 at column 3); save the file as UTF-8"
