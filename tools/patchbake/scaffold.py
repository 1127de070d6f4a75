"""``patchbake init``: a new pipeline.yaml for a vLLM version, outside any repository.

The pin is resolved through the package index pip is configured with (the file name and
the sha256 the index states; ``fetch`` checks the bytes against it when it downloads
them). The file holds one lineage and nothing else: images, suites, channels and signing
are added when they are wanted (docs/pipeline.md). What is written is parsed by the same
validator every command uses before it is put in place, and an existing pipeline.yaml is
never overwritten.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .config import Pipeline
from .config.pipeline import PIPELINE_FILE, parse
from .config.yamlread import parse_text
from .errors import ConfigError, UsageError
from .fsutil import write_once
from .sources import http, index

_VERSION = re.compile(r"[0-9]+(\.[0-9]+)*([a-z]+[0-9]*)?(\.post[0-9]+)?")
_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")

TEMPLATE = """\
# patchbake pipeline (docs/pipeline.md), written by `patchbake init --vllm {version}`.
# The pin below was resolved through the package index pip is configured with
# ({origin}); `patchbake fetch` checks the downloaded bytes against its sha256.
version: 1
name: {name}

lineages:
  v{version}:
    name: {name}
    upstream:
      kind: index
      package: {package}
      version: {version}
      filename: {filename}
      sha256: {sha256}
      strip: {strip}
      generated: [vllm/_version.py]
    # written by `patchbake patch export` from a workspace (`patchbake patch workspace`)
    patch: patch/{name}-v{version}.patch
    files: patch/FILES.txt
    source_record: patch/SOURCE
"""


@dataclass(frozen=True, slots=True)
class Initialised:
    path: Path
    lineage: str
    filename: str
    sha256: str
    index_origin: str


def render(version: str, name: str, filename: str, sha256: str, origin: str,
           package: str = "vllm") -> str:
    return TEMPLATE.format(version=version, name=name, filename=filename, sha256=sha256,
                           origin=origin, package=package,
                           strip=filename.removesuffix(".tar.gz"))


def check_arguments(version: str, name: str) -> None:
    if not _VERSION.fullmatch(version):
        raise UsageError(f"--vllm {version[:40]!r} is not a version such as 0.25.1")
    if not _NAME.fullmatch(name):
        raise UsageError(f"--name {name[:40]!r} is not a patch name (lowercase letters, "
                         "digits and '-', at most 63)")


def init_pipeline(directory: Path, version: str, name: str) -> Initialised:
    """Write ``directory/pipeline.yaml`` for vLLM ``version``; refuse an existing one."""
    check_arguments(version, name)
    dest = directory.absolute() / PIPELINE_FILE
    if dest.exists() or dest.is_symlink():
        raise ConfigError(f"{dest} already exists; nothing was written",
                          hint="edit it (docs/pipeline.md), or init another directory")
    filename, sha256, origin = index.find_sdist("vllm", version, session=http.new_session())
    text = render(version, name, filename, sha256, origin)
    pipeline: Pipeline = parse(parse_text(text.encode(), dest.name), dest)  # never write
    lineage = pipeline.lineage().key                                     # what cannot load
    directory.mkdir(parents=True, exist_ok=True)
    try:
        write_once(dest, text.encode())
    except FileExistsError:
        raise ConfigError(f"{dest} appeared while it was being written; nothing was "
                          "overwritten") from None
    return Initialised(dest, lineage, filename, sha256, origin)


__all__ = ["Initialised", "init_pipeline", "render"]
