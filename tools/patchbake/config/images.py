"""Image definitions: ``images/<name>.yaml``, referenced from pipeline.yaml ``images:``.

A definition names its base BY DIGEST (a definition without one is an error), where the
base comes from, the base's site-packages directory, and the bake mode. pipeline.yaml maps
a definition name to its file::

    images:
      sm89-serving: images/sm89-serving.yaml

The file is read (``load_file``) when a command uses the definition, not when pipeline.yaml
is loaded: `image standin` gives the digest a new definition names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..digest import Digest, is_digest, is_hex
from ..errors import ConfigError
from ..fsutil import canonical_json, sha256_bytes
from .schema import Field, Schema, one_of, validate
from .yamlread import load_file as read_yaml

BASE_SOURCES = ("registry", "oci-layout", "docker-archive", "docker", "standin", "lock")
MODES = ("overlay", "build")


def _digest_check(value: Any) -> str | None:
    return None if is_digest(value) else "must be sha256:<64 hex digits>"


def _abs_path_check(value: Any) -> str | None:
    v = str(value)
    if not v.startswith("/") or ".." in v.split("/") or v.endswith("/"):
        return "must be an absolute path without '..' or a trailing '/'"
    return None


BASE_SCHEMA = Schema({
    "source": Field(str, required=True, check=one_of(*BASE_SOURCES),
                    help="registry, oci-layout, docker-archive, docker, standin or lock "
                         "(the serving base built from the lineage's lock)"),
    "name": Field(str, required=True, help="the base's name, e.g. vllm/vllm-openai:v0.25.1"),
    "digest": Field(str, required=True, check=_digest_check,
                    help="the base pinned by digest: tags move, digests do not"),
    "platform": Field(str, default="linux/amd64"),
    "platform_digest": Field(str, check=_digest_check,
                             help="the platform manifest inside a multi-arch index"),
    "path": Field(str, help="OCI layout directory or docker-archive tar (relative to the repo)"),
    "verified": Field(bool, default=False,
                      help="whether the digest was checked against the registry"),
    "variant": Field(str, default="plain", check=one_of("plain", "with-python"),
                     help="stand-in only: with-python adds the host's python3 (tests)"),
    "has_vllm": Field(bool, default=True,
                      help="false only for test bases that carry no vLLM at all: bake then "
                           "requires an empty vllm/ tree there instead of the lineage's"),
    "note": Field(str, default=""),
})

BUILD_SCHEMA = Schema({
    "template": Field(str, default="Dockerfile.sm89.j2"),
    "torch_cuda_arch_list": Field(str, default="8.9"),
    "builder": Field(str, help="devel image (by digest) that compiles native changes"),
    "max_jobs": Field(int, default=2),
})

CUDA_CODE_SCHEMA = Schema({
    "expect": Field(str, default="present", check=one_of("present", "none"),
                    help="none: the image carries no CUDA code at all (the stand-in)"),
    "exempt": Field(list, default=[],
                    help="objects that never run on the target GPU: {path, why}"),
})

DEFINITION_SCHEMA = Schema({
    "version": Field(int, required=True, check=lambda v: None if v == 1 else "must be 1"),
    "description": Field(str, default=""),
    "base": Field(dict, required=True),
    "site_packages": Field(str, required=True, check=_abs_path_check,
                           help="where the base installs Python packages"),
    "site_packages_note": Field(str, default=""),
    "mode": Field(str, required=True, check=one_of(*MODES)),
    "lineage": Field(str, default="", help="the pipeline.yaml lineage this image bakes; "
                     "bake refuses another lineage and a base of another upstream"),
    "startup_allow": Field(list, default=[],
                           help="start-up hooks the in-image check accepts: {path, sha256}"),
    "source": Field(str, default="", help="org.opencontainers.image.source for this image"),
    "build": Field(dict, default={}),
    "labels": Field(dict, default={}),
    "verify_on_start": Field(bool, default=False,
                             help="the image checks itself at every start unless "
                                  "PATCHBAKE_VERIFY_ON_START=0 (default: only when =1)"),
    "cuda_code": Field(dict, default={},
                       help="what the cuda-code gate expects: {expect, exempt} (docs/cuda-code.md)"),
})


@dataclass(frozen=True)
class Base:
    source: str
    name: str
    digest: Digest
    platform: str
    platform_digest: Digest | None
    path: Path | None
    verified: bool
    variant: str = "plain"
    has_vllm: bool = True


@dataclass(frozen=True)
class Definition:
    name: str
    path: Path
    description: str
    base: Base
    site_packages: str
    mode: str
    source: str
    template: Path
    torch_cuda_arch_list: str
    builder: str | None
    max_jobs: int
    labels: tuple[tuple[str, str], ...]
    lineage: str
    startup_allow: tuple[tuple[str, str], ...]  # (absolute path, sha256 hex)
    fingerprint: str  # sha256 of the validated definition (part of the bake key)
    repo_root: Path = Path(".")  # relative paths (base.path, upstream paths) resolve here
    verify_on_start: bool = False
    cuda_expect: str = "present"  # "none": no CUDA object at all is what this image holds
    cuda_exempt: tuple[tuple[str, str], ...] = ()  # (absolute path, why it never runs)

    def baked_env(self) -> dict[str, str]:
        """Variables bake sets in the image's config (verify admits exactly these values)."""
        return {"PATCHBAKE_VERIFY_ON_START": "1"} if self.verify_on_start else {}

    @property
    def sp_rel(self) -> str:
        """site-packages as a layer path: 'usr/local/lib/python3.12/dist-packages'."""
        return self.site_packages.strip("/")


def _startup_allow(items: list[Any], source: str) -> tuple[tuple[str, str], ...]:
    out = []
    for i, item in enumerate(items):
        where = f"{source}: 'startup_allow[{i}]'"
        if not isinstance(item, dict) or set(item) != {"path", "sha256"}:
            raise ConfigError(f"{where} must be a mapping with exactly 'path' and 'sha256'")
        # env:NAME pins an image config variable (sha256 of NAME=VALUE): verify's checks
        env = re.fullmatch(r"env:[A-Za-z_][A-Za-z0-9_]*", str(item["path"]))
        problem = None if env else _abs_path_check(item["path"])
        if problem:
            raise ConfigError(f"{where}.path {problem}")
        if not is_hex(item["sha256"]):
            raise ConfigError(f"{where}.sha256 must be 64 lowercase hex digits")
        out.append((str(item["path"]), str(item["sha256"])))
    return tuple(sorted(out))


def _cuda_exempt(items: list[Any], source: str) -> tuple[tuple[str, str], ...]:
    out = []
    for i, item in enumerate(items):
        where = f"{source}: 'cuda_code.exempt[{i}]'"
        if not isinstance(item, dict) or set(item) != {"path", "why"}:
            raise ConfigError(f"{where} must be a mapping with exactly 'path' and 'why'")
        problem = _abs_path_check(item["path"])
        if problem:
            raise ConfigError(f"{where}.path {problem}")
        if not isinstance(item["why"], str) or not item["why"].strip():
            raise ConfigError(f"{where}.why must say why the object never runs on the target")
        out.append((str(item["path"]), " ".join(item["why"].split())))
    return tuple(sorted(out))


def parse(data: Any, name: str, path: Path, root: Path) -> Definition:
    source = f"{path.name}"
    top = validate(data, DEFINITION_SCHEMA, "", source)
    base = validate(top["base"], BASE_SCHEMA, "base", source)
    build = validate(top["build"], BUILD_SCHEMA, "build", source)
    if base["source"] in ("oci-layout", "docker-archive") and not base["path"]:
        raise ConfigError(f"{source}: base.source '{base['source']}' needs 'base.path'")
    for k, v in top["labels"].items():
        if not isinstance(v, str):
            raise ConfigError(f"{source}: 'labels.{k}' must be of type string")
    if top["mode"] == "build" and not build["builder"]:
        raise ConfigError(f"{source}: mode 'build' needs 'build.builder' (a devel image by "
                          "digest that has the CUDA compiler)")
    allow = _startup_allow(top["startup_allow"], source)
    cuda = validate(top.pop("cuda_code"), CUDA_CODE_SCHEMA, "cuda_code", source)
    exempt = _cuda_exempt(cuda["exempt"], source)
    # what the cuda-code gate expects changes nothing a bake writes: not in the bake key
    fingerprint = sha256_bytes(canonical_json({"top": {**top, "base": base, "build": build}}))
    return Definition(
        name=name, path=path, description=top["description"],
        base=Base(base["source"], base["name"], Digest.parse(base["digest"]), base["platform"],
                  None if base["platform_digest"] is None
                  else Digest.parse(base["platform_digest"]),
                  (root / base["path"]) if base["path"] else None,
                  base["verified"], base["variant"], base["has_vllm"]),
        site_packages=top["site_packages"], mode=top["mode"], source=top["source"],
        template=path.parent / build["template"],
        torch_cuda_arch_list=build["torch_cuda_arch_list"], builder=build["builder"],
        max_jobs=build["max_jobs"],
        labels=tuple(sorted((str(k), str(v)) for k, v in top["labels"].items())),
        lineage=top["lineage"], startup_allow=allow,
        fingerprint=fingerprint, repo_root=root, verify_on_start=top["verify_on_start"],
        cuda_expect=cuda["expect"], cuda_exempt=exempt,
    )


def load_file(path: Path, name: str | None = None, root: Path | None = None) -> Definition:
    data = read_yaml(path, "image definition")
    return parse(data, name or path.stem, path, root or path.parent.parent)
