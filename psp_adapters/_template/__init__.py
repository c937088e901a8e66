"""A copyable starting point for a new PSP adapter (not registered; see README.md)."""

from __future__ import annotations
