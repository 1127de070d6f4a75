"""The CI workflows: valid GitHub Actions syntax (check-jsonschema's vendored workflow
schema, run in-process), and every `run:` step names a make target, a ci/ script or a
patchbake command that exists. Hermetic: nothing is started."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
# besides make, ci/ scripts and patchbake: git (what checkout brings) and apt-get (the
# container's git, make and python3, installed before checkout can make a clone)
ALLOWED = {"git", "apt-get"}


def test_there_are_workflows() -> None:
    assert {p.name for p in WORKFLOWS} >= {"pull-request.yml", "release.yml"}


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_matches_the_vendored_github_schema(path: Path) -> None:
    pytest.importorskip("check_jsonschema", reason="pip install -e '.[test]'")
    from check_jsonschema.cli.main_command import main
    from click.testing import CliRunner

    res = CliRunner().invoke(main, ["--builtin-schema", "vendor.github-workflows", str(path)])
    assert res.exit_code == 0, res.output


def test_the_schema_check_can_fail(tmp_path: Path) -> None:
    pytest.importorskip("check_jsonschema", reason="pip install -e '.[test]'")
    from check_jsonschema.cli.main_command import main
    from click.testing import CliRunner

    bad = tmp_path / "bad.yml"
    bad.write_text("name: x\non: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    stepz: []\n")
    res = CliRunner().invoke(main, ["--builtin-schema", "vendor.github-workflows", str(bad)])
    assert res.exit_code != 0


def make_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z0-9_.-]+):", text, re.MULTILINE))


def patchbake_commands() -> set[str]:
    import click
    from patchbake.cli import main_group

    return set(main_group.list_commands(click.Context(main_group)))


def commands_of(script: str) -> list[list[str]]:
    """Each command line of a `run:` block, split like a shell would (no expansion)."""
    out = []
    for line in re.sub(r"\\\n", " ", script).splitlines():
        line = re.sub(r"\$\{\{[^}]*\}\}", "X", line).strip()
        if line and not line.startswith("#"):
            for part in re.split(r"&&|\|\||;|\|", line):
                if part.strip():
                    out.append(shlex.split(part))
    return out


def problems(argv: list[str], targets: set[str], commands: set[str]) -> list[str]:
    word = argv[0]
    if word == "make":
        return [f"make target '{t}' does not exist" for t in argv[1:]
                if not t.startswith("-") and "=" not in t and t not in targets]
    if word.startswith("./") or "/" in word:
        return [] if (REPO / word).is_file() else [f"{word} does not exist"]
    if word in ("python3", "patchbake"):
        args = argv[3:] if argv[1:3] == ["-m", "patchbake"] else argv[1:]
        sub = next((a for a in args if not a.startswith("-")), None)
        return [] if sub in commands else [f"patchbake has no command {sub!r}"]
    why = f"{word!r} is not a make target, ci/ script or patchbake command"
    return [] if word in ALLOWED else [why]


def run_steps(path: Path) -> list[str]:
    doc: dict[Any, Any] = yaml.safe_load(path.read_text())
    return [s["run"] for job in doc["jobs"].values() for s in job.get("steps", [])
            if "run" in s]


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_run_step_names_something_that_exists(path: Path) -> None:
    targets, commands = make_targets(), patchbake_commands()
    found = []
    for script in run_steps(path):
        for argv in commands_of(script):
            found += problems(argv, targets, commands)
    assert not found, found


@pytest.mark.parametrize("path", sorted((REPO / "ci").glob("*.sh")), ids=lambda p: p.name)
def test_ci_scripts_name_patchbake_commands_that_exist(path: Path) -> None:
    commands = patchbake_commands()
    for m in re.finditer(r"-m patchbake((?: --\w+)*) (\w[\w-]*)", path.read_text()):
        assert m.group(2) in commands, f"{path.name}: patchbake {m.group(2)}"


def test_the_run_step_check_can_fail() -> None:
    targets, commands = make_targets(), patchbake_commands()
    assert problems(["make", "tset"], targets, commands) == ["make target 'tset' does not exist"]
    assert problems(["./ci/nope.sh"], targets, commands)
    assert problems(["python3", "-m", "patchbake", "relaese"], targets, commands)
    assert problems(["curl", "x"], targets, commands)
    assert not problems(["make", "ci-gates"], targets, commands)


def jobs_of(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((REPO / ".github" / "workflows" / name).read_text())
    return dict(doc["jobs"])


def test_the_gates_job_requires_the_channel_being_released() -> None:
    env = jobs_of("release.yml")["gates"]["env"]
    assert env["REQUIRED_CHANNEL"] == "${{ inputs.channel }}"
    assert "REQUIRED_CHANNEL" in (REPO / "ci" / "gates.sh").read_text()


def test_key_secrets_are_key_material_never_paths() -> None:
    text = (REPO / ".github" / "workflows" / "release.yml").read_text()
    assert "_PATH }}" not in text and "PATCHBAKE_SIGNING_KEY:" not in text
    assert "key_from_env PATCHBAKE_KEY_PEM" in (REPO / "ci" / "promote.sh").read_text()


def test_the_gpu_legs_sign_different_declared_suites() -> None:
    from patchbake import config

    legs = jobs_of("release.yml")["gpu-suites"]["strategy"]["matrix"]["include"]
    suites = [leg["suite"] for leg in legs]
    assert len(set(suites)) == len(suites)
    declared = config.load(REPO / "pipeline.yaml").suites
    assert all(s in declared and declared[s].requires.gpu for s in suites)
    sm89 = next(leg["suite"] for leg in legs if leg["sm"] == "sm89")
    assert declared[sm89].requires.capability == "==8.9"


def test_the_release_records_come_back_and_the_approval_is_behind_reviewers() -> None:
    jobs = jobs_of("release.yml")
    uploads = [s["with"]["name"] for s in jobs["promote"]["steps"]
               if s.get("uses", "").startswith("actions/upload-artifact")]
    assert uploads == ["release-record"]
    assert jobs["propose"]["permissions"]["contents"] == "write"
    assert jobs["approve"]["environment"]["name"] == "release"
    assert "approve" in jobs["gates"]["needs"]


def test_the_container_gets_git_make_and_python_before_checkout() -> None:
    steps = jobs_of("pull-request.yml")["test"]["steps"]
    assert "apt-get install" in steps[0]["run"] and "git make python3" in steps[0]["run"]
    assert steps[1]["uses"].startswith("actions/checkout")
