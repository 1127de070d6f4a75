"""An image is checked against its own definition's lineage, whatever the default is."""

from __future__ import annotations

from pathlib import Path

import pytest
from patchbake.digest import Digest
from patchbake import config
from patchbake.errors import LineageError
from patchbake.verify.expected import image_definition
from patchbake.images import record

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pipeline() -> config.Pipeline:
    return config.load(REPO / "pipeline.yaml")


def bind_lineage(pipeline: config.Pipeline, requested: str | None, *,
                 definition: str | None = None,
                 manifest_digest: Digest | None = None) -> config.Lineage:
    """What verify, fixtures run and evidence sign do: find the image's definition, then
    take its lineage."""
    return pipeline.lineage_for(image_definition(pipeline, definition=definition,
                                                 manifest_digest=manifest_digest), requested)


def test_the_definitions_lineage_is_taken_when_none_is_asked(pipeline: config.Pipeline) -> None:
    assert pipeline.lineage(None).key == "v0.25.1"  # the repository's default
    assert bind_lineage(pipeline, None, definition="sm89-serving-offline-v0.33.0").key == "v0.33.0"
    assert bind_lineage(pipeline, None, definition="sm89-serving-offline").key == "v0.25.1"


def test_a_recorded_digest_finds_its_definitions_lineage(pipeline: config.Pipeline) -> None:
    digest = record.latest(REPO, "sm89-serving-offline-v0.33.0").manifest_digest
    assert bind_lineage(pipeline, None, manifest_digest=digest).key == "v0.33.0"
    assert bind_lineage(pipeline, "v0.33.0", manifest_digest=digest).key == "v0.33.0"


def test_another_lineage_asked_for_is_refused(pipeline: config.Pipeline) -> None:
    digest = record.latest(REPO, "sm89-serving-offline-v0.33.0").manifest_digest
    with pytest.raises(LineageError, match="bakes lineage v0.33.0; --lineage v0.25.1") as e:
        bind_lineage(pipeline, "v0.25.1", manifest_digest=digest)
    assert e.value.exit_code == 37


def test_an_unrecorded_digest_keeps_the_asked_or_default_lineage(
        pipeline: config.Pipeline) -> None:
    assert bind_lineage(pipeline, None, manifest_digest=Digest.from_hex("0" * 64)).key == "v0.25.1"
    assert bind_lineage(pipeline, "v0.33.0", manifest_digest=Digest.from_hex("0" * 64)).key == \
        "v0.33.0"


def test_release_gates_refuse_another_lineage_than_the_images(
        pipeline: config.Pipeline) -> None:
    from patchbake.release import create

    ev = create.evaluation(pipeline, None, "sm89-serving-offline-v0.33.0")
    assert ev.lineage.key == "v0.33.0"
    with pytest.raises(LineageError, match="bakes lineage v0.33.0; --lineage v0.25.1") as e:
        create.evaluation(pipeline, None, "sm89-serving-offline-v0.33.0", "v0.25.1")
    assert e.value.exit_code == 37


def test_bake_and_verify_bind_the_same_way(pipeline: config.Pipeline) -> None:
    from patchbake.images import definition

    defn = definition.load(pipeline, "sm89-serving-offline-v0.33.0")
    assert pipeline.lineage_for(defn, None).key == "v0.33.0"
    assert pipeline.lineage_for(defn, "v0.33.0").key == "v0.33.0"
    assert pipeline.lineage_for(None, "v0.33.0").key == "v0.33.0"
    assert pipeline.lineage_for(None, None).key == "v0.25.1"
    with pytest.raises(LineageError, match=r"image definition 'sm89-serving-offline-v0.33.0' "
                                           r"\(sm89-serving-offline-v0.33.0.yaml\) bakes"):
        pipeline.lineage_for(defn, "v0.25.1")
