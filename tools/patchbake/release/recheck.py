"""What ``patchbake report`` verifies in its own run before its page may say "signed",
"verified" or "passed": the trust policy loads; the ledger verifies (chain, canonical
lines, signatures by a ``release`` key) and records the release; the VSA verifies against
the policy and names exactly this release; every signed input the release recorded still
has its recorded bytes, a trusted signature and this digest as its subject (evidence,
benchmark, approvals, SBOM and provenance); the image record has the bytes the release
recorded (the identity chain is read from it); and the channel's gates, as pipeline.yaml
declares them, are each recorded as passed and the signed ones backed by those inputs
(bundle.channel_gates: k distinct approvers, none the release manager). A check that cannot
be made is broken, never skipped: the page shows each result, and the command fails when
one is broken.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from ..config import Pipeline
from ..errors import PatchbakeError, ReleaseError
from ..evidence import policy, records
from ..fsutil import read_input
from . import imageattest, ledger, manifest, vsa
from .attest import recorded_disagreement, verify_benchmark
from .bundle import channel_gates, image_record, recorded_approvals
from .facts import Evidence


@dataclass(frozen=True, slots=True)
class Check:
    subject: str  # what was checked: "ledger", "VSA", an envelope's path
    ok: bool
    detail: str  # what it showed, or why it is broken


@dataclass
class Rechecked:
    checks: list[Check] = field(default_factory=list)
    entries: list[ledger.Entry] = field(default_factory=list)  # only a verified ledger's
    vsa_signer: str | None = None
    release_keys: tuple[str, ...] = ()  # the keys that signed the VSA and the ledger entry
    approved: int = 0  # the recorded approvals that verified

    @property
    def broken(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def ok(self, subject: str) -> bool:
        return any(c.subject == subject and c.ok for c in self.checks)

    def detail(self, subject: str) -> str:
        return next((c.detail for c in self.checks if c.subject == subject), "not checked")

    def run(self, subject: str, check: Callable[[], str]) -> bool:
        try:
            self.checks.append(Check(subject, True, check()))
        except PatchbakeError as exc:
            self.checks.append(Check(subject, False, exc.message))
        return self.checks[-1].ok


def _recorded(path: Path, sha256: str, got: str, what: str) -> None:
    if got != sha256:
        raise ReleaseError(f"{path} is not the {what} the release recorded (sha256 "
                           f"{got[:12]}…, recorded {sha256[:12]}…): re-signed or altered")


def _in_ledger(out: Rechecked, root: Path, pol: policy.Policy, rel: manifest.Release
               ) -> str | None:
    """The ledger verifies and records the release: the time of its entry, or None."""
    recorded_at: list[str] = []

    def check() -> str:
        entries = ledger.verify(manifest.releases_dir(root), pol)
        mine = ledger.find(entries, "release", release=rel.id)
        if not mine or mine[0].digest != rel.digest:
            raise ReleaseError(f"no ledger entry records release {rel.id[:16]} of {rel.digest}")
        out.entries, recorded_at[:] = entries, [mine[0].time]
        if mine[0].signature is not None:
            out.release_keys += (mine[0].signature.keyid,)
        return (f"{len(entries)} entries, chain and signatures intact; line {mine[0].seq + 1} "
                "records the release")

    out.run("ledger", check)
    return recorded_at[0] if recorded_at else None


def _signed_vsa(out: Rechecked, root: Path, pol: policy.Policy, rel: manifest.Release) -> None:
    def check() -> str:
        path = rel.path.parent / manifest.VSA_NAME
        got = vsa.verify(read_input(path, "the release's VSA", ReleaseError), rel, pol,
                         str(path.relative_to(root)))
        out.vsa_signer = got.signer
        out.release_keys += (got.keyid,)
        return (f"signed by {got.signer} (a release key); names release {rel.id[:16]}… and "
                "its inputs")

    out.run("VSA", check)


def _evidence(root: Path, pol: policy.Policy, rel: manifest.Release, e: Evidence) -> str:
    v = records.verify_file(root / e.path, rel.digest, pol, e.suite)
    _recorded(root / e.path, e.envelope_sha256, v.envelope_sha256, "evidence")
    return f"signed by {v.signer}, about {rel.digest}, {v.statement.result}"


def _benchmark(root: Path, pol: policy.Policy, rel: manifest.Release) -> str:
    b = rel.manifest.benchmark
    assert b is not None
    got = verify_benchmark(root / b.path, rel.digest, pol, b.name)
    _recorded(root / b.path, b.envelope_sha256, got.envelope_sha256, "benchmark")
    problem = recorded_disagreement(b.figures, b.gpu, b.capability, got)
    if problem:
        raise ReleaseError(f"the release's benchmark record is not what {b.path} signed: "
                           f"{problem}")
    return f"signed by {got.signer}, about {rel.digest}"


def _approvals(out: Rechecked, root: Path, pol: policy.Policy, rel: manifest.Release,
               recorded_at: str | None) -> str:
    if recorded_at is None:
        raise ReleaseError("not judged: the ledger, which says when the release was made, "
                           "does not verify")
    out.approved = len(recorded_approvals(root, rel, pol, recorded_at, out.release_keys))
    return (f"signed by {', '.join(a.signer for a in rel.manifest.approvals)}; live when "
            "the release was recorded")


def _gates(out: Rechecked, rel: manifest.Release, pipeline: Pipeline | None) -> str:
    if pipeline is None:
        raise ReleaseError("not judged: no pipeline.yaml declares the channel's gates")
    if rel.manifest.approvals and not out.ok("approvals"):
        raise ReleaseError("not judged: the recorded approvals do not verify")
    return channel_gates(rel, pipeline, out.approved)


def recheck(root: Path, policy_path: Path, rel: manifest.Release,
            pipeline: Pipeline | None) -> Rechecked:
    """Every check, in order; ``pipeline`` declares the channel's gates (None: that check
    is broken, never skipped)."""
    out = Rechecked()
    try:
        pol = policy.load(policy_path)
    except PatchbakeError as exc:
        out.checks.append(Check("trust policy", False, f"{exc.message}: nothing can be "
                                "verified"))
        out.checks += [Check(what, False, "not verified: no usable trust policy")
                       for what in ("ledger", "VSA", *(e.path for e in rel.envelopes()),
                                    "channel gates")]
        return out
    out.checks.append(Check("trust policy", True, f"{policy_path.name}: {len(pol.keys)} keys"))
    recorded_at = _in_ledger(out, root, pol, rel)
    _signed_vsa(out, root, pol, rel)
    m = rel.manifest
    for e in m.evidence:
        out.run(e.path, partial(_evidence, root, pol, rel, e))
    if m.benchmark is not None:
        out.run(m.benchmark.path, partial(_benchmark, root, pol, rel))
    if m.approvals:
        out.run("approvals", partial(_approvals, out, root, pol, rel, recorded_at))
    for a in m.attestations:
        out.run(a.path, partial(imageattest.verify, root, a, rel.digest, pol))
    record = m.images[0].record
    if record:
        out.run("image record", partial(image_record, root, rel, record))
    out.run("channel gates", partial(_gates, out, rel, pipeline))
    # paths as the repository names them: the page never depends on the checkout's place
    out.checks = [replace(c, detail=c.detail.replace(f"{root}/", "")) for c in out.checks]
    return out
