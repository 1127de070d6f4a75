"""Shared helpers for the images tests: a tiny repository whose upstream is a local
directory (so fetch is hermetic), a fake patched tree, and a definition pinned to the
stand-in built from that upstream."""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path

from patchbake.digest import Digest
from patchbake import config
from patchbake.images.standin import build_standin
from patchbake.sources import fetch
from patchbake.store import Store

UPSTREAM = {
    "vllm/__init__.py": b"from vllm._version import __version__\n",
    "vllm/_version.py": b"__version__ = '0.25.1'\n",
    "vllm/envs.py": b"A = 1\n" * 50,
    "vllm/sampling_params.py": b"class SamplingParams:\n    pass\n",
    "vllm/scripts.py": b"def main():\n    pass\n",
    "vllm/sub/topk.py": b"def topk(x):\n    return sorted(x)[:1]\n",
    "setup.py": b"from setuptools import setup\nsetup()\n",
}
PATCHED = {
    "vllm/envs.py": b"A = 1\n" * 50 + b"B = 2\n",
    "vllm/sub/topk.py": b"def topk(x):\n    return sorted(x, key=lambda v: (v, 0))[:1]\n",
    "vllm/new_module.py": b"X = 1\n",
}
DELETED = frozenset({"vllm/scripts.py"})
SP = "/usr/local/lib/python3.12/dist-packages"


@dataclass(frozen=True)
class FakePatched:
    root: Path
    files: dict[str, str]
    deleted: frozenset[str]
    patch_sha256: str
    files_sha256: str
    tree_digest: Digest
    pristine_digest: Digest


def write_tree(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


PIPELINE = """version: 1
name: test
lineages:
  v0.25.1:
    name: topk
    upstream:
      kind: path
      package: vllm
      version: 0.25.1
      path: upstream
      generated: [vllm/_version.py]
    patch: patch/topk-v0.25.1.patch
    files: patch/FILES.txt
    source_record: patch/SOURCE
images:
  offline: images/offline.yaml
{extra}"""

DEFINITION = """version: 1
base:
  source: standin
  name: patchbake/standin-vllm:0.25.1
  digest: {digest}
site_packages: {sp}
mode: {mode}
{more}"""


@dataclass
class Repo:
    root: Path
    store: Store
    patched: FakePatched
    standin_digest: Digest

    @property
    def pipeline(self) -> config.Pipeline:
        return config.load(self.root / "pipeline.yaml")

    def define(self, name: str, text: str) -> None:
        (self.root / "images" / f"{name}.yaml").write_text(text)
        p = self.root / "pipeline.yaml"
        entry = f"  {name}: images/{name}.yaml\n"
        if entry not in p.read_text():  # redefining rewrites the file only (no duplicate key)
            p.write_text(p.read_text().replace("images:\n", f"images:\n{entry}"))


def make_repo(tmp: Path, store_dir: Path | None = None, patched: dict[str, bytes] | None = None,
              mode: str = "overlay") -> Repo:
    root = tmp / "repo"
    write_tree(root / "upstream", UPSTREAM)
    (root / "images").mkdir(parents=True, exist_ok=True)
    (root / "pipeline.yaml").write_text(PIPELINE.format(extra=""))
    store = Store.open(store_dir or tmp / "store")
    pipeline = config.load(root / "pipeline.yaml")
    lin = pipeline.lineage()
    fetched = fetch(lin, store, base=root)
    proot = tmp / "patched"
    if not proot.exists():
        shutil.copytree(fetched.root, proot)
        for d in DELETED:
            (proot / d).unlink()
        write_tree(proot, patched or PATCHED)
    files = {rel: hashlib.sha256((proot / rel).read_bytes()).hexdigest()
             for rel in (patched or PATCHED)}
    fake = FakePatched(proot, files, DELETED, "a" * 64, "b" * 64, Digest.from_hex("c" * 64),
                       fetched.tree_digest)
    s = build_standin(store, lin, SP, base=root)
    (root / "images" / "offline.yaml").write_text(
        DEFINITION.format(digest=s.manifest.digest, sp=SP, mode=mode, more=""))
    return Repo(root, store, fake, s.manifest.digest)
