"""What can make the image's Python run code before (or instead of) the verified ``vllm/``.

Verify must not be bypassable without touching ``vllm/``: Python imports ``sitecustomize``
and ``usercustomize`` from anywhere on ``sys.path``, executes ``import`` lines of every
``*.pth`` file in a site directory, imports the first ``vllm`` it finds on ``sys.path``,
and obeys start-up environment variables (``PYTHONPATH``, ``PYTHONSTARTUP``, ``PYTHONHOME``,
``PYTHONWARNINGS`` categories are imported, ``PYTHONPYCACHEPREFIX`` moves the bytecode it
trusts, ``LD_PRELOAD`` loads native code into the interpreter). Where to look comes from the
image definition (its site-packages: the interpreter's version and prefix) plus the
standard locations of that version, never from the image under test.

Every finding is a failure unless the definition's ``startup_allow`` names it with its
content digest (a file: sha256 of its bytes; an environment variable: sha256 of
``NAME=VALUE``, keyed ``env:NAME``). A hook that is a symlink is refused: what it points
at is not a checked file.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..oci.view import View

_VERSION = re.compile(r"(?:^|/)python(3\.\d+)(?:/|$)")
HOOK_MODULES = ("sitecustomize", "usercustomize")
STARTUP_ENV = ("PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "PYTHONUSERBASE",
               "PYTHONPLATLIBDIR", "PYTHONPYCACHEPREFIX", "PYTHONWARNINGS", "PYTHONINSPECT",
               "PYTHONEXECUTABLE", "PYTHONBREAKPOINT", "LD_PRELOAD", "LD_AUDIT")
# bases set these themselves: a failure only when the image differs from its base
# (PATH picks the python3 the entrypoint runs, and /opt/patchbake/ may be written above
# the base; PATCHBAKE_PYTHON is the start-up check's own interpreter)
BASE_ENV = ("LD_LIBRARY_PATH", "PATH", "PATCHBAKE_PYTHON")
_BASE_ENV_WHY = {"LD_LIBRARY_PATH": "other native libraries load",
                 "PATH": "another executable may run as python3 or the server",
                 "PATCHBAKE_PYTHON": "the start-up check runs another interpreter"}
_CONFIG_KEYS = ("Entrypoint", "Cmd", "User", "WorkingDir", "Shell", "Healthcheck", "OnBuild")
OTHER_VERSIONS = tuple(f"3.{n}" for n in range(8, 15))  # 3.8 .. 3.14


@dataclass(frozen=True)
class Places:
    """Layer paths (no leading '/') where the image's Python looks at start-up."""

    site_dirs: tuple[str, ...]  # *.pth files are read here
    path_dirs: tuple[str, ...]  # on sys.path: modules import from here (site dirs included)
    zips: tuple[str, ...]  # pythonXY.zip: on sys.path when present

    def tracked(self) -> tuple[str, ...]:
        """Scan prefixes/patterns (see ``oci.view``) covering every start-up hook."""
        out = [f"{d}/*.pth" for d in self.site_dirs]
        out += [f"{d}/{m}" for d in self.path_dirs for m in (*HOOK_MODULES, "vllm")]
        return tuple(dict.fromkeys([*out, *self.zips]))


def places(site_packages: str, env: dict[str, str]) -> Places:
    """Where Python of the definition's version looks, under the usual prefixes."""
    sp = site_packages.strip("/")
    m = _VERSION.search(sp)
    # the definition's version first, then every other CPython 3 an image may also carry
    versions = list(dict.fromkeys([*([m.group(1)] if m else []), *OTHER_VERSIONS]))
    prefix = sp.split("/lib/python")[0] if "/lib/python" in sp else ""
    prefixes = list(dict.fromkeys(p for p in (prefix, "usr", "usr/local") if p))
    site = [sp]
    stdlib: list[str] = []
    zips: list[str] = []
    for p in prefixes:
        site.append(f"{p}/lib/python3/dist-packages")
        for v in versions:
            site += [f"{p}/lib/python{v}/site-packages", f"{p}/lib/python{v}/dist-packages",
                     f"{p}/lib64/python{v}/site-packages"]
            stdlib += [f"{p}/lib/python{v}", f"{p}/lib/python{v}/lib-dynload"]
            zips.append(f"{p}/lib/python{v.replace('.', '')}.zip")
    for v in versions:  # root's user site (other users' homes are not looked through)
        site.append(f"root/.local/lib/python{v}/site-packages")
    extra = [d.strip("/") for d in env.get("PYTHONPATH", "").split(":") if d.strip("/")]
    site = list(dict.fromkeys(site))
    return Places(tuple(site), tuple(dict.fromkeys([*extra, *stdlib, *site])), tuple(zips))


def env_of(config: dict[str, Any]) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in (config.get("config") or {}).get("Env") or []:
        k, _, v = str(item).partition("=")
        env[k] = v
    return env


def env_digest(name: str, value: str) -> str:
    return hashlib.sha256(f"{name}={value}".encode()).hexdigest()


def _is_hook(path: str, pl: Places, sp: str, dirs: frozenset[str]) -> str | None:
    """Why ``path`` (in the view) changes what Python runs at start-up, or None."""
    if path.startswith(f"{sp}/vllm/"):
        return None  # the verified package itself
    parent, _, name = path.rpartition("/")
    if name.endswith(".pth") and parent in pl.site_dirs:
        return "a .pth file in a site directory (its import lines run at start-up)"
    if path in pl.zips:
        return "a zip on sys.path (modules in it are importable)"
    parts = path.split("/")
    for k in range(1, len(parts)):
        if "/".join(parts[:k]) not in dirs:
            continue
        head = parts[k]
        mod = head.split(".", 1)[0]
        if mod in HOOK_MODULES:
            return f"{mod} (imported by site at every start-up)"
        if mod == "vllm" and not head.endswith((".dist-info", ".egg-info")):
            return "a second 'vllm' on sys.path (it may shadow the verified package)"
    return None


def _hooks(view: View, pl: Places, sp: str) -> list[tuple[str, str]]:
    """(path, why) of every start-up hook in the view, sorted by path."""
    dirs = frozenset(pl.path_dirs)
    pkg = f"{sp}/vllm/"  # the verified package, most of the view: _is_hook passes it over
    out = []
    for path in view.files:
        why = None if path.startswith(pkg) else _is_hook(path, pl, sp, dirs)
        if why is not None:
            out.append((path, why))
    return sorted(out)


def _link_problem(view: View, link_sha256: str, shown: str,
                  allow: dict[str, str]) -> str | None:
    """A hook that is a symlink (Debian's ``sitecustomize.py`` -> ``/etc/python3.X/...``)
    passes only when it points, by an absolute path, at a regular file of the image that the
    definition allow-lists too, with the content the hook's own entry names: the link is
    checked by its target text (the view hashes a symlink's target) and the file by its
    bytes. Allow-listed paths are scanned (``allowed_paths``), so the target is in the view."""
    target = next((p for p in allow if p.startswith("/")
                   and hashlib.sha256(p.encode()).hexdigest() == link_sha256), None)
    info = view.files.get(target.lstrip("/")) if target else None
    if target is None or info is None or info.kind != "file":
        return ("it is a symlink whose target is not an allow-listed file of the image "
                "(allow-list the target path too)")
    if allow.get(shown) != info.sha256 or allow.get(target) != info.sha256:
        return (f"it links to {target}, whose content is not the allow-listed one "
                f"[sha256:{info.sha256}]")
    return None


def _hook_problem(view: View, path: str, why: str, allow: dict[str, str]) -> str | None:
    info = view.files[path]
    shown = "/" + path
    if info.kind == "symlink":
        problem = _link_problem(view, info.sha256, shown, allow)
        return f"{shown}: {why}; {problem}" if problem else None
    if info.kind != "file":  # a device or the like is not a checked file
        return f"{shown}: {why}; it is a {info.kind} whose content cannot be checked"
    if allow.get(shown) != info.sha256:
        return (f"{shown}: {why}; not allow-listed by the definition"
                + (" (allow-list names another sha256)" if shown in allow else "")
                + f" [sha256:{info.sha256}]")
    return None


def allowed_paths(allow: Iterable[tuple[str, str]]) -> tuple[str, ...]:
    """The allow-listed files as scan prefixes: a symlinked hook's target is read too."""
    return tuple(p.lstrip("/") for p, _ in allow if p.startswith("/"))


def findings(view: View, pl: Places, sp: str, allow: dict[str, str], env: dict[str, str],
             base_config: dict[str, Any] | None, config: dict[str, Any],
             wrapped: dict[str, Any] | None = None,
             declared_env: dict[str, str] | None = None) -> list[str]:
    """One line per start-up change that the definition does not allow-list. ``wrapped``
    is the base config as bake rewrites it (the start-up check wrapper in front of the
    base's entrypoint): the image's entrypoint and cmd must be exactly that, so the
    wrapper cannot be dropped. ``declared_env``: variables the definition has bake set
    (the engine backend's ``TORCH_CUDA_ARCH_LIST``), admitted with exactly that value."""
    out = [problem for path, why in _hooks(view, pl, sp)
           if (problem := _hook_problem(view, path, why, allow))]
    seen: dict[str, str] = {}
    for item in (config.get("config") or {}).get("Env") or []:
        k, _, v = str(item).partition("=")
        if k in seen and seen[k] != v:
            out.append(f"image config Env sets {k} twice ({seen[k]!r}, then {v!r}): getenv "
                       "takes the first, Python's os.environ and the shells the last")
        seen.setdefault(k, v)
    for name in STARTUP_ENV:
        if name in env and allow.get(f"env:{name}") != env_digest(name, env[name]):
            out.append(f"image config Env {name}={env[name]!r} changes what Python runs at "
                       "start-up; not allow-listed by the definition")
    if base_config is not None:
        out += _config_changes(env, allow, base_config, config, wrapped, declared_env or {})
    return out


def _config_changes(env: dict[str, str], allow: dict[str, str], base_config: dict[str, Any],
                    config: dict[str, Any], wrapped: dict[str, Any] | None,
                    declared: dict[str, str]) -> list[str]:
    """The image's config against the one bake writes: the base's Env, every variable
    (programs read settings at start: vLLM's ``VLLM_*`` name files it loads and callables it
    imports), and the base's entrypoint behind the start-up wrapper. Allow-listed
    variables (``env:NAME`` with the digest of ``NAME=VALUE``) may differ."""
    out = []
    base_env = env_of(base_config)
    for name in sorted({*env, *base_env} - set(STARTUP_ENV)):
        if env.get(name) != base_env.get(name) and \
                (name not in declared or env.get(name) != declared[name]) and \
                allow.get(f"env:{name}") != env_digest(name, env.get(name, "")):
            why = _BASE_ENV_WHY.get(name, "what the programs of the image read at start changes")
            out.append(f"image config Env {name}={env.get(name)!r} differs from the "
                       f"base's {base_env.get(name)!r}: {why}")
    mine, base = config.get("config") or {}, base_config.get("config") or {}
    baked = (wrapped or {}).get("config") or base
    for key in _CONFIG_KEYS:  # an engine writes "" or null where a base has nothing
        if (mine.get(key) or None) != (baked.get(key) or None):
            whose = "the one bake writes (the start-up wrapper in front of the base's)" \
                if key in ("Entrypoint", "Cmd") and wrapped else "the base's"
            out.append(f"image config {key} {mine.get(key)!r} differs from {whose} "
                       f"{baked.get(key)!r}: the image runs something else at start")
    return out


def allow_list(entries: Iterable[tuple[str, str]]) -> dict[str, str]:
    return {k: v.removeprefix("sha256:") for k, v in entries}
