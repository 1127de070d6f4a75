"""Host runner against real small trees with a real pytest subprocess, then signed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from patchbake.digest import Digest
from patchbake.errors import SuiteError
from patchbake.evidence import keys, policy, records
from patchbake.config import suites
from patchbake.suites.host import HostRunner
from patchbake.suites.image import SuiteImage
from patchbake.suites.run import run_suite
from patchbake.store import Store

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SUITES = REPO / "tests" / "fixtures" / "suites"
PATCHED, PRISTINE = SUITES / "trees" / "patched", SUITES / "trees" / "pristine"
REF = SuiteImage("toy", Digest.from_hex("ab" * 32), None)


class TreeHostRunner(HostRunner):
    """The host runner with the materialised tree replaced by a fixed directory."""

    @contextmanager
    def patched_tree(self, ref: SuiteImage) -> Iterator[str]:
        yield str(PATCHED)


def suite(name: str, **over: Any) -> suites.Suite:
    raw = {"path": f"tests/fixtures/suites/{name}", "runner": "host",
           "command": ["{python}", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                       "-o", "python_files=check_*.py", "--junitxml={junit}",
                       f"tests/fixtures/suites/{name}"],
           "requires": {"min_tests": 1}, **over}
    return suites.parse_suite(name, raw, REPO)


def pristine() -> tuple[Path, str]:
    return PRISTINE, "toy pristine tree"


@pytest.fixture
def runner(tmp_path: Path) -> TreeHostRunner:
    return TreeHostRunner(REPO, Store.open(tmp_path / "store"))


def test_passing_suite_fails_on_pristine_and_repeats_identically(
        runner: TreeHostRunner, tmp_path: Path) -> None:
    result = run_suite(suite("passing", repeats=2, patch_sensitive=True,
                             requires={"min_tests": 4}), REF, runner, pristine)
    assert result.result == "PASSED", result.problems
    assert result.counts == {"tests": 4, "passed": 4, "failed": 0, "skipped": 0, "errors": 0}
    sens = result.probes["patch_sensitivity"]
    assert sens["status"] == "ok" and sens["failed"] == 4
    assert any("test_sorts_and_pads_last" in n for n in sens["failing_tests"])
    det = result.probes["determinism"]
    assert det["status"] == "ok" and det["repeats"] == 2 and det["digests"] == 1
    env = result.environment
    assert env["runner"] == "host" and env["python"] and env["image_digest"] == str(REF.digest)
    # sign it and verify it like CI would
    k = keys.generate(tmp_path / "keys")
    (tmp_path / "policy.yaml").write_text(
        "version: 1\nkeys:\n" + policy.render_entry("t", k.keyid, k.public_pem, "", ["*"],
                                                    "https://in-toto.io/attestation/test-result/v0.1"))
    path, _, _ = records.sign_result(result, keys.load_private(k.private_path), tmp_path / "ev")
    v = records.verify_file(path, REF.digest, policy.load(tmp_path / "policy.yaml"), "passing")
    assert v.counts_as_evidence and v.statement.counts["passed"] == 4


def test_failing_suite_names_the_failure(runner: TreeHostRunner) -> None:
    result = run_suite(suite("failing"), REF, runner)
    assert result.result == "FAILED"
    assert result.failed_tests == ("tests.fixtures.suites.failing.check_fail::test_fails",)
    assert "1 failed and 0 errored" in result.problems[0]


def test_empty_suite_collects_nothing_and_fails(runner: TreeHostRunner) -> None:
    result = run_suite(suite("empty"), REF, runner)
    assert result.result == "FAILED" and result.problems == ("collected no tests",)


def test_fewer_than_minimum_fails(runner: TreeHostRunner) -> None:
    result = run_suite(suite("passing", requires={"min_tests": 10}), REF, runner)
    assert "ran 4 tests (0 skipped), fewer than the minimum 10" in result.problems[0]


def test_insensitive_suite_is_flagged_on_pristine(runner: TreeHostRunner) -> None:
    result = run_suite(suite("insensitive", patch_sensitive=True), REF, runner, pristine)
    assert result.result == "PASSED"
    assert result.probes["patch_sensitivity"]["status"] == "flagged"


def test_gpu_suite_is_refused_on_this_machine(runner: TreeHostRunner) -> None:
    probe = runner.environment(suite("passing"), REF)
    if probe.get("cuda_available"):
        pytest.skip("this machine has a GPU")
    from patchbake.errors import RequirementError

    with pytest.raises(RequirementError, match="needs a CUDA GPU") as info:
        run_suite(suite("passing", requires={"gpu": True}), REF, runner)
    assert info.value.exit_code == 41


def test_command_that_writes_no_junit(runner: TreeHostRunner) -> None:
    s = suite("passing", command=["{python}", "-c", "import sys; sys.exit(3)", "{junit}"])
    with pytest.raises(SuiteError, match="exited 3 and wrote no JUnit XML"):
        run_suite(s, REF, runner)
