"""The reviewer's paragraph, computed from verified evidence only.

Every sentence is backed by a checked fact: the patch hash from the image record, the
N/N match from a fresh identity verification, test counts from signed statements that
verified against the trust policy and this exact digest. Whatever could not be verified
is listed under "Not run" with its reason, never silently dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..digest import Digest
from ..errors import EvidenceError
from .records import NOT_SHOWN, Verified


@dataclass(frozen=True)
class ImageFacts:
    name: str
    digest: Digest  # manifest digest
    patch_sha256: str | None
    matched: int | None  # baked files that matched a fresh apply (None: not verified)
    total: int | None
    target_sm: str | None = None  # e.g. "sm89": the hardware the image is built for


def sm_of(capability: str | None) -> str | None:
    if not capability:
        return None
    return "sm" + capability.replace(".", "")


def gpu_label(env: Mapping[str, Any]) -> str:
    name = str(env.get("gpu_name") or "GPU").replace("NVIDIA ", "")
    name = name.split()[0] if name else "GPU"
    sm = sm_of(env.get("compute_capability"))
    return f"{name}, {sm}" if sm else name


def _suite_sentence(v: Verified) -> str:
    s = v.statement
    env = s.environment
    kind = "CUDA" if env.get("gpu_name") and s.needs_gpu else "CPU"
    where = f" ({gpu_label(env)})" if kind == "CUDA" else ""
    runner = "host runner on the image's materialised tree" if s.runner == "host" else \
        "Docker runner inside the image"
    text = (f"The exact image passed {s.counts['passed']} focused {kind} tests{where} of suite "
            f"`{s.suite}` with the {runner}")
    if s.counts["skipped"]:
        text += f" ({s.counts['skipped']} skipped)"
    probes = []
    sens = s.probes.get("patch_sensitivity") or {}
    if sens.get("status") == "ok":
        probes.append(f"on the pristine upstream tree it fails ({sens.get('failed', '?')} of "
                      f"{sens.get('tests', '?')} tests), so it tests the patch")
    det = s.probes.get("determinism") or {}
    if det.get("status") == "ok":
        # with no output digests recorded only outcomes were compared: not "bit-identical"
        probes.append(f"{det.get('repeats')} repeats were bit-identical across "
                      f"{det.get('digests')} output digests" if det.get("digests") else
                      f"{det.get('repeats')} repeats agreed test by test (no output digests "
                      "recorded)")
    if probes:
        text += "; " + "; ".join(probes)
    pins = env.get("upstream_pins") or {}
    differ = [k for k in env.get("pins_differ") or [] if k in pins]
    if differ:
        text += "; it ran with " + ", ".join(
            f"{k} {env.get(k) or 'absent'} where the upstream pins {pins[k]}" for k in differ)
    return text + "."


def paragraph(  # noqa: C901 - one sentence per fact, in reading order
        facts: ImageFacts, evidence: dict[str, Verified | EvidenceError]) -> str:
    parts = []
    patch = f"SHA-256 `{facts.patch_sha256}`" if facts.patch_sha256 else "(unrecorded)"
    parts.append(f"This exact patch is {patch} and was baked into image `{facts.name}` "
                 f"`{facts.digest}`.")
    if facts.matched is not None and facts.total is not None:
        if facts.matched == facts.total:
            parts.append(f"All {facts.total} baked source files matched a fresh apply.")
        else:
            parts.append(f"Only {facts.matched} of {facts.total} baked source files matched a "
                         "fresh apply: this image is not the patch.")
    else:
        parts.append("Its baked files were not re-verified here (run `patchbake verify`).")
    not_run = []
    gpu_sms = set()
    for suite, v in sorted(evidence.items()):
        if isinstance(v, EvidenceError) and v.reason == "missing":
            not_run.append(f"`{suite}` (no signed evidence for this image)")
        elif isinstance(v, EvidenceError):
            not_run.append(f"`{suite}` ({v.reason}: {v.message})")
        elif v.statement.result == "PASSED" and not v.patch_shown:
            not_run.append(f"`{suite}` (passed {v.statement.counts['passed']} tests, but "
                           f"{NOT_SHOWN}: it never failed on the pristine upstream tree, so "
                           "it counts toward nothing)")
        elif not v.counts_as_evidence:
            not_run.append(f"`{suite}` (evidence present but {v.statement.result}; it does "
                           "not count)")
        else:
            parts.append(_suite_sentence(v))
            sm = sm_of(v.statement.environment.get("compute_capability"))
            if sm:
                gpu_sms.add(sm)
    if facts.target_sm and gpu_sms and facts.target_sm not in gpu_sms:
        not_run.append(f"the GPU suites on {facts.target_sm} hardware (the GPU evidence is "
                       f"{', '.join(sorted(gpu_sms))} evidence, not {facts.target_sm})")
    if not_run:
        parts.append("Not run: " + "; ".join(not_run) + ".")
    return " ".join(parts)
