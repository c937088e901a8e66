"""The bank's faults on the sandbox's payout credits (``bank_credits``): each documented fault on the earliest credit
no earlier fault touched, in the order given; refusals name the problem."""

from __future__ import annotations

from datetime import date

import pytest

from psp_adapters.sandbox.bank_credits import BankCredit, Fault, apply_faults, bank_reference, parse_fault

D1, D2, D3 = date(2026, 3, 4), date(2026, 3, 5), date(2026, 3, 6)


def credit(n: int, day: date, amount: int, currency: str = "EUR") -> BankCredit:
    return BankCredit(amount, currency, day, day, f"B{n:015d}", f"E2E{n}", "PSP", f"PAYOUT po_{n}", (f"po_{n}",))


CREDITS = [credit(3, D3, 300), credit(1, D1, 100), credit(2, D2, 200, "USD"), credit(4, D3, 400)]


def test_parse_fault__names_values_and_refusals() -> None:
    assert parse_fault("missing-credit") == Fault("missing-credit")
    assert parse_fault(" bank-fee=150 ") == Fault("bank-fee", 150)
    assert parse_fault("late=60") == Fault("late", 60)
    for bad, says in [("lost", "unknown fault 'lost'"), ("late", "needs =N"), ("two-in-one=2", "takes no value"),
                      ("late=61", "between 1 and 60"), ("late=-1", "not a whole number"),
                      ("bank-fee=0", "at least 1"), ("bank-fee=1.5", "not a whole number")]:
        with pytest.raises(ValueError, match=says):
            parse_fault(bad)


def test_apply_faults__none_sorts_by_booking_day() -> None:
    assert [c.payouts for c in apply_faults(CREDITS, [], first_day=D1)] == [("po_1",), ("po_2",), ("po_3",),
                                                                             ("po_4",)]


def test_apply_faults__each_on_the_next_untouched_credit_in_order() -> None:
    faults = [Fault("missing-credit"), Fault("bank-fee", 50), Fault("late", 2), Fault("foreign-credit")]

    booked = apply_faults(CREDITS, faults, first_day=date(2026, 3, 1), currency="EUR")

    assert [(c.payouts, c.amount, c.currency, c.booking_date, c.value_date) for c in booked] == [
        ((), 4242, "EUR", date(2026, 3, 1), date(2026, 3, 1)),  # foreign-credit: nobody's payout, the first day
        (("po_2",), 150, "USD", D2, D2),  # bank-fee=50 (po_1, the earliest, is missing)
        (("po_4",), 400, "EUR", D3, D3),  # untouched
        (("po_3",), 300, "EUR", date(2026, 3, 8), date(2026, 3, 8)),  # late=2
    ]
    assert booked[0].counterparty == "ACME GMBH" and booked[0].remittance == "INVOICE 2026-117"


def test_apply_faults__two_in_one_joins_two_of_one_currency_naming_neither() -> None:
    [usd, joined] = apply_faults(CREDITS[1:], [Fault("two-in-one")], first_day=D1)  # po_1 (EUR) + po_4 (EUR)

    assert usd.payouts == ("po_2",)
    assert (joined.amount, joined.currency, joined.booking_date, joined.payouts) == (500, "EUR", D3,
                                                                                    ("po_1", "po_4"))
    assert (joined.end_to_end_id, joined.remittance) == (None, "COLLECTIVE CREDIT")
    assert joined.bank_reference == bank_reference("collective", "po_1", "po_4") != credit(1, D1, 1).bank_reference
    assert len(joined.bank_reference) == 16


@pytest.mark.parametrize(("faults", "says"), [
    ([Fault("bank-fee", 100)], "not less than the credit of 100"),
    ([Fault("missing-credit")] * 5, "no credit left"),
    ([Fault("missing-credit"), Fault("two-in-one")], "no credit left"),  # po_2 is USD: no EUR partner for po_3
])
def test_apply_faults__refusals(faults: list[Fault], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        apply_faults([credit(1, D1, 100), credit(2, D2, 200, "USD"), credit(3, D3, 300)], faults, first_day=D1)


def test_credit__json_both_ways_and_refuses_a_bad_amount() -> None:
    c = credit(7, D1, 700)
    assert BankCredit.from_json(c.to_json()) == c
    with pytest.raises(ValueError):
        BankCredit.from_json({**c.to_json(), "amount": 0})
    with pytest.raises(TypeError):
        BankCredit.from_json({**c.to_json(), "payouts": "po_7"})
