"""recon.close.match.decide, rule by rule and exception by exception (its docstring's table), on hand-made
payouts and credits; every expected match and finding is written out here, never computed by the code."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from recon.close.match import MatchRules, decide, dispute_fees, names_reference
from recon.payout_rows import Credit, DisputeFee, ExceptionKind, Finding, Match, Payout, PayoutStatus

DAY = date(2026, 11, 10)
AT = datetime(2026, 11, 10, tzinfo=UTC)
AS_OF = date(2026, 11, 12)  # inside DAY's ±3 day window
LATE = date(2026, 11, 20)  # past it


def payout(pid: int, amount: int, *, day: date = DAY, trace: str | None = None, currency: str = "EUR",
           status: PayoutStatus = PayoutStatus.PAID, lines_net: int | None = None, lines: int = 1,
           account: str = "") -> Payout:
    return Payout(id=pid, psp="stripe", merchant_account=account, payout_ref=f"po_{pid}", amount=amount,
                  currency=currency, status=status, arrival_date=day, trace_ref=trace, statement_descriptor=None,
                  digest="d", version=1, line_count=lines, lines_net=amount if lines_net is None else lines_net,
                  fetched_at=AT, updated_at=AT)


def credit(cid: int, amount: int, *, day: date = DAY, e2e: str | None = None, ref: str | None = None,
           text: str | None = None, currency: str = "EUR", account: str = "NL91", payout_id: int | None = None,
           value: date | None = None) -> Credit:
    return Credit(id=cid, account=account, amount=amount, currency=currency, booking_date=day, value_date=value,
                  bank_reference=ref, end_to_end_id=e2e, remittance=text, payout_id=payout_id)


def run(payouts: list[Payout], credits: list[Credit], *, rules: MatchRules | None = None, as_of: date = AS_OF,
        stored: tuple[Match, ...] = ()) -> tuple[set[tuple[tuple[int, ...], tuple[int, ...], str, int]],
                                                  set[tuple[str, int | None, int | None]], list[int]]:
    d = decide(payouts, credits, rules=rules or MatchRules(), stored=stored, as_of=as_of, since=date(2026, 11, 1),
               until=date(2026, 12, 1), exclusive_accounts={"NL91"})
    return ({(m.payout_ids, m.entry_ids, m.rule, m.bank_fee) for m in d.matches},
            {(f.kind.value, f.payout_id, f.entry_id) for f in d.findings}, d.awaiting)


def test_match__reference_in_end_to_end_id_matches_one_to_one() -> None:
    late = date(2026, 11, 25)
    matches, findings, _ = run([payout(1, 5000, trace="TRACE1")], [credit(10, 5000, e2e="TRACE1", day=late)])
    assert matches == {((1,), (10,), "reference", 0)}  # a reference needs no date window
    assert findings == set()


def test_match__adyen_batch_number_in_remittance_is_a_whole_word() -> None:
    matches, findings, _ = run([payout(1, 7000, trace="12")],
                               [credit(10, 7000, text="ADYEN BATCH 123"), credit(11, 7000, text="ADYEN BATCH 12 NL")],
                               as_of=LATE)
    assert matches == {((1,), (11,), "reference", 0)}
    assert findings == {("unexplained_credit", None, 10)}
    assert names_reference(credit(1, 1, text="batch 12."), "12")
    assert not names_reference(credit(1, 1, text="batch 120"), "12")


def test_match__reference_with_another_amount_is_amount_differs() -> None:
    matches, findings, _ = run([payout(1, 5000, trace="T1")], [credit(10, 4990, e2e="T1")])
    assert matches == set()
    assert findings == {("amount_differs", 1, 10)}


def test_match__bank_fee_within_tolerance_is_matched_and_recorded() -> None:
    matches, findings, _ = run([payout(1, 5000, trace="T1")], [credit(10, 4990, e2e="T1")],
                               rules=MatchRules(bank_fee_tolerance=10))
    assert matches == {((1,), (10,), "reference", 10)}
    assert findings == set()


def test_match__amount_and_date_window() -> None:
    matches, findings, _ = run([payout(1, 5000)], [credit(10, 5000, day=date(2026, 11, 13))])
    assert matches == {((1,), (10,), "amount_date", 0)}
    matches, findings, awaiting = run([payout(1, 5000)], [credit(10, 5000, day=date(2026, 11, 14))])
    assert matches == set()  # four days late: outside ±3
    # the payout's window has not passed at AS_OF: awaiting, no exception; the credit nothing explains is one
    assert (findings, awaiting) == ({("unexplained_credit", None, 10)}, [1])


def test_match__value_date_counts_as_well_as_booking_date() -> None:
    matches, _, _ = run([payout(1, 5000)], [credit(10, 5000, day=date(2026, 11, 20), value=date(2026, 11, 11))])
    assert matches == {((1,), (10,), "amount_date", 0)}


def test_match__another_currency_is_never_a_candidate() -> None:
    matches, findings, _ = run([payout(1, 5000)], [credit(10, 5000, currency="USD")], as_of=LATE)
    assert matches == set()
    assert findings == {("bank_missing", 1, None), ("unexplained_credit", None, 10)}


def test_match__two_candidate_credits_are_ambiguous_naming_both() -> None:
    matches, findings, _ = run([payout(1, 5000)], [credit(10, 5000), credit(11, 5000, day=date(2026, 11, 11))])
    assert matches == set()
    assert findings == {("ambiguous", 1, None)}


def test_match__two_payouts_one_credit_of_their_amount_are_ambiguous() -> None:
    matches, findings, _ = run([payout(1, 5000), payout(2, 5000)], [credit(10, 5000)])
    assert matches == set()
    assert findings == {("ambiguous", 1, 10), ("ambiguous", 2, 10), ("ambiguous", None, 10)}


def test_match__several_payouts_in_one_credit_when_the_sum_is_exact() -> None:
    matches, findings, _ = run([payout(1, 3000), payout(2, 2000), payout(3, 999)], [credit(10, 5000)])
    assert matches == {((1, 2), (10,), "several_payouts", 0)}
    assert findings == set()


def test_match__one_payout_split_over_credits() -> None:
    matches, findings, _ = run([payout(1, 9000)], [credit(10, 4000), credit(11, 5000), credit(12, 10)])
    assert matches == {((1,), (10, 11), "split_credit", 0)}
    assert findings == {("unexplained_credit", None, 12)}


def test_match__two_sets_of_payouts_with_the_sum_are_ambiguous() -> None:
    matches, findings, _ = run([payout(1, 3000), payout(2, 2000), payout(3, 1000), payout(4, 4000)],
                               [credit(10, 5000)])
    assert matches == set()
    assert ("ambiguous", None, 10) in {(k, p, e) for k, p, e in findings}
    assert {p for k, p, _ in findings if k == "ambiguous" and p} == {1, 2, 3, 4}


def test_match__nothing_after_the_window_is_bank_missing_and_an_unexpected_credit_unexplained() -> None:
    matches, findings, awaiting = run([payout(1, 5000)], [credit(10, 777)], as_of=LATE)
    assert (matches, awaiting) == (set(), [])
    assert findings == {("bank_missing", 1, None), ("unexplained_credit", None, 10)}


def test_match__a_credit_on_a_shared_account_is_not_called_unexplained() -> None:
    _, findings, _ = run([], [credit(10, 777, account="SHARED")], as_of=LATE)
    assert findings == set()


def test_match__failed_payout_is_not_looked_for_and_lines_that_differ_are_found() -> None:
    matches, findings, _ = run([payout(1, 5000, status=PayoutStatus.FAILED), payout(2, 4000, lines_net=3900)],
                               [credit(10, 5000), credit(11, 4000)], as_of=LATE)
    assert matches == {((2,), (11,), "amount_date", 0)}  # lines_differ is shown, the bank match still made
    assert findings == {("payout_failed", 1, None), ("lines_differ", 2, None), ("unexplained_credit", None, 10)}


def test_match__stored_matches_are_kept_and_their_credits_taken() -> None:
    stored = (Match((1,), (10,), rule="reference"),)
    matches, findings, _ = run([payout(1, 5000), payout(2, 5000)], [credit(10, 5000, payout_id=1)], stored=stored,
                               as_of=LATE)
    assert matches == set()
    assert findings == {("bank_missing", 2, None)}


def test_match__the_group_search_is_bounded() -> None:
    many = [payout(n, 100 + n) for n in range(1, 30)]
    matches, _, _ = run(many, [credit(500, 101 + 102)], rules=MatchRules(max_candidates=24))
    assert matches == set()  # 29 candidate payouts: more than max_candidates, not searched


@pytest.mark.parametrize(("field", "value"), [("window_days", 32), ("bank_fee_tolerance", -1),
                                              ("max_group", 7), ("max_candidates", 1), ("window_days", True)])
def test_match_rules__bounded(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        MatchRules(**{field: value}).validate("close")  # type: ignore[arg-type]


def test_exception_kinds__all_seven_are_decided_here() -> None:
    """Six by ``decide``, ``dispute_fee_differs`` by ``dispute_fees``."""
    assert {k.value for k in ExceptionKind} == {"bank_missing", "amount_differs", "ambiguous", "unexplained_credit",
                                                "lines_differ", "payout_failed", "dispute_fee_differs"}


def test_match__a_batch_number_counts_only_with_its_merchant_account_when_the_text_names_one() -> None:
    batches = [payout(1, 7000, trace="1", account="ShopEU"), payout(2, 5000, trace="1", account="ShopUS")]
    matches, findings, _ = run(batches, [credit(10, 5000, text="ADYEN PAYOUT ShopUS BATCH 1"),
                                credit(11, 7000, text="ADYEN PAYOUT ShopEU BATCH 1")])
    assert matches == {((1,), (11,), "reference", 0), ((2,), (10,), "reference", 0)}
    assert findings == set()
    # a text naming no account: both batches 1 name both credits, one group whose sums agree
    matches, _, _ = run(batches, [credit(10, 5000, text="ADYEN BATCH 1"), credit(11, 7000, text="ADYEN BATCH 1")])
    assert matches == {((1, 2), (10, 11), "reference_group", 0)}


# --- negative payouts: bank debits (a debit's amount negative, as the store gives it) --------------------------


def debit(cid: int, size: int, **kw: object) -> Credit:
    return credit(cid, -size, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("payouts", "entries", "rules", "expected_matches", "expected_findings"), [
    # by reference, a debit's bank fee on top within the tolerance: fee = payouts - entries = -5000 - -5010
    ([payout(1, -5000, trace="T1")], [debit(10, 5010, e2e="T1")], MatchRules(bank_fee_tolerance=10),
     {((1,), (10,), "reference", 10)}, set()),
    # a debit smaller than the payout is not a fee: amount_differs
    ([payout(1, -5000, trace="T1")], [debit(10, 4990, e2e="T1")], MatchRules(bank_fee_tolerance=10),
     set(), {("amount_differs", 1, 10)}),
    # amount and date: the debit, never the credit of the same size
    ([payout(1, -3000)], [credit(10, 3000), debit(11, 3000)], MatchRules(),
     {((1,), (11,), "amount_date", 0)}, {("unexplained_credit", None, 10)}),
    # a reference on a credit does not make a negative payout's match
    ([payout(1, -3000, trace="T1")], [credit(10, 3000, e2e="T1")], MatchRules(),
     set(), {("bank_missing", 1, None), ("unexplained_credit", None, 10)}),
    # several negative payouts in one debit (N:1), a positive one beside them untouched by it
    ([payout(1, -1100), payout(2, -2200), payout(3, 3300)], [debit(10, 3300), credit(11, 3300)], MatchRules(),
     {((1, 2), (10,), "several_payouts", 0), ((3,), (11,), "amount_date", 0)}, set()),
    # one negative payout taken in two debits (1:N), a bank fee of 5 on top
    ([payout(1, -9000)], [debit(10, 4000), debit(11, 5005)], MatchRules(bank_fee_tolerance=5),
     {((1,), (10, 11), "split_credit", 5)}, set()),
    # a debit nothing explains is not an exception; a negative payout without a debit is bank_missing
    ([payout(1, -700)], [debit(10, 99_900)], MatchRules(), set(), {("bank_missing", 1, None)}),
])
def test_match__negative_payouts_pair_with_debits(payouts: list[Payout], entries: list[Credit], rules: MatchRules,
                                                  expected_matches: set[object],
                                                  expected_findings: set[object]) -> None:
    matches, findings, _ = run(payouts, entries, rules=rules, as_of=LATE)
    assert matches == expected_matches
    assert findings == expected_findings


def fee(payout_id: int, dispute: str, given: int, carried: int, *, other: int = 0) -> DisputeFee:
    return DisputeFee(payout_id=payout_id, payout_ref=f"po_{payout_id}", dispute_id=hash(dispute) % 1000,
                      psp_dispute_id=dispute, fee=given, currency="EUR", carried=carried, other_currency_lines=other)


@pytest.mark.parametrize(("fees", "found"), [
    ([fee(1, "dp_a", 1500, 1500)], []),  # the lines carry the fee the PSP gave
    ([fee(1, "dp_a", 1500, 2000)],
     [Finding(ExceptionKind.DISPUTE_FEE_DIFFERS, 1, None,
              "payout po_1: dispute dp_a's fee is 1500 EUR, its payout lines carry 2000 EUR (minor units)")]),
    ([fee(1, "dp_a", 0, 1500)],  # a won dispute's fee given back, its reinstatement line not paid out yet
     [Finding(ExceptionKind.DISPUTE_FEE_DIFFERS, 1, None,
              "payout po_1: dispute dp_a's fee is 0 EUR, its payout lines carry 1500 EUR (minor units)")]),
    ([fee(1, "dp_a", 1500, 2000, other=1)], []),  # a line in another currency: not comparable
    ([fee(2, "dp_a", 1500, 1000), fee(2, "dp_b", 1500, 1500), fee(2, "dp_c", 700, 0), fee(3, "dp_a", 1500, 1000)],
     [Finding(ExceptionKind.DISPUTE_FEE_DIFFERS, 2, None,
              "payout po_2: dispute dp_a's fee is 1500 EUR, its payout lines carry 1000 EUR (minor units); "
              "payout po_2: dispute dp_c's fee is 700 EUR, its payout lines carry 0 EUR (minor units)"),
      Finding(ExceptionKind.DISPUTE_FEE_DIFFERS, 3, None,
              "payout po_3: dispute dp_a's fee is 1500 EUR, its payout lines carry 1000 EUR (minor units)")]),
])
def test_dispute_fees__a_fee_its_lines_do_not_carry_is_one_finding_per_payout(fees: list[DisputeFee],
                                                                            found: list[Finding]) -> None:
    assert dispute_fees(fees) == found
