"""Stripe's ``expand[]`` (docs.stripe.com/expand): an id in an answer replaced by the object it names, nested with
dots (``latest_charge.balance_transaction``), through a list's ``data`` (``data.source``), at most four levels
deep, on retrieves, lists, searches and on the answers of writes alike.

Only the fields the API reference marks expandable can be expanded (``EXPANDABLE``, per object type); any other
path is Stripe's 400 "This property cannot be expanded". A field that is null stays null; an id the sandbox does
not keep (a customer it never created) stays an id.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from psp_adapters.sandbox.stripe_form import Invalid, invalid

MAX_DEPTH = 4
#: object type -> its fields that ``expand[]`` may replace (those the sandbox serves)
EXPANDABLE: Mapping[str, frozenset[str]] = {
    "payment_intent": frozenset({"customer", "latest_charge", "payment_method"}),
    "charge": frozenset({"balance_transaction", "customer", "payment_intent", "failure_balance_transaction"}),
    "refund": frozenset({"balance_transaction", "charge", "payment_intent", "failure_balance_transaction",
                         "payment_method"}),
    "dispute": frozenset({"charge", "payment_intent"}),
    "balance_transaction": frozenset({"source"}),
    "customer": frozenset({"invoice_settings.default_payment_method"}),
    "payment_method": frozenset({"customer"}),
    "payout": frozenset({"balance_transaction", "failure_balance_transaction", "original_payout",
                         "reversed_by"}),
}

Lookup = Callable[[str], dict[str, object] | None]


def check(paths: Sequence[str], *, listing: bool = False) -> None:
    """Refuse (Invalid) paths deeper than Stripe allows, or not under ``data.`` for a list answer."""
    for n, path in enumerate(paths):
        parts = path.split(".")
        depth = len(parts) - (1 if listing else 0)
        if not path or "" in parts or depth > MAX_DEPTH or (listing and parts[0] != "data"):
            raise invalid(f"This property cannot be expanded ({path}).", param=f"expand[{n}]")


def expand(doc: dict[str, object], paths: Sequence[str], lookup: Lookup) -> dict[str, object]:
    """``doc`` with every path of ``paths`` expanded (a new dict; ``doc`` is left as it is). Raises Invalid for a
    path that names a field its object does not let expand."""
    check(paths, listing=doc.get("object") in ("list", "search_result"))
    result = dict(doc)
    for n, path in enumerate(paths):
        try:
            _expand(result, path.split("."), lookup)
        except Invalid:
            raise invalid(f"This property cannot be expanded ({path}).", param=f"expand[{n}]") from None
    return result


def _expand(doc: dict[str, object], parts: list[str], lookup: Lookup) -> None:
    head, rest = parts[0], parts[1:]
    kind = str(doc.get("object"))
    if kind in ("list", "search_result") and head == "data":
        data = doc.get("data")
        items = [dict(item) if isinstance(item, dict) else item for item in data] if isinstance(data, list) else []
        doc["data"] = items
        for item in items:
            if isinstance(item, dict) and rest:
                _expand(item, rest, lookup)
        return
    field, tail = _field(kind, parts)
    value = _get(doc, field)
    if isinstance(value, str):
        found = lookup(value)
        if found is not None:
            value = found
            _set(doc, field, value)
    if tail and isinstance(value, dict):
        copy = dict(value)
        _set(doc, field, copy)
        _expand(copy, tail, lookup)


def _field(kind: str, parts: list[str]) -> tuple[str, list[str]]:
    """The expandable field ``parts`` start with (one that may hold a dot) and what follows it."""
    allowed = EXPANDABLE.get(kind, frozenset())
    for size in range(len(parts), 0, -1):
        candidate = ".".join(parts[:size])
        if candidate in allowed:
            return candidate, parts[size:]
    raise invalid("not expandable")


def _get(doc: Mapping[str, object], dotted: str) -> object:
    node: object = doc
    for name in dotted.split("."):
        node = node.get(name) if isinstance(node, Mapping) else None
    return node


def _set(doc: dict[str, object], dotted: str, value: object) -> None:
    names = dotted.split(".")
    node = doc
    for name in names[:-1]:
        child = node.get(name)
        if not isinstance(child, dict):
            return
        node[name] = child = dict(child)
        node = child
    node[names[-1]] = value
