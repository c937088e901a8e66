"""A local PSP simulator for demo, chaos tests and benchmarks: an HTTP server with fault injection
(``server``, ``api``, ``faults``, ``ledger``) speaking one of three wires (``native_api``, ``stripe_api``,
``adyen_api``), and the adapter recon uses to talk to the native one (``adapter``, ``wire``)."""

from __future__ import annotations

from psp_adapters.sandbox.adapter import SandboxAdapter
from psp_adapters.sandbox.api import SANDBOX_PORT_DEFAULT
from psp_adapters.sandbox.faults import FAULT_FLAGS, Faults
from psp_adapters.sandbox.records import FLAVORS
from psp_adapters.sandbox.server import SandboxServer, serve_forever

__all__ = [
    "FAULT_FLAGS",
    "FLAVORS",
    "SANDBOX_PORT_DEFAULT",
    "Faults",
    "SandboxAdapter",
    "SandboxServer",
    "serve_forever",
]
