"""Stripe: PaymentIntents over httpx (``adapter``), Stripe's wire types and mapping (``wire``), and the
balance-transaction settlement listing (``balance``). ``check_charge`` is the import-time check of a charge."""

from __future__ import annotations

from psp_adapters.stripe.adapter import DEFAULT_BASE_URL, StripeAdapter
from psp_adapters.stripe.wire import API_VERSION, check_charge

__all__ = ["API_VERSION", "DEFAULT_BASE_URL", "StripeAdapter", "check_charge"]
