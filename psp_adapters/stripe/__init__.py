"""Stripe: PaymentIntents over httpx (``adapter``), Stripe's wire types and mapping (``wire``), the
balance-transaction settlement listing (``balance``), webhooks (``webhook``). ``PSP`` is what recon registers
(``psp_adapters.registry``); ``check_charge`` is the import-time check of a charge."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from psp_adapters import settings as s
from psp_adapters.protocol import PspPackage
from psp_adapters.stripe import webhook
from psp_adapters.stripe.adapter import DEFAULT_BASE_URL, StripeAdapter
from psp_adapters.stripe.wire import API_VERSION, check_charge


def create(settings: Mapping[str, Any]) -> StripeAdapter:
    """The adapter: ``base_url``, ``api_key`` (required), ``api_version`` (default: the pinned ``API_VERSION``),
    ``timeout``, ``transport`` (tests)."""
    return StripeAdapter(
        s.text(settings, "base_url", required=True),
        api_key=s.secret(settings, "api_key", required=True),
        api_version=s.text(settings, "api_version") or None,  # None: the adapter's pinned API_VERSION
        timeout=s.timeout(settings),
        transport=settings.get("transport"),
    )


PSP = PspPackage(adapter=StripeAdapter, create=create, base_url=DEFAULT_BASE_URL, check_charge=check_charge,
                 webhook=webhook.receiver, webhook_secrets=(webhook.SECRET_VARIABLE,))

__all__ = ["API_VERSION", "DEFAULT_BASE_URL", "PSP", "StripeAdapter", "check_charge", "create"]
