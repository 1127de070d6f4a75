"""What packaging tools show a newcomer: the wheel's metadata names its license the way
current tools read it (License-Expression, Metadata 2.4), and no invented project URL."""

from __future__ import annotations

import email.parser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration]
REPO = Path(__file__).resolve().parents[2]


def test_metadata_names_the_license(tmp_path: Path) -> None:
    src = tmp_path / "src"
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(REPO / "tools" / "patchbake", src / "tools" / "patchbake",
                    ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "meta"
    out.mkdir()
    r = subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta; "
                        "print(build_meta.prepare_metadata_for_build_wheel(sys.argv[1]))",
                        str(out)], cwd=src, capture_output=True, text=True, timeout=300,
                       check=False)
    assert r.returncode == 0, r.stderr
    meta = email.parser.Parser().parsestr(
        (out / r.stdout.strip().splitlines()[-1] / "METADATA").read_text())
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    assert meta["Metadata-Version"] >= "2.4"
    assert meta.get_all("Project-URL") == ["Upstream (vLLM), https://github.com/vllm-project/vllm"]
