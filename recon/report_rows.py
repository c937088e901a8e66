"""The rows of the settlement report (``recon.db.report_store``): each PSP reference of the listing with the
payment it matched, and payments no line stands for. A leaf, like ``recon.rows``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LineMatch:
    """One PSP reference of the listing (its lines merged) and the payment of ours it matched, if any.

    ``rank`` 1 is the line that stands for its payment (or merchant reference); a higher rank is a further
    PSP charge for the same one. ``in_window``: the payment was created after ``until - settlement_window``.
    """

    psp_reference: str
    psp_merchant_reference: str | None
    psp_amount: int
    psp_currency: str
    psp_status: str
    lines: int
    rank: int
    payment_id: int | None
    merchant_reference: str | None
    our_psp_reference: str | None
    amount: int | None
    currency: str | None
    status: str | None
    in_window: bool
    fee: int | None = None  #: the PSP's fee for this payment, minor units of ``settlement_currency``
    net: int | None = None  #: what the PSP pays out for it after fees, same units
    settlement_currency: str | None = None  #: None: the line's own currency
    refunded: int = 0  #: what our refunds that have not failed take back from the payment (minor units)
    dispute: str | None = None  #: the payment's latest dispute we recorded: its PSP id and status


@dataclass(frozen=True, slots=True)
class UnlistedPayment:
    """A payment of the period that no PSP line stands for."""

    payment_id: int
    merchant_reference: str
    psp_reference: str | None
    amount: int
    currency: str
    status: str
    in_window: bool
