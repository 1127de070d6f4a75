"""`make lint`'s two checks, run where the tools are installed: STYLE.md enforced by
ruff (bugbear, complexity <= 10, no subprocess outside proc.py) and mypy strict over the
package and the tests. A violation anywhere fails this test with the tool's report."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv", [["ruff", "check", "tools", "tests", "bench"], ["mypy"],
                                  ["lint-imports"]],
                         ids=["ruff", "mypy", "import-linter"])
def test_lint_passes(argv: list[str]) -> None:
    if shutil.which(argv[0]) is None:
        pytest.skip(f"{argv[0]} is not installed (make lint installs it)")
    r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600,
                       check=False)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_ruff_refuses_subprocess_outside_proc(tmp_path: Path) -> None:
    """The ban is live: a library module importing subprocess is a finding (TID251)."""
    if shutil.which("ruff") is None:
        pytest.skip("ruff is not installed (make lint installs it)")
    bad = tmp_path / "library_module.py"
    bad.write_text("import subprocess\n\nsubprocess.run(['true'], check=True)\n")
    r = subprocess.run(["ruff", "check", "--no-cache", "--config",
                        str(ROOT / "pyproject.toml"), str(bad)], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode != 0 and "TID251" in r.stdout, r.stdout
