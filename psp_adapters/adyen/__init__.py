"""Adyen: Checkout API v71 and the Payment accounting report (``adapter``), wire types and charge rules
(``wire``: ``check_charge``), the report's CSV layout (``report``)."""

from __future__ import annotations

from psp_adapters.adyen.adapter import DEFAULT_BASE_URL, DEFAULT_REPORT_BASE_URL, AdyenAdapter
from psp_adapters.adyen.wire import check_charge

__all__ = ["DEFAULT_BASE_URL", "DEFAULT_REPORT_BASE_URL", "AdyenAdapter", "check_charge"]
