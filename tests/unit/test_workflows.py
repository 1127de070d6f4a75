"""The CI workflows: valid GitHub Actions syntax (check-jsonschema's vendored workflow
schema, run in-process), and every `run:` step names a make target, a ci/ script or a
patchbake command that exists. Hermetic: nothing is started."""

from __future__ import annotations

import re
import shlex
import sys
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


# -- secrets per step, evidence taken from a scratch folder (docs/ci.md) ---------------------

sys.path.insert(0, str(REPO / "ci"))
import take_evidence  # noqa: E402

POLICY_CHECK = "git diff --exit-code HEAD -- pipeline.yaml manifests/trust-policy.yaml"


def release_doc() -> dict[str, Any]:
    return dict(yaml.safe_load((REPO / ".github" / "workflows" / "release.yml").read_text()))


def test_secrets_are_given_per_step_never_per_job_or_workflow() -> None:
    doc = release_doc()
    assert not [k for k, v in doc.get("env", {}).items() if "secrets." in str(v)]
    for key, job in doc["jobs"].items():
        assert not [k for k, v in job.get("env", {}).items() if "secrets." in str(v)], key
        for step in job["steps"]:
            run = step.get("run", "")
            secret_env = [k for k, v in step.get("env", {}).items() if "secrets." in str(v)]
            if "make setup-python" in run or "make demo" in run or "gpu-suite.sh run" in run \
                    or "take-evidence" in run or step.get("uses"):
                assert not secret_env, f"{key}: `{run or step['uses']}` gets {secret_env}"


def test_every_signing_step_follows_the_policy_check() -> None:
    for key, job in release_doc()["jobs"].items():
        runs = [s.get("run", "") for s in job["steps"]]
        for i, step in enumerate(job["steps"]):
            if "PATCHBAKE_KEY_PEM" in step.get("env", {}):
                assert POLICY_CHECK in runs[:i], f"{key}: signs before checking the policy"
    for script in ("approve.sh", "promote.sh", "gpu-suite.sh"):
        text = (REPO / "ci" / script).read_text()
        assert text.index("policy_is_the_commits") < text.index("key_from_env"), script


def test_evidence_is_downloaded_into_scratch_and_taken_before_use() -> None:
    jobs = release_doc()["jobs"]
    for key in ("approve", "gates", "promote"):
        steps = jobs[key]["steps"]
        downloads = [s for s in steps if s.get("uses", "").startswith("actions/download-artifact")]
        assert len(downloads) == 1, key
        w = downloads[0]["with"]
        assert w["pattern"].startswith("evidence-") and w["path"] == ".work/artifacts/evidence"
        assert "merge-multiple" not in w, key  # one folder per artifact: who sent what
        runs = [s.get("run", "") for s in steps]
        take = next(i for i, r in enumerate(runs) if "ci/take-evidence.sh" in r)
        assert take < next(i for i, r in enumerate(runs) if r == "make demo"), key
    assert jobs["approve"]["steps"][1]["with"]["pattern"] == "evidence-sm*"
    for key, job in jobs.items():  # nothing from another job lands on the checkout's manifests
        for s in job["steps"]:
            if s.get("uses", "").startswith("actions/download-artifact") \
                    and s["with"].get("path") == ".":
                assert s["with"].get("name") in ("image-record", "release-record"), key


def test_the_gpu_leg_uploads_only_its_evidence_file_and_loads_the_key_after_the_suite() -> None:
    steps = release_doc()["jobs"]["gpu-suites"]["steps"]
    up = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact"))
    assert up["with"]["path"] == "evidence-out/${{ matrix.suite }}.dsse.json"
    runs = [s.get("run", "") for s in steps]
    assert runs.index("./ci/gpu-suite.sh run") < runs.index("./ci/gpu-suite.sh sign")
    text = (REPO / "ci" / "gpu-suite.sh").read_text()
    assert text.index("suites run") < text.index("key_from_env")
    assert "collect_changes" not in text


HEX = "ab" * 32
DIGEST = f"sha256:{HEX}"
APPROVAL = "approval-sm89-stable-0123456789abcdef-20261202T101010Z.dsse.json"
SUITES = {"dsv4-topk-gpu", "dsv4-topk-gpu-sm89"}


def handed(tmp_path: Path, files: dict[str, bytes]) -> tuple[Path, Path]:
    src, repo = tmp_path / "artifacts", tmp_path / "repo"
    (repo / "manifests").mkdir(parents=True)
    (repo / "manifests" / "trust-policy.yaml").write_bytes(b"committed\n")
    for rel, data in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    return src, repo


def test_take_evidence_copies_the_expected_files_to_their_paths(tmp_path: Path) -> None:
    src, repo = handed(tmp_path, {"evidence-sm89/dsv4-topk-gpu-sm89.dsse.json": b"e89",
                                  "evidence-sm90/dsv4-topk-gpu.dsse.json": b"e90",
                                  f"evidence-approval/{APPROVAL}": b"a"})
    took = take_evidence.take(src, repo, DIGEST, "sm89-stable", SUITES)
    ev = repo / "manifests" / "evidence" / HEX
    assert sorted(took) == sorted([ev / "dsv4-topk-gpu-sm89.dsse.json",
                                   ev / "dsv4-topk-gpu.dsse.json", ev / APPROVAL])
    assert (ev / "dsv4-topk-gpu.dsse.json").read_bytes() == b"e90"
    assert take_evidence.take(tmp_path / "none", repo, DIGEST, "sm89-stable", SUITES) == []


@pytest.mark.parametrize("rel, why", [
    ("evidence-sm90/manifests/trust-policy.yaml", "only plain files at the top"),
    ("evidence-sm90/trust-policy.yaml", "not a file evidence-sm90 hands over"),
    ("evidence-sm90/pipeline.yaml", "not a file evidence-sm90 hands over"),
    (f"evidence-sm90/manifests/evidence/{'cd' * 32}/dsv4-topk-gpu.dsse.json", "only plain"),
    ("evidence-sm90/dsv4-topk-cpu.dsse.json", "not a file"),  # not a GPU suite
    ("evidence-sm90/" + APPROVAL, "not a file"),  # approvals come from the approve job only
    ("evidence-approval/dsv4-topk-gpu.dsse.json", "not a file evidence-approval hands over"),
    ("evidence-approval/" + APPROVAL.replace("sm89-stable", "validated"), "not a file"),
    ("release-record/manifests/trust-policy.yaml", "not an artifact this job takes"),
    ("stray.yaml", "not an artifact's folder"),
])
def test_take_evidence_refuses_anything_else_and_copies_nothing(tmp_path: Path, rel: str,
                                                                 why: str) -> None:
    src, repo = handed(tmp_path, {"evidence-sm89/dsv4-topk-gpu-sm89.dsse.json": b"e89",
                                  rel: b"planted"})
    with pytest.raises(take_evidence.Refused, match=why):
        take_evidence.take(src, repo, DIGEST, "sm89-stable", SUITES)
    assert not (repo / "manifests" / "evidence").exists()
    assert (repo / "manifests" / "trust-policy.yaml").read_bytes() == b"committed\n"


def test_take_evidence_refuses_links_and_replacing_committed_evidence(tmp_path: Path) -> None:
    src, repo = handed(tmp_path, {"evidence-sm90/dsv4-topk-gpu.dsse.json": b"new"})
    committed = repo / "manifests" / "evidence" / HEX / "dsv4-topk-gpu.dsse.json"
    committed.parent.mkdir(parents=True)
    committed.write_bytes(b"old")
    with pytest.raises(take_evidence.Refused, match="write-once"):
        take_evidence.take(src, repo, DIGEST, "validated", SUITES)
    committed.write_bytes(b"new")  # the same bytes: already there, nothing to copy
    assert take_evidence.take(src, repo, DIGEST, "validated", SUITES) == []
    link = src / "evidence-sm89" / "dsv4-topk-gpu-sm89.dsse.json"
    link.parent.mkdir()
    link.symlink_to(repo / "manifests" / "trust-policy.yaml")
    with pytest.raises(take_evidence.Refused, match="only plain files"):
        take_evidence.take(src, repo, DIGEST, "validated", SUITES)
    with pytest.raises(take_evidence.Refused, match="sha256:<64 hex>"):
        take_evidence.take(src, repo, "sha256:../../x", "validated", SUITES)


def test_take_evidence_knows_the_declared_gpu_suites() -> None:
    legs = release_doc()["jobs"]["gpu-suites"]["strategy"]["matrix"]["include"]
    declared = take_evidence.gpu_suites_declared(REPO)
    assert {leg["suite"] for leg in legs} <= declared and "dsv4-topk-cpu" not in declared
    assert all(take_evidence._LEG.match(f"evidence-{leg['sm']}") for leg in legs)
