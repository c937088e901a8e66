"""Adyen: Checkout API v72 (v71 selectable) and the Payment accounting report (``adapter``), the charge's rules
and body (``charge``: ``check_charge``), Adyen's answers and their outcomes (``wire``), the report's CSV layout
(``report``), webhooks (``webhook``). ``PSP`` is what recon registers (``psp_adapters.registry``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from psp_adapters import settings as s
from psp_adapters.adyen import webhook
from psp_adapters.adyen.adapter import DEFAULT_BASE_URL, DEFAULT_REPORT_BASE_URL, AdyenAdapter
from psp_adapters.adyen.charge import DEFAULT_RECURRING_PROCESSING_MODEL, DEFAULT_RETURN_URL, check_charge
from psp_adapters.adyen.wire import DEFAULT_API_VERSION
from psp_adapters.protocol import PspPackage


def create(settings: Mapping[str, Any]) -> AdyenAdapter:
    """The adapter. ``merchant_account`` is only the default (a payment may name its own); the report user's
    credentials (``report_api_key``, or ``report_username`` with ``report_password``) are required and never fall
    back to ``api_key``: the adapter's ValueError names them and their variables."""
    return AdyenAdapter(
        s.text(settings, "base_url", required=True),
        api_key=s.secret(settings, "api_key", required=True),
        merchant_account=s.text(settings, "merchant_account") or None,
        api_version=s.text(settings, "api_version") or DEFAULT_API_VERSION,
        return_url=s.text(settings, "return_url") or DEFAULT_RETURN_URL,
        recurring_processing_model=s.text(settings, "recurring_processing_model") or DEFAULT_RECURRING_PROCESSING_MODEL,
        report_base_url=s.text(settings, "report_base_url") or DEFAULT_REPORT_BASE_URL,
        report_api_key=s.secret(settings, "report_api_key") or None,
        report_username=s.text(settings, "report_username") or None,
        report_password=s.secret(settings, "report_password") or None,
        report_timezone=s.text(settings, "report_timezone") or "UTC",
        timeout=s.timeout(settings),
        transport=settings.get("transport"),
    )


PSP = PspPackage(adapter=AdyenAdapter, create=create, base_url=DEFAULT_BASE_URL, check_charge=check_charge,
                 webhook=webhook.receiver, webhook_secrets=(webhook.KEY_VARIABLE, webhook.USERNAME_VARIABLE,
                                                            webhook.PASSWORD_VARIABLE))

__all__ = ["DEFAULT_BASE_URL", "DEFAULT_REPORT_BASE_URL", "PSP", "AdyenAdapter", "check_charge", "create"]
