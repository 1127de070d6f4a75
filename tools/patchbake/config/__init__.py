"""pipeline.yaml, validated once into one typed ``Pipeline``: the lineages, the image
definitions' files, and the suites, channels and signing sections.

The layer under every stage: it imports only the base modules (errors, records, digest,
fsutil, limits, userdirs), never a stage, so each stage can take its section's types from
here.
"""

from .pipeline import (
    PIPELINE_FILE,
    SOURCE_KINDS,
    Lineage,
    Pipeline,
    Upstream,
    find_pipeline,
    load,
    parse,
)

__all__ = ["PIPELINE_FILE", "SOURCE_KINDS", "Lineage", "Pipeline", "Upstream", "find_pipeline",
           "load", "parse"]
