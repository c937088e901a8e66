"""Adyen: Checkout API v72 (v71 selectable) and the Payment accounting report (``adapter``), the charge's rules
and body (``charge``: ``check_charge``), Adyen's answers and their outcomes (``wire``), the report's CSV layout
(``report``), webhooks (``webhook``)."""

from __future__ import annotations

from psp_adapters.adyen.adapter import DEFAULT_BASE_URL, DEFAULT_REPORT_BASE_URL, AdyenAdapter
from psp_adapters.adyen.charge import check_charge

__all__ = ["DEFAULT_BASE_URL", "DEFAULT_REPORT_BASE_URL", "AdyenAdapter", "check_charge"]
