"""Suite declarations, JUnit parsing, requirement checks and probes (hermetic)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from patchbake.errors import ConfigError, RequirementError, SuiteError
from patchbake.config import suites
from patchbake.suites import execution, junit, machine, probes
from patchbake.suites.execution import Execution, fill, verdict

GOOD = {"path": "tests/fixtures/suites/passing", "runner": "host",
        "command": ["{python}", "-m", "pytest", "--junitxml={junit}", "x"],
        "requires": {"gpu": True, "capability": ">=8.9", "min_tests": 2,
                     "min_free_memory_gib": 4},
        "repeats": 3, "patch_sensitive": True}


def parse(**over: Any) -> suites.Suite:
    raw = {**GOOD, **over}
    return suites.parse_suite("toy", raw, Path("/repo"))


def test_good_declaration() -> None:
    s = parse()
    assert s.requires.capability == ">=8.9" and s.repeats == 3 and s.patch_sensitive
    assert s.declaration()["requires"]["min_tests"] == 2


@pytest.mark.parametrize("over, message", [
    ({"runner": "podman"}, "'suites.toy.runner' must be one of host, docker"),
    ({"command": ["pytest", "x"]}, "must write JUnit XML to '{junit}'"),
    ({"command": ["pytest", "--junitxml={junitt}"]}, "did you mean 'junit'"),
    ({"command": "pytest --junitxml={junit}"}, "must be of type list"),
    ({"requires": {"gpu": True, "capability": "sm89"}}, "not a compute capability constraint"),
    ({"requires": {"gpu": True, "capability": "=>8.9"}}, "not a compute capability constraint"),
    ({"requires": {"gpu": False, "capability": ">=8.9"}}, "capability' is set but gpu is false"),
    ({"requires": {"min_tests": 0}}, "'suites.toy.requires.min_tests' must be at least 1"),
    ({"requires": {"gpu": "yes"}}, "must be of type boolean"),
    ({"requires": {"gpus": True}}, "did you mean 'gpu'"),
    ({"repeats": 0}, "'suites.toy.repeats' must be at least 1"),
    ({"patch_sensitiv": True}, "did you mean 'patch_sensitive'"),
])
def test_bad_declarations_are_clear_errors(over: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(**over)
    assert message in str(info.value)
    assert info.value.exit_code == 3


def test_missing_path_and_unknown_suite() -> None:
    raw = {k: v for k, v in GOOD.items() if k != "path"}
    with pytest.raises(ConfigError, match="missing required key 'suites.toy.path'"):
        suites.parse_suite("toy", raw, Path("/r"))
    with pytest.raises(ConfigError, match="no suite 'tyo'; did you mean 'toy'"):
        suites.get(suites.parse_all({"toy": GOOD}, Path("/r")), "tyo")


def test_capability_constraints() -> None:
    assert suites.parse_constraint(">=8.9,<10.0") == ((">=", (8, 9)), ("<", (10, 0)))


def test_fill_placeholders() -> None:
    assert fill(("{python}", "--junitxml={junit}", "{tree}/x"), junit_path="/o/j.xml",
                tree="/t", python="py") == ["py", "--junitxml=/o/j.xml", "/t/x"]


XML = b"""<?xml version="1.0"?><testsuites><testsuite tests="5">
<testcase classname="m" name="ok"><properties><property name="output_sha256" value="aa"/></properties></testcase>
<testcase classname="m" name="bad"><failure message="boom">trace</failure></testcase>
<testcase classname="m" name="err"><error message="fixture"/></testcase>
<testcase classname="m" name="skip"><skipped message="no cuda"/></testcase>
<testcase classname="m" name="ok2"/>
</testsuite></testsuites>"""


def test_junit_counts_names_and_properties() -> None:
    r = junit.parse_bytes(XML, "x")
    assert r.counts == {"tests": 5, "passed": 2, "failed": 1, "skipped": 1, "errors": 1}
    assert r.failing == ["m::bad", "m::err"]
    assert junit.output_digests(r.cases[0]) == {"output_sha256": "aa"}


@pytest.mark.parametrize("data, message", [
    (b"<oops", "not valid JUnit XML"),
    (b"<html/>", "root element is <html>"),
    (b'<!DOCTYPE x [<!ENTITY a "b">]><testsuites/>', "declares a DTD"),
])
def test_junit_malformed(data: bytes, message: str) -> None:
    with pytest.raises(SuiteError, match=message):
        junit.parse_bytes(data, "x")


def test_junit_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SuiteError, match="wrote no JUnit XML"):
        junit.parse_file(tmp_path / "none.xml")


def ex(xml: bytes, rc: int = 0) -> Execution:
    return Execution(junit.parse_bytes(xml, "x"), "h" * 64, rc, 0.1, "")


def cases(*outcomes: str, digest: str = "d") -> bytes:
    tags = {"passed": "", "failed": "<failure/>", "skipped": "<skipped/>", "error": "<error/>"}
    body = "".join(
        f'<testcase classname="m" name="t{i}"><properties><property name="out_sha256" '
        f'value="{digest}"/></properties>{tags[o]}</testcase>' for i, o in enumerate(outcomes))
    return f"<testsuite>{body}</testsuite>".encode()


def test_verdict_rules() -> None:
    s = parse()  # min_tests 2
    assert verdict(s, ex(cases("passed", "passed"))) == []
    assert verdict(s, ex(b"<testsuite/>", 5)) == ["collected no tests"]
    assert "fewer than the minimum 2" in verdict(s, ex(cases("passed", "skipped")))[0]
    assert "1 failed and 0 errored: m::t1" in verdict(s, ex(cases("passed", "failed", "passed"), 1))[0]
    assert "exited 4" in verdict(s, ex(cases("passed", "passed"), 4))[0]


def test_sensitivity_probe() -> None:
    s = parse()
    flagged = probes.patch_sensitivity(s, ex(cases("passed", "passed")), "pristine")
    assert flagged["status"] == "flagged" and "passes on the pristine" in flagged["reason"]
    ok = probes.patch_sensitivity(s, ex(cases("failed", "error"), 1), "pristine")
    assert ok["status"] == "ok" and ok["failing_tests"] == ["m::t0", "m::t1"]
    assert probes.patch_sensitivity(parse(patch_sensitive=False), None, "p")["status"] == \
        "not-declared"
    assert probes.patch_sensitivity(s, None, "p", "no junit")["status"] == "ok"


def test_determinism_probe() -> None:
    same = [ex(cases("passed", "passed")) for _ in range(3)]
    assert probes.determinism(same)["status"] == "ok"
    assert probes.determinism(same)["digests"] == 2
    drift = same[:2] + [ex(cases("passed", "passed", digest="e"))]
    d = probes.determinism(drift)
    assert d["status"] == "flagged" and d["differences"][0]["repeat"] == 3
    assert probes.determinism(same[:1])["status"] == "not-run"


H200 = {"cuda_available": True, "gpu_name": "NVIDIA H200", "compute_capability": "9.0",
        "free_memory_gib": 130.0, "torch": "2.11", "host": "box"}


@pytest.mark.parametrize("env, req, message", [
    ({"torch": "2.13.0+cpu", "cuda_available": False, "host": "cpu"}, {},
     "needs a CUDA GPU; torch 2.13.0+cpu sees no CUDA device on cpu"),
    ({"torch": None, "host": "cpu"}, {}, "needs a CUDA GPU; torch is not installed"),
    (H200, {"capability": "==8.9"}, "needs compute capability ==8.9; NVIDIA H200 has 9.0"),
    (H200, {"capability": ">=8.9,<9.0"}, "needs compute capability >=8.9,<9.0"),
    (H200, {"min_free_memory_gib": 200}, "needs 200.0 GiB of free GPU memory"),
    ({**H200, "compute_capability": None}, {"capability": ">=8.9"},
     "needs compute capability >=8.9; the capability of NVIDIA H200 could not be determined"),
])
def test_requirement_refusals(env: dict[str, Any], req: dict[str, Any], message: str) -> None:
    s = parse(requires={"gpu": True, **req})
    with pytest.raises(RequirementError) as info:
        machine.check(s, env)
    assert message in info.value.one_line() and info.value.exit_code == 41


def test_requirements_met() -> None:
    machine.check(parse(), H200)
    machine.check(parse(requires={"gpu": False}), {"cuda_available": False})


def test_nvidia_smi_parsing() -> None:
    out = machine.nvidia_smi(lambda argv: "NVIDIA H200, 570.86.15, 9.0, 143000\n")
    assert out == {"gpu_name": "NVIDIA H200", "driver": "570.86.15", "compute_capability": "9.0",
                   "free_memory_gib": 139.65}


def test_a_suite_that_could_not_import_names_the_module_and_the_setup(tmp_path: Path) -> None:
    """A fresh machine after `make demo` has pytest but not torch: the error names torch
    and the make target that installs it, not pytest."""
    out = ("ImportError while loading conftest\nconftest.py:20: in <module>\n    import torch\n"
           "E   ModuleNotFoundError: No module named 'torch'\n")
    with pytest.raises(SuiteError) as info:
        execution.collect(tmp_path / "none.xml", 4, 0.1, out, "/venv/bin/python")
    assert info.value.message == "the suite did not run: /venv/bin/python cannot import 'torch'"
    assert info.value.hint is not None and "`make setup-suite`" in info.value.hint
    assert "pytest is installed" not in info.value.hint
    with pytest.raises(SuiteError) as info:
        execution.collect(tmp_path / "none.xml", 4, 0.1, out.replace("torch", "numpy.linalg"),
                          "python3 in img", execution.IMAGE_INSTALL_HINT)
    assert "cannot import 'numpy'" in info.value.message
    assert info.value.hint == ("python3 in img lacks numpy: run the suite in an image that has "
                               "it, or with `--runner host` (docs/fixtures.md)")
    with pytest.raises(SuiteError, match="exited 2 and wrote no JUnit XML.*last output: boom"):
        execution.collect(tmp_path / "none.xml", 2, 0.1, "boom\n", "/venv/bin/python")
