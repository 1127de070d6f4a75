"""Gates on signed inputs (evidence, capability, benchmark, approval), hermetic: each one
passes on good input and fails closed, with its reason, on each kind of bad input."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from patchbake.errors import EvidenceError
from patchbake.digest import Digest
from patchbake import config
from patchbake.evidence import keys
from patchbake.release import attest, create, facts, gates
from patchbake.config.channels import Benchmark, Gate
from release_support import (
    FIGURES,
    Keys,
    make_repo,
    sign_all,
    sign_result,
    suite_result,
    write_policy,
)

DIGEST = "sha256:" + "ab" * 32
IMAGE = "sm89-serving-offline"


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, Keys]:
    root = tmp_path / "repo"
    k = make_repo(root, tmp_path / "keys")
    return root, k


def evaluation(root: Path) -> gates.Evaluation:
    p = config.load(root / "pipeline.yaml")
    return create.evaluation(p, None, f"{IMAGE}@{DIGEST}")


def run(root: Path, channel: str) -> gates.Table:
    p = config.load(root / "pipeline.yaml")
    ch = p.channels[channel]
    return gates.evaluate(evaluation(root), ch)


def status(table: gates.Table, gate: str) -> tuple[str, str]:
    d = next(d for d in table.decisions if d.gate == gate)
    return d.status, d.reason


def test_signed_inputs_pass_every_signed_gate(repo: tuple[Path, Keys]) -> None:
    root, k = repo
    sign_all(root, k, IMAGE, DIGEST)
    table = run(root, "sm89-stable")
    for gate in ("evidence", "capability", "benchmark", "approval"):
        assert status(table, gate)[0] == "pass", status(table, gate)
    assert "no earlier 'sm89-stable' release has figures from that GPU" in status(table, "benchmark")[1]
    assert status(table, "approval")[1] == "approved by approver"


def test_gates_needing_the_store_error_without_one_and_block(repo: tuple[Path, Keys]) -> None:
    root, k = repo
    sign_all(root, k, IMAGE, DIGEST)
    table = run(root, "sm89-stable")
    assert status(table, "verify")[0] == "error"
    assert "needs the local store" in status(table, "verify")[1]
    assert not table.passed and table.verdict().startswith("'sm89-stable' is BLOCKED")


def test_evidence_gate_applies_the_pipelines_declaration_not_the_evidences(
        repo: tuple[Path, Keys]) -> None:
    root, k = repo
    result = suite_result(root, "dsv4-topk-gpu", IMAGE, DIGEST, capability="9.0")
    det = {**result.probes["determinism"], "repeats": 1, "digests": 0}
    result = dataclasses.replace(
        result, probes={**result.probes, "determinism": det},
        suite={**result.suite, "repeats": 1})  # the run declared fewer repeats than pipeline.yaml
    sign_result(root, k.evidence, result)
    sign_result(root, k.evidence, suite_result(root, "dsv4-topk-cpu", IMAGE, DIGEST))
    st, reason = status(run(root, "validated"), "evidence")
    assert st == "fail" and "repeats not shown bit-identical" in reason, reason


def test_missing_evidence_fails_with_its_reason(repo: tuple[Path, Keys]) -> None:
    root, _ = repo
    st, reason = status(run(root, "validated"), "evidence")
    assert st == "fail" and reason.startswith("suite 'dsv4-topk-gpu': missing:")


@pytest.mark.parametrize("change, expect", [
    ({"passed": 3}, "fewer than its minimum 30"),
    ({"sensitivity": "flagged"}, "its evidence says WARNED"),
    ({"determinism": "flagged"}, "its evidence says WARNED"),
])
def test_evidence_below_the_declaration_fails(repo: tuple[Path, Keys], change: dict[str, Any],
                                              expect: str) -> None:
    root, k = repo
    result = suite_result(root, "dsv4-topk-gpu", IMAGE, DIGEST, capability="9.0", **change)
    sign_result(root, k.evidence, result)
    sign_result(root, k.evidence, suite_result(root, "dsv4-topk-cpu", IMAGE, DIGEST))
    st, reason = status(run(root, "validated"), "evidence")
    assert st == "fail" and expect in reason, reason


def test_evidence_by_a_key_outside_the_policy_fails(repo: tuple[Path, Keys]) -> None:
    root, k = repo
    sign_result(root, k.outsider, suite_result(root, "dsv4-topk-gpu", IMAGE, DIGEST,
                                               capability="9.0"))
    st, reason = status(run(root, "validated"), "evidence")
    assert st == "fail" and "untrusted-key" in reason


def test_evidence_about_another_image_fails(repo: tuple[Path, Keys]) -> None:
    root, k = repo
    other = "sha256:" + "cd" * 32
    path = sign_result(root, k.evidence, suite_result(root, "dsv4-topk-gpu", IMAGE, other,
                                                      capability="9.0"))
    mine = root / "manifests" / "evidence" / DIGEST[7:] / path.name
    mine.parent.mkdir(parents=True)
    mine.write_bytes(path.read_bytes())
    st, reason = status(run(root, "validated"), "evidence")
    assert st == "fail" and "wrong-subject" in reason


def test_an_edited_suite_invalidates_its_evidence(repo: tuple[Path, Keys]) -> None:
    root, k = repo
    sign_all(root, k, IMAGE, DIGEST)
    (root / "tests/gpu_suites/dsv4_topk/test_wiring.py").write_text("# edited\n")
    st, reason = status(run(root, "validated"), "evidence")
    assert st == "fail" and "another version of the suite" in reason


def test_h200_evidence_leaves_sm89_stable_blocked_on_sm89_evidence(
        repo: tuple[Path, Keys]) -> None:
    root, k = repo
    sign_all(root, k, IMAGE, DIGEST, capability="9.0")
    table = run(root, "sm89-stable")
    assert status(table, "evidence")[0] == "pass"
    st, reason = status(table, "capability")
    assert st == "fail"
    assert "missing input" in reason and "sm89 evidence" in reason and "cc 9.0" in reason


def _previous(figures: dict[str, Any], gpu: str | None = "NVIDIA L40S",
              capability: str | None = "8.9") -> facts.Benchmark:
    """The benchmark fact of an earlier release (sign_all measures on an L40S, cc 8.9)."""
    return facts.Benchmark("dsv4-topk-gpu", "manifests/evidence/x/benchmark.dsse.json",
                           "k" * 64, "0" * 64, figures, gpu, capability)


def test_benchmark_beyond_tolerance_of_the_previous_release_fails(
        repo: tuple[Path, Keys]) -> None:
    root, k = repo
    sign_all(root, k, IMAGE, DIGEST)
    ev = evaluation(root)
    before = {m: dict(f) for m, f in FIGURES.items()}
    before["fused_us[15x512]"]["value"] = 4.0  # now 4.83 us: 21% slower
    ev.previous_benchmark = lambda c, n, w: _previous(before)
    g = Gate("benchmark", "sm89-stable", benchmark=Benchmark("dsv4-topk-gpu", 0.10))
    st, reason = gates.gate_benchmark(ev, g)
    assert st == "fail" and "fused_us[15x512] 4.0 us -> 4.83 us (+20.7% worse)" in reason
    ev.previous_benchmark = lambda c, n, w: _previous(FIGURES)
    assert gates.gate_benchmark(ev, g)[0] == "pass"


@pytest.mark.parametrize("previous, says", [
    # the same time in another unit: 4.0 us was 0.0040 ms; 4.83 us now is 21% slower
    ({"value": 0.0040, "unit": "ms", "better": "lower"}, "(+20.7% worse)"),
    ({"value": 4.83, "unit": "tokens/s", "better": "lower"}, "not comparable"),
    ({"value": 4.83, "better": "lower"}, "the figure has no 'unit'"),
    ({"value": 4.83, "unit": "us", "better": "higher"}, "'better' changed"),
])
def test_benchmark_figures_are_compared_in_one_unit(
        repo: tuple[Path, Keys], previous: dict[str, object], says: str) -> None:
    root, k = repo
    sign_all(root, k, IMAGE, DIGEST)
    ev = evaluation(root)
    ev.previous_benchmark = lambda c, n, w: _previous({**FIGURES, "fused_us[15x512]": previous})
    g = Gate("benchmark", "sm89-stable", benchmark=Benchmark("dsv4-topk-gpu", 0.10))
    st, reason = gates.gate_benchmark(ev, g)
    assert st == "fail" and says in reason


def test_figures_are_compared_with_the_last_release_measured_on_the_same_gpu(
        repo: tuple[Path, Keys]) -> None:
    """A faster card would hide a regression: the baseline is the channel's last release
    whose figures name the same GPU and capability; with none, these start one."""
    root, k = repo
    sign_all(root, k, IMAGE, DIGEST)
    ev = evaluation(root)
    asked: list[tuple[str, str]] = []
    slower: dict[str, Any] = {
        m: {**f, "value": float(str(f["value"])) / 2} if f["better"] == "lower" else dict(f)
        for m, f in FIGURES.items()}

    def lookup(c: str, n: str, w: tuple[str, str]) -> facts.Benchmark | None:
        asked.append(w)
        return _previous(slower) if w == ("NVIDIA H200", "9.0") else None
    ev.previous_benchmark = lookup
    g = Gate("benchmark", "sm89-stable", benchmark=Benchmark("dsv4-topk-gpu", 0.10))
    st, reason = gates.gate_benchmark(ev, g)
    assert asked == [("NVIDIA L40S", "8.9")]
    assert st == "pass" and "no earlier 'sm89-stable' release has figures from that GPU" in reason
    ev.previous_benchmark = lambda c, n, w: _previous(slower)
    assert gates.gate_benchmark(ev, g)[0] == "fail"


def _sign_figures_measured_on(root: Path, k: Keys, environment: Any) -> None:
    """Re-sign the figures with ``environment`` as given (sign_benchmark refuses one that
    names no GPU; figures signed by another tool may still)."""
    path = attest.benchmark_path(root / "manifests" / "evidence", Digest.parse(DIGEST),
                                 "dsv4-topk-gpu")
    path.unlink()
    payload = attest._statement(IMAGE, Digest.parse(DIGEST), attest.BENCHMARK_TYPE, {
        "name": "dsv4-topk-gpu", "figures": FIGURES, "environment": environment})
    attest._write(path, payload, keys.load_private(k.evidence))


def test_figures_measured_on_another_capability_than_the_channel_releases_for_fail(
        repo: tuple[Path, Keys]) -> None:
    root, k = repo
    sign_all(root, k, IMAGE, DIGEST)
    _sign_figures_measured_on(root, k, {"gpu": "NVIDIA H200", "capability": "9.0"})
    st, reason = status(run(root, "sm89-stable"), "benchmark")
    assert st == "fail"
    assert "measured on NVIDIA H200 (compute capability 9.0)" in reason and "8.9" in reason


def test_the_capability_is_the_evaluated_channels_even_when_it_comes_after_the_benchmark(
        repo: tuple[Path, Keys]) -> None:
    """A benchmark gate declared in an earlier channel is held to the capability gate of
    the channel being evaluated, wherever in the chain that gate is declared."""
    root, k = repo
    sign_all(root, k, IMAGE, DIGEST)
    _sign_figures_measured_on(root, k, {"gpu": "NVIDIA H200", "capability": "9.0"})
    p = config.load(root / "pipeline.yaml")
    early = Gate("benchmark", "validated", benchmark=Benchmark("dsv4-topk-gpu", 0.10))
    late = config.channels.Channel("sm89-late", 9, "", (early, Gate(
        "capability", "sm89-late", capability="8.9")))
    ev = create.evaluation(p, None, f"{IMAGE}@{DIGEST}")
    table = gates.evaluate(ev, late)
    st, reason = table.decisions[0].status, table.decisions[0].reason
    assert st == "fail" and "'sm89-late' releases for 8.9" in reason
    alone = config.channels.Channel("validated-like", 1, "", (early,))
    assert gates.evaluate(ev, alone).decisions[0].status == "pass"


@pytest.mark.parametrize("environment", [{}, {"gpu": "NVIDIA L40S"}, {"capability": "8.9"},
                                         {"gpu": "", "capability": "8.9"},
                                         {"gpu": "NVIDIA L40S", "capability": 8.9},
                                         {"gpu": "NVIDIA H200", "capability": "8.9"},
                                         {"gpu": " ", "capability": "sm_89 "},
                                         ["NVIDIA L40S", "8.9"], "NVIDIA L40S",
                                         {"gpu": "NVIDIA L40S " + "x" * 200, "capability": "8.9"},
                                         {"gpu": "NVIDIA L40S\n", "capability": "8.9"},
                                         {"gpu": "NVIDIA L40S", "capability": "8.9" * 100}])
def test_figures_that_do_not_say_where_they_were_measured_fail(
        repo: tuple[Path, Keys], environment: dict[str, Any]) -> None:
    root, k = repo
    sign_all(root, k, IMAGE, DIGEST)
    _sign_figures_measured_on(root, k, environment)
    st, reason = status(run(root, "sm89-stable"), "benchmark")
    assert st == "fail" and "do not say believably where they were measured" in reason
    with pytest.raises(EvidenceError, match="figures from another GPU are never compared"):
        attest.sign_benchmark(root / "manifests" / "evidence", "dsv4-topk-gpu", IMAGE,
                              Digest.parse("sha256:" + "cd" * 32), FIGURES, environment,
                              keys.load_private(k.evidence))
    assert not (root / "manifests" / "evidence" / ("cd" * 32)).exists()  # nothing written


def test_figures_without_a_known_unit_cannot_be_signed(tmp_path: Path) -> None:
    with pytest.raises(EvidenceError, match="figure 'f' has unit 'parsecs'"):
        attest.check_figures({"f": {"value": 1.0, "unit": "parsecs", "better": "lower"}}, "b")


def test_altered_benchmark_figures_fail(repo: tuple[Path, Keys]) -> None:
    root, k = repo
    sign_all(root, k, IMAGE, DIGEST)
    path = attest.benchmark_path(root / "manifests" / "evidence", Digest.parse(DIGEST),
                                 "dsv4-topk-gpu")
    path.write_text(path.read_text().replace('"payload": "', '"payload": "e30K', 1))
    st, reason = status(run(root, "sm89-stable"), "benchmark")
    assert st == "fail" and "benchmark 'dsv4-topk-gpu'" in reason


def test_approval_by_a_key_without_the_approver_role_does_not_count(
        repo: tuple[Path, Keys]) -> None:
    root, k = repo
    sign_all(root, k, IMAGE, DIGEST)
    write_policy(root, k, drop="approver")
    st, reason = status(run(root, "sm89-stable"), "approval")
    assert st == "fail"
    assert "0 of 1 signed approval(s) for 'sm89-stable' by a key whose role is approver" in reason


def test_unreadable_trust_policy_blocks_every_signed_gate(repo: tuple[Path, Keys]) -> None:
    root, k = repo
    sign_all(root, k, IMAGE, DIGEST)
    (root / "manifests" / "trust-policy.yaml").unlink()
    table = run(root, "sm89-stable")
    for gate in ("evidence", "benchmark", "approval"):
        assert status(table, gate)[0] in ("fail", "error"), gate
    assert not table.passed


def test_the_repositorys_sm89_stable_is_blocked_on_missing_sm89_evidence() -> None:
    """The committed pipeline, policy and evidence, as they are: sm89-stable must say that
    what is missing is sm89 evidence (and has no approver to sign an approval)."""
    from release_support import REPO

    p = config.load(REPO / "pipeline.yaml")
    ev = create.evaluation(p, None, IMAGE)  # the definition's committed latest record
    chs = p.channels
    table = gates.evaluate(ev, chs["sm89-stable"])
    st, reason = status(table, "capability")
    assert st == "fail" and "missing input" in reason and "(sm89 evidence)" in reason
    assert status(table, "approval")[0] == "fail"
    assert not table.passed


@pytest.mark.parametrize("change, expect", [
    ({"passed": 3}, "fewer than its minimum 30"),
    ({"sensitivity": "flagged"}, "its evidence says WARNED"),
    # the signer's word about the device is checked against NVIDIA's table ...
    ({"environment": {"gpu_name": "NVIDIA H200"}},
     "GPU 'NVIDIA H200' is an H200, compute capability 9.0, but the evidence claims 8.9"),
    ({"environment": {"gpu_name": "NVIDIA Quantum 9000"}}, "not a part patchbake knows"),
    # ... and against the raw device properties the suite recorded
    ({"environment": {"device_properties": {"name": "NVIDIA L40S", "major": 9, "minor": 0}}},
     "the recorded device properties ('NVIDIA L40S', 9.0) disagree"),
])
def test_capability_gate_alone_holds_its_evidence_to_the_declaration(
        tmp_path: Path, change: dict[str, Any], expect: str) -> None:
    """A channel with a capability gate and no evidence gate for that suite: evidence from
    the right device that falls short of the suite's declaration does not pass it."""
    root = tmp_path / "repo"
    k = make_repo(root, tmp_path / "keys",
                  channels={"gpu": {"gates": ["capability"], "capability": "8.9"}})
    sign_result(root, k.evidence, suite_result(root, "dsv4-topk-gpu", IMAGE, DIGEST,
                                               capability="8.9", **change))
    st, reason = status(run(root, "gpu"), "capability")
    assert st == "fail" and expect in reason, reason


def test_a_blocked_gate_table_says_its_verdict_once(
        repo: tuple[Path, Keys], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from patchbake.entry import main

    root, _ = repo
    monkeypatch.setenv("PATCHBAKE_PIPELINE", str(root / "pipeline.yaml"))
    assert main(["release", "gates", "--channel", "sm89-stable", "--image",
                 f"{IMAGE}@{DIGEST}"]) == 60
    out, err = capsys.readouterr()
    assert (out + err).count("is BLOCKED for") == 1
    assert err.startswith("patchbake: error: 'sm89-stable' is BLOCKED for")
