"""Redaction: the one place that knows what must never be stored or printed, and masks it.

``redact(text)`` masks, in any text a PSP, a driver or a person may have put a secret or card data into:

- card numbers: 13 to 19 digits, optionally grouped by spaces or dashes, that pass the Luhn check;
- card verification codes: a CVC/CVV/CVN/CID/security-code field followed by 3 or 4 digits;
- API keys: Stripe secret, restricted and publishable keys (``sk_/rk_/pk_`` + ``live_/test_``), webhook
  signing secrets (``whsec_…``), Adyen API keys (``AQE…``);
- credentials in context: ``Bearer``/``Basic`` tokens, ``user:password@`` in URLs, ``password=…``,
  ``api_key: …``, and quoted JSON fields such as ``"api_key": "…"`` or ``"authorization": "…"``.

``redact_value(obj)`` applies it to every string inside a JSON-like value (dict keys are kept; a value under a
key that names a secret or card field is masked whole); ``redact_json(text)`` to a JSON document's text;
``redact_row(params, keep=…)`` to the parameters of one row a store writes. recon applies these at its storage
boundary and at its log and output boundaries, so a card number in a PSP's error text, a webhook's reference or
an operator's note reaches neither the database nor any output. It is a last line of defence: adapters keep
keys in ``Secret`` and never quote them.

The storage boundary is each store's row builder (``redact_row``): every text or JSON value bound for a column
is redacted unless the store names it in ``keep``, a column that must hold exactly what it was given (a PSP's
own identifier, a key recon made); tests/integration/test_stored_text.py walks the schema and plants a card
number into the source of every text column.

A PSP's own identifiers (its payment reference, its refund, capture, dispute and webhook event ids) are kept
exactly by the stores and shown exactly by the output boundaries: ``identifier`` marks one as an ``Identifier``,
which the console's templates, its CSV export and the command line's tables show unmasked (one in ten of Adyen's
16-digit references passes the Luhn check), while every other text around it is still redacted.

recon's own identifiers made of hex digits (digests, the bank's fallback entry keys, idempotency keys) are
written by ``grouped``: groups of at most eight hex digits joined by dots. A plain digest holds a Luhn-valid
run of 13 or more digits now and then (SHA-256's first 32 hex digits: about one in a thousand), which any of
these boundaries would mask as a card number; a dot is no card separator (a space or a dash is: dashed groups,
as a UUID writes them, are not immune), so no run of a grouped identifier is long enough to be one
(docs/design.md, "recon's own identifiers").
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Collection, Mapping
from typing import Any

MASK = "***"
CARD_MASK = "[card]"
KEY_MASK = "[redacted]"

_CREDENTIALS = (
    (re.compile(r"(://[^:/@\s]+:)[^@\s]+@"), r"\1***@"),  # user:password@ in a URL
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+"), r"\1 ***"),
    (re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9*]+"), KEY_MASK),  # Stripe API keys
    (re.compile(r"\bwhsec_[A-Za-z0-9]+"), KEY_MASK),  # Stripe webhook signing secrets
    (re.compile(r"\bAQE[A-Za-z0-9+/=_.-]{16,}"), KEY_MASK),  # Adyen API keys
    # quoted fields first ("api_key": "…"), then bare ones (api_key=…, password: …)
    (re.compile(r"""(?i)(["']?\b(?:password|passwd|pwd|api[_-]?key|secret|token|authorization|client[_-]?secret)"""
                r"""["']?\s*[=:]\s*["'])[^"']+"""), r"\1***"),
    (re.compile(r"(?i)\b(password|passwd|pwd|api[_-]?key|secret|token)(\s*[=:]\s*)(?![\"'])[^\s\"',}&]+"),
     r"\1\2***"),
    # a card verification code next to its field name: cvc=123, "cvv": "1234", security code: 123
    (re.compile(r"""(?i)(["']?\b(?:cvc|cvv2?|cvn|cid|csc|security[ _-]?code)["']?\s*[=:]?\s*["']?)\d{3,4}\b"""),
     r"\1***"),
)
#: a run of 13 to 19 digits, one space or dash allowed between two, taken whole: no digit, nor a digit and a
#: separator, on either side (a longer grouped number is not a card); a dash after a word (``order-4242…``) is
#: no separator, and was once read as one, which let ``order-<card number>`` through
_CARD = re.compile(r"(?<!\d)(?<!\d[ -])(?:\d[ -]?){12,18}\d(?!\d)(?![ -]\d)")
#: JSON keys whose whole value is masked, whatever it looks like
_SECRET_KEYS = re.compile(r"(?i)^(?:password|passwd|pwd|api[_-]?key|secret|token|authorization|cvc|cvv2?|cvn|"
                          r"csc|card[_-]?number|pan|number|security[_-]?code|client[_-]?secret)$")


#: what every pattern above needs somewhere in the text: a URL's ``://``, a scheme, key prefix or field name
#: (case aside: it searches the text in lower case), or 13 digits with at most one space or dash between two. A
#: text without any (a PSP's reference, a timestamp) is returned as it is after this one search, a fraction of
#: what the ten patterns cost (docs/benchmarks.md, webhooks); it searches the lower-cased text because a
#: case-insensitive search was slower. Tests check that ``redact`` and ``_redact_all`` agree.
_MAYBE = re.compile(r"://|bearer|basic|[spr]k_|whsec_|aqe|passw|pwd|api[_-]?key|secret|token|authorization"
                    r"|cv[cvn]|cid|csc|security|\d(?:[ -]?\d){12}")
#: ``_MAYBE``'s question for an ASCII text, asked in two searches: its words on the lowered text, case-sensitive
#: (in ASCII, a letter matches a lower-case letter case-blind exactly when its lower case is that letter), every
#: branch starting with a literal, and its digits as [0-9] (what \d is in ASCII). The same answer (tests check
#: it), a tenth of the cost on a bank's 230-character remittance text: the engine skips to the characters a
#: branch can start with only when every branch starts with a literal and the search is case-sensitive.
_MAYBE_WORDS = re.compile(r"://|bearer|basic|sk_|pk_|rk_|whsec_|aqe|passw|pwd|api[_-]?key|secret|token"
                          r"|authorization|cv[cvn]|cid|csc|security")
_MAYBE_DIGITS = re.compile(r"[0-9](?:[ -]?[0-9]){12}")
#: the secret-named keys (``_SECRET_KEYS``) whose names ``_MAYBE`` does not hold, as a JSON document's keys:
#: ``{"pan": "x"}`` holds no pattern's text, but its value is masked whole all the same
_MAYBE_SECRET_KEY = re.compile(r'(?i)"(?:pan|(?:card[_-]?)?number)"\s*:')


def redact(text: str, keep: Collection[str | None] = ()) -> str:
    """``text`` with card numbers, card codes and credentials masked (see the module docstring).

    ``keep``: the PSP identifiers that the record this text belongs to stores exactly (its payment's
    psp_reference, its movement's PSP id, a conflict's two sides), shown as themselves where recon's own text
    names them (``kept_text``); every other card-like run is still masked, and so is a kept identifier that is
    only part of a longer token (``ref-<identifier>``)."""
    if not _maybe(text):
        return text
    kept = _kept(keep)
    return _redact_all(text, kept) if kept else _redact_all(text)


def _maybe(text: str) -> bool:
    """Whether ``text`` holds anything a pattern needs (``_MAYBE``; for an ASCII text, its two quicker halves)."""
    if text.isascii():
        return _MAYBE_WORDS.search(text.lower()) is not None or _MAYBE_DIGITS.search(text) is not None
    return _MAYBE.search(text.lower()) is not None


def _redact_all(text: str, kept: tuple[str, ...] = ()) -> str:
    for pattern, replacement in _CREDENTIALS:
        text = pattern.sub(replacement, text)
    if not kept:
        return _CARD.sub(_mask_card, text)
    spans = _kept_spans(text, kept)
    return _CARD.sub(lambda m: m.group(0) if _inside(m.span(), spans) else _mask_card(m), text)


def _kept(keep: Collection[str | None]) -> tuple[str, ...]:
    """The identifiers of ``keep`` worth keeping: single tokens (``_IDENTIFIER``) holding a card-like run; an
    empty or None one, or anything with a space, is no identifier and keeps nothing."""
    return tuple(sorted({k for k in keep if k and _IDENTIFIER.fullmatch(k) and _MAYBE_DIGITS.search(k)},
                        key=len, reverse=True))


#: a character that continues a token: a kept identifier next to one is part of a longer token, and masked
_TOKEN_CHAR = re.compile(r"[A-Za-z0-9_]")
#: joiners inside an identifier-like token (``order-…``, ``a.b``, ``x/y``): next to a kept identifier they
#: make it part of a longer token when a token character is on their far side (``ref-<id>``, not ``<id>: …``)
_JOINERS = "-./:+="


def _kept_spans(text: str, kept: tuple[str, ...]) -> list[tuple[int, int]]:
    """Where in ``text`` a kept identifier stands as a whole token (not inside a longer one)."""
    spans = []
    for k in kept:
        start = text.find(k)
        while start >= 0:
            end = start + len(k)
            if not (_continues(text, start - 1, start - 2) or _continues(text, end, end + 1)):
                spans.append((start, end))
            start = text.find(k, start + 1)
    return spans


def _continues(text: str, at: int, beyond: int) -> bool:
    """Whether the character at ``at`` (next to a kept identifier) makes it part of a longer token: a token
    character, or a joiner with a token character at ``beyond`` (the far side of it)."""
    if at < 0 or at >= len(text):
        return False
    if _TOKEN_CHAR.match(text[at]):
        return True
    return text[at] in _JOINERS and 0 <= beyond < len(text) and _TOKEN_CHAR.match(text[beyond]) is not None


def _inside(span: tuple[int, int], spans: list[tuple[int, int]]) -> bool:
    return any(start <= span[0] and span[1] <= end for start, end in spans)


def redact_optional(text: str | None) -> str | None:
    return None if text is None else redact(text)


def redact_value(value: Any) -> Any:
    """A JSON-like value with every string redacted and secret-named fields masked whole."""
    if isinstance(value, str):
        return value if value in _CLEAN else _redact_remembering(value)
    if isinstance(value, dict):
        return _redact_dict(value)
    if isinstance(value, list | tuple):
        return [redact_value(v) for v in value]
    return value


def _redact_dict(value: dict[Any, Any]) -> dict[Any, Any]:
    """``redact_value`` of a dict: a value under a secret-named (str) key masked whole unless it is None, "" or a
    boolean; every other value redacted as ``redact_value`` does, a string, a number or None without a call
    (a PSP's event body is mostly those: this loop took 40 % less than the comprehension that called
    ``redact_value`` for each, docs/benchmarks.md, issue 29). tests/unit/test_redact.py checks it against that
    definition on generated documents."""
    out = {}
    for k, v in value.items():
        # a key met before and not secret-named costs a set lookup (``_PLAIN_KEYS``), no call
        if k in _PLAIN_KEYS or not _secret_named(k) or v is None or v is True or v is False or v == "":
            kind = type(v)
            if kind is str:
                out[k] = v if v in _CLEAN else _redact_remembering(v)
            elif kind is int or kind is float or v is None or kind is bool:
                out[k] = v
            elif kind is dict:
                out[k] = _redact_dict(v)
            else:
                out[k] = redact_value(v)
        else:
            out[k] = MASK
    return out


def _secret_named(key: Any) -> bool:
    """Whether a dict's ``key`` names a secret (a str matching ``_SECRET_KEYS``); a str key that does not is
    remembered in ``_PLAIN_KEYS`` (bounded as ``_CLEAN`` is, and only when ``redact`` leaves it as it is: a key
    holding a card number is walked as before, never held), so the next document's same key skips this call."""
    if not isinstance(key, str):
        return False
    if _secret_key(key):
        return True
    if len(key) <= _CLEAN_CHARS and len(_PLAIN_KEYS) < _CLEAN_MAX and redact(key) == key:
        _PLAIN_KEYS.add(key)
    return False


#: the keys of recon's evidence (an event's details) whose values are a PSP's own identifiers, kept exactly as
#: the ``psp_reference`` columns are: Adyen's references are 16 digits, one in ten Luhn-valid, and a masked one
#: no longer says which payment the PSP meant (``conflict_details`` names both sides of a conflict by them)
EVIDENCE_IDENTIFIERS = frozenset({"psp_reference", "psp_reference_conflict"})


def redact_evidence(details: dict[str, Any] | None) -> dict[str, Any] | None:
    """An event's details at the storage boundary: ``redact_value`` of each, except the PSP's identifiers
    (``EVIDENCE_IDENTIFIERS``), kept exactly when they are text or texts (anything else is redacted); a top-level
    text naming one of those identifiers (a message: "the PSP reports <reference>: …") keeps it (``redact``'s
    ``keep``), every other card-like run in it masked."""
    if details is None:
        return None
    kept = _kept(evidence_identifiers(details))
    out = {}
    for k, v in details.items():  # redact_value's answer, a string, a number or None without a call (_redact_dict)
        kind = type(v)
        if k in EVIDENCE_IDENTIFIERS and _identifiers(v):
            out[k] = v
        elif kept and kind is str:  # recon's text naming the identifiers these details store exactly
            out[k] = v if not _maybe(v) else _redact_all(v, kept)
        elif kind is str:
            out[k] = v if v in _CLEAN else _redact_remembering(v)
        elif v is None or kind is int or kind is float or kind is bool:
            out[k] = v
        else:
            out[k] = redact_value(v)
    return out


def _identifiers(value: Any) -> bool:
    """Whether ``value`` is an identifier, a list of them or a dict of those (a conflict's two sides)."""
    if isinstance(value, str):
        return True
    if isinstance(value, list | tuple):
        return all(isinstance(v, str) for v in value)
    if isinstance(value, dict):
        return all(isinstance(v, str) or (isinstance(v, list | tuple) and all(isinstance(i, str) for i in v))
                   for v in value.values())
    return False


#: the fields that hold a PSP's own identifier (its payment reference, its ids of a refund, a capture or cancel,
#: a dispute, a webhook event): kept exactly by the stores, shown exactly by the output boundaries (``Identifier``)
PSP_IDENTIFIER_FIELDS = frozenset({"psp_reference", "psp_refund_id", "psp_modification_id", "psp_dispute_id",
                                   "event_id", "psp_id"})
#: what an identifier looks like: one token of at most 200 letters, digits and ``_ . : / + = -``, no space
_IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/+=-]{0,199}")


class Identifier(str):
    """A PSP's own identifier where an output shows it as such (a payment's PSP reference, a refund's PSP id, a
    dispute's id: ``PSP_IDENTIFIER_FIELDS``), made by ``identifier``. The output boundaries redact every text but
    this one: the console's templates (``finalize``), its CSV export and the command line's tables
    (``recon.render.output``) show it exactly, so a 16-digit Adyen reference that happens to pass the Luhn check
    (one in ten) reads as itself, not as ``[card]``, and can be looked up at the PSP. Escaping still applies (it
    is no markup), and it is still text for every other purpose."""

    __slots__ = ()


def identifier(value: str) -> Identifier:
    """``value``, a PSP's identifier, to be shown exactly (``Identifier``): a single token (``_IDENTIFIER``) is
    exempt from the card-number mask only (a key pattern is still masked: no PSP names its ids ``sk_live_…``);
    anything else (spaces, a sentence, 200+ characters) is no identifier and is redacted as every text is."""
    if _IDENTIFIER.fullmatch(value) is None:
        return Identifier(redact(value))
    for pattern, replacement in _CREDENTIALS:
        value = pattern.sub(replacement, value)
    return Identifier(value)


class KeptText(Identifier):
    """recon's own text about one record (a review reason, an event's line) redacted at its output boundary with
    that record's PSP identifiers kept (``kept_text``): an ``Identifier`` to every boundary, which shows it as
    it is, since it was redacted when made."""

    __slots__ = ()


def kept_text(text: str, keep: Collection[str | None]) -> KeptText:
    """``redact(text, keep)`` marked as redacted (``KeptText``): where a renderer knows both a text and the
    identifiers its record stores exactly (``keep``), a Luhn-valid Adyen reference it names reads as itself."""
    return KeptText(redact(text, keep))


def evidence_identifiers(details: Mapping[str, Any] | None) -> list[str]:
    """The PSP identifiers an event's details store exactly (``EVIDENCE_IDENTIFIERS``, as ``redact_evidence``
    keeps them): a reference, or a conflict's two sides."""
    found: list[str] = []
    for k in EVIDENCE_IDENTIFIERS:
        v = (details or {}).get(k)
        if v is None or not _identifiers(v):
            continue
        for item in (v.values() if isinstance(v, dict) else [v]):
            found.extend([item] if isinstance(item, str) else item)
    return found


def redact_json(text: str) -> str:
    """A JSON document's text with ``redact_value`` applied to what it holds; returned as it is when nothing in
    it could need masking (two searches: ``_maybe`` and the secret-named keys it does not cover). Those searches
    read the raw text, so a document with a backslash (a JSON escape: ``4\\u00324…`` is a card number's digits,
    ``"p\\u0061n"`` the key ``pan``) is always walked. A number is never masked: only strings and secret-named
    fields are."""
    if "\\" not in text and not _maybe(text) and _MAYBE_SECRET_KEY.search(text) is None:
        return text
    return json.dumps(redact_value(json.loads(text)), separators=(",", ":"))


def redact_row(row: Mapping[str, Any], *, keep: Collection[str] = ()) -> dict[str, Any]:
    """The parameters of one row a store writes, at the storage boundary: every string, dict and list through
    ``redact_value`` (short clean strings are remembered, so a status or a PSP name costs a set lookup), except
    the names in ``keep``; numbers, booleans, times and None as they are."""
    out = {}
    for k, v in row.items():  # a loop taking a plain string or number without a call: every row a store writes
        kind = type(v)
        if kind is str:
            out[k] = v if k in keep or v in _CLEAN else _redact_remembering(v)
        elif v is None or kind is int or kind is bool or k in keep or not isinstance(v, str | dict | list):
            out[k] = v
        else:
            out[k] = redact_value(v)
    return out


#: Short strings that ``redact`` leaves unchanged, remembered: a PSP's documents and our audit details repeat
#: most of their strings (statuses, object types, currencies, event names), so a Stripe event's body or a
#: webhook's evidence costs a tenth of the regular expressions. Only clean strings are kept, so no secret or
#: card number is held beyond its own use; at most _CLEAN_MAX of at most _CLEAN_CHARS characters (~10 MB).
_CLEAN: set[str] = set()
#: dict keys ``_secret_named`` found not secret-named, remembered the same way (a PSP's documents repeat their
#: keys: a Stripe event body's 56 values cost 10 us of the walk with a cached call per key, docs/benchmarks.md)
_PLAIN_KEYS: set[str] = set()
_CLEAN_MAX = 32_768
_CLEAN_CHARS = 256


def _redact_remembering(text: str) -> str:
    out = redact(text)
    if out == text and len(text) <= _CLEAN_CHARS and len(_CLEAN) < _CLEAN_MAX:
        _CLEAN.add(text)
    return out


@functools.lru_cache(maxsize=1_024)
def _secret_key(key: str) -> bool:
    return _SECRET_KEYS.match(key) is not None


#: the most hex digits ``grouped`` writes without a dot: under the 13 digits a card number has at least
GROUP = 8


def grouped(hex_digits: str) -> str:
    """``hex_digits`` in groups of ``GROUP`` joined by dots: the form of every identifier recon makes of hex
    digits, which ``redact`` leaves as it is (see the module docstring)."""
    return ".".join(hex_digits[i:i + GROUP] for i in range(0, len(hex_digits), GROUP))


def has_card_number(text: str) -> bool:
    """Whether ``text`` holds what ``redact`` masks as a card number (13 to 19 digits passing the Luhn check)."""
    return any(_mask_card(m) == CARD_MASK for m in _CARD.finditer(text))


def is_luhn_valid(digits: str) -> bool:
    """The Luhn checksum of a digit string (the card-number test)."""
    numbers = [int(c) for c in digits]
    checksum = sum(numbers[-1::-2]) + sum(sum(divmod(2 * d, 10)) for d in numbers[-2::-2])
    return checksum % 10 == 0


def _mask_card(match: re.Match[str]) -> str:
    digits = "".join(c for c in match.group(0) if c.isdigit())
    return CARD_MASK if 13 <= len(digits) <= 19 and is_luhn_valid(digits) else match.group(0)
