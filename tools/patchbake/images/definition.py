"""Image definitions by name: the ``images:`` entries of pipeline.yaml, read and parsed
(config.images) when a command needs one."""

from __future__ import annotations

from ..config import Pipeline
from ..config.images import Definition, load_file
from ..config.schema import suggest
from ..errors import ConfigError


def names(pipeline: Pipeline) -> list[str]:
    return sorted(pipeline.images)


def load(pipeline: Pipeline, name: str) -> Definition:
    """The definition ``name`` from pipeline.yaml ``images:``, read from its file."""
    images = pipeline.images
    if name not in images:
        known = sorted(images)
        raise ConfigError(f"{pipeline.path.name}: no image definition '{name}'"
                          f"{suggest(name, known)}"
                          + (f" (definitions: {', '.join(known)})" if known else
                             " (pipeline.yaml declares no images)"))
    path = images[name]
    if not path.resolve().is_relative_to(pipeline.root.resolve()):
        shown = path.relative_to(pipeline.root) if path.is_relative_to(pipeline.root) else path
        raise ConfigError(f"{pipeline.path.name}: 'images.{name}' names {shown}, which lies "
                          "outside the repository",
                          hint="image definitions are reviewed files of the repository")
    return load_file(path, name, pipeline.root)


def default_name(pipeline: Pipeline, lineage: str | None = None) -> str:
    """The image `bake` and `run` act on without an argument: the only one, or the offline
    one, among those that bake ``lineage`` (``--lineage``; a definition naming no
    lineage bakes any) when one is asked for."""
    known = names(pipeline)
    if not known:
        raise ConfigError(f"{pipeline.path.name}: declares no image definitions under 'images:'",
                          hint="add one to bake an image (docs/images.md); fetch, patch and "
                               "series commands need none")
    if lineage is not None:
        key = pipeline.lineage(lineage).key
        known = [n for n in known if load(pipeline, n).lineage in ("", key)]
        if not known:
            raise ConfigError(f"{pipeline.path.name}: no image definition bakes lineage {key}",
                              hint="name one with `lineage: KEY` (docs/images.md)")
    if len(known) == 1:
        return known[0]
    offline = [n for n in known if "-offline" in n]  # the stand-in: what `run` bakes fast
    if len(offline) > 1:  # one per lineage: the default lineage's
        default = pipeline.lineage(lineage).key
        offline = [n for n in offline if load(pipeline, n).lineage in ("", default)]
    if len(offline) == 1:
        return offline[0]
    raise ConfigError(f"{pipeline.path.name}: several image definitions "
                      f"({', '.join(known)}); name one")
