"""run_suite's orchestration with an in-process runner (hermetic: no pytest subprocess)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from patchbake.digest import Digest
from patchbake.errors import RequirementError, SuiteError
from patchbake.evidence import statement
from patchbake.config import suites
from patchbake.suites import junit
from patchbake.suites.execution import Execution
from patchbake.suites.image import SuiteImage
from patchbake.suites.run import run_suite, suite_content_sha256

REPO = Path(__file__).resolve().parents[2]
SUITES = REPO / "tests" / "fixtures" / "suites"
REF = SuiteImage("toy", Digest.from_hex("ab" * 32), Digest.from_hex("cd" * 32))


class FakeRunner:
    """Answers per tree: 'patched' runs pass, 'pristine' runs get ``pristine_xml``."""

    name = "host"

    def __init__(self, env: dict[str, Any], patched: list[bytes], pristine: bytes) -> None:
        self.env, self.patched, self.pristine = env, list(patched), pristine
        self.calls: list[str] = []

    def environment(self, suite: suites.Suite, ref: SuiteImage) -> dict[str, Any]:
        return dict(self.env)

    @contextmanager
    def patched_tree(self, ref: SuiteImage) -> Iterator[str]:
        yield "patched"

    @contextmanager
    def tree_at(self, path: Path) -> Iterator[str]:
        yield "pristine"

    def execute(self, suite: suites.Suite, tree: str, workdir: Path, index: int) -> Execution:
        self.calls.append(tree)
        xml = self.patched.pop(0) if tree == "patched" else self.pristine
        return Execution(junit.parse_bytes(xml, "x"), "0" * 64, 0, 0.01, "")


def xml(*outcomes: str, digest: str = "d") -> bytes:
    tag = {"passed": "", "failed": "<failure/>"}
    return ("<testsuite>" + "".join(
        f'<testcase classname="m" name="t{i}"><properties><property name="out_sha256" '
        f'value="{digest}"/></properties>{tag[o]}</testcase>' for i, o in enumerate(outcomes))
        + "</testsuite>").encode()


def suite(**over: Any) -> suites.Suite:
    raw = {"path": str(SUITES / "passing"), "command": ["x", "--junitxml={junit}"],
           "repeats": 2, "patch_sensitive": True, "requires": {"min_tests": 2}, **over}
    return suites.parse_suite("toy", raw, REPO)


def pristine() -> tuple[Path, str]:
    return Path("/pristine"), "pristine upstream (test)"


def test_pass_with_probes_builds_a_statement() -> None:
    r = FakeRunner({"host": "h"}, [xml("passed", "passed")] * 2, xml("failed", "failed"))
    result = run_suite(suite(), REF, r, pristine)
    assert r.calls == ["patched", "patched", "pristine"]
    assert result.result == "PASSED" and result.counts["passed"] == 2
    assert result.probes["patch_sensitivity"]["status"] == "ok"
    assert result.probes["determinism"]["status"] == "ok"
    assert result.suite["content_sha256"] == suite_content_sha256(SUITES / "passing")
    stmt = statement.build(result, [dict(s) for s in result.steps])
    assert statement.SuiteStatement.of(stmt, "t").result == "PASSED"


def test_patch_sensitive_suite_passing_on_pristine_is_flagged() -> None:
    r = FakeRunner({}, [xml("passed", "passed")] * 2, xml("passed", "passed"))
    result = run_suite(suite(), REF, r, pristine)
    assert result.result == "PASSED"
    assert result.probes["patch_sensitivity"]["status"] == "flagged"
    stmt = statement.build(result, [])
    assert stmt.predicate["result"] == "WARNED"  # cannot count as evidence


def test_repeats_that_differ_are_flagged() -> None:
    r = FakeRunner({}, [xml("passed", "passed"), xml("passed", "passed", digest="x")],
                   xml("failed"))
    result = run_suite(suite(), REF, r, pristine)
    assert result.probes["determinism"]["status"] == "flagged"
    assert statement.build(result, []).predicate["result"] == "WARNED"


def test_collecting_nothing_and_too_few_fail() -> None:
    r = FakeRunner({}, [b"<testsuite/>"] * 2, xml("failed"))
    assert run_suite(suite(), REF, r, pristine).problems[0] == "collected no tests"
    r = FakeRunner({}, [xml("passed")] * 2, xml("failed"))
    result = run_suite(suite(), REF, r, pristine)
    assert result.result == "FAILED"
    assert "fewer than the minimum 2" in result.problems[0]


def test_requirements_refused_before_running() -> None:
    r = FakeRunner({"torch": "2.13.0+cpu", "cuda_available": False, "host": "ci"}, [], b"")
    with pytest.raises(RequirementError, match="needs a CUDA GPU"):
        run_suite(suite(requires={"gpu": True}), REF, r, pristine)
    assert r.calls == []


def test_patch_sensitive_without_pristine_is_refused() -> None:
    r = FakeRunner({}, [xml("passed", "passed")] * 2, b"")
    with pytest.raises(SuiteError, match="no pristine tree"):
        run_suite(suite(), REF, r, None)


def test_suite_content_hash_ignores_caches(tmp_path: Path) -> None:
    (tmp_path / "check_a.py").write_text("x = 1\n")
    before = suite_content_sha256(tmp_path)
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "check_a.cpython-311.pyc").write_bytes(b"junk")
    assert suite_content_sha256(tmp_path) == before
    (tmp_path / "check_a.py").write_text("x = 2\n")
    assert suite_content_sha256(tmp_path) != before
    with pytest.raises(SuiteError, match="does not exist"):
        suite_content_sha256(tmp_path / "nope")


def test_image_reference_parsing() -> None:
    from patchbake.images.refs import ImageRef

    text = "sha256:" + "ab" * 32
    d = Digest.parse(text)
    assert ImageRef.parse(f"img@{text}") == ImageRef("img", d)
    assert ImageRef.parse(text) == ImageRef(None, d)
    assert ImageRef.parse("img") == ImageRef("img", None)
    assert str(ImageRef.parse(f"img@{text}")) == f"img@{text}"
    from patchbake.errors import ImageError

    with pytest.raises(ImageError, match="not sha256"):
        ImageRef.parse("img@sha256:zz")


def test_unparsable_image_record_is_an_image_error(tmp_path: Path) -> None:
    from patchbake.errors import ImageError
    from patchbake.suites.image import find_record

    d = Digest.from_hex("ab" * 32)
    rec = tmp_path / "manifests" / "images" / "img" / f"{'ab' * 32}.json"
    rec.parent.mkdir(parents=True)
    assert find_record(tmp_path, d) is None
    rec.write_text('{"manifest_digest": "x"')
    with pytest.raises(ImageError, match="is not valid JSON") as info:
        find_record(tmp_path, d)
    assert info.value.exit_code == 30
    rec.write_text('{"manifest_digest": "x"}')  # JSON, but not a record of a known format
    with pytest.raises(ImageError, match="field 'format' is missing"):
        find_record(tmp_path, d)
