"""Helpers for the serving-base tests: find a store that already holds the lock's wheels
(they are ~5 GB; the tests never download them), and seed fresh stores from it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "images" / "locks" / "vllm-0.25.1.lock"


def _blob(store: Path, digest: str) -> Path:
    return store / "blobs" / "sha256" / digest.removeprefix("sha256:")


def lock_digests() -> tuple[list[str], list[str]]:
    """(wheel digests, Debian package digests) of the v0.25.1 lock."""
    doc = json.loads(LOCK.read_bytes())
    return ([w["sha256"] for w in doc["wheels"]],
            [p["sha256"] for p in doc["os"]["packages"]])


def serving_store(shared_home: Path) -> Path:
    """The first store holding every wheel of the lock: PATCHBAKE_SERVING_HOME, the user's
    store (PATCHBAKE_HOME or ~/.cache/patchbake), the tests' shared store; else skip."""
    if not LOCK.is_file():
        pytest.skip(f"{LOCK.relative_to(REPO)} is not in this checkout")
    wheels, _ = lock_digests()
    candidates = [os.environ.get("PATCHBAKE_SERVING_HOME"), os.environ.get("PATCHBAKE_HOME"),
                  str(Path.home() / ".cache" / "patchbake"), str(shared_home)]
    for c in candidates:
        if c and all(_blob(Path(c), d).is_file() for d in wheels):
            return Path(c)
    pytest.skip(f"the {len(wheels)} wheels of {LOCK.name} are not in any store here "
                "(`make serving-image` or `patchbake image base` fetches them, about 5 GB)")


def seed(source: Path, fresh: Path) -> None:
    """Give ``fresh`` the lock's wheels and Debian packages held in ``source`` (hard links:
    blobs are immutable; a copy where the two are on different file systems)."""
    wheels, debs = lock_digests()
    for d in [*wheels, *debs]:
        src = _blob(source, d)
        if not src.is_file():
            continue
        dest = _blob(fresh, d)
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src, dest)
        except OSError:
            shutil.copyfile(src, dest)
