"""Adyen: Checkout API v71 and the Payment accounting report (``adapter``), wire types (``wire``)."""

from __future__ import annotations

from psp_adapters.adyen.adapter import DEFAULT_BASE_URL, DEFAULT_REPORT_BASE_URL, AdyenAdapter

__all__ = ["DEFAULT_BASE_URL", "DEFAULT_REPORT_BASE_URL", "AdyenAdapter"]
