from __future__ import annotations

import recon


def test_public_api__all_is_sorted_and_complete() -> None:
    assert recon.__all__ == sorted(recon.__all__)
    for name in recon.__all__:
        assert hasattr(recon, name), name
    public = {n for n in vars(recon) if not n.startswith("_") and n[0].isupper()}
    assert public <= set(recon.__all__)


def test_public_api__engine_does_not_import_payments_or_adapters() -> None:
    import ast
    from pathlib import Path

    engine = Path(recon.__file__).parent / "engine"
    for path in engine.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert not name.startswith(("psp_adapters", "recon.payments", "recon.reconcile", "recon.classify",
                                            "httpx")), f"{path.name} imports {name}"
