"""Matching payouts to bank credits: pure functions, one decision room (docs/design.md, "Matching payouts").

``decide(payouts, credits, rules=…, stored=…, as_of=…, since=…, until=…, exclusive_accounts=…)`` returns the
new matches and the findings (exceptions) of one close, in this order; each step only sees what the steps
before it left:

1. **Without the bank**: a payout whose lines do not add up to its amount is ``lines_differ`` (it may still be
   matched); a ``failed`` or ``canceled`` payout is ``payout_failed`` and is not looked for in the bank.
2. **Reference**: a credit whose end-to-end id or bank reference *is* the payout's trace reference (Stripe's
   ``trace_id``, Adyen's batch number), or whose remittance text carries it as a whole word (and, when the text
   names a merchant account of the close, names the payout's: Adyen numbers batches per account). Payouts and credits
   linked by references form groups (1:1, N:1, 1:N); a group whose sums agree (the credits' sum at most
   ``bank_fee_tolerance`` below the payouts') is matched, any other is ``amount_differs`` naming both sides.
3. **Amount and date**: same currency, the credit booked (or valued) within ``window_days`` of the expected
   arrival, its amount at most ``bank_fee_tolerance`` below the payout's. A payout with exactly one candidate
   credit that has no other candidate payout is matched; two candidates either way are ``ambiguous``, naming
   all of them: never guessed.
4. **Several payouts in one credit (N:1)**, then **one payout split over credits (1:N)**: among what is left in
   the window, sets of 2 to ``max_group`` whose sum is the other side's exactly (less a bank fee in tolerance).
   One such set is a match; two are ``ambiguous``. A side with more than ``max_candidates`` candidates is not
   searched (it stays unexplained, and says so): the search is bounded.
5. **What is left**: a payout whose window has passed (``arrival + window_days < as_of``) is ``bank_missing``;
   one still inside it is ``awaiting_bank`` (no exception yet). A credit booked in ``[since, until)`` on an
   account that only this PSP pays into, explained by nothing, is ``unexplained_credit``.

``dispute_fees(fees)`` is the close's other finding about lines: a dispute whose fee, as the PSP gave it
(``disputes.fee``: Stripe's dispute balance transactions' fees, Adyen's Chargeback row's commission), is not what
the payout lines linked to it carry (the sum of their fees in its currency, over every stored payout: a won
dispute's reinstatement line may give a fee back later) is ``dispute_fee_differs`` on each payout of the close
that has a line of it, one finding per payout naming every such dispute. A dispute with a line in another
currency is not compared (the fees are not in one unit), nor one whose fee the PSP did not give.

**Signs.** A positive payout reaches the bank as a credit; a negative one (Stripe's payout of a negative
balance, an Adyen batch that owes) is taken from it as a debit. The bank entries come signed (``Credit.amount``:
a debit negative) and each rule pairs only payouts and entries of one sign, with the same arithmetic: a bank fee
is ``sum(payouts) - sum(entries)`` in both cases (a bank keeping 1.00 of a credit of 50.00 books 49.00; taking
1.00 more with a debit of 50.00 books -51.00). A debit explained by nothing is not an exception: an account's
other outgoings are not the close's business. A payout of zero needs no bank movement.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from itertools import combinations

from recon.payout_rows import Credit, DisputeFee, ExceptionKind, Finding, Match, Payout, PayoutStatus

#: bounds of the rules (config ``[close]``)
WINDOW_DAYS_MAX = 31
TOLERANCE_MAX = 100_000  #: minor units: a bank fee above 1,000.00 is an exception, never a tolerance
GROUP_MAX = 6
CANDIDATES_MAX = 40
_FAILED = (PayoutStatus.FAILED, PayoutStatus.CANCELED)


@dataclass(frozen=True, slots=True)
class MatchRules:
    window_days: int = 3  #: ± days around the expected arrival
    bank_fee_tolerance: int = 0  #: minor units a bank may keep from a credit
    max_group: int = 4  #: the most payouts in one credit (N:1) or credits of one payout (1:N)
    max_candidates: int = 24  #: the most candidates a group search looks through

    def validate(self, where: str) -> None:
        checks = (("window_days", self.window_days, 0, WINDOW_DAYS_MAX),
                  ("bank_fee_tolerance", self.bank_fee_tolerance, 0, TOLERANCE_MAX),
                  ("max_group", self.max_group, 1, GROUP_MAX),
                  ("max_candidates", self.max_candidates, 2, CANDIDATES_MAX))
        for name, value, low, high in checks:
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{where}.{name}: must be an integer from {low} to {high}")


@dataclass
class Decision:
    matches: list[Match] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    #: payouts inside their window with no credit yet: not an exception, not explained either
    awaiting: list[int] = field(default_factory=list)


def decide(payouts: Sequence[Payout], credits: Sequence[Credit], *, rules: MatchRules, stored: Iterable[Match],
           as_of: date, since: date, until: date, exclusive_accounts: Collection[str]) -> Decision:
    """The close's decision (the module docstring). ``stored``: the matches made before, kept as they are;
    ``credits``: those of the PSP's accounts booked in ``[since - window, until + window)``."""
    out = Decision()
    taken_payouts = {p for m in stored for p in m.payout_ids}
    taken_credits = {c for m in stored for c in m.entry_ids} | {c.id for c in credits if c.payout_id is not None}
    for p in payouts:
        if p.line_count and not p.lines_add_up:
            out.findings.append(Finding(ExceptionKind.LINES_DIFFER, p.id, None,
                                        f"payout {p.payout_ref}: its lines net {p.lines_net} {p.currency}, the "
                                        f"payout is {p.amount} {p.currency} (minor units)"))
        if p.status in _FAILED:
            out.findings.append(Finding(ExceptionKind.PAYOUT_FAILED, p.id, None,
                                        f"payout {p.payout_ref} is {p.status.value} at the PSP"))
    open_p = {p.id: p for p in payouts if p.id not in taken_payouts and p.status not in _FAILED and p.amount != 0}
    open_c = {c.id: c for c in credits if c.id not in taken_credits}
    _by_reference(open_p, open_c, rules, out)
    _by_amount_and_date(open_p, open_c, rules, out)
    _groups(open_p, open_c, rules, out, several_payouts=True)
    _groups(open_p, open_c, rules, out, several_payouts=False)
    window = timedelta(days=rules.window_days)
    for p in sorted(open_p.values(), key=lambda x: x.id):
        if p.arrival_date + window < as_of:
            out.findings.append(Finding(ExceptionKind.BANK_MISSING, p.id, None,
                                        f"payout {p.payout_ref} of {p.amount} {p.currency} (minor units), expected "
                                        f"{p.arrival_date} ±{rules.window_days} day(s): no bank "
                                        f"{'credit' if p.amount > 0 else 'debit'} explains it"))
        else:
            out.awaiting.append(p.id)
    for c in sorted(open_c.values(), key=lambda x: x.id):
        if c.amount > 0 and c.account in exclusive_accounts and since <= c.booking_date < until:
            out.findings.append(Finding(ExceptionKind.UNEXPLAINED_CREDIT, None, c.id,
                                        f"credit {c.id} of {c.amount} {c.currency} (minor units) booked "
                                        f"{c.booking_date} on {c.account}: no payout explains it"))
    return out


def dispute_fees(fees: Iterable[DisputeFee]) -> list[Finding]:
    """``dispute_fee_differs`` findings (the module docstring): one per payout, naming each dispute whose fee its
    lines do not carry, in the order given."""
    differing: dict[int, list[str]] = defaultdict(list)
    for f in fees:
        if f.other_currency_lines == 0 and f.carried != f.fee:
            differing[f.payout_id].append(
                f"payout {f.payout_ref}: dispute {f.psp_dispute_id}'s fee is {f.fee} {f.currency}, its payout "
                f"lines carry {f.carried} {f.currency} (minor units)")
    return [Finding(ExceptionKind.DISPUTE_FEE_DIFFERS, payout_id, None, "; ".join(details))
            for payout_id, details in differing.items()]


def names_reference(credit: Credit, ref: str) -> bool:
    """Whether the credit carries ``ref``: its end-to-end id or bank reference is it, or its remittance text has
    it as a whole word (batch ``12`` is not in ``123``)."""
    if ref in (credit.end_to_end_id, credit.bank_reference):
        return True
    return bool(credit.remittance) and re.search(rf"(?<![0-9A-Za-z]){re.escape(ref)}(?![0-9A-Za-z])",
                                                 credit.remittance or "") is not None


def _by_reference(open_p: dict[int, Payout], open_c: dict[int, Credit], rules: MatchRules, out: Decision) -> None:
    index = _reference_index(open_c.values())
    accounts = {p.merchant_account for p in open_p.values() if p.merchant_account}
    links: dict[int, set[int]] = {p.id: {c.id for c in _referenced(index, p.trace_ref)
                                         if c.currency == p.currency and _same_sign(p, c)
                                         and _same_account(p, c, accounts)}
                                  for p in open_p.values() if p.trace_ref is not None}
    for payout_ids, credit_ids in _components(links):
        ps, cs = [open_p[i] for i in payout_ids], [open_c[i] for i in credit_ids]
        fee = sum(p.amount for p in ps) - sum(c.amount for c in cs)
        if 0 <= fee <= rules.bank_fee_tolerance:
            rule = "reference" if len(ps) == len(cs) == 1 else "reference_group"
            out.matches.append(Match(tuple(payout_ids), tuple(credit_ids), rule=rule, bank_fee=fee))
        else:
            for p in ps:
                out.findings.append(Finding(ExceptionKind.AMOUNT_DIFFERS, p.id, cs[0].id,
                                            f"payout {p.payout_ref}: its reference {p.trace_ref} is on credit(s) "
                                            f"{_credit_list(cs)}; payouts {sum(q.amount for q in ps)}, credits "
                                            f"{sum(c.amount for c in cs)} {p.currency} (minor units)"))
        _take(open_p, open_c, payout_ids, credit_ids)


_WORD = re.compile(r"[0-9A-Za-z]+")


def _reference_index(credits: Iterable[Credit]) -> dict[str, list[Credit]]:
    """Credits by each word that could start a reference they carry (end-to-end id, bank reference, the
    remittance's words): a payout's reference looks up candidates instead of reading every credit."""
    index: dict[str, list[Credit]] = defaultdict(list)
    for c in credits:
        keys = {c.end_to_end_id, c.bank_reference, *_WORD.findall(c.remittance or "")}
        for key in keys:
            if key:
                index[key].append(c)
    return index


def _same_account(p: Payout, c: Credit, accounts: set[str]) -> bool:
    """A reference numbered per merchant account (Adyen's batch numbers start at 1 in each) names the payout's
    batch only where the remittance names no other account: a text naming some merchant account of the close
    must name the payout's. A reference the credit carries as its end-to-end id or bank reference stands alone."""
    if c.end_to_end_id == p.trace_ref or c.bank_reference == p.trace_ref or not c.remittance:
        return True
    named = {a for a in accounts if names_reference(Credit(0, "", 0, "", c.booking_date, None, None, None,
                                                          c.remittance), a)}
    return not named or p.merchant_account in named


def _referenced(index: dict[str, list[Credit]], ref: str) -> list[Credit]:
    """The credits that carry ``ref`` (``names_reference``), found through the index: a whole-word occurrence
    of ``ref`` in a remittance starts with ``ref``'s first word, which is then one of the remittance's words."""
    first = _WORD.search(ref)
    found = {c.id: c for key in {ref, first[0] if first else ref} for c in index.get(key, ())}
    return [c for c in found.values() if names_reference(c, ref)]


def _components(links: dict[int, set[int]]) -> list[tuple[list[int], list[int]]]:
    """The connected groups of payouts and the credits their references name (payouts without any left out)."""
    by_credit: dict[int, set[int]] = defaultdict(set)
    for p, cs in links.items():
        for c in cs:
            by_credit[c].add(p)
    seen: set[int] = set()
    groups = []
    for start in sorted(p for p, cs in links.items() if cs):
        if start in seen:
            continue
        ps, cs, todo = {start}, set(), [start]
        while todo:
            for c in links[todo.pop()]:
                if c not in cs:
                    cs.add(c)
                    todo += [p for p in by_credit[c] if p not in ps]
                    ps |= by_credit[c]
        seen |= ps
        groups.append((sorted(ps), sorted(cs)))
    return groups


def _same_sign(p: Payout, c: Credit) -> bool:
    """A positive payout is a credit, a negative one a debit (the module docstring, "Signs")."""
    return (p.amount > 0) == (c.amount > 0)


def _near(p: Payout, c: Credit, rules: MatchRules) -> bool:
    window = timedelta(days=rules.window_days)
    days = [c.booking_date] + ([c.value_date] if c.value_date else [])
    return c.currency == p.currency and _same_sign(p, c) and any(abs(d - p.arrival_date) <= window for d in days)


class _Days:
    """Payouts or bank entries by (currency, sign) and day, so that what is near a day is a few look-ups, not a
    scan."""

    def __init__(self, items: Iterable[tuple[tuple[str, bool], Iterable[date], int]]) -> None:
        self.by_day: dict[tuple[tuple[str, bool], date], list[int]] = defaultdict(list)
        for key, days, item_id in items:
            for day in set(days):
                self.by_day[(key, day)].append(item_id)

    def near(self, key: tuple[str, bool], days: Iterable[date], window_days: int) -> set[int]:
        """The ids of ``key`` (currency, positive) on a day within ``window_days`` of one of ``days``."""
        found: set[int] = set()
        for day in days:
            for n in range(-window_days, window_days + 1):
                found.update(self.by_day.get((key, day + timedelta(days=n)), ()))
        return found


def _credit_days(c: Credit) -> list[date]:
    return [c.booking_date] + ([c.value_date] if c.value_date else [])


def _by_amount_and_date(open_p: dict[int, Payout], open_c: dict[int, Credit], rules: MatchRules,
                        out: Decision) -> None:
    by_amount: dict[tuple[str, int], list[Credit]] = defaultdict(list)
    for c in open_c.values():
        by_amount[(c.currency, c.amount)].append(c)
    amounts: dict[str, list[int]] = defaultdict(list)
    for currency, amount in sorted(by_amount):
        amounts[currency].append(amount)
    cands: dict[int, set[int]] = {}
    for p in open_p.values():
        row = amounts.get(p.currency, [])
        low, high = bisect_left(row, p.amount - rules.bank_fee_tolerance), bisect_right(row, p.amount)
        cands[p.id] = {c.id for amount in row[low:high] for c in by_amount[(p.currency, amount)] if _near(p, c, rules)}
    for payout_ids, credit_ids in _components(cands):
        if len(payout_ids) == len(credit_ids) == 1:
            payout, credit = open_p[payout_ids[0]], open_c[credit_ids[0]]
            out.matches.append(Match((payout.id,), (credit.id,), rule="amount_date",
                                     bank_fee=payout.amount - credit.amount))
        else:
            _ambiguous([open_p[i] for i in payout_ids], [open_c[i] for i in credit_ids], "amount and date", out)
        _take(open_p, open_c, payout_ids, credit_ids)


def _groups(open_p: dict[int, Payout], open_c: dict[int, Credit], rules: MatchRules, out: Decision, *,
            several_payouts: bool) -> None:
    """N:1 (``several_payouts``: a credit whose amount is the sum of several payouts) or 1:N."""
    if rules.max_group < 2 or not open_p or not open_c:
        return
    # by sign too: a credit's candidates are positive payouts, a debit's negative ones (and the other way)
    payouts = _Days(((p.currency, p.amount > 0), [p.arrival_date], p.id) for p in open_p.values())
    credits = _Days(((c.currency, c.amount > 0), _credit_days(c), c.id) for c in open_c.values())
    for one_id in sorted(open_c if several_payouts else open_p):
        if several_payouts and one_id in open_c:
            credit = open_c[one_id]
            sign = 1 if credit.amount > 0 else -1
            near = payouts.near((credit.currency, sign > 0), _credit_days(credit), rules.window_days)
            pool = {i: sign * open_p[i].amount for i in near
                    if i in open_p and sign * open_p[i].amount < sign * credit.amount}
            target = sign * credit.amount
        elif not several_payouts and one_id in open_p:
            payout = open_p[one_id]
            sign = 1 if payout.amount > 0 else -1
            near = credits.near((payout.currency, sign > 0), [payout.arrival_date], rules.window_days)
            pool = {i: sign * open_c[i].amount for i in near
                    if i in open_c and sign * open_c[i].amount < sign * payout.amount}
            target = sign * payout.amount
        else:
            continue
        if not 2 <= len(pool) <= rules.max_candidates:
            continue
        # the pool and the target as sizes (sign * amount): a debit's bank fee makes it larger, not smaller
        found = _sums(pool, target, rules, several_payouts=several_payouts, sign=sign)
        if not found:
            continue
        members = sorted({i for ids in found for i in ids})
        many, single = (list(found[0]), [one_id]) if several_payouts else ([one_id], list(found[0]))
        if len(found) == 1:
            total = sum(pool[i] for i in found[0])
            rule = "several_payouts" if several_payouts else "split_credit"
            fee = sign * (total - target if several_payouts else target - total)
            out.matches.append(Match(tuple(many), tuple(single), rule=rule, bank_fee=fee))
            _take(open_p, open_c, many, single)
            continue
        ps, cs = (members, [one_id]) if several_payouts else ([one_id], members)
        what = "several payouts in one credit" if several_payouts else "one payout split over credits"
        _ambiguous([open_p[i] for i in ps], [open_c[i] for i in cs], what, out)
        _take(open_p, open_c, ps, cs)


def _sums(pool: dict[int, int], target: int, rules: MatchRules, *, several_payouts: bool,
          sign: int = 1) -> list[tuple[int, ...]]:
    """The sets of 2 to ``max_group`` ids of ``pool`` (id -> size: amount times ``sign``) whose sum meets
    ``target`` (a size too), less a bank fee in tolerance (``sum(payouts) - sum(entries)``, signed: the module
    docstring). At most two are looked for: two are ambiguous."""
    found: list[tuple[int, ...]] = []
    for size in range(2, rules.max_group + 1):
        for combo in combinations(sorted(pool), size):
            total = sum(pool[i] for i in combo)
            fee = sign * (total - target if several_payouts else target - total)
            if 0 <= fee <= rules.bank_fee_tolerance:
                found.append(combo)
                if len(found) == 2:
                    return found
    return found


def _ambiguous(ps: Sequence[Payout], cs: Sequence[Credit], rule: str, out: Decision) -> None:
    for p in ps:
        out.findings.append(Finding(ExceptionKind.AMBIGUOUS, p.id, cs[0].id if len(cs) == 1 else None,
                                    f"payout {p.payout_ref}: by {rule}, candidates: payouts "
                                    f"{', '.join(q.payout_ref for q in ps)}; credits {_credit_list(cs)}; "
                                    "not guessed"))
    if len(ps) == 1 and len(cs) > 1:
        return
    for c in cs if len(ps) > 1 else ():
        out.findings.append(Finding(ExceptionKind.AMBIGUOUS, None, c.id,
                                    f"credit {c.id}: by {rule}, candidates: payouts "
                                    f"{', '.join(q.payout_ref for q in ps)}; not guessed"))


def _credit_list(cs: Sequence[Credit]) -> str:
    return ", ".join(f"{c.id} ({c.amount} {c.currency}, {c.booking_date}, ref {c.bank_reference or '-'})" for c in cs)


def _take(open_p: dict[int, Payout], open_c: dict[int, Credit], payout_ids: Iterable[int],
          credit_ids: Iterable[int]) -> None:
    for i in payout_ids:
        open_p.pop(i, None)
    for i in credit_ids:
        open_c.pop(i, None)
