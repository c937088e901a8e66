"""Stripe's search query language (docs.stripe.com/search#search-query-language), for the search endpoints of
PaymentIntents, Charges and Customers.

A query is clauses joined by ``AND`` or by ``OR`` (not both in one query; at most 10 clauses). A clause is a
field, an operator and a value, optionally negated with a leading ``-``:

- ``:`` exact match (strings compare ignoring case); ``~`` substring match, for string fields, at least 3
  characters; ``>``, ``<``, ``>=``, ``<=`` for numeric fields (``amount``, ``created``; ``:`` is equality there);
- string values are quoted, with double or single quotes (``\\`` escapes a quote); numbers are bare; ``null``
  matches a field without a value (``-metadata["key"]:null``: the key is set);
- ``metadata["key"]`` (or ``metadata['key']``) reads one metadata key.

The fields of each resource (``FIELDS``) are the documented query fields the sandbox's objects carry; any other
field, operator or malformed query is Stripe's 400 ``invalid_request_error`` naming what is wrong. Search is
immediately consistent here (Stripe's may lag by a minute).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from psp_adapters.sandbox.stripe_form import Invalid, invalid

MAX_CLAUSES = 10
#: resource -> query field -> its type: "numeric", "string" (exact and substring), "token" (exact only),
#: "boolean", "metadata" (docs.stripe.com/search, "Query fields for …")
FIELDS: Mapping[str, Mapping[str, str]] = {
    "payment_intent": {"amount": "numeric", "created": "numeric", "currency": "token", "customer": "token",
                       "metadata": "metadata", "status": "token"},
    "charge": {"amount": "numeric", "billing_details.address.postal_code": "string", "created": "numeric",
               "currency": "token", "customer": "token", "disputed": "boolean", "metadata": "metadata",
               "payment_method_details.card.last4": "token", "payment_method_details.card.exp_month": "numeric",
               "payment_method_details.card.exp_year": "numeric", "payment_method_details.card.brand": "token",
               "refunded": "boolean", "status": "token"},
    "customer": {"created": "numeric", "email": "string", "metadata": "metadata", "name": "string",
                 "phone": "string"},
}
_CLAUSE = re.compile(
    r"""\s*(?P<neg>-)?
        (?P<field>metadata\[(?P<kq>["'])(?P<key>(?:\\.|(?!(?P=kq)).)*)(?P=kq)\]|[a-z_]+(?:\.[a-z0-9_]+)*)
        (?P<op>>=|<=|:|~|>|<|=)
        (?P<value>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|-?\d+(?:\.\d+)?|null)\s*""",
    re.VERBOSE,
)
_CONNECTOR = re.compile(r"\s+(AND|OR)\s+", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Clause:
    negated: bool
    field: str  #: a query field, or "metadata"
    key: str | None  #: the metadata key
    op: str
    value: str | int | None  #: None: null


def parse(query: str, resource: str) -> Callable[[Mapping[str, object]], bool]:
    """The predicate of ``query`` over an object of ``resource`` as the API serves it. Raises Invalid."""
    if not query.strip():
        raise invalid("Missing required param: query.", code="parameter_missing", param="query")
    clauses, connectors = _split(query)
    if len(set(connectors)) > 1:
        raise invalid("A query cannot combine AND and OR; use one of them.", param="query")
    if len(clauses) > MAX_CLAUSES:
        raise invalid(f"A query has at most {MAX_CLAUSES} clauses.", param="query")
    parsed = [_clause(text, resource) for text in clauses]
    if connectors and connectors[0] == "OR":
        return lambda doc: any(_matches(clause, doc) for clause in parsed)
    return lambda doc: all(_matches(clause, doc) for clause in parsed)


def _split(query: str) -> tuple[list[str], list[str]]:
    """The clauses' texts and the connectors between them, reading quoted values whole."""
    clauses: list[str] = []
    connectors: list[str] = []
    position = 0
    while True:
        match = _CLAUSE.match(query, position)
        if match is None:
            raise invalid(f"Invalid query near {query[position:position + 30]!r}: expected field:value "
                          "(docs.stripe.com/search#search-query-language).", param="query")
        clauses.append(match.group(0))
        position = match.end()
        if position == len(query):
            return clauses, connectors
        joined = _CONNECTOR.match(query, position - 1 if query[position - 1].isspace() else position)
        if joined is None:
            raise invalid(f"Invalid query near {query[position:position + 30]!r}: clauses are joined by AND or OR.",
                          param="query")
        connectors.append(joined.group(1).upper())
        position = joined.end()


def _clause(text: str, resource: str) -> Clause:
    match = _CLAUSE.fullmatch(text)
    assert match is not None  # nosec B101  # _split matched it
    field = "metadata" if match["key"] is not None else match["field"]
    kind = FIELDS[resource].get(field)
    if match["field"] == "metadata":
        raise invalid("Search metadata by key: metadata[\"key\"]:\"value\".", param="query")
    if kind is None:
        raise invalid(f"Field '{field}' is not a query field of this resource.", param="query")
    op, raw = match["op"], match["value"]
    value: str | int | None = None if raw == "null" else _unquote(raw) if raw[0] in "\"'" else raw
    if kind == "numeric" and value is not None:
        if not isinstance(value, str) or not re.fullmatch(r"-?[0-9]{1,18}", value):
            raise invalid(f"Field '{field}' takes a number.", param="query")
        value = int(value)
    elif op in (">", "<", ">=", "<=", "="):
        raise invalid(f"Field '{field}' cannot be compared with {op}: it is not numeric.", param="query")
    if op == "~" and (kind != "string" or not isinstance(value, str) or len(value) < 3):
        raise invalid(f"Substring search (~) takes a string field and at least 3 characters ({field}).", param="query")
    if kind != "numeric" and value is not None and raw[0] not in "\"'":
        raise invalid(f"The value of '{field}' must be quoted.", param="query")
    key = _unquote(match["kq"] + match["key"] + match["kq"]) if match["key"] is not None else None
    return Clause(bool(match["neg"]), field, key, op, value)


def _matches(clause: Clause, doc: Mapping[str, object]) -> bool:
    actual = _read(doc, clause.field, clause.key)
    return _test(clause, actual) != clause.negated


def _test(clause: Clause, actual: object) -> bool:
    expected = clause.value
    if expected is None:
        return actual is None
    if actual is None:
        return False
    if isinstance(expected, int) and not isinstance(actual, bool) and isinstance(actual, int):
        return {":": actual == expected, "=": actual == expected, ">": actual > expected, "<": actual < expected,
                ">=": actual >= expected, "<=": actual <= expected}[clause.op]
    text = str(actual).lower() if not isinstance(actual, bool) else ("true" if actual else "false")
    if clause.op == "~":
        return str(expected).lower() in text
    return text == str(expected).lower()


def _read(doc: Mapping[str, object], field: str, key: str | None) -> object:
    if key is not None:
        metadata = doc.get("metadata")
        return metadata.get(key) if isinstance(metadata, Mapping) else None
    node: object = doc
    for name in field.split("."):
        node = node.get(name) if isinstance(node, Mapping) else None
    return node


def _unquote(raw: str) -> str:
    return re.sub(r"\\(.)", r"\1", raw[1:-1])


__all__ = ["FIELDS", "Invalid", "parse"]
