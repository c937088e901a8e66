"""A copyable starting point for a new PSP adapter (not registered; see README.md).

A PSP's package exports ``PSP``, what recon registers: copy this folder to ``psp_adapters/<name>/``, then add
``"<name>": "psp_adapters.<name>"`` to ``psp_adapters.registry.PACKAGES``. With webhooks, add a ``webhook.py``
whose receiver class implements ``psp_adapters.protocol.WebhookReceiver`` (verify, events, the answer) and a
``receiver(environ, *, tolerance)`` factory, and name them in ``PSP`` (``webhook=``, ``webhook_secrets=``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from psp_adapters import settings as s
from psp_adapters._template.adapter import TemplateAdapter
from psp_adapters.protocol import PspPackage


def create(settings: Mapping[str, Any]) -> TemplateAdapter:
    """The adapter from its settings (``psp_adapters.registry.settings_from_env`` and ``[psp.NAME]``)."""
    return TemplateAdapter(
        s.text(settings, "base_url", required=True),
        api_key=s.secret(settings, "api_key", required=True),
        timeout=s.timeout(settings),
        transport=settings.get("transport"),
    )


PSP = PspPackage(adapter=TemplateAdapter, create=create, base_url=None)
