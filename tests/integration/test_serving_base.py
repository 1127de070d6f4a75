"""The serving base from the v0.25.1 lock, built twice in two fresh stores by two processes
with different HOME, TZ and umask: the same manifest digest, the one the definition pins.

Needs the lock's wheels in a store on this machine (seeded into the fresh stores by hard
link) and apt's sources (mmdebstrap resolves the locked packages again). About 3 minutes
a build here; peak disk about 10 GB (the first store is removed before the second build).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any
from pathlib import Path

import pytest
from serving_support import REPO, seed, serving_store

pytestmark = [pytest.mark.integration]


def build(store: Path, home: Path, tz: str, umask: str) -> dict[str, Any]:
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PATCHBAKE_HOME": str(store), "HOME": str(home), "TZ": tz,
           "PATCHBAKE_NO_PROGRESS": "1", "NO_COLOR": "1"}
    env.pop("PATCHBAKE_PIPELINE", None)
    cp = subprocess.run(["sh", "-c", f'umask {umask} && exec "$@"', "sh", sys.executable,
                         "-m", "patchbake", "image", "base", "--lineage", "v0.25.1", "--json"],
                        cwd=REPO, env=env, capture_output=True, text=True, timeout=1800,
                        check=False)
    assert cp.returncode == 0, cp.stderr[-3000:]
    return json.loads(cp.stdout)  # type: ignore[no-any-return]  # json's Any


def pinned_digest() -> str:
    text = (REPO / "images" / "sm89-serving-local.yaml").read_text()
    return text.split("\n  digest: ", 1)[1].split("\n", 1)[0].strip()


@pytest.mark.slow
def test_two_fresh_stores_give_the_pinned_digest(tmp_path: Path, shared_home: Path) -> None:
    source = serving_store(shared_home)
    first_store = tmp_path / "a" / "store"
    seed(source, first_store)
    first = build(first_store, tmp_path / "a" / "home", "America/Los_Angeles", "077")
    assert first["cached"] is False
    assert [x["group"] for x in first["layers"]] == ["os", "cuda", "torch", "python", "vllm"]
    again = build(first_store, tmp_path / "a" / "home", "UTC", "022")
    assert again["cached"] is True and again["digest"] == first["digest"]
    shutil.rmtree(tmp_path / "a")  # ~10 GB: gone before the second build

    second_store = tmp_path / "b" / "store"
    seed(source, second_store)
    second = build(second_store, tmp_path / "b" / "home", "Asia/Kolkata", "002")
    assert second["cached"] is False
    assert second["digest"] == first["digest"], (first["layers"], second["layers"])
    assert second["digest"] == pinned_digest()
    shutil.rmtree(tmp_path / "b")
