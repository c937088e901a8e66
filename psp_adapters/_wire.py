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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from psp_adapters.errors import PspProtocolError

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

    def amount(self, doc: Mapping[str, object], name: str = "amount") -> int:
        """An integer amount (in the PSP's units); PspProtocolError when it is missing, null, a bool or a
        float (never rounded)."""
        value = doc.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise self.error(f"field {name!r} missing or not an integer amount")

    def optional_amount(self, doc: Mapping[str, object], name: str) -> int | None:
        """An integer amount when present and not null, else None; PspProtocolError on a bool or a float."""
        return None if doc.get(name) is None else self.amount(doc, name)
