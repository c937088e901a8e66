"""psp_adapters.pager: the guard every adapter's listing goes through ends every listing.

A listing that repeats a cursor, promises more after an empty page or without a cursor, or runs past its page
bound is a PspProtocolError naming the PSP and the endpoint; a listing that makes progress is never stopped
before its bound.
"""

from __future__ import annotations

import pytest

from psp_adapters.errors import PspProtocolError
from psp_adapters.pager import MAX_PAGES_DEFAULT, Pager


def test_pager__a_listing_that_makes_progress_runs_to_its_bound_and_no_further() -> None:
    pager = Pager("stripe", "/v1/payment_intents", max_pages=3)
    for n in range(3):
        pager.request()
        assert pager.follow(f"pi_{n}", items=100) == f"pi_{n}"
    with pytest.raises(PspProtocolError, match=r"stripe: listing /v1/payment_intents never ends: more than 3 pages"):
        pager.request()
    assert Pager("stripe", "/v1/x").max_pages == MAX_PAGES_DEFAULT == 100_000


def test_pager__a_repeated_cursor_is_a_protocol_error() -> None:
    pager = Pager("sandbox", "/v1/payments")
    pager.request()
    pager.follow("c1", items=2)
    pager.request()
    pager.follow("c2", items=2)
    pager.request()
    with pytest.raises(PspProtocolError, match="cursor 'c1' repeated after 3 pages") as info:
        pager.follow("c1", items=2)  # a cycle of pages, not only the same page twice
    assert info.value.psp == "sandbox"


@pytest.mark.parametrize(("cursor", "items", "what"), [
    ("pi_1", 0, "after an empty one"),
    (None, 3, "without a cursor"),
    ("", 3, "without a cursor"),
    (42, 3, "without a cursor"),
])
def test_pager__more_pages_without_progress_is_a_protocol_error(cursor: object, items: int, what: str) -> None:
    pager = Pager("stripe", "/v1/balance_transactions")
    pager.request()
    with pytest.raises(PspProtocolError, match=what):
        pager.follow(cursor, items=items)


def test_pager__needs_a_bound() -> None:
    with pytest.raises(ValueError):
        Pager("stripe", "/v1/payment_intents", max_pages=0)
