"""Stripe's request encoding and error object: form parameters (bodies and query strings alike), their
idempotency fingerprint, and ``{"error": {…}}`` answers (docs.stripe.com/api/errors).

Parameters nest with brackets: ``a=1``, ``a[k]=v`` (a hash), ``a[]=v`` or ``a[0]=v`` (a list, as stripe-python sends
``expand`` and ``types``), ``a[k][j]=v`` and ``a[0][k]=v`` (deeper). ``Params`` reads them with the types Stripe's
reference gives each parameter and raises ``Invalid`` with Stripe's error when one is of another shape.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from psp_adapters.sandbox.core import Response, json_response

_DOCS = "https://stripe.com/docs/error-codes/"
_SEGMENT = re.compile(r"\[([^\[\]]*)\]")
REQUEST = "invalid_request_error"

Param = str | list["Param"] | dict[str, "Param"]


class Invalid(Exception):
    """A request Stripe would refuse: ``response`` is its error answer (400 unless said otherwise)."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status)
        self.response = response


def error(
    status: int,
    kind: str,
    message: str,
    *,
    code: str | None = None,
    headers: Sequence[tuple[str, str]] = (),
    **fields: object,
) -> Response:
    """Stripe's error object: ``{"error": {"type", "code", "message", "doc_url", …}}``; absent fields are left out,
    as Stripe does."""
    body: dict[str, object] = {"type": kind, "message": message}
    if code is not None:
        body["code"] = code
        body["doc_url"] = _DOCS + code.replace("_", "-")
    body.update({name: value for name, value in fields.items() if value is not None})
    return json_response(status, {"error": body}, *headers)


def invalid(message: str, *, code: str | None = None, param: str | None = None, status: int = 400) -> Invalid:
    """An ``invalid_request_error`` to raise."""
    return Invalid(error(status, REQUEST, message, code=code, param=param))


def missing(kind: str, object_id: str, *, param: str | None = None) -> Invalid:
    """Stripe's 404 for an id it does not know: ``No such payment_intent: 'pi_x'``."""
    return invalid(f"No such {kind}: '{object_id}'", code="resource_missing", param=param, status=404)


def fingerprint(method: str, path: str, pairs: Iterable[tuple[str, str]]) -> str:
    """The idempotency fingerprint of a request: endpoint and parameters (their order is irrelevant)."""
    return hashlib.sha256(json.dumps([method, path, sorted(pairs)]).encode()).hexdigest()


def unix(value: datetime) -> int:
    return int(value.timestamp())


class Params:
    """One request's parameters, nested; ``take`` marks what an endpoint read, ``unknown`` names the rest."""

    def __init__(self, pairs: Iterable[tuple[str, str]]) -> None:
        self.tree: dict[str, Param] = {}
        for name, value in pairs:
            self._put(name, value)
        self.tree = {key: _listify(value) for key, value in self.tree.items()}

    def _put(self, name: str, value: str) -> None:
        base = name.partition("[")[0]
        keys = _SEGMENT.findall(name[len(base):])
        if not base or "".join(f"[{key}]" for key in keys) != name[len(base):]:
            raise invalid(f"Invalid parameter name: {name}", code="parameter_unknown", param=name)
        node: dict[str, Param] = self.tree
        path = [base, *keys]
        for depth, key in enumerate(path):
            last = depth == len(path) - 1
            if key == "":  # a[]: the next element of a list
                key = str(sum(1 for k in node if k.isdigit()))
            if last:
                if key in node:
                    raise invalid(f"Parameter {name} given twice", param=name)
                node[key] = value
                return
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                raise invalid(f"Invalid parameter {name}: {'['.join(path[:depth + 1])} is not a hash", param=name)
            node = child

    def names(self) -> set[str]:
        return set(self.tree)

    def check_known(self, known: Iterable[str]) -> None:
        """Raise Stripe's ``parameter_unknown`` for the first parameter not in ``known``."""
        unknown = sorted(self.names() - set(known))
        if unknown:
            raise invalid(f"Received unknown parameter: {unknown[0]}", code="parameter_unknown", param=unknown[0])

    def text(self, name: str) -> str | None:
        value = self.tree.get(name)
        if value is not None and not isinstance(value, str):
            raise invalid(f"Invalid {name}: must be a string", code="parameter_invalid_string", param=name)
        return value

    def integer(self, name: str) -> int | None:
        value = self.text(name)
        if value is None or value == "":
            return None
        if not re.fullmatch(r"-?[0-9]{1,18}", value):
            raise invalid(f"Invalid integer: {value}", code="parameter_invalid_integer", param=name)
        return int(value)

    def flag(self, name: str) -> bool | None:
        value = self.text(name)
        if value in (None, ""):
            return None
        if value not in ("true", "false"):
            raise invalid(f"Invalid boolean: {value}", code="parameter_invalid_boolean", param=name)
        return value == "true"

    def choice(self, name: str, allowed: Sequence[str]) -> str | None:
        value = self.text(name)
        if value not in (None, "", *allowed):
            raise invalid(f"Invalid {name}: must be one of {', '.join(allowed)}", code="parameter_invalid_string",
                          param=name)
        return value or None

    def strings(self, name: str) -> list[str]:
        """A list of strings (``expand[]``, ``types[]``); a lone string counts as a list of one."""
        value = self.tree.get(name)
        if value is None:
            return []
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
            raise invalid(f"Invalid array: {name}", code="parameter_invalid_array", param=name)
        return [item for item in items if isinstance(item, str)]

    def hash(self, name: str) -> dict[str, Param]:
        value = self.tree.get(name)
        if value is None or value == "":
            return {}
        if not isinstance(value, dict):
            raise invalid(f"Invalid object: {name}", code="parameter_invalid_object", param=name)
        return value

    def metadata(self, name: str = "metadata") -> dict[str, str]:
        """A metadata hash: at most 50 keys of 40 characters, values of 500 (docs.stripe.com/api/metadata)."""
        found = self.hash(name)
        if len(found) > 50 or any(len(k) > 40 or not isinstance(v, str) or len(v) > 500 for k, v in found.items()):
            raise invalid("Invalid metadata: at most 50 keys of 40 characters, values of 500 characters",
                          param=name)
        return {key: value for key, value in found.items() if isinstance(value, str)}


def merged_metadata(old: Mapping[str, str], update: Mapping[str, str]) -> dict[str, str]:
    """Stripe's metadata update: keys are set, an empty value unsets its key."""
    merged = {**old, **update}
    return {key: value for key, value in merged.items() if value != ""}


def _listify(value: Param) -> Param:
    """Hashes whose keys are all indices become lists, in index order (deepest first)."""
    if isinstance(value, dict):
        value = {key: _listify(child) for key, child in value.items()}
        if value and all(key.isdigit() for key in value):
            return [value[key] for key in sorted(value, key=int)]
    return value
