"""ci/workflow.py, what `make ci-local` reads a workflow with: jobs in needs: order, matrix
legs, expressions from ci/local.yml, and refusals of what it cannot run as GitHub would.
Hermetic: nothing runs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "ci"))
import workflow  # noqa: E402

CONFIG: dict[str, Any] = yaml.safe_load((REPO / "ci" / "local.yml").read_text())
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_workflow_plans_against_the_local_config(path: Path) -> None:
    assert workflow.plan(path, CONFIG)


def test_release_legs_run_in_needs_order_with_the_matrix_expanded() -> None:
    legs = workflow.plan(REPO / ".github/workflows/release.yml", CONFIG)
    titles = [leg.title for leg in legs]
    assert titles == ["bake", "gpu-suites (sm89, dsv4-topk-gpu-sm89)",
                      "gpu-suites (sm90, dsv4-topk-gpu)", "approve", "gates", "promote",
                      "propose"]


def write(tmp_path: Path, jobs: dict[str, Any]) -> Path:
    p = tmp_path / "wf.yml"
    p.write_text(yaml.safe_dump({"name": "x", "on": {"workflow_dispatch": {}}, "jobs": jobs}))
    return p


def test_an_action_that_is_not_emulated_is_refused(tmp_path: Path) -> None:
    p = write(tmp_path, {"a": {"runs-on": "ubuntu-latest", "steps": [
        {"uses": "docker/login-action@v3"}]}})
    with pytest.raises(workflow.Refused, match=r"`uses: docker/login-action@v3` is not "
                                               r"emulated by ci-local"):
        workflow.plan(p, CONFIG)


def test_a_secret_the_local_config_lacks_is_refused(tmp_path: Path) -> None:
    p = write(tmp_path, {"a": {"runs-on": "ubuntu-latest", "env": {
        "K": "${{ secrets.PATCHBAKE_RELEASE_KEY_PATH }}"}, "steps": [{"run": "true"}]}})
    with pytest.raises(workflow.Refused, match="secrets.PATCHBAKE_RELEASE_KEY_PATH' names nothing"):
        workflow.plan(p, CONFIG)


def test_needs_that_cannot_be_ordered_are_refused(tmp_path: Path) -> None:
    p = write(tmp_path, {"a": {"runs-on": "x", "needs": "b", "steps": [{"run": "true"}]},
                         "b": {"runs-on": "x", "needs": "a", "steps": [{"run": "true"}]}})
    with pytest.raises(workflow.Refused, match="cannot be ordered"):
        workflow.plan(p, CONFIG)


def test_expressions() -> None:
    ctx = {"inputs": {"channel": "candidate"}, "matrix": {"sm": "sm89"},
           "github": {"event_name": "workflow_dispatch"}}
    assert workflow.substitute("x-${{ matrix.sm }}-${{inputs.channel}}", ctx) == "x-sm89-candidate"
    assert workflow.substitute("${{ vars.UNSET }}", ctx) == ""  # as GitHub: unset is empty
    assert workflow.evaluate("github.event_name == 'workflow_dispatch'", ctx) is True
    assert workflow.evaluate("inputs.channel != 'candidate'", ctx) is False
    with pytest.raises(workflow.Refused, match="beyond what ci-local evaluates"):
        workflow.evaluate("always()", ctx)
    with pytest.raises(workflow.Refused, match="context 'job'"):
        workflow.evaluate("job.status", ctx)
