"""The reviewer paragraph: only verified, counting evidence becomes a sentence."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from patchbake.errors import EvidenceError
from patchbake.evidence import keys, policy, records, summary
from test_evidence_sign_verify import SUBJECT, make_result, write_policy


def _verified(tmp_path: Path, **over: Any) -> records.Verified:
    k = keys.generate(tmp_path / "k")
    pol = policy.load(write_policy(tmp_path / "p.yaml", k.public_path, k.keyid))
    path, _, _ = records.sign_result(make_result(**over), keys.load_private(k.private_path),
                                     tmp_path / "ev")
    return records.verify_file(path, SUBJECT, pol)


def test_paragraph_from_verified_evidence(tmp_path: Path) -> None:
    facts = summary.ImageFacts("sm89-serving-offline", SUBJECT, "f" * 64, 70, 70, "sm89")
    missing = EvidenceError("evidence x does not exist", reason="missing")
    text = summary.paragraph(facts, {"toy-gpu": _verified(tmp_path), "toy-cpu": missing})
    assert text.startswith(f"This exact patch is SHA-256 `{'f' * 64}` and was baked into image "
                           f"`sm89-serving-offline` `{SUBJECT}`.")
    assert "All 70 baked source files matched a fresh apply." in text
    assert "The exact image passed 3 focused CUDA tests (H200, sm90) of suite `toy-gpu`" in text
    assert "on the pristine upstream tree it fails (3 of 3 tests)" in text
    assert "3 repeats were bit-identical" in text
    assert "Not run: `toy-cpu` (no signed evidence for this image)" in text
    assert "the GPU suites on sm89 hardware (the GPU evidence is sm90 evidence, not sm89)" in text


def test_warned_evidence_is_not_a_pass(tmp_path: Path) -> None:
    v = _verified(tmp_path, probes={"patch_sensitivity": {"status": "flagged"},
                                    "determinism": {"status": "not-run"}})
    facts = summary.ImageFacts("img", SUBJECT, None, 69, 70)
    text = summary.paragraph(facts, {"toy-gpu": v})
    assert "passed" not in text.split("Not run:")[0].split("fresh apply")[-1]
    assert "Only 69 of 70 baked source files matched" in text
    assert "`toy-gpu` (evidence present but WARNED; it does not count)" in text


def test_verification_problems_are_not_summarised_as_all_matched(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from patchbake.verify import baked
    from patchbake.errors import VerifyError
    from patchbake.evidence import facts
    from patchbake.suites.image import SuiteImage

    def fake(problems: list[str], mismatched: list[dict[str, Any]], matched: int
             ) -> baked.VerifyResult:
        return baked.VerifyResult(
            ref=str(SUBJECT), kind="store", digest=SUBJECT, config_digest=SUBJECT, matched=matched,
            total=70, mismatched=mismatched, base_drift={}, problems=problems, layers=[],
            identity=None, bytes_read=0, seconds=0.0)

    unused: Any = None  # verify_image is replaced: pipeline, store and lineage are not read
    ref = SuiteImage("img", SUBJECT, None)
    bad_record = fake(["/opt/patchbake/verify.py does not match the identity record"], [], 70)
    monkeypatch.setattr(baked, "verify_image", lambda *a, **k: bad_record)
    with pytest.raises(VerifyError, match="verify.py does not match") as info:
        facts.match_counts(unused, unused, unused, ref)
    assert info.value.exit_code == VerifyError("x").exit_code
    one_off = fake([], [{"path": "vllm/x.py", "expected": "a", "found": "b"}], 69)
    monkeypatch.setattr(baked, "verify_image", lambda *a, **k: one_off)
    assert facts.match_counts(unused, unused, unused, ref) == (69, 70)  # the paragraph says "Only 69 of 70"
    monkeypatch.setattr(baked, "verify_image", lambda *a, **k: fake([], [], 70))
    assert facts.match_counts(unused, unused, unused, ref) == (70, 70)


def test_repeats_without_output_digests_are_not_called_bit_identical(tmp_path: Path) -> None:
    v = _verified(tmp_path, probes={"patch_sensitivity": {"status": "ok", "tests": 3,
                                                          "failed": 3},
                                    "determinism": {"status": "ok", "repeats": 3,
                                                    "digests": 0}})
    text = summary.paragraph(summary.ImageFacts("img", SUBJECT, None, 70, 70), {"toy-gpu": v})
    assert "3 repeats agreed test by test (no output digests recorded)" in text
    assert "bit-identical" not in text


def test_a_run_on_another_torch_than_the_upstream_pin_says_so(tmp_path: Path) -> None:
    from test_evidence_sign_verify import make_result

    env = {**make_result().environment, "torch": "2.11.0+cu130",
           "upstream_pins": {"torch": "2.14.0"}, "pins_differ": ["torch"]}
    facts = summary.ImageFacts("img", SUBJECT, None, 5, 5)
    text = summary.paragraph(facts, {"toy-gpu": _verified(tmp_path, environment=env)})
    assert "it ran with torch 2.11.0+cu130 where the upstream pins 2.14.0" in text
    same = {**env, "torch": "2.14.0+cu130", "pins_differ": []}
    text = summary.paragraph(facts, {"toy-gpu": _verified(tmp_path / "b", environment=same)})
    assert "upstream pins" not in text
