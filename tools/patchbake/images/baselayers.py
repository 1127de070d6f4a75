"""The layers of the serving base: which wheel goes in which layer, and each layer written
(or found) in the store.

Layers run from what changes least to what changes most, so that two bases share the
bottom of their stacks (an engine shares a layer only when every layer below it is the
same too): the Debian root filesystem; the CUDA libraries (``nvidia-*`` and ``cuda-*``
wheels); torch (torch, triton, torchvision, torchaudio); every other dependency; vLLM.

Each layer is a function of its own inputs only (its wheels' sha256, the install scheme,
the epoch and the writers' versions) and is remembered under ``bakes/servingbase-layer-*``
by that key, so a lock that changes one wheel rewrites one layer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from ..digest import Digest
from ..fsutil import cache_write, canonical_json, sha256_bytes
from ..oci.media import OCI_LAYER_TAR, Descriptor
from ..oci.tarwriter import FORMAT as TAR_FORMAT
from ..oci.tarwriter import Entry, with_parents, write_layer
from ..sources.lockfile import Wheel
from ..store import Store
from . import wheelinstall
from .wheelinstall import Conflict, Scheme, WheelInstall

TORCH = ("torch", "triton", "torchvision", "torchaudio")
GROUPS = ("os", "cuda", "torch", "python", "vllm")  # bottom to top; also the install order
GROUP_TITLES = {"os": "Debian root filesystem", "cuda": "CUDA libraries (nvidia-*, cuda-*)",
                "torch": "torch, triton, torchvision, torchaudio",
                "python": "the other Python dependencies", "vllm": "vLLM"}

Advance = Callable[[int], None]


def group_of(project: str) -> str:
    """The layer a wheel (by its normalized project name) is installed in."""
    if project.startswith(("nvidia-", "cuda-")):
        return "cuda"
    if project in TORCH:
        return "torch"
    return "vllm" if project == "vllm" else "python"


@dataclass(frozen=True)
class Layer:
    group: str
    descriptor: Descriptor
    files: int
    wheels: int
    cached: bool

    def to_json(self) -> dict[str, object]:
        return {"group": self.group, "title": GROUP_TITLES[self.group],
                "digest": str(self.descriptor.digest), "size": self.descriptor.size,
                "files": self.files, "wheels": self.wheels, "cached": self.cached}


def layer_key(group: str, inputs: object, epoch: int) -> str:
    return sha256_bytes(canonical_json({"group": group, "inputs": inputs, "epoch": epoch,
                                        "tar": TAR_FORMAT, "wheels": wheelinstall.VERSION}))


def _cache_file(store: Store, key: str) -> Path:
    return store.root / "bakes" / f"servingbase-layer-{key}.json"


def cached_layer(store: Store, group: str, key: str, wheels: int) -> Layer | None:
    try:
        rec = json.loads(_cache_file(store, key).read_bytes())
        digest = Digest.parse(rec["digest"])
        if store.has(digest):
            return Layer(group, Descriptor(OCI_LAYER_TAR, digest, int(rec["size"])),
                         int(rec["files"]), wheels, True)
    except (OSError, ValueError, KeyError, TypeError):
        pass  # absent or damaged: the layer is written again
    return None


def write(store: Store, group: str, key: str, entries: Iterable[Entry], epoch: int,
          wheels: int, advance: Advance) -> Layer:
    """Write the layer into the store and remember it under ``key``."""
    ordered = with_parents(entries)
    size = 0

    def counted() -> Iterator[bytes]:
        nonlocal size
        for chunk in write_layer(ordered, epoch):
            size += len(chunk)
            advance(len(chunk))
            yield chunk

    desc = Descriptor(OCI_LAYER_TAR, store.put_stream(counted()), size)
    files = sum(1 for e in ordered if e.kind != "dir")
    cache_write(_cache_file(store, key), canonical_json(
        {"digest": str(desc.digest), "size": size, "files": files}))
    return Layer(group, desc, files, wheels, False)


def plan_wheels(stack: ExitStack, wheels: list[Wheel], blobs: dict[str, Path],
                scheme: Scheme) -> dict[str, WheelInstall]:
    """Every wheel's installed files, its zip held open in ``stack`` until written."""
    out = {}
    for w in wheels:
        zf = stack.enter_context(wheelinstall.opened(blobs[w.name], w.filename))
        out[w.name] = wheelinstall.install_wheel(zf, w.filename, scheme)
    return out


def install_order(wheels: Iterable[Wheel]) -> list[Wheel]:
    return sorted(wheels, key=lambda w: (GROUPS.index(group_of(w.name)), w.name))


def conflicts_of(plans: dict[str, WheelInstall], order: list[Wheel]) -> list[Conflict]:
    """Paths two wheels write with different bytes, over the whole install order."""
    return wheelinstall.merge([plans[w.name] for w in order])[1]
