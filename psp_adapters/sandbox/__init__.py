"""A local PSP simulator for demo, chaos tests and benchmarks: an HTTP server with fault injection
(``server``, ``api``, ``faults``, ``ledger``) speaking one of three wires (``native_api``, ``stripe_api``,
``adyen_api``), and the adapter recon uses to talk to the native one (``adapter``, ``wire``). ``PSP`` is what
recon registers (``psp_adapters.registry``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from psp_adapters import settings as s
from psp_adapters.protocol import PspPackage
from psp_adapters.sandbox.adapter import SandboxAdapter
from psp_adapters.sandbox.api import SANDBOX_PORT_DEFAULT
from psp_adapters.sandbox.faults import FAULT_FLAGS, Faults
from psp_adapters.sandbox.records import FLAVORS
from psp_adapters.sandbox.server import SandboxServer, serve_forever

#: the sandbox server's default address
SANDBOX_BASE_URL_DEFAULT = f"http://127.0.0.1:{SANDBOX_PORT_DEFAULT}"


def create(settings: Mapping[str, Any]) -> SandboxAdapter:
    """The native sandbox's adapter: ``base_url``, ``api_key`` (optional), ``timeout``, ``transport`` (tests)."""
    return SandboxAdapter(
        s.text(settings, "base_url", required=True),
        api_key=s.secret(settings, "api_key") or None,
        timeout=s.timeout(settings),
        transport=settings.get("transport"),
    )


PSP = PspPackage(adapter=SandboxAdapter, create=create, base_url=SANDBOX_BASE_URL_DEFAULT)

__all__ = [
    "FAULT_FLAGS",
    "FLAVORS",
    "PSP",
    "SANDBOX_BASE_URL_DEFAULT",
    "SANDBOX_PORT_DEFAULT",
    "Faults",
    "SandboxAdapter",
    "SandboxServer",
    "create",
    "serve_forever",
]
