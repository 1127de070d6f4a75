"""A local Docker image with Python, pytest and CPU torch, for the docker runner's tests.

Built with ``docker import`` from this machine's own Python installation (the interpreter,
its standard library, the shared libraries ``ldd`` names, and only the site-packages the
suites need), so nothing is pulled. Tagged by a digest of its inputs: built once per
machine, reused by later runs. Its image ID depends on the host and is never pinned.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from pathlib import Path

VERSION = "patchbake-fixtures-python/2"
PACKAGES = ("torch", "torchgen", "functorch", "pytest", "_pytest", "pluggy", "iniconfig", "packaging",
            "typing_extensions", "filelock", "sympy", "mpmath", "networkx", "jinja2",
            "markupsafe", "fsspec", "numpy", "py", "pygments", "exceptiongroup", "tomli")
_STDLIB_SKIP = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "site-packages",
                "__pycache__", "lib2to3", "pydoc_data"}
_TORCH_SKIP = {"include"}


def _site() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def image_site() -> str:
    """Where the image's interpreter (this machine's base interpreter, outside any virtual
    environment) looks for packages: the packages are placed there. Debian's python3 reads
    /usr/local/lib/python3.X/dist-packages, a source build <prefix>/lib/python3.X/site-packages."""
    exe = str(Path(sys.executable).resolve())
    r = subprocess.run([exe, "-I", "-c", "import site; print(site.getsitepackages()[0])"],
                       capture_output=True, text=True, check=True)
    return r.stdout.strip()


def _package_paths() -> list[Path]:
    site = _site()
    out = []
    for name in PACKAGES:
        for cand in (site / name, site / f"{name}.py", site / f"{name}.libs"):
            if cand.exists():
                out.append(cand)
    for d in site.glob("*.dist-info"):
        if d.name.split("-")[0].lower().replace("_", "") in {
                p.lower().replace("_", "") for p in PACKAGES}:
            out.append(d)
    return sorted(out)


def input_key() -> str:
    h = hashlib.sha256(VERSION.encode())
    h.update(sys.version.encode())
    h.update(image_site().encode())
    for p in _package_paths():
        h.update(p.name.encode() + b"\0")
    return h.hexdigest()[:20]


def _ldd(paths: list[Path]) -> set[Path]:
    libs: set[Path] = set()
    for chunk in range(0, len(paths), 200):
        r = subprocess.run(["ldd", *map(str, paths[chunk:chunk + 200])], check=False,
                           capture_output=True, text=True)
        for line in r.stdout.splitlines():
            if line.rstrip().endswith(":"):  # ldd's "<file>:" header when given several files
                continue
            part = line.split("=>")[-1].split("(")[0].strip()
            if not part.startswith("/"):
                continue
            lib = Path(os.path.normpath(part))
            # the interpreter's own and the packages' bundled libraries (numpy.libs, ...)
            # are in the image already; in a virtual environment those live under
            # sys.prefix, not sys.base_prefix
            if not any(lib.is_relative_to(p) for p in (sys.base_prefix, sys.prefix, _site())):
                libs.add(lib)
    return libs


def _walk(root: Path, skip: set[str]) -> list[Path]:
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root).as_posix()
        dirnames[:] = sorted(d for d in dirnames if d not in skip
                             and (f"{rel}/{d}" if rel != "." else d) not in skip)
        files += [Path(dirpath) / f for f in sorted(filenames) if not f.endswith(".pyc")]
    return files


def build_rootfs(out: Path) -> None:
    prefix = Path(sys.base_prefix)
    target_site = Path(image_site())
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    files = [Path(sys.executable).resolve()]
    files += sorted((prefix / "lib").glob("libpython*.so*"))
    files += _walk(prefix / "lib" / ver, _STDLIB_SKIP)
    for p in _package_paths():
        files += _walk(p, _TORCH_SKIP) if p.is_dir() else [p]
    so = [f for f in files if ".so" in f.name or f == files[0]]
    libs = _ldd(so)
    with tarfile.open(out, "w") as tar:
        added: set[str] = set()

        def add(path: Path, arc: str) -> None:
            # With the system interpreter (prefix /usr) a library can be both a package
            # file and an ldd dependency: the engine refuses a path twice in one layer.
            if arc in added:
                return
            added.add(arc)
            tar.add(str(path), arcname=arc, recursive=False)

        for f in files:
            arc = f.as_posix().lstrip("/")
            if f.is_relative_to(_site()):
                # site-packages land in the image's own prefix
                arc = (target_site / f.relative_to(_site())).as_posix().lstrip("/")
            add(f, arc)
        for lib in sorted(libs):
            add(lib.resolve(), lib.as_posix().lstrip("/"))
        for name, target in (("usr/bin/python3", files[0].as_posix()),):
            if name in added:  # the interpreter itself is /usr/bin/python3 (system python)
                continue
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
        for d in ("tmp", "root"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777
            tar.addfile(info)


def ensure_image() -> str:
    """Return the tag of the image, building it when this machine has not yet."""
    tag = f"patchbake-fixtures-python:{input_key()}"
    if subprocess.run(["docker", "image", "inspect", tag], check=False,
                      capture_output=True).returncode == 0:
        return tag
    with tempfile.TemporaryDirectory(prefix="pb-rootfs.") as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        build_rootfs(tarball)
        changes = ["--change", "ENV PATH=/usr/bin:/bin", "--change",
                   "ENV PYTHONDONTWRITEBYTECODE=1", "--change", 'CMD ["python3"]']
        subprocess.run(["docker", "import", *changes, str(tarball), tag], check=True,
                       capture_output=True)
    return tag


if __name__ == "__main__":
    print(json.dumps({"image": ensure_image()}))
