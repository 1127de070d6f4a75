"""Gate evaluation: one image digest against one channel's gates, fail-closed.

Every gate evaluates to ``pass``, ``fail`` or ``error`` with a one-line reason. A gate
whose input is missing, unreadable or unverifiable fails; a gate that raised (any
exception, expected or not) is an ``error``; both block. Nothing here writes anything
(the reproducible gate's second bake lives in a temporary store it removes).

The evaluation also gathers the facts a release manifest records (which evidence
envelope, which record, which figures), each keyed by what it is about.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ..config import Lineage, Pipeline
from ..config import channels
from ..config.channels import Channel, Gate
from ..config.suites import get as get_suite
from ..cuda.check import check_stored
from ..cuda.verdict import Target
from ..digest import Digest, differing
from ..errors import EvidenceError, GuardError, ImageError, PatchbakeError, StoreError
from ..evidence import policy, records
from ..evidence.records import Verified
from ..fsutil import read_input, sha256_bytes
from ..images import definition as definitions
from ..images.record import ImageRecord
from ..patchset.guard import check_lineage
from ..sources import fetch
from ..store import Store
from ..suites.image import find_record
from ..suites.run import suite_content_sha256
from ..verify import baked
from . import gpus, units
from .attest import (
    Basis,
    benchmark_path,
    measured_on,
    measurement_problem,
    utcnow,
    verify_approvals,
    verify_benchmark,
)
from .facts import Approval, Benchmark, Evidence, Facts, Patch, Record, Upstream, Verification
from ..fields import Fields
from .rebake import rebake

STATUSES = ("pass", "fail", "error")
Outcome = tuple[str, str]  # (status, reason)


@dataclass(frozen=True, slots=True)
class Decision:
    channel: str  # the channel that declared the gate
    gate: str
    status: str
    reason: str

    KEYS = ("channel", "gate", "status", "reason")

    @classmethod
    def load(cls, f: Fields) -> Decision:
        return cls(f.text("channel"), f.text("gate"), f.one_of("status", STATUSES),
                   f.text("reason"))

    def dump(self) -> dict[str, str]:
        return {"channel": self.channel, "gate": self.gate, "status": self.status,
                "reason": self.reason}


@dataclass
class Table:
    channel: str
    image: str
    digest: Digest
    decisions: list[Decision]

    @property
    def passed(self) -> bool:
        return bool(self.decisions) and all(d.status == "pass" for d in self.decisions)

    @property
    def blocking(self) -> list[Decision]:
        return [d for d in self.decisions if d.status != "pass"]

    def verdict(self) -> str:
        if self.passed:
            return f"{self.image} {self.digest} may enter '{self.channel}'"
        first = self.blocking[0]
        return (f"'{self.channel}' is BLOCKED for {self.digest}: {len(self.blocking)} gate(s) "
                f"do not pass; first: {first.gate}: {first.reason}")

    def to_json(self) -> dict[str, Any]:
        return {"channel": self.channel, "image": self.image, "digest": str(self.digest),
                "passed": self.passed, "decisions": [d.dump() for d in self.decisions]}


@dataclass
class Evaluation:
    """What the gates look at, computed once and shared between them."""

    pipeline: Pipeline
    store: Store | None
    lineage: Lineage
    image: str
    digest: Digest
    evidence_dir: Path
    policy_path: Path
    # the benchmark fact of the channel's latest release whose figures were measured on the
    # same GPU: (channel, name, (gpu, capability)) -> fact or None
    previous_benchmark: Callable[[str, str, tuple[str, str]], Benchmark | None] = \
        lambda c, n, w: None
    # the channel whose gates are being evaluated (a gate may be inherited from another)
    evaluating: Channel | None = None
    clock: Callable[[], datetime] = utcnow  # when approvals are judged live (tests set it)
    facts: Facts = field(default_factory=Facts)
    _memo: dict[str, Any] = field(default_factory=dict)

    def memo(self, key: str, make: Callable[[], Any]) -> Any:
        if key not in self._memo:
            try:
                self._memo[key] = make()
            except PatchbakeError as exc:  # remembered: every gate that needs it errors
                self._memo[key] = exc
        value = self._memo[key]
        if isinstance(value, PatchbakeError):
            raise value
        return value

    def need_store(self) -> Store:
        if self.store is None:
            raise PatchbakeError("this gate needs the local store (and the image in it)")
        return self.store

    def fetched(self) -> Any:

        return self.memo("fetched", lambda: fetch(self.lineage, self.need_store(),
                                                  base=self.pipeline.root))

    def policy(self) -> Any:

        return self.memo("policy", lambda: policy.load(self.policy_path))

    def record(self) -> ImageRecord | None:

        found: ImageRecord | None = self.memo(
            "record", lambda: find_record(self.pipeline.root, self.digest))
        return found

    def evidence(self, suite: str) -> Verified:

        def verify() -> Verified:
            return records.verify_file(records.evidence_path(self.evidence_dir, self.digest,
                                                             suite),
                                       self.digest, self.policy(), suite)

        found: Verified = self.memo(f"evidence:{suite}", verify)
        return found


def _rel(ev: Evaluation, path: Path) -> str:
    try:
        return path.resolve().relative_to(ev.pipeline.root).as_posix()
    except ValueError:
        return str(path)


# -- candidate ------------------------------------------------------------------------
def gate_guard(ev: Evaluation, g: Gate) -> Outcome:

    f = ev.fetched()
    rep = check_lineage(ev.lineage, pristine_root=f.root, tree_digest=f.tree_digest)
    ev.facts.upstream = Upstream(ev.lineage.upstream.pin, None if f.archive_sha256 is None
                                 else f.archive_sha256.hex, f.tree_digest)
    if not rep.ok:
        return "fail", (f"the lost-line guard found {len(rep.problems)} problem(s); first: "
                        f"{rep.problems[0].message}")
    return "pass", (f"patch sha256:{rep.patch_sha256[:12]}, FILES.txt and the pinned tree "
                    f"agree ({rep.files} files, +{rep.added} -{rep.removed})")


def gate_record(ev: Evaluation, g: Gate) -> Outcome:
    rec = ev.record()
    hexd = ev.digest.hex
    if rec is None:
        return "fail", (f"no committed image record names {ev.digest} "
                        f"(manifests/images/*/{hexd[:12]}….json): bake and commit it")
    lin = ev.lineage
    patch = sha256_bytes(read_input(lin.patch, "the patch", GuardError))
    files = sha256_bytes(read_input(lin.files, "FILES.txt", GuardError))
    path = f"manifests/images/{rec.definition}/{hexd}.json"
    ev.facts.record = Record(path, rec.definition, rec.config_digest, sha256_bytes(
        read_input(ev.pipeline.root / path, "the image record", ImageError)))
    ev.facts.patch = Patch(_rel(ev, lin.patch), patch, files)
    if rec.manifest_digest != ev.digest:
        return "fail", f"{path} records {rec.manifest_digest}, not {ev.digest}"
    if rec.patch_sha256 != patch:
        baked, committed = differing(rec.patch_sha256, patch)
        return "fail", (f"{path} was baked from patch sha256:{baked}, the "
                        f"committed patch is sha256:{committed}")
    if rec.doc.get("files_sha256") != files:
        return "fail", f"{path} names another FILES.txt than the committed one"
    if (rec.doc.get("upstream") or {}).get("pin") != lin.upstream.pin:
        return "fail", f"{path} names upstream {(rec.doc.get('upstream') or {}).get('pin')}"
    return "pass", f"{path} names this digest, the committed patch and FILES.txt"


def gate_verify(ev: Evaluation, g: Gate) -> Outcome:

    res = ev.memo("verify", lambda: baked.verify_image(ev.pipeline, str(ev.digest),
                                                          ev.need_store(), ev.lineage))
    drift = res.base_drift.get("counts", {})
    ev.facts.verify = Verification(res.matched, res.total, res.config_digest, drift)
    if not res.ok:
        try:
            baked.raise_on_failure(res)
        except PatchbakeError as exc:
            return "fail", exc.message
        return "fail", f"{res.summary()}: nothing was verified"
    return "pass", (f"{res.summary()}; base drift: {drift.get('changed', 0)} changed, "
                    f"{drift.get('missing', 0)} missing, {drift.get('extra', 0)} extra")


def gate_reproducible(ev: Evaluation, g: Gate) -> Outcome:

    rec = ev.record()
    if rec is None:
        return "fail", "no image record: nothing says how to bake this image again"
    if rec.doc.get("backend") != "embedded":
        return "fail", (f"the image was built by the {rec.doc.get('backend')} backend, whose "
                        "builds are not reproducible")
    base = Digest.parse((rec.doc.get("base") or {}).get("manifest_digest"),
                        "the image record's base.manifest_digest")
    again = rebake(ev.pipeline, rec.definition, ev.lineage, ev.need_store(),
                   base, int(rec.doc.get("source_date_epoch") or 0))
    if again.digest != ev.digest:
        return "fail", f"a second bake in a fresh store gave {again.digest}, not {ev.digest}"
    return "pass", "a second bake in a fresh store gave the same manifest digest"


def gate_cuda_code(ev: Evaluation, g: Gate) -> Outcome:
    # what zero CUDA objects means, and what is exempt, is the declaration of the definition
    # the committed record names: never taken from the image
    assert g.cuda_target is not None
    rec = ev.record()
    if rec is None:
        return "fail", ("no image record: nothing says which definition (and so which CUDA "
                        "code) this image is meant to have")
    defn = definitions.load(ev.pipeline, rec.definition)
    return check_stored(ev.need_store(), ev.digest, rec.definition, Target.parse(g.cuda_target),
                        defn.cuda_expect, dict(defn.cuda_exempt))


# -- validated ------------------------------------------------------------------------
def _suite_problem(ev: Evaluation, name: str, v: Verified) -> str | None:
    """Why verified evidence ``v`` for suite ``name`` does not satisfy the pipeline's own
    declaration of the suite (never the declaration the evidence carries)."""

    suite = get_suite(ev.pipeline.suites, name, ev.pipeline.path.name)
    s = v.statement
    c = s.counts
    if s.result != "PASSED":
        return f"its evidence says {s.result}"
    if c["failed"] or c["errors"]:
        return f"{c['failed']} failed and {c['errors']} errors"
    if c["passed"] < suite.requires.min_tests:
        return f"{c['passed']} passed tests, fewer than its minimum {suite.requires.min_tests}"
    sens = s.probes.get("patch_sensitivity") or {}
    if sens.get("status") != "ok":
        return f"not shown to fail on the pristine tree (probe: {sens.get('status', 'none')})"
    det = s.probes.get("determinism") or {}
    if det.get("status") != "ok" or int(det.get("repeats") or 0) < max(suite.repeats, 2) \
            or not det.get("digests"):
        return (f"repeats not shown bit-identical (probe {det.get('status', 'none')}, "
                f"{det.get('repeats', 0)} repeats, {det.get('digests', 0)} output digests; "
                f"declared {suite.repeats})")
    if s.content_sha256 != suite_content_sha256(suite.path):
        return "it ran another version of the suite than the committed one"
    return None


def _evidence_fact(ev: Evaluation, v: Verified) -> Evidence:
    env = v.statement.environment
    return Evidence(v.statement.suite, _rel(ev, v.path), v.envelope_sha256, v.keyid, v.signer,
                    v.statement.result, dict(v.statement.counts), v.statement.runner,
                    env.get("gpu_name"), env.get("compute_capability"))


def gate_evidence(ev: Evaluation, g: Gate) -> Outcome:
    found = []
    for name in g.suites:
        try:
            v = ev.evidence(name)
        except EvidenceError as exc:

            return "fail", f"suite '{name}': {exc.reason}: {exc.message}"
        problem = _suite_problem(ev, name, v)
        if problem:
            return "fail", f"suite '{name}': {problem}"
        found.append(v)
    ev.facts.evidence.update({v.statement.suite: _evidence_fact(ev, v) for v in found})
    parts = [f"{v.statement.suite} {v.statement.counts['passed']} passed"
             + (f" ({v.statement.environment.get('gpu_name')}, cc "
                f"{v.statement.environment.get('compute_capability')})"
                if v.statement.environment.get("compute_capability") else "") for v in found]
    return "pass", f"{len(found)}/{len(g.suites)} suites trusted for this digest: " + \
        "; ".join(parts)


# -- sm89-stable ----------------------------------------------------------------------
def gate_capability(ev: Evaluation, g: Gate) -> Outcome:
    gpu_suites = [n for n, s in ev.pipeline.suites.items() if s.requires.gpu]
    if not gpu_suites:
        return "fail", "no GPU suite is declared, so no GPU evidence can exist"
    seen = []
    for name in gpu_suites:
        try:
            v = ev.evidence(name)
        except EvidenceError:
            continue
        cap = v.statement.environment.get("compute_capability")
        # held to the suite's declaration here too: a channel need not list the suite in
        # an evidence gate, and "PASSED" alone says nothing of counts or probes
        problem = _suite_problem(ev, name, v) or gpus.claim_problem(v.statement.environment)
        if problem is None and cap == g.capability:
            ev.facts.evidence[name] = _evidence_fact(ev, v)
            return "pass", (f"suite '{name}' passed on {v.statement.environment.get('gpu_name')}"
                            f" (compute capability {cap})")
        seen.append(f"{name} on {v.statement.environment.get('gpu_name')}, cc {cap}"
                    + (f": {problem}" if problem else ""))
    sm = "sm" + str(g.capability).replace(".", "")
    have = f" (have: {'; '.join(seen)})" if seen else " (no trusted GPU evidence at all)"
    return "fail", (f"missing input: no passing GPU evidence from a compute capability "
                    f"{g.capability} device ({sm} evidence){have}")


def _regressions(now: dict[str, Any], before: dict[str, Any], tol: float) -> list[str]:
    """Each figure of the previous release against today's, in one unit (a figure moved
    from 12.9 ms to 0.0155 s is 20 % slower, not 1000 times faster)."""
    out = []
    for metric, old in sorted(before.items()):
        new = now.get(metric)
        if new is None:
            out.append(f"{metric} is no longer measured")
            continue
        try:
            old_v, new_v = units.comparable(old, new)
        except ValueError as exc:
            out.append(f"{metric}: {exc}")
            continue
        change = (new_v - old_v) / old_v
        worse = change if old.get("better") == "lower" else -change
        if new.get("better") != old.get("better"):
            out.append(f"{metric}: 'better' changed from {old.get('better')} to "
                       f"{new.get('better')}")
        elif worse > tol:
            out.append(f"{metric} {old['value']} {old.get('unit', '')} -> {new['value']} "
                       f"{new.get('unit', '')} ({worse:+.1%} worse)")
    return out


def _declared_capabilities(ev: Evaluation, g: Gate) -> set[str]:
    """The compute capabilities the capability gates of the channel being evaluated (its
    own and inherited ones) ask for; the declaring channel's when none is being evaluated."""
    ch = ev.evaluating or channels.get(ev.pipeline.channels, g.declared_in,
                                       ev.pipeline.path.name)
    return {str(c.capability) for c in ch.gates if c.kind == "capability" and c.capability}


def gate_benchmark(ev: Evaluation, g: Gate) -> Outcome:
    """Signed figures verify, were measured on the GPU the channel releases for (where it
    names one), and none is worse than the channel's previous release's by more than the
    tolerance, both measured on the same GPU (with no such release, these are the baseline)."""
    assert g.benchmark is not None
    name, tol = g.benchmark.name, g.benchmark.tolerance
    try:
        b = verify_benchmark(benchmark_path(ev.evidence_dir, ev.digest, name), ev.digest,
                             ev.policy(), name)
    except EvidenceError as exc:

        return "fail", f"benchmark '{name}': {exc.reason}: {exc.message}"
    env = b.predicate.get("environment")
    problem = measurement_problem(env)
    if problem:
        return "fail", (f"benchmark '{name}': the signed figures do not say believably where "
                        f"they were measured ({problem}), so nothing can be compared with them")
    gpu, cap = measured_on(env) or ("", "")
    where = f"{gpu} (compute capability {cap})"
    wanted = _declared_capabilities(ev, g)
    if wanted and cap not in wanted:
        channel = ev.evaluating.name if ev.evaluating else g.declared_in
        return "fail", (f"benchmark '{name}': measured on {where}, "
                        f"but '{channel}' releases for {', '.join(sorted(wanted))}: "
                        "figures from another GPU say nothing of that one")
    figures = b.predicate["figures"]
    ev.facts.benchmark = Benchmark(name, _rel(ev, b.path), b.keyid, b.envelope_sha256,
                                   dict(figures), gpu, cap)
    before = ev.previous_benchmark(g.declared_in, name, (gpu, cap))
    if before is None:
        return "pass", (f"{len(figures)} signed figures from {where}; "
                        f"no earlier '{g.declared_in}' release has figures from that GPU: "
                        "they are the baseline")
    worse = _regressions(figures, dict(before.figures), tol)
    if worse:
        return "fail", (f"{len(worse)} figure(s) beyond the {tol:.0%} tolerance of the "
                        f"last '{g.declared_in}' release measured on {gpu}; first: {worse[0]}")
    return "pass", (f"{len(figures)} signed figures within {tol:.0%} of the last "
                    f"'{g.declared_in}' release measured on {gpu}")


SIGNED_GATES = ("evidence", "capability", "benchmark")  # the inputs an approval names


def approval_basis(ev: Evaluation, channel: str) -> tuple[Basis, list[Decision]]:
    """What an approval into ``channel`` approves (the lineage and the signed inputs its
    signed gates read, as they verify now), and those gates' decisions. The facts they
    gather are kept apart from the evaluation's own."""
    ch = channels.get(ev.pipeline.channels, channel, ev.pipeline.path.name)
    saved, ev.facts = ev.facts, Facts()
    evaluating, ev.evaluating = ev.evaluating, ch
    decisions = []
    try:
        for g in ch.gates:
            if g.kind in SIGNED_GATES:
                status, reason = GATES[g.kind](ev, g)
                decisions.append(Decision(g.declared_in, g.kind, status, reason))
        inputs = {e.path: e.envelope_sha256 for e in ev.facts.evidence.values()}
        if ev.facts.benchmark is not None:
            inputs[ev.facts.benchmark.path] = ev.facts.benchmark.envelope_sha256
    finally:
        ev.facts, ev.evaluating = saved, evaluating
    return Basis(ev.lineage.key, tuple(sorted(inputs.items()))), decisions


def gate_approval(ev: Evaluation, g: Gate) -> Outcome:
    basis, _ = approval_basis(ev, g.declared_in)
    good, bad = verify_approvals(ev.evidence_dir, ev.digest, ev.policy(), g.declared_in,
                                 basis, ev.clock())
    ev.facts.approvals = [Approval(_rel(ev, a.path), a.keyid, a.signer, a.envelope_sha256)
                          for a in good]
    if len(good) >= g.approvals:
        return "pass", "approved by " + ", ".join(a.signer for a in good)
    why = f"; rejected: {bad[0]}" if bad else ""
    return "fail", (f"missing input: {len(good)} of {g.approvals} signed approval(s) for "
                    f"'{g.declared_in}' by a key whose role is approver (each key and owner "
                    f"counts once){why}")


GATES: dict[str, Callable[[Evaluation, Gate], Outcome]] = {
    "guard": gate_guard, "record": gate_record, "verify": gate_verify,
    "reproducible": gate_reproducible, "cuda-code": gate_cuda_code,
    "evidence": gate_evidence,
    "capability": gate_capability, "benchmark": gate_benchmark, "approval": gate_approval,
}


def evaluate(ev: Evaluation, channel: Channel) -> Table:
    """Every gate of ``channel`` (inherited ones first); never raises for a gate."""
    # an image this store does not hold is a verdict on the image (blocked), not a broken
    # store: the gates that read it say so
    absent = ev.store is not None and not ev.store.has(ev.digest)
    saved, ev.evaluating = ev.evaluating, channel
    try:
        return _evaluate(ev, channel, absent)
    finally:
        ev.evaluating = saved


def _evaluate(ev: Evaluation, channel: Channel, absent: bool) -> Table:
    decisions = []
    for g in channel.gates:
        try:
            status, reason = GATES[g.kind](ev, g)
        except StoreError as exc:
            if not absent:
                # the store itself is unusable (read-only, broken): no gate can be judged,
                # so this is the store's error (13), not a verdict on the image (60)
                raise
            status, reason = "error", (f"the image {ev.digest} is not in the store: "
                                       f"{exc.one_line()}")
        except PatchbakeError as exc:
            status, reason = "error", exc.one_line()
        except Exception as exc:  # noqa: BLE001 - fail closed: an unexpected crash blocks
            status, reason = "error", f"{type(exc).__name__}: {exc}"
        # paths as the repository names them: a reason never depends on the checkout's place
        reason = reason.replace(f"{ev.pipeline.root}/", "")
        decisions.append(Decision(g.declared_in, g.kind, status, " ".join(reason.split())))
    return Table(channel.name, ev.image, ev.digest, decisions)
