"""The layering of docs/architecture.md, held on every import the package makes.

The layers are read from the one place they are declared, ``[tool.importlinter]`` in
pyproject.toml (``make lint`` runs import-linter on it too). This test reads every
``import`` statement of the package with ``ast`` -- at module level, inside functions and
under ``TYPE_CHECKING`` alike, since a lazy import across a layer is still an import -- and
asserts that no module imports a module of a higher layer, and that no two modules import
each other, directly or through others.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tools" / "patchbake"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports_of(source: bytes, name: str, is_package: bool) -> set[str]:
    """Every patchbake module the module ``name`` imports, wherever the statement stands
    (``from X import y`` counts X and X.y: the graph keeps the one that is a module)."""
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "patchbake")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "patchbake":
                continue
            found.add(target)
            found.update(f"{target}.{a.name}" for a in node.names)
    return found


def import_graph() -> dict[str, set[str]]:
    # data/ holds files baked into images (verify.py runs there on the image's python3),
    # not modules of the package: nothing imports them
    paths = sorted(p for p in PACKAGE.rglob("*.py") if "data" not in p.relative_to(PACKAGE).parts)
    modules = {_module_name(p) for p in paths}
    graph: dict[str, set[str]] = {}
    for p in paths:
        me = _module_name(p)
        # an import of a package's __init__ (``from . import x``) names the package itself:
        # kept only where it is a module we know, and never the importer's own ancestors
        imported = _imports_of(p.read_bytes(), me, p.name == "__init__.py")
        graph[me] = {t for t in imported if t in modules and t != me
                     and not me.startswith(t + ".")}
    return graph


def declared_layers() -> list[list[str]]:
    """Top layer first; each layer a list of module names under ``patchbake``."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers"]
    return [[m.strip() for m in layer.replace("|", ":").split(":")]
            for layer in contract["layers"]]


def layer_of(module: str, layers: list[list[str]]) -> int | None:
    parts = module.split(".")
    if len(parts) < 2:
        return None  # the package itself (``from .. import __version__``): below everything
    for depth, names in enumerate(layers):
        if parts[1] in names:
            return depth
    raise AssertionError(f"{module} is in no layer of pyproject.toml's [tool.importlinter]")


def upward_imports(graph: Mapping[str, Iterable[str]],
                   layers: list[list[str]]) -> list[str]:
    bad = []
    for importer, targets in sorted(graph.items()):
        mine = layer_of(importer, layers)
        for target in sorted(targets):
            theirs = layer_of(target, layers)
            if mine is not None and theirs is not None and theirs < mine:
                bad.append(f"{importer} imports {target} (a higher layer)")
    return bad


def reachable(graph: Mapping[str, Iterable[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        v = todo.pop()
        if v not in seen:
            seen.add(v)
            todo.extend(graph.get(v, ()))
    return seen


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or through others."""
    reach = {v: reachable(graph, v) for v in graph}
    groups = {tuple(sorted({v} | {w for w in reach[v] if v in reach.get(w, ())}))
              for v in graph if v in reach[v]}
    return sorted(list(g) for g in groups)


def test_no_module_imports_a_higher_layer() -> None:
    assert upward_imports(import_graph(), declared_layers()) == []


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_every_module_is_in_a_layer() -> None:
    layers = declared_layers()
    for module in import_graph():
        layer_of(module, layers)  # raises for a module no layer names


def test_the_checks_can_fail() -> None:
    """A lazy import of the face from the base, and a pair importing each other, are found."""
    layers = [["cli"], ["release"], ["store"]]
    graph = {"patchbake.store": {"patchbake.cli"}, "patchbake.release.a": {"patchbake.release.b"},
             "patchbake.release.b": {"patchbake.release.a"}, "patchbake.cli": set()}
    assert upward_imports(graph, layers) == [
        "patchbake.store imports patchbake.cli (a higher layer)"]
    assert cycles(graph) == [["patchbake.release.a", "patchbake.release.b"]]
    with pytest.raises(AssertionError, match="in no layer"):
        layer_of("patchbake.nowhere", layers)


def test_lazy_and_type_checking_imports_are_read() -> None:
    source = b"""
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from ..release import ledger
def f():
    from ..cli import main
    import patchbake.mainjob
"""
    found = _imports_of(source, "patchbake.images.bake", False)
    assert {"patchbake.release.ledger", "patchbake.cli.main", "patchbake.mainjob"} <= found
