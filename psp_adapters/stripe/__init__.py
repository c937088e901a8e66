"""Stripe: PaymentIntents over httpx (``adapter``) and Stripe's wire types and mapping (``wire``)."""

from __future__ import annotations

from psp_adapters.stripe.adapter import DEFAULT_BASE_URL, StripeAdapter

__all__ = ["DEFAULT_BASE_URL", "StripeAdapter"]
