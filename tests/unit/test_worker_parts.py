"""The worker's parts depend one way: ``worker`` composes ``claimer``, ``runners``, ``finisher`` and
``presence``; they share ``slots`` (and the engine's leaf modules) and never import one another."""

from __future__ import annotations

import grimp

ENGINE = "recon.engine"
PARTS = ("claimer", "runners", "finisher", "presence")
WORKER = (*PARTS, "slots", "worker")


def test_worker_parts__depend_one_way_with_no_cycle() -> None:
    graph = grimp.build_graph("recon", cache_dir=None)
    imports = {m: {i.removeprefix(f"{ENGINE}.") for i in graph.find_modules_directly_imported_by(f"{ENGINE}.{m}")
                   if i.startswith(f"{ENGINE}.")} for m in WORKER}
    assert imports["worker"] >= {*PARTS, "slots"}
    for part in PARTS:
        assert "slots" in imports[part], part
        assert not imports[part] & {*PARTS, "worker"} - {part}, f"{part} imports {imports[part]}"
    assert not imports["slots"] & {*PARTS, "worker"}
    for m in WORKER:
        for imported in graph.find_modules_directly_imported_by(f"{ENGINE}.{m}"):
            if imported.startswith("recon."):
                chain = graph.find_shortest_chain(importer=imported, imported=f"{ENGINE}.{m}")
                assert chain is None, f"import cycle: {' -> '.join(chain or ())}"
