"""Reading a PSP's JSON documents field by field: one set of validators every adapter's ``wire.py`` shares.

A wire module binds one ``JsonFields`` to its PSP's name and reads every document through it::

    _json = JsonFields(PSP_NAME)
    doc = _json.as_object(payload, "payment")
    status = _json.require(doc, "status", str)
    amount = _json.amount(doc, "amount")

A document that is not what the PSP documents (not an object, a missing field, a field of the wrong type)
raises ``PspProtocolError`` with ``psp`` set and a message naming the PSP and the field: schema drift, never a
guess. Booleans are never numbers: JSON ``true`` parses to Python ``True``, and ``isinstance(True, int)`` is
True, so every check here refuses a bool unless ``bool`` itself is asked for. Amounts are integers in the
PSP's units; a float amount (``12.5``) is drift too, never rounded.

Numbers are bounded where they enter: an amount outside a signed 64-bit integer (recon's BIGINT columns and its
sums), or negative where the field cannot be, and a Unix time or ISO-8601 instant outside 1970..9999 (the range
a datetime, and both databases, hold), are malformed: PspProtocolError at the boundary, never an
OverflowError later in a column, a sum or a date.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

from psp_adapters.errors import PspProtocolError
from psp_adapters.units import AMOUNT_MAX

#: the latest Unix time a PSP may send: 9999-12-31T23:59:59Z, datetime's last second
UNIX_TIME_MAX = 253_402_300_799

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class JsonFields:
    """The JSON validators of one PSP; ``psp`` names it in every error (``PspProtocolError.psp`` and the
    message's ``"<psp>: "`` prefix)."""

    psp: str

    def error(self, message: str) -> PspProtocolError:
        """A PspProtocolError for this PSP: ``"<psp>: <message>"``."""
        return PspProtocolError(f"{self.psp}: {message}", psp=self.psp)

    def as_object(self, value: object, what: str) -> Mapping[str, object]:
        """``value`` as a JSON object (``what`` names it in the error); PspProtocolError when it is not one."""
        if not isinstance(value, Mapping):
            raise self.error(f"{what} is not a JSON object")
        return value

    def require(self, doc: Mapping[str, object], name: str, kind: type[_T]) -> _T:
        """``doc[name]``, of type ``kind`` (a bool only when ``kind`` is bool); PspProtocolError when it is
        missing, null or of another type."""
        value = doc.get(name)
        if isinstance(value, kind) and (kind is bool or not isinstance(value, bool)):
            return value
        raise self.error(f"field {name!r} missing or not {kind.__name__}")

    def optional(self, doc: Mapping[str, object], name: str, kind: type[_T]) -> _T | None:
        """``doc[name]`` when present and not null, else None; PspProtocolError when it has another type
        (a bool is only ever a bool)."""
        if doc.get(name) is None:
            return None
        return self.require(doc, name, kind)

    def amount(self, doc: Mapping[str, object], name: str = "amount", *, signed: bool = False) -> int:
        """An integer amount (in the PSP's units); PspProtocolError when it is missing, null, a bool or a
        float (never rounded), negative (unless ``signed``: a balance transaction's fee or net), or outside a
        signed 64-bit integer."""
        value = doc.get(name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.error(f"field {name!r} missing or not an integer amount")
        if value < 0 and not signed:
            raise self.error(f"field {name!r} is a negative amount")
        if abs(value) > AMOUNT_MAX:
            raise self.error(f"field {name!r} is an amount outside 64 bits")
        return value

    def optional_amount(self, doc: Mapping[str, object], name: str, *, signed: bool = False) -> int | None:
        """An integer amount when present and not null, else None; PspProtocolError as ``amount`` says."""
        return None if doc.get(name) is None else self.amount(doc, name, signed=signed)

    def unix_time(self, doc: Mapping[str, object], name: str) -> datetime:
        """An integer Unix time (seconds) as an aware UTC datetime; PspProtocolError when it is missing, not an
        integer, or outside 1970-01-01..9999-12-31."""
        value = self.require(doc, name, int)
        if not 0 <= value <= UNIX_TIME_MAX:
            raise self.error(f"field {name!r} is a Unix time outside 1970..9999")
        return datetime.fromtimestamp(value, UTC)

    def optional_unix_time(self, doc: Mapping[str, object], name: str) -> datetime | None:
        """``unix_time`` when present and not null, else None."""
        return None if doc.get(name) is None else self.unix_time(doc, name)

    def instant(self, value: str, what: str) -> datetime:
        """An ISO-8601 date-time with an offset, as aware UTC; PspProtocolError when it does not parse, has no
        offset (a wall-clock time says no instant), or falls outside datetime's range once in UTC."""
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise self.error(f"{what} is not an ISO-8601 date-time") from None
        if parsed.tzinfo is None:
            raise self.error(f"{what} has no UTC offset")
        try:
            return parsed.astimezone(UTC)
        except OverflowError:  # 0001-01-01T00:00+01:00, 9999-12-31T23:00-05:00
            raise self.error(f"{what} is outside the years 1..9999 in UTC") from None
