"""recon.errors: the ReconError tree is complete in one place, and its docstring draws all of it."""

from __future__ import annotations

import importlib
import pkgutil

import recon
from recon import errors
from recon.errors import ReconError

#: ReconError subclasses allowed to live elsewhere, each with why (drawn in the tree with their module)
KEPT_ELSEWHERE = {
    # carries the importer's problems (recon.payments.importer.Problem) and their display rule: recon.errors
    # stays a leaf that imports nothing of ours
    "recon.payments.importer.ImportRejected",
}


def every_recon_error() -> set[type[ReconError]]:
    for module in pkgutil.walk_packages(recon.__path__, "recon."):
        if not module.name.endswith(".__main__"):  # runs the command line
            importlib.import_module(module.name)
    found: set[type[ReconError]] = set()
    todo = [ReconError]
    while todo:
        cls = todo.pop()
        found.add(cls)
        todo.extend(cls.__subclasses__())
    return found


def test_errors__every_recon_error_is_defined_in_recon_errors() -> None:
    elsewhere = {f"{cls.__module__}.{cls.__qualname__}" for cls in every_recon_error()
                 if cls.__module__ != "recon.errors"}
    assert elsewhere == KEPT_ELSEWHERE


def test_errors__the_tree_in_the_docstring_names_every_class() -> None:
    tree = (errors.__doc__ or "").split("```")[1]
    missing = sorted(cls.__name__ for cls in every_recon_error() if f" {cls.__name__} " not in f" {tree} "
                     and f"── {cls.__name__}" not in tree and cls.__name__ != "ReconError")
    assert missing == []
    assert tree.lstrip().startswith("ReconError")
