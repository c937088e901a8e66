"""Evidence as readable facts: a payment event's details, a review reason and a sweep's summary in words and
label/value pairs, amounts in major units with their currency, for the console and ``recon payments show``.

Nothing here reads the database; every function takes what a store returned. The JSON stays available (``recon
payments show --json``); these are how people read it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from recon.payments.money import MINOR_UNITS, format_amount
from recon.redact import EVIDENCE_IDENTIFIERS, evidence_identifiers, identifier, kept_text

#: "ours 61570 EUR, PSP 55413": the amounts a review reason writes in minor units
_REASON_AMOUNTS = re.compile(r"ours (\d+) ([A-Z]{3}), PSP (\d+)(?: ([A-Z]{3}))?")
#: event details shown as their own facts, with their labels, in this order
_LABELS = (("psp_outcome", "the PSP said"), ("psp_status", "its status"), ("psp_reference", "PSP reference"),
           ("reason", "reason"), ("error", "error"), ("webhook_event", "webhook event"), ("news", "news"))
#: a sweep summary's counts, with their labels, in this order
_SWEEP_COUNTS = (("checked", "checked"), ("healed_succeeded", "healed to succeeded"),
                 ("healed_failed", "healed to failed"), ("still_pending", "still pending"),
                 ("needs_review", "sent to review"), ("errors", "errors"), ("dead", "dead"),
                 ("psp_calls", "PSP calls"))


def money(amount: Any, currency: Any) -> str | None:
    """Minor units as people read them (grouped), or None when the pair is not an amount and a currency."""
    if isinstance(amount, bool) or not isinstance(amount, int) or not isinstance(currency, str) or \
            currency.upper() not in MINOR_UNITS:
        return None
    return format_amount(amount, currency, grouped=True)


def readable_reason(reason: str | None) -> str:
    """A review reason with its minor-unit amounts in major units: "amount_mismatch: ours 61570 EUR, PSP 55413"
    -> "amount mismatch: ours 615.70 EUR, PSP 554.13 EUR"."""
    if not reason:
        return ""

    def major(m: re.Match[str]) -> str:
        ours, currency, theirs, theirs_currency = m.group(1), m.group(2), m.group(3), m.group(4) or m.group(2)
        if currency not in MINOR_UNITS or theirs_currency not in MINOR_UNITS:
            return m.group(0)
        return (f"ours {format_amount(int(ours), currency, grouped=True)}, PSP "
                f"{format_amount(int(theirs), theirs_currency, grouped=True)}")

    head, sep, rest = reason.partition(":")
    text = _REASON_AMOUNTS.sub(major, rest) if sep else _REASON_AMOUNTS.sub(major, reason)
    return f"{head.replace('_', ' ')}:{text}" if sep else text


def resolution_sentence(to_status: str, details: Mapping[str, Any]) -> str:
    """A manual resolution as one sentence: who, what, why, both amounts, the PSP's answer, an override, the
    difference: as ``recon payments show`` prints it."""
    ours, psp = details.get("ours") or {}, details.get("psp") or {}
    text = f"resolved {to_status} by {details.get('operator')}: {details.get('reason', '')}"
    ours_text, psp_text = money(ours.get("amount"), ours.get("currency")), \
        money(psp.get("amount"), str(psp.get("currency") or "").upper())
    if ours_text and psp_text:
        text += f" (ours {ours_text}, PSP {psp_text})"
    if details.get("psp_outcome"):
        text += f"; PSP said {details.get('psp_status') or details.get('psp_outcome')}"
    else:
        text += f"; PSP not asked ({details.get('psp_not_asked')})"
    if details.get("override"):
        text += "; OVERRIDE"
    difference = details.get("difference")
    if isinstance(difference, Mapping) and difference.get("sentence"):
        text += f"; {difference['sentence']}"
    bulk = details.get("bulk")
    if isinstance(bulk, Mapping):
        text += f"; one of {bulk.get('size')} resolved together"
    return text


def event_facts(details: Mapping[str, Any] | None, *, keep: tuple[str | None, ...] = ()) -> list[tuple[str, str]]:
    """An event's details as label/value facts: the PSP's answer and amount first, then every other field
    by its name (nested values as ``key: value`` lists), never a JSON blob. A plain fact is redacted here,
    keeping as they are the PSP identifiers these details store exactly and ``keep`` (its payment's PSP
    reference): a message or a conflict's two sides naming a Luhn-valid Adyen reference reads as itself."""
    if not details:
        return []
    d = dict(details)
    keep = (*keep, *evidence_identifiers(d))
    facts: list[tuple[str, str]] = []
    amount = money(d.get("psp_amount"), str(d.get("psp_currency") or "").upper())
    for key, label in _LABELS:
        if d.get(key) not in (None, ""):
            facts.append((label, _identifier_or_plain(key, d[key], keep)))
    if amount:
        facts.append(("the PSP's amount", amount))
    shown = {k for k, _ in _LABELS} | {"psp_amount", "psp_currency"}
    for key in sorted(k for k in d if k not in shown):
        if d[key] not in (None, "", [], {}):
            facts.append((key.replace("_", " "), _identifier_or_plain(key, d[key], keep)))
    return facts


def sweep_facts(summary: Mapping[str, Any] | None) -> str:
    """A sweep's summary in one line: "checked 120, healed to succeeded 80, …, money at risk 1,234.00 EUR"."""
    if not summary:
        return ""
    parts = [f"{label} {summary[key]}" for key, label in _SWEEP_COUNTS if summary.get(key) not in (None, 0)]
    at_risk = summary.get("money_at_risk")
    if isinstance(at_risk, list):
        sums: dict[str, int] = {}
        for row in at_risk:
            if isinstance(row, Mapping) and isinstance(row.get("amount"), int) and isinstance(row.get("currency"),
                                                                                               str):
                sums[row["currency"]] = sums.get(row["currency"], 0) + row["amount"]
        amounts = [m for m in (money(a, c) for c, a in sorted(sums.items())) if m]
        if amounts:
            parts.append("money at risk " + ", ".join(amounts))
    return ", ".join(parts) or "nothing to do"


def options_facts(options: Mapping[str, Any] | None) -> str:
    """A sweep's options as ``name value`` pairs."""
    if not options:
        return ""
    return ", ".join(f"{k.replace('_', ' ')} {_plain(v)}" for k, v in sorted(options.items()) if v not in (None, ""))


def _identifier_or_plain(key: str, value: Any, keep: tuple[str | None, ...]) -> str:
    """A fact's value: a PSP's identifier (``EVIDENCE_IDENTIFIERS``, kept exactly by the stores) as an
    ``Identifier``, which the outputs show exactly; anything else as plain text redacted but for ``keep``
    (``recon.redact.kept_text``)."""
    if key in EVIDENCE_IDENTIFIERS and isinstance(value, str):
        return identifier(value)
    return kept_text(_plain(value), keep)


def _plain(value: Any) -> str:
    if isinstance(value, Mapping):
        return "; ".join(f"{k.replace('_', ' ')}: {_plain(v)}" for k, v in sorted(value.items()) if v is not None)
    if isinstance(value, list | tuple):
        return ", ".join(_plain(v) for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)
