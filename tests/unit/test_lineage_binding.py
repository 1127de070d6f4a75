"""An image is checked against its own definition's lineage, whatever the default is."""

from __future__ import annotations

from pathlib import Path

import pytest
from patchbake.digest import Digest
from patchbake import config
from patchbake.errors import LineageError
from patchbake.expected import bind_lineage
from patchbake.images import record

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pipeline() -> config.Pipeline:
    return config.load(REPO / "pipeline.yaml")


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
    with pytest.raises(LineageError, match="is of lineage v0.33.0; --lineage v0.25.1") as e:
        bind_lineage(pipeline, "v0.25.1", manifest_digest=digest)
    assert e.value.exit_code == 37


def test_an_unrecorded_digest_keeps_the_asked_or_default_lineage(
        pipeline: config.Pipeline) -> None:
    assert bind_lineage(pipeline, None, manifest_digest=Digest.from_hex("0" * 64)).key == "v0.25.1"
    assert bind_lineage(pipeline, "v0.33.0", manifest_digest=Digest.from_hex("0" * 64)).key == \
        "v0.33.0"
