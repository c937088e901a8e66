"""No import cycle among the project's modules (docs/architecture.md): every dependency points one way.

grimp (which import-linter is built on) reads every import statement, including those inside functions and
under ``TYPE_CHECKING``: a cycle hidden behind a lazy import is still a cycle in the design.
"""

from __future__ import annotations

import grimp

PACKAGES = ("recon", "psp_adapters")


def test_no_module_imports_itself_back() -> None:
    graph = grimp.build_graph(*PACKAGES)
    cycles = set()
    for importer in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(importer):
            if imported.split(".")[0] in PACKAGES and graph.find_shortest_chain(importer=imported, imported=importer):
                cycles.add(" <-> ".join(sorted((importer, imported))))
    assert sorted(cycles) == []
