"""Redaction: the one place that knows what must never be stored or printed, and masks it.

``redact(text)`` masks, in any text a PSP, a driver or a person may have put a secret or card data into:

- card numbers: 13 to 19 digits, optionally grouped by spaces or dashes, that pass the Luhn check;
- card verification codes: a CVC/CVV/CVN/CID/security-code field followed by 3 or 4 digits;
- API keys: Stripe secret, restricted and publishable keys (``sk_/rk_/pk_`` + ``live_/test_``), webhook
  signing secrets (``whsec_…``), Adyen API keys (``AQE…``);
- credentials in context: ``Bearer``/``Basic`` tokens, ``user:password@`` in URLs, ``password=…``,
  ``api_key: …``, and quoted JSON fields such as ``"api_key": "…"`` or ``"authorization": "…"``.

``redact_value(obj)`` applies it to every string inside a JSON-like value (dict keys are kept; a value under a
key that names a secret or card field is masked whole). recon applies these at its storage boundary (job
errors and attempt history, payment reasons and audit details, PSP control reasons) and at its log
boundary (every log line), so a card number in a PSP's error text reaches neither the database nor any
output. It is a last line of defence: adapters keep keys in ``Secret`` and never quote them.
"""

from __future__ import annotations

import functools
import re
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
_CARD = re.compile(r"(?<![\d-])(?:\d[ -]?){12,18}\d(?![\d-])")
#: JSON keys whose whole value is masked, whatever it looks like
_SECRET_KEYS = re.compile(r"(?i)^(?:password|passwd|pwd|api[_-]?key|secret|token|authorization|cvc|cvv2?|cvn|"
                          r"csc|card[_-]?number|pan|number|security[_-]?code|client[_-]?secret)$")


#: what every pattern above needs somewhere in the text: a URL's ``://``, a scheme, key prefix or field name
#: (case aside), or 13 digits with at most one space or dash between two. A text without any is returned as
#: it is after this one search (3-5 µs for a PSP's reference or a timestamp, against 10-13 µs for the ten
#: patterns); tests check that ``redact`` and ``_redact_all`` agree.
_MAYBE = re.compile(r"(?i)://|bearer|basic|[spr]k_|whsec_|aqe|passw|pwd|api[_-]?key|secret|token|authorization"
                    r"|cv[cvn]|cid|csc|security|\d(?:[ -]?\d){12}")


def redact(text: str) -> str:
    """``text`` with card numbers, card codes and credentials masked (see the module docstring)."""
    return _redact_all(text) if _MAYBE.search(text) else text


def _redact_all(text: str) -> str:
    for pattern, replacement in _CREDENTIALS:
        text = pattern.sub(replacement, text)
    return _CARD.sub(_mask_card, text)


def redact_optional(text: str | None) -> str | None:
    return None if text is None else redact(text)


def redact_value(value: Any) -> Any:
    """A JSON-like value with every string redacted and secret-named fields masked whole."""
    if isinstance(value, str):
        return value if value in _CLEAN else _redact_remembering(value)
    if isinstance(value, dict):
        return {k: (MASK if isinstance(k, str) and v not in (None, "") and not isinstance(v, bool)
                    and _secret_key(k) else redact_value(v)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(v) for v in value]
    return value


#: Short strings that ``redact`` leaves unchanged, remembered: a PSP's documents and our audit details repeat
#: most of their strings (statuses, object types, currencies, event names), so a Stripe event's body or a
#: webhook's evidence costs a tenth of the regular expressions. Only clean strings are kept, so no secret or
#: card number is held beyond its own use; at most _CLEAN_MAX of at most _CLEAN_CHARS characters (~10 MB).
_CLEAN: set[str] = set()
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


def is_luhn_valid(digits: str) -> bool:
    """The Luhn checksum of a digit string (the card-number test)."""
    numbers = [int(c) for c in digits]
    checksum = sum(numbers[-1::-2]) + sum(sum(divmod(2 * d, 10)) for d in numbers[-2::-2])
    return checksum % 10 == 0


def _mask_card(match: re.Match[str]) -> str:
    digits = "".join(c for c in match.group(0) if c.isdigit())
    return CARD_MASK if 13 <= len(digits) <= 19 and is_luhn_valid(digits) else match.group(0)
