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
    """The definition ``name`` from pipeline.yaml ``images:`` (name -> file path)."""
    images = pipeline.images
    if name not in images:
        known = sorted(images)
        raise ConfigError(f"{pipeline.path.name}: no image definition '{name}'"
                          f"{suggest(name, known)}"
                          + (f" (definitions: {', '.join(known)})" if known else
                             " (pipeline.yaml declares no images)"))
    rel = images[name]
    if not isinstance(rel, str):
        raise ConfigError(f"{pipeline.path.name}: 'images.{name}' must be the path of a "
                          f"definition file, got {type(rel).__name__}")
    path = (pipeline.root / rel).resolve()
    if not path.is_relative_to(pipeline.root.resolve()):
        raise ConfigError(f"{pipeline.path.name}: 'images.{name}' names {rel}, which lies "
                          "outside the repository",
                          hint="image definitions are reviewed files of the repository")
    return load_file(pipeline.root / rel, name, pipeline.root)


def default_name(pipeline: Pipeline) -> str:
    """The image `bake` acts on without an argument: the only one, or the offline one."""
    known = names(pipeline)
    if not known:
        raise ConfigError(f"{pipeline.path.name}: declares no image definitions under 'images:'")
    if len(known) == 1:
        return known[0]
    offline = [n for n in known if n.endswith("-offline")]
    if len(offline) == 1:
        return offline[0]
    raise ConfigError(f"{pipeline.path.name}: several image definitions "
                      f"({', '.join(known)}); name one")
