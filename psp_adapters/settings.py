"""Reading an adapter's settings mapping: what every PSP package's factory (``PspPackage.create``) shares.

The mapping is ``psp_adapters.registry.settings_from_env``'s (and the config file's ``[psp.NAME]`` over it):
plain values are strings, credentials ``Secret``, the timeout an ``httpx.Timeout``. A required setting that is
missing raises ``MissingSetting`` naming it (recon turns it into the variable or key to set); a value of the
wrong type raises ValueError.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from psp_adapters.http import DEFAULT_TIMEOUT
from psp_adapters.protocol import Secret


class MissingSetting(ValueError):
    """A required setting of an adapter is not set; ``key`` names it."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"setting {key!r} is required")


def text(settings: Mapping[str, Any], key: str, *, required: bool = False) -> str:
    """A plain setting; "" when it is not set (MissingSetting when ``required``)."""
    value = settings.get(key)
    if value is None or value == "":
        if required:
            raise MissingSetting(key)
        return ""
    if not isinstance(value, str):
        raise ValueError(f"setting {key!r} must be a string")
    return value


def secret(settings: Mapping[str, Any], key: str, *, required: bool = False) -> Secret:
    """A credential; an empty Secret when it is not set (MissingSetting when ``required``)."""
    value = settings.get(key)
    if value is None or not value:
        if required:
            raise MissingSetting(key)
        return Secret("")
    if not isinstance(value, Secret):
        raise ValueError(f"setting {key!r} must be a Secret")  # a bare str would end up in reprs and logs
    return value


def timeout(settings: Mapping[str, Any]) -> httpx.Timeout:
    """The ``timeout`` setting, or the shared default (``psp_adapters.http.DEFAULT_TIMEOUT``)."""
    value = settings.get("timeout")
    if value is None:
        return DEFAULT_TIMEOUT
    if not isinstance(value, httpx.Timeout):
        raise ValueError("setting 'timeout' must be an httpx.Timeout")
    return value
