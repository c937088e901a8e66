"""Pagination that always ends: the one guard every adapter's listing goes through.

A PSP's list endpoint pages by cursor (Stripe's ``starting_after`` = the last id of a page while ``has_more``;
the sandbox's ``next_cursor``) or by a sequence of files (Adyen's daily reports, one download per account-day).
Nothing in those protocols stops a listing that answers ``has_more: true`` with the same page forever: the
caller would loop at the PSP's rate limit for good, and a burst worker would never return. So every adapter
asks its ``Pager`` before each request and for each next cursor, and a listing is a protocol error
(``PspProtocolError``: the answer cannot be what the PSP documents) when it

- repeats a cursor (the same page again, or a cycle of pages),
- promises more without progress (``has_more`` with an empty page, or without a cursor), or
- runs past ``max_pages`` requests (``MAX_PAGES_DEFAULT``: 100,000 pages of 100 is ten million items, far
  beyond any window or report period recon asks for; what the other two checks cannot see, e.g. a PSP minting
  a new cursor for the same page each time, ends here).

What the caller does with the error is its business: a reconcile window job hands its payments to their own
jobs and ends (``recon.reconcile.window``); ``recon report`` fails with its one-line error. A ``Pager`` serves
one listing; it keeps the cursors it has seen (at most ``max_pages`` strings).
"""

from __future__ import annotations

from psp_adapters.errors import PspProtocolError

#: the most requests one listing may make (see the module docstring)
MAX_PAGES_DEFAULT = 100_000


class Pager:
    """The guard of one listing of ``psp`` at ``endpoint`` (named in the errors): ``request()`` before each
    request, ``follow(cursor, items=…)`` for each page that says there is more."""

    def __init__(self, psp: str, endpoint: str, *, max_pages: int | None = None) -> None:
        if max_pages is not None and max_pages < 1:
            raise ValueError("max_pages must be at least 1")
        self.psp = psp
        self.endpoint = endpoint
        self.max_pages = max_pages or MAX_PAGES_DEFAULT  #: None: the module's bound as it is now
        self.pages = 0  #: requests made so far
        self._seen: set[str] = set()

    def request(self) -> None:
        """Count one more request; PspProtocolError when it would be past ``max_pages``."""
        if self.pages >= self.max_pages:
            raise self._error(f"more than {self.max_pages} pages")
        self.pages += 1

    def follow(self, cursor: object, *, items: int) -> str:
        """The cursor of the next page, after a page of ``items`` items that said there is more.

        PspProtocolError when the page brought nothing (no progress), the cursor is missing or not a string,
        or it was followed before (the same page again)."""
        if items <= 0:
            raise self._error("more pages promised after an empty one (no progress)")
        if not isinstance(cursor, str) or not cursor:
            raise self._error("more pages promised without a cursor")
        if cursor in self._seen:
            raise self._error(f"cursor {cursor[:64]!r} repeated after {self.pages} pages")
        self._seen.add(cursor)
        return cursor

    def _error(self, what: str) -> PspProtocolError:
        return PspProtocolError(f"{self.psp}: listing {self.endpoint} never ends: {what}", psp=self.psp)
