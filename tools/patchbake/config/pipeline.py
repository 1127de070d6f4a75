"""pipeline.yaml: the instance. Validated once into frozen objects.

A pipeline holds one or more *lineages* (an upstream pin with its own patch, FILES.txt and
source record), plus image definitions, fixture suites and release channels. Commands take
``--lineage``; the default is the newest upstream version.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..errors import ConfigError, LineageError, shown
from . import channels as channels_section
from . import signing as signing_section
from . import suites as suites_section
from .channels import Channel
from .images import Definition
from .schema import Field, Schema, one_of, sha256_check, suggest, validate
from .signing import Signing
from .suites import Suite
from .yamlread import load_file

PIPELINE_FILE = "pipeline.yaml"
SOURCE_KINDS = ("index", "url", "path", "git")


def _commit_check(value: Any) -> str | None:
    if not re.fullmatch(r"[0-9a-f]{40}", str(value)):
        return "must be a full 40-hex-digit commit id (tags and branches move)"
    return None


UPSTREAM_SCHEMA = Schema({
    "kind": Field(str, required=True, check=one_of(*SOURCE_KINDS),
                  help="index, url, path or git"),
    "package": Field(str, default="vllm"),
    "version": Field(str, required=True),
    "filename": Field(str),
    "sha256": Field(str, check=sha256_check),
    "url": Field(str),
    "path": Field(str),
    "repo": Field(str),
    "commit": Field(str, check=_commit_check),
    "strip": Field(str, help="top-level directory inside the archive"),
    "generated": Field(list, default=[], help="paths generated at build time", items=str),
    "pins": Field(dict, default={}, help="what the release pins (e.g. torch: 2.14.0); suites "
                                         "record it beside what they ran with"),
})

LINEAGE_SCHEMA = Schema({
    "upstream": Field(dict, required=True),
    "patch": Field(str, required=True, help="path of the canonical patch"),
    "files": Field(str, required=True, help="path of FILES.txt"),
    "source_record": Field(str, required=True, help="path of the SOURCE record"),
    "series": Field(str, default=None),
    "lock": Field(str, default=None, help="the serving base's lock (`patchbake lock`)"),
    "name": Field(str, required=True, help="patch name, as in <name>-v<version>.patch"),
})

PIPELINE_SCHEMA = Schema({
    "version": Field(int, required=True, check=lambda v: None if v == 1 else "must be 1"),
    "name": Field(str, required=True),
    "lineages": Field(dict, required=True),
    "default_lineage": Field(str),
    "images": Field(dict, default={}),
    "suites": Field(dict, default={}),
    "channels": Field(dict, default={}),
    "signing": Field(dict, default={}),
})


@dataclass(frozen=True, slots=True)
class Upstream:
    kind: str
    package: str
    version: str
    filename: str | None
    sha256: str | None
    url: str | None
    path: str | None
    repo: str | None
    commit: str | None
    strip: str | None
    generated: tuple[str, ...]
    pins: tuple[tuple[str, str], ...] = ()

    @property
    def pin(self) -> str:
        """One-line identity of the upstream: what FILES.txt headers and records quote."""
        if self.kind == "git":
            return f"{self.package}=={self.version} git:{self.commit}"
        return f"{self.package}=={self.version} sha256:{self.sha256}"


@dataclass(frozen=True, slots=True)
class Lineage:
    key: str
    name: str
    upstream: Upstream
    patch: Path
    files: Path
    source_record: Path
    series: Path | None
    lock: Path | None = None  # the serving base's lock file (sources/lockfile.py)


@dataclass(frozen=True, slots=True)
class Pipeline:
    path: Path
    root: Path
    name: str
    lineages: Mapping[str, Lineage]
    default_lineage: str
    # definition name -> its file, as declared under the repository root; the file is read
    # (config.images) by the command that uses the definition, so a definition being written
    # (after `image standin` gave its base's digest) does not stop the other commands
    images: Mapping[str, Path]
    suites: Mapping[str, Suite]
    channels: Mapping[str, Channel]  # in pipeline.yaml's order
    signing: Signing

    def lineage(self, key: str | None = None) -> Lineage:
        k = key or self.default_lineage
        if k not in self.lineages:
            raise ConfigError(
                f"{self.path.name}: no lineage '{k}'{suggest(k, list(self.lineages))}"
                f" (lineages: {', '.join(sorted(self.lineages))})"
            )
        return self.lineages[k]

    def lineage_for(self, definition: Definition | None, requested: str | None) -> Lineage:
        """The lineage an image of ``definition`` is baked, verified or probed against: the
        one the definition names; ``--lineage`` naming another is refused, so a bake, a
        suite's pristine probe, a verify or a signature never uses another upstream's tree.
        Without a definition (or one naming none) it is the requested or default lineage."""
        if definition is None or not definition.lineage:
            return self.lineage(requested)
        bound = definition.lineage
        if requested and requested != bound:
            raise LineageError(f"image definition '{definition.name}' ({definition.path.name}) "
                               f"bakes lineage {bound}; --lineage {requested} names another "
                               "upstream", hint=f"drop --lineage or pass --lineage {bound}")
        return self.lineage(bound)


def version_key(v: str) -> tuple[Any, ...]:
    parts = re.split(r"[.\-+]", v.lstrip("v"))
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts)


def _upstream(raw: dict[str, Any], where: str, source: str) -> Upstream:
    u = validate(raw, UPSTREAM_SCHEMA, where, source)
    need = {"index": ("filename", "sha256"), "url": ("url", "sha256"), "path": ("path",),
            "git": ("repo", "commit")}[u["kind"]]
    for key in need:
        if not u[key]:
            raise ConfigError(f"{source}: missing required key '{where}.{key}' "
                              f"(needed by kind '{u['kind']}')")
    return Upstream(
        kind=u["kind"], package=u["package"], version=u["version"], filename=u["filename"],
        sha256=u["sha256"], url=u["url"], path=u["path"], repo=u["repo"], commit=u["commit"],
        strip=u["strip"], generated=tuple(u["generated"]),
        pins=_pins(u["pins"], f"{where}.pins", source),
    )


def _pins(raw: dict[Any, Any], where: str, source: str) -> tuple[tuple[str, str], ...]:
    for k, v in raw.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise ConfigError(f"{source}: '{where}' maps package names to version strings "
                              f"(got {shown(k)}: {shown(v)})")
    return tuple(sorted(raw.items()))


def _images(raw: dict[str, Any], root: Path, source: str) -> Mapping[str, Path]:
    out: dict[str, Path] = {}
    for name, rel in raw.items():
        if not isinstance(rel, str):
            raise ConfigError(f"{source}: 'images.{name}' must be the path of a "
                              f"definition file, got {type(rel).__name__}")
        out[str(name)] = root / rel
    return MappingProxyType(out)


def parse(data: Any, path: Path) -> Pipeline:
    source = str(path.name)
    if data is None:
        raise ConfigError(f"{path} is empty (no YAML document, or only comments)",
                          hint="`patchbake init --vllm VERSION` writes a new one; "
                               "docs/pipeline.md describes every key")
    top = validate(data, PIPELINE_SCHEMA, "", source)
    root = path.parent.resolve()
    lineages: dict[str, Lineage] = {}
    for key, raw in top["lineages"].items():
        where = f"lineages.{key}"
        lin = validate(raw, LINEAGE_SCHEMA, where, source)
        up = _upstream(lin["upstream"], f"{where}.upstream", source)
        lineages[str(key)] = Lineage(
            key=str(key), name=lin["name"], upstream=up,
            patch=root / lin["patch"], files=root / lin["files"],
            source_record=root / lin["source_record"],
            series=(root / lin["series"]) if lin["series"] else None,
            lock=(root / lin["lock"]) if lin["lock"] else None,
        )
    if not lineages:
        raise ConfigError(f"{source}: 'lineages' must name at least one lineage")
    # Each lineage owns its patch, FILES.txt and SOURCE: two sharing one would overwrite
    # each other's on export, and the guard would check one against the other's pin.
    owner: dict[Path, str] = {}
    for each in lineages.values():
        for what, owned in (("patch", each.patch), ("files", each.files),
                            ("source_record", each.source_record), ("series", each.series),
                            ("lock", each.lock)):
            if owned is None:
                continue
            other = owner.setdefault(owned, f"lineages.{each.key}.{what}")
            if other != f"lineages.{each.key}.{what}":
                raise ConfigError(f"{source}: 'lineages.{each.key}.{what}' names "
                                  f"{owned.relative_to(root) if owned.is_relative_to(root) else owned}"
                                  f", which '{other}' names too: each lineage needs its own "
                                  "patch, FILES.txt, SOURCE, series and lock")
    default = top["default_lineage"] or max(
        lineages, key=lambda k: version_key(lineages[k].upstream.version))
    if default not in lineages:
        raise ConfigError(f"{source}: 'default_lineage' names '{default}', which is not a "
                          f"lineage{suggest(default, list(lineages))}")
    # every section is validated here, so a bad declaration fails whatever command runs
    suites = suites_section.parse_all(top["suites"], root, source)
    return Pipeline(path=path.resolve(), root=root, name=top["name"],
                    lineages=MappingProxyType(lineages), default_lineage=default,
                    images=_images(top["images"], root, source), suites=suites,
                    channels=channels_section.parse(top["channels"], suites, source),
                    signing=signing_section.parse(top["signing"], root, source))


def load(path: str | os.PathLike[str] | None = None) -> Pipeline:
    """pipeline.yaml, read and validated."""
    p = Path(path) if path else find_pipeline()
    if not p.exists():
        if path or os.environ.get("PATCHBAKE_PIPELINE"):
            raise ConfigError(f"{p}: no such file",
                              hint="check --pipeline or PATCHBAKE_PIPELINE")
        raise ConfigError(f"no pipeline.yaml in {p.parent} or any directory above it: "
                          "this command acts on a pipeline",
                          hint="run it inside a patchbake repository, pass --pipeline FILE, "
                               "or write one with `patchbake init --vllm VERSION`")
    return parse(load_file(p, "pipeline"), p)


def find_pipeline(start: Path | None = None) -> Path:
    env = os.environ.get("PATCHBAKE_PIPELINE")
    if env:
        return Path(env)
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / PIPELINE_FILE).is_file():
            return d / PIPELINE_FILE
    return here / PIPELINE_FILE
