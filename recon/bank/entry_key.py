"""What makes an entry the same entry in two statements: its key, unique per account (``bank_entries``).

- The bank's own reference when it sends one (camt ``AcctSvcrRef``, MT940 ``:61:`` after ``//``, BAI2 type-16
  bank reference): ``ref:<reference>``. The bank gives each booking one reference and repeats it in every
  statement that shows the booking, whatever the statement's period.
- Otherwise the fallback ``fb:<digest>:<n>``: ``digest`` is the first 32 hex digits of SHA-256 over the entry's
  booking date, value date, direction, amount, currency, end-to-end id, counterparty, remittance and bank code
  (as stored, i.e. redacted), written as four dotted groups of eight (``recon.redact.grouped``: a plain one
  holds a Luhn-valid run now and then, which ``recon bank show`` and every other output would mask as a card
  number; migration 0026 rewrote the keys stored before), and ``n`` counts the entries of the same statement
  with that digest, in file order, from 1.

Why the fallback is stable across overlapping statements: camt.053, MT940 and BAI2 are end-of-day statements,
so a statement holds every booking of each day it covers, never part of a day. A booking's digest contains
its booking date, so the entries that share a digest all lie on one day, and every statement that covers that
day holds all of them: two identical entries on one day are ``…:1`` and ``…:2`` in the Monday statement and in
the Monday-to-Friday statement alike, and a third identical entry booked later that day is ``…:3`` in both.
Identical entries cannot be told apart, so which one is ``1`` does not matter; how many there are does.

Hazards: an intraday statement (camt.052, MT942: not read here) would break the whole-day premise; the same
booking imported from two formats, or with text the bank later re-wrote, gets two keys (it would show as two
entries, never as one lost). A reference that redaction would mask (it looks like a card number) cannot be
stored as it is, so such an entry uses the fallback: its key never holds what the store may not.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from recon.redact import grouped, redact

REFERENCE_PREFIX = "ref:"
FALLBACK_PREFIX = "fb:"


def reference_key(raw_reference: str | None) -> str | None:
    """``ref:<reference>`` for a reference that can be stored as it is; None: use the fallback."""
    if raw_reference is None or not raw_reference.strip():
        return None
    text = raw_reference.strip()
    return REFERENCE_PREFIX + text if redact(text) == text else None


def fallback_digest(fields: Sequence[str | int | None]) -> str:
    """The fallback's digest of an entry's stored (redacted) fields, in the order the module docstring lists,
    ``grouped``."""
    joined = "\x1f".join("" if f is None else str(f) for f in fields)
    return grouped(hashlib.sha256(joined.encode("utf-8")).hexdigest()[:32])


def fallback_key(digest: str, ordinal: int) -> str:
    return f"{FALLBACK_PREFIX}{digest}:{ordinal}"
