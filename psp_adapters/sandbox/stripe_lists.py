"""Stripe's list and search answers (docs.stripe.com/api/pagination, /api/pagination/search): ``created`` ranges,
``limit`` (1 to 100, default 10), cursors by object id (``starting_after``, ``ending_before``: newest first either
way), search pages, and ``expand[]`` through ``data``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TypeVar

from psp_adapters.sandbox import stripe_expand
from psp_adapters.sandbox.stripe_form import Params, invalid, missing

T = TypeVar("T")
LIMIT_MAX = 100
_LATEST = 253402300799  # 9999-12-31T23:59:59Z
_OPERATORS = ("gte", "gt", "lte", "lt")


def limit(params: Params) -> int:
    value = params.integer("limit")
    if value is None:
        return 10
    if not 1 <= value <= LIMIT_MAX:
        raise invalid(f"Invalid limit: must be between 1 and {LIMIT_MAX}", code="parameter_invalid_integer",
                      param="limit")
    return value


def created_window(params: Params, name: str = "created") -> tuple[datetime, datetime]:
    """``created`` (unix seconds) or ``created[gte|gt|lte|lt]`` as the instants ``[lo, hi)``."""
    lo, hi = 0, _LATEST + 1
    exact = params.tree.get(name)
    if isinstance(exact, str):
        lo = hi = params.integer(name) or 0
        hi += 1
    elif exact is not None:
        bounds = params.hash(name)
        unknown = sorted(set(bounds) - set(_OPERATORS))
        if unknown:
            raise invalid(f"Received unknown parameter: {name}[{unknown[0]}]", code="parameter_unknown",
                          param=f"{name}[{unknown[0]}]")
        for operator, raw in bounds.items():
            if not isinstance(raw, str) or not (raw.isascii() and raw.lstrip("-").isdigit()):
                raise invalid(f"Invalid integer: {raw}", code="parameter_invalid_integer", param=f"{name}[{operator}]")
            n = int(raw)
            lo = max(lo, n + (operator == "gt")) if operator in ("gte", "gt") else lo
            hi = min(hi, n + (operator == "lte")) if operator in ("lte", "lt") else hi
    return _instant(lo), _instant(max(lo, hi))


def _instant(seconds: int) -> datetime:
    return datetime.fromtimestamp(min(max(seconds, 0), _LATEST), UTC)


def paginate(
    items: Sequence[T], params: Params, *, id_of: Callable[[T], str], kind: str
) -> tuple[list[T], bool]:
    """A page of ``items`` (newest first) after ``starting_after`` or before ``ending_before`` (the ids of
    ``kind`` objects); returns the page and whether more follow in that direction."""
    after, before, size = params.text("starting_after"), params.text("ending_before"), limit(params)
    if after and before:
        raise invalid("You may only specify one of these parameters: ending_before, starting_after.")
    ids = [id_of(item) for item in items]
    for cursor, param in ((after, "starting_after"), (before, "ending_before")):
        if cursor and cursor not in ids:
            raise missing(kind, cursor, param=param)
    if before:
        end = ids.index(before)
        return list(items[max(0, end - size):end]), end - size > 0
    start = ids.index(after) + 1 if after else 0
    return list(items[start:start + size]), start + size < len(items)


def listing(url: str, data: list[dict[str, object]], has_more: bool) -> dict[str, object]:
    return {"object": "list", "data": data, "has_more": has_more, "url": url}


def search_page(url: str, data: list[dict[str, object]], *, start: int, size: int, total: int) -> dict[str, object]:
    more = start + size < total
    return {"object": "search_result", "data": data, "has_more": more, "next_page": str(start + size) if more else None,
            "url": url}


def page_start(params: Params) -> int:
    """Where a search page starts (``page``: the ``next_page`` of the previous one)."""
    page = params.text("page")
    if page is not None and not (page.isascii() and page.isdigit()):
        raise invalid("Invalid page: use the next_page of the previous answer.", param="page")
    return int(page or 0)


def expanded(doc: dict[str, object], params: Params, lookup: stripe_expand.Lookup) -> dict[str, object]:
    """``doc`` with the request's ``expand[]`` applied."""
    paths = params.strings("expand")
    return stripe_expand.expand(doc, paths, lookup) if paths else doc
