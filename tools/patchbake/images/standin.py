"""The offline stand-in base: the pinned vLLM sdist's Python tree laid out as
site-packages on a minimal rootfs, at the same paths as the real base.

Default variant ("plain"): two layers -- a tiny rootfs skeleton (directories, passwd,
group, os-release) and ``<site-packages>/vllm/**`` from the pristine sdist tree. It holds
no host binary at all, so its bytes (and manifest digest) depend only on the sdist and
this module: the same digest on every machine, which the offline definition pins.

"with-python" variant (for engine tests that run ``python3 /opt/patchbake/verify.py`` in
a container): a third layer with the host's busybox (``/bin/sh``) and the host's Debian
``python3`` binary, the shared libraries ``ldd`` names, and the pure-Python standard
library. Its digest depends on the host, so it is never pinned in a definition.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .. import proc
from ..config import Lineage
from ..digest import Digest
from ..errors import ImageError
from ..fsutil import cache_write, canonical_json, sha256_bytes
from ..oci import layout
from ..oci.media import OCI_CONFIG, OCI_LAYER_TAR, OCI_MANIFEST, Descriptor
from ..oci.tarwriter import FORMAT as TAR_FORMAT
from ..oci.tarwriter import Entry, file_entry, symlink_entry, with_parents, write_layer
from ..sources import fetch
from ..store import Store

VERSION = "patchbake-standin/1"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_STDLIB_SKIP = {"test", "idlelib", "tkinter", "turtledemo", "lib2to3", "ensurepip",
                "__pycache__", "site-packages", "dist-packages", "pydoc_data", "lib-dynload",
                "distutils", "unittest", "sqlite3", "curses", "dbm"}


@dataclass(frozen=True)
class StandIn:
    manifest: Descriptor
    config_digest: Digest
    layers: tuple[Digest, ...]
    files: int
    variant: str
    cached: bool


def _skeleton() -> list[Entry]:
    etc = {
        "etc/passwd": b"root:x:0:0:root:/root:/bin/sh\n",
        "etc/group": b"root:x:0:\n",
        "etc/os-release": b'NAME="patchbake stand-in"\nID=patchbake-standin\n'
                          b'PRETTY_NAME="patchbake offline stand-in base (no OS)"\n',
    }
    dirs = ["bin", "tmp", "root", "opt", "usr/bin", "usr/lib", "usr/local/bin"]
    return [file_entry(p, data=d) for p, d in etc.items()] + [Entry(d, "dir", 0o755)
                                                              for d in dirs]


def _tree_entries(root: Path, prefix: str) -> list[Entry]:
    out: list[Entry] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel_dir = Path(dirpath).relative_to(root.parent).as_posix()
        for name in sorted(filenames):
            full = Path(dirpath) / name
            rel = f"{prefix}/{rel_dir}/{name}"
            if full.is_symlink():
                out.append(symlink_entry(rel, os.readlink(full)))
            elif full.is_file():
                out.append(file_entry(rel, source=full,
                                      executable=bool(full.stat().st_mode & 0o111)))
            else:
                raise ImageError(f"{full}: not a regular file or symlink; cannot lay it out")
    return out


def _host_python_entries() -> list[Entry]:
    """The host's Debian python3 + ldd's libraries + the pure-Python stdlib, and busybox."""
    exe = Path("/usr/bin/python3").resolve()
    if not exe.is_file():
        raise ImageError("the with-python stand-in needs the host's /usr/bin/python3 "
                         "(Debian python3.11)")
    busybox = Path(proc.which("busybox")).resolve()
    ver = exe.name.removeprefix("python")
    entries: dict[str, Entry] = {}

    def add_file(src: Path, dest: str, executable: bool = False) -> None:
        entries.setdefault(dest, file_entry(dest, source=src, executable=executable))

    add_file(exe, f"usr/bin/{exe.name}", True)
    entries["usr/bin/python3"] = symlink_entry("usr/bin/python3", exe.name)
    add_file(busybox, "bin/busybox", True)
    entries["bin/sh"] = symlink_entry("bin/sh", "busybox")
    ldd = proc.run(["ldd", str(exe)]).text
    for line in ldd.splitlines():
        path = line.split("=>")[-1].split("(")[0].strip()
        if not path.startswith("/"):
            continue
        real = Path(path).resolve()
        add_file(real, real.as_posix().lstrip("/"), real.name.startswith("ld-"))
        merged = path.replace("/lib64/", "/usr/lib64/", 1) if path.startswith("/lib64/") \
            else path.replace("/lib/", "/usr/lib/", 1) if path.startswith("/lib/") else path
        if merged != real.as_posix():
            entries[merged.lstrip("/")] = symlink_entry(merged.lstrip("/"), real.as_posix())
    for link, target in (("lib", "usr/lib"), ("lib64", "usr/lib64")):
        entries[link] = symlink_entry(link, target)
    stdlib = Path(f"/usr/lib/python{ver}")
    # an (empty) lib-dynload keeps python from warning about its exec_prefix
    entries[f"usr/lib/python{ver}/lib-dynload"] = Entry(f"usr/lib/python{ver}/lib-dynload",
                                                        "dir", 0o755)
    for dirpath, dirnames, filenames in os.walk(stdlib):
        dirnames[:] = sorted(d for d in dirnames if d not in _STDLIB_SKIP)
        for name in filenames:
            full = Path(dirpath) / name
            if name.endswith(".py") and full.is_file() and not full.is_symlink():
                add_file(full, full.as_posix().lstrip("/"))
    return list(entries.values())


def _put_layer(store: Store, entries: Iterable[Entry]) -> Descriptor:
    size = 0

    def counted() -> Iterable[bytes]:
        nonlocal size
        for chunk in write_layer(with_parents(entries), 0):
            size += len(chunk)
            yield chunk

    return Descriptor(OCI_LAYER_TAR, store.put_stream(counted()), size)


def _key(tree_digest: Digest, site_packages: str, variant: str) -> str:
    # the with-python layer depends on the host and on this module's layout of it (v2)
    host = f"{sys.version} layout-2" if variant == "with-python" else ""
    return sha256_bytes(canonical_json({"v": VERSION, "tar": TAR_FORMAT, "tree": str(tree_digest),
                                        "sp": site_packages, "variant": variant,
                                        "host": host}))


def build_standin(store: Store, lineage: Lineage, site_packages: str, *,
                  variant: str = "plain", pristine: Path | None = None,
                  tree_digest: Digest | None = None, base: Path | None = None) -> StandIn:
    """Build (or find) the stand-in base in the store; returns its manifest descriptor."""
    if variant not in ("plain", "with-python"):
        raise ImageError(f"unknown stand-in variant '{variant}' (plain or with-python)")
    if pristine is None or tree_digest is None:
        fetched = fetch(lineage, store, base=base)
        pristine, tree_digest = fetched.root, fetched.tree_digest
    vllm = pristine / "vllm"
    if not vllm.is_dir():
        raise ImageError(f"{pristine} has no vllm/ package directory to lay out")
    key = _key(tree_digest, site_packages, variant)
    cache = store.root / "bakes" / f"standin-{key}.json"
    if cache.is_file():
        rec = json.loads(cache.read_bytes())
        desc = Descriptor(OCI_MANIFEST, Digest.parse(rec["manifest"]), rec["size"])
        if store.has(desc.digest):
            return StandIn(desc, Digest.parse(rec["config"]),
                           tuple(Digest.parse(d) for d in rec["layers"]), rec["files"],
                           variant, True)
    sp = site_packages.strip("/")
    tree = _tree_entries(vllm, sp)
    layers = [_put_layer(store, _skeleton()), _put_layer(store, tree)]
    if variant == "with-python":
        layers.append(_put_layer(store, _host_python_entries()))
    version = lineage.upstream.version
    config = {
        "architecture": "amd64", "os": "linux", "created": "1970-01-01T00:00:00Z",
        "config": {"Env": [PATH_ENV], "WorkingDir": "/", "Labels": {
            "org.opencontainers.image.title": "patchbake offline stand-in base",
            "org.opencontainers.image.version": f"vllm {version}",
            "dev.patchbake.standin": VERSION,
            "dev.patchbake.standin.variant": variant,
            "dev.patchbake.upstream.pin": lineage.upstream.pin,
            "dev.patchbake.upstream.tree-digest": str(tree_digest),
        }},
        "rootfs": {"type": "layers", "diff_ids": [str(d.digest) for d in layers]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": f"{VERSION} {what}"}
                    for what in ("rootfs skeleton", f"vllm {version} python tree",
                                 "host python3 and busybox")[:len(layers)]],
    }
    cdigest, csize, _ = layout.put_json(store, config)
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                "config": {"mediaType": OCI_CONFIG, "digest": str(cdigest), "size": csize},
                "layers": [d.to_json() for d in layers]}
    mdigest, msize, _ = layout.put_json(store, manifest)
    desc = Descriptor(OCI_MANIFEST, mdigest, msize)
    layout.add_ref(store, f"standin/{variant}/vllm-{version}", desc)
    cache_write(cache, canonical_json({"manifest": str(mdigest), "size": msize,
                                       "config": str(cdigest),
                                       "layers": [str(d.digest) for d in layers],
                                       "files": len(tree)}))  # a cache: skipped if refused
    return StandIn(desc, cdigest, tuple(d.digest for d in layers), len(tree), variant, False)
