"""The reviewer paragraph: only verified, counting evidence becomes a sentence."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from patchbake.errors import EvidenceError
from patchbake.evidence import keys, policy, records, summary
from test_evidence_sign_verify import DIGEST, make_result, write_policy


def _verified(tmp_path: Path, **over: Any) -> records.Verified:
    k = keys.generate(tmp_path / "k")
    pol = policy.load(write_policy(tmp_path / "p.yaml", k.public_path, k.keyid))
    path, _, _ = records.sign_result(make_result(**over), keys.load_private(k.private_path),
                                     tmp_path / "ev")
    return records.verify_file(path, DIGEST, pol)


def test_paragraph_from_verified_evidence(tmp_path: Path) -> None:
    facts = summary.ImageFacts("sm89-serving-offline", DIGEST, "f" * 64, 70, 70, "sm89")
    missing = EvidenceError("evidence x does not exist")
    missing.reason = "missing"  # type: ignore[attr-defined]
    text = summary.paragraph(facts, {"toy-gpu": _verified(tmp_path), "toy-cpu": missing})
    assert text.startswith(f"This exact patch is SHA-256 `{'f' * 64}` and was baked into image "
                           f"`sm89-serving-offline` `{DIGEST}`.")
    assert "All 70 baked source files matched a fresh apply." in text
    assert "The exact image passed 3 focused CUDA tests (H200, sm90) of suite `toy-gpu`" in text
    assert "on the pristine upstream tree it fails (3 of 3 tests)" in text
    assert "3 repeats were bit-identical" in text
    assert "Not run: `toy-cpu` (no signed evidence for this image)" in text
    assert "the GPU suites on sm89 hardware (the GPU evidence is sm90 evidence, not sm89)" in text


def test_warned_evidence_is_not_a_pass(tmp_path: Path) -> None:
    v = _verified(tmp_path, probes={"patch_sensitivity": {"status": "flagged"},
                                    "determinism": {"status": "not-run"}})
    facts = summary.ImageFacts("img", DIGEST, None, 69, 70)
    text = summary.paragraph(facts, {"toy-gpu": v})
    assert "passed" not in text.split("Not run:")[0].split("fresh apply")[-1]
    assert "Only 69 of 70 baked source files matched" in text
    assert "`toy-gpu` (evidence present but WARNED; it does not count)" in text
