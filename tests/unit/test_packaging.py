"""Packaging conventions: metadata a package index shows, one version source, and the
runtime dependencies the tool really imports."""

from __future__ import annotations

import ast
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[2]


def _project() -> dict[str, object]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]  # type: ignore[no-any-return]


def test_metadata_is_complete() -> None:
    p = _project()
    assert p["readme"] == "README.md" and p["license"] == "Apache-2.0"
    assert p["license-files"] == ["LICENSE"]
    assert "Apache License" in (REPO / "LICENSE").read_text()[:200]
    assert p["authors"] and p["urls"] and len(p["classifiers"]) >= 5  # type: ignore[arg-type]
    assert p["dynamic"] == ["version"] and "version" not in p


def _imported_top_level(root: Path) -> set[str]:
    names: set[str] = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def test_unidiff_is_a_test_dependency_only() -> None:
    p = _project()
    runtime = " ".join(p["dependencies"])  # type: ignore[arg-type]
    assert "unidiff" not in runtime
    assert any("unidiff" in d for d in p["optional-dependencies"]["test"])  # type: ignore[index]
    assert "unidiff" not in _imported_top_level(REPO / "tools")


def test_suite_needs_are_declared() -> None:
    suite = " ".join(_project()["optional-dependencies"]["suite"])  # type: ignore[index]
    used = _imported_top_level(REPO / "tests" / "gpu_suites")
    assert "numpy" in suite and "pytest" in suite
    assert {"torch", "pytest"} <= used  # torch comes from `make setup-suite`
