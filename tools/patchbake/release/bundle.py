"""Offline verification of a release, from the repository or from an exported bundle.

``export`` copies what a downstream user needs into a directory laid out like the
repository (so one verifier reads both): the release manifest and VSA, the ledger up to
the release's last entry, the trust policy, every signed envelope the release names and
the image record, plus ``bundle.json`` listing each file's sha256. No store, no network.

``verify`` checks, in order: the ledger (chain, canonical lines, signatures by a
``release`` key), the release manifest's hash (its id) and its ledger entry, the VSA,
each envelope (recorded sha256, trusted signature, subject = the release's digest), the
image's SBOM and provenance (the same, signed by a ``release`` key, and valid documents:
AttestationError otherwise), the image record, and the channel's gates. Each check is a row;
the first break raises (LedgerError for the ledger, ReleaseError for the rest).

The channel's gates are never taken from the release alone (whoever holds the release key
writes its manifest): ``channel_gates`` rebuilds them, inherited ones included, from the
verifier's pipeline.yaml (like the trust policy, never the bundle's: a bundle carries none),
requires each recorded as passed, and re-checks the signed ones against what the release
recorded: the evidence of every listed suite, GPU evidence of the capability, the
benchmark's figures, and ``approvals: k`` approvals by k distinct keys and owners, none by
a release key or the release's own signer under separation of duties. Without a
pipeline.yaml the verdict says the gates were not checked.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__
from ..digest import Digest
from ..errors import EvidenceError, ImageError, LedgerError, PatchbakeError, ReleaseError, shown
from ..config import Pipeline
from ..config.channels import Gate
from ..evidence import policy, records
from ..fsutil import atomic_write, pretty_json, read_input, sha256_bytes
from ..images.record import ImageRecord
from ..images.refs import ImageRef
from ..verify import baked
from ..fields import Fields
from ..digest import is_hex
from . import imageattest, ledger, manifest, tlog, vsa
from .attest import (
    Basis,
    Signed,
    check_live,
    parse_time,
    read_approval,
    recorded_disagreement,
    verify_benchmark,
)

BUNDLE = "bundle.json"
INCLUSION = "inclusion.json"  # beside the checkpoint: the release entry's audit path
BUNDLE_FORMAT = "patchbake-release-bundle/1"
POLICY = Path("manifests") / "trust-policy.yaml"


@dataclass
class Verdict:
    release: str
    digest: Digest
    channel: str
    checks: list[tuple[str, str]] = field(default_factory=list)  # (check, detail)
    unchecked: str | None = None  # why the channel's gates were not checked (no config)

    def to_json(self) -> dict[str, Any]:
        return {"release": self.release, "digest": str(self.digest), "channel": self.channel,
                "ok": True, "gates_checked": self.unchecked is None,
                **({} if self.unchecked is None else {"unchecked": self.unchecked}),
                "checks": [{"check": c, "detail": d} for c, d in self.checks]}

    def summary(self) -> str:
        """The verdict line (the command adds what it read back from a registry)."""
        line = (f"VERIFIED: release {self.release[:16]} of {self.digest} in "
                f"'{self.channel}'")
        if self.unchecked is not None:
            line += f" -- its gates NOT checked against the channel: {self.unchecked}"
        return line


def _files(root: Path, rel: manifest.Release, policy_path: Path) -> list[Path]:
    out = [rel.path, rel.path.parent / manifest.VSA_NAME, policy_path]
    out += [root / e.path for e in rel.envelopes()]
    record = rel.manifest.images[0].record
    if record:
        out.append(root / record)
    return out


def export(root: Path, policy_path: Path, release: str, dest: Path) -> Path:
    """Write the bundle for ``release`` into ``dest`` (must be empty or absent)."""
    rdir = manifest.releases_dir(root)
    rel = manifest.load(root, release)
    entries = ledger.read(rdir)
    last = max((i for i, e in enumerate(entries) if e.release == rel.id),
               default=None)
    if last is None:
        raise ReleaseError(f"release {rel.id[:16]} is not in the ledger; nothing to export")
    if dest.exists() and any(dest.iterdir()):
        raise ReleaseError(f"{dest} is not empty; export writes a fresh directory")
    staging = dest.with_name(dest.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    listing: dict[str, str] = {}
    try:
        for src in _files(root, rel, policy_path):
            target = POLICY if src == policy_path else src.resolve().relative_to(root.resolve())
            data = read_input(src, "a file of the release", ReleaseError)
            (staging / target).parent.mkdir(parents=True, exist_ok=True)
            (staging / target).write_bytes(data)
            listing[target.as_posix()] = sha256_bytes(data)
        lpath = staging / manifest.RELEASES_DIR / ledger.NAME
        lpath.write_bytes(b"".join(e.line + b"\n" for e in entries[:last + 1]))
        listing[lpath.relative_to(staging).as_posix()] = sha256_bytes(lpath.read_bytes())
        # the signed checkpoint of the whole log and the audit path of the release's entry
        # in it: a downstream user checks offline that the release is in the signed log
        cp = read_input(rdir / tlog.NAME, "the ledger's checkpoint", LedgerError)
        first = next(i for i, e in enumerate(entries) if e.release == rel.id)
        proof = pretty_json(tlog.inclusion(entries, first).to_json())
        for name, data in ((tlog.NAME, cp), (INCLUSION, proof)):
            out = staging / manifest.RELEASES_DIR / name
            out.write_bytes(data)
            listing[out.relative_to(staging).as_posix()] = sha256_bytes(data)
        atomic_write(staging / BUNDLE, pretty_json({
            "format": BUNDLE_FORMAT, "release": rel.id, "digest": str(rel.digest),
            "channel": rel.channel, "files": listing, "tool": f"patchbake {__version__}"}))
        if dest.exists():
            dest.rmdir()
        staging.rename(dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return dest


def release_of(root: Path, text: str) -> str:
    """A release id, or an image reference carrying its digest (``sha256:<hex>``,
    ``name@sha256:<hex>``, parsed by images.refs): the latest release of that image."""
    if text.startswith("sha256:") or "@" in text:

        entries = [e for e in ledger.read(manifest.releases_dir(root)) if e.kind == "release"]
        digest = ImageRef.parse(text, lambda: [e.digest for e in entries]).digest
        found = [e for e in entries if e.digest == digest]
        if not found:
            raise ReleaseError(f"no release in the ledger names image {digest}")
        return found[-1].release
    return manifest.parse_id(text, manifest.releases_dir(root))


def recorded_approvals(root: Path, rel: manifest.Release, pol: Any, recorded_at: str,
                       release_keys: tuple[str, ...] = ()) -> list[Signed]:
    """Each approval the release recorded: the recorded bytes, signed by the recorded key, an
    approver of the channel whose gate counted it, about this digest, live when the release's
    ledger entry was signed (``recorded_at``; an approval may expire afterwards), for this
    release's lineage and naming only signed inputs the release recorded. As the gate counts
    them: no two by one key or one owner (normalised), and with separation of duties none by
    a key with the ``release`` role, nor by ``release_keys`` (the keys that signed this
    release's VSA and ledger entry) or their owner. EvidenceError or ReleaseError otherwise;
    the approvals otherwise."""
    m = rel.manifest
    channel = next((g.channel for g in m.gates if g.gate == "approval"), rel.channel)
    inputs = {(e.path, e.envelope_sha256) for e in rel.envelopes()}
    at = parse_time(recorded_at, "ledger entry's time", f"release {rel.id[:16]}")
    good: list[Signed] = []
    for a in m.approvals:
        got = read_approval(root / a.path, rel.digest, pol, channel)
        if got.envelope_sha256 != a.envelope_sha256 or got.keyid != a.keyid:
            raise ReleaseError(f"{a.path} is not the approval the release recorded")
        check_live(got.predicate, at, a.path)
        basis = Basis.load(got.predicate.get("release"), a.path)
        if basis.lineage != m.lineage or not set(basis.inputs) <= inputs:
            raise ReleaseError(f"{a.path} approves another release than {rel.id[:16]} "
                               f"(lineage {basis.lineage!r}, or a signed input it does not "
                               "record)")
        key = pol.keys[got.keyid]
        twin = next((g for g in good if pol.keys[g.keyid].same_holder(key)), None)
        if twin is not None:
            by = "key" if twin.keyid == got.keyid else f"owner ({key.owner.strip()})"
            raise ReleaseError(f"{a.path} and {Path(twin.path).name} are by the same {by}: "
                               "the release counts one approver twice (each key and owner "
                               "counts once)")
        if pol.separation_of_duties:
            _separate(pol, a.path, key, release_keys)
        good.append(got)
    return good


def _separate(pol: policy.Policy, path: str, key: policy.TrustedKey,
              release_keys: tuple[str, ...]) -> None:
    """With separation of duties, an approval by a release key, or by the key (or owner) that
    signed this very release, is the release manager approving their own release."""
    why = None
    if "release" in key.roles:
        why = f"key '{key.name}' holds the 'release' role"
    for rk in release_keys:
        signer = pol.keys.get(rk)
        if rk == key.keyid:
            why = f"key '{key.name}' signed the release itself"
        elif signer is not None and signer.same_holder(key):
            why = f"owner {key.owner.strip()!r} signed the release with '{signer.name}'"
    if why:
        raise ReleaseError(f"{path}: {why}: a release manager approved their own release "
                           "(separation_of_duties)")


def _signed_gate(rel: manifest.Release, pipeline: Pipeline, g: Gate, approved: int
                 ) -> str | None:
    """Why the release's record does not hold what gate ``g`` (a signed gate) needs: the
    inputs themselves were verified in the evidence row."""
    m = rel.manifest
    if g.kind == "evidence":
        for suite in g.suites:
            e = next((e for e in m.evidence if e.suite == suite), None)
            if e is None:
                return f"it records no evidence of suite '{suite}'"
            if e.result != "PASSED":
                return f"the evidence of suite '{suite}' it records says {e.result}"
    elif g.kind == "capability":
        gpu = {n for n, s in pipeline.suites.items() if s.requires.gpu}
        if not any(e.suite in gpu and e.capability == g.capability and e.result == "PASSED"
                   for e in m.evidence):
            return f"it records no GPU evidence from a compute capability {g.capability} device"
    elif g.kind == "benchmark":
        name = g.benchmark.name if g.benchmark else "?"
        if m.benchmark is None or m.benchmark.name != name:
            return f"it records no signed figures of benchmark '{name}'"
    elif g.kind == "approval" and approved < g.approvals:
        return (f"it records {approved} approval(s) for '{g.declared_in}' by distinct keys and "
                f"owners; the channel requires {g.approvals}")
    return None


def channel_gates(rel: manifest.Release, pipeline: Pipeline | None, approved: int) -> str:
    """The channel's gates as the verifier's pipeline.yaml declares them (inherited ones
    too), each recorded as passed, the signed ones backed by what the release recorded.
    ``approved``: the approvals recorded_approvals verified. ReleaseError otherwise."""
    m = rel.manifest
    failed = [g.dump() for g in m.gates if g.status != "pass"]
    if failed or not m.gates:
        raise ReleaseError(f"the release records a gate that did not pass: {failed[:1]}")
    if pipeline is None:
        if any(g.gate == "approval" for g in m.gates) and not approved:
            raise ReleaseError("the release records the 'approval' gate as passed with no "
                               "approval")
        return (f"{len(m.gates)} gates recorded as passed; NOT checked against the channel: "
                "no pipeline.yaml")
    src = pipeline.path.name
    if m.pipeline != pipeline.name:
        raise ReleaseError(f"the release is of pipeline '{m.pipeline}', {src} is "
                           f"'{pipeline.name}': its channel's gates cannot be checked",
                           hint="name the release's pipeline.yaml: patchbake --pipeline FILE")
    ch = pipeline.channels.get(rel.channel)
    if ch is None:
        raise ReleaseError(f"the release is in channel '{rel.channel}', which {src} does not "
                           "declare: its gates cannot be checked")
    recorded = {(d.channel, d.gate) for d in m.gates}
    signed = 0
    for g in ch.gates:
        if (g.declared_in, g.kind) not in recorded:
            raise ReleaseError(f"the release records no '{g.kind}' gate (declared in "
                               f"'{g.declared_in}'), which channel '{ch.name}' requires in "
                               f"{src}: the gate was left out, or the release predates it")
        if g.kind in ("evidence", "capability", "benchmark", "approval"):
            problem = _signed_gate(rel, pipeline, g, approved)
            if problem:
                raise ReleaseError(f"the '{g.kind}' gate is recorded as passed, but {problem}")
            signed += 1
    return (f"{len(ch.gates)} gates of '{ch.name}' in {src}, each recorded as passed; "
            f"{signed} signed one(s) backed by the signed inputs")


def _envelopes(root: Path, rel: manifest.Release, pol: Any, recorded_at: str,
               release_keys: tuple[str, ...], approved: list[Signed]) -> str:

    m = rel.manifest
    for e in m.evidence:
        v = records.verify_file(root / e.path, rel.digest, pol, e.suite)
        if v.envelope_sha256 != e.envelope_sha256 or v.statement.result != e.result \
                or v.statement.environment.get("compute_capability") != e.capability:
            raise ReleaseError(f"{e.path} is not the evidence the release recorded")
    b = m.benchmark
    if b:
        got = verify_benchmark(root / b.path, rel.digest, pol, b.name)
        if got.envelope_sha256 != b.envelope_sha256:
            raise ReleaseError(f"{b.path} is not the benchmark the release recorded")
        problem = recorded_disagreement(b.figures, b.gpu, b.capability, got)
        if problem:
            raise ReleaseError(f"the release's benchmark record is not what {b.path} signed: "
                               f"{problem}")
    approved += recorded_approvals(root, rel, pol, recorded_at, release_keys)
    n = len(rel.envelopes()) - len(m.attestations)
    return f"{n} signed statement(s) verified; every subject is {rel.digest}"


def _attestations(root: Path, rel: manifest.Release, pol: Any) -> str:
    """The image's SBOM and provenance: both recorded by every release that has them;
    a release without (no image record, or made before they existed) says so."""
    atts = rel.manifest.attestations
    if not atts:
        return "none recorded (the release names no image record, or predates them)"
    if sorted(a.kind for a in atts) != ["provenance", "sbom"]:
        raise ReleaseError(f"release {rel.id[:16]} records {[a.kind for a in atts]}, not "
                           "one SBOM and one provenance")
    try:
        return "; ".join(imageattest.verify(root, a, rel.digest, pol) for a in atts)
    except EvidenceError as exc:
        raise ReleaseError(f"attestation: {exc.message}") from None


def image_record(root: Path, rel: manifest.Release, name: str) -> str:
    """The image record ``name`` the release names still has the bytes the release recorded
    and names the release's image."""
    image = rel.manifest.images[0]
    data = read_input(root / name, "the image record", ReleaseError)
    try:
        named = ImageRecord.from_json(json.loads(data), name).manifest_digest
    except (ValueError, ImageError):
        named = None
    if sha256_bytes(data) != image.record_sha256 or named != rel.digest:
        raise ReleaseError(f"the image record {name} is not the one recorded (sha256 "
                           f"{sha256_bytes(data)[:12]}…, recorded "
                           f"{str(image.record_sha256)[:12]}…)"
                           + ("" if named is not None else ": not an image record"))
    return f"{name}: the recorded bytes (sha256 {sha256_bytes(data)[:12]}…), naming this digest"


def _listing(root: Path) -> tuple[str, str]:
    """bundle.json names every file of the bundle with its sha256, and nothing else: a
    file added, removed or changed after export, or a name that leaves the bundle, is
    refused."""
    raw = read_input(root / BUNDLE, "the bundle's listing", ReleaseError)
    try:
        doc = json.loads(raw)
    except ValueError:
        raise ReleaseError(f"{BUNDLE} is not JSON") from None
    f = Fields(doc, BUNDLE, ReleaseError, ("format", "release", "digest", "channel", "files",
                                           "tool"))
    if f.text("format") != BUNDLE_FORMAT:
        raise ReleaseError(f"{BUNDLE} is not a {BUNDLE_FORMAT} listing")
    files = f.mapping("files")
    base = root.resolve()
    for name, sha in sorted(files.items()):
        path = (root / name).resolve()
        if name.startswith("/") or ".." in Path(name).parts or not path.is_relative_to(base) \
                or not is_hex(sha):
            raise ReleaseError(f"{BUNDLE}: entry {shown(name)} is not a file of the bundle with "
                               "a sha256")
        data = read_input(root / name, f"bundle file {shown(name)}", ReleaseError)
        if sha256_bytes(data) != sha:
            raise ReleaseError(f"bundle file {name} was changed after export (its sha256 is "
                               f"not the one {BUNDLE} lists)")
    present = {p.relative_to(root).as_posix() for p in root.rglob("*")
               if p.is_file() and p.name != BUNDLE}
    extra = sorted(present - set(files))
    if extra:
        raise ReleaseError(f"bundle file {extra[0]} is not in {BUNDLE} ({len(extra)} such): "
                           "something was added after export")
    return f.text("release"), f"{len(files)} files, each as {BUNDLE} lists it"


def _in_log(rdir: Path, entries: list[ledger.Entry], entry: ledger.Entry,
            rel: manifest.Release, pol: policy.Policy, bundle: bool) -> str:
    """The release's entry is in the log a release key signed: from a bundle by the audit
    path it carries, in the repository against the committed checkpoint."""
    origin = tlog.origin_of(rel.manifest.pipeline)
    if not bundle:
        cp = tlog.check_committed(rdir, entries, pol, origin)
        if cp is None or cp.size <= entry.seq:
            raise LedgerError("the ledger's checkpoint does not cover the release's entry",
                              hint="`patchbake ledger checkpoint` signs one")
        proof = tlog.inclusion(entries[:cp.size], entry.seq)
    else:
        cp = tlog.read_note(read_input(rdir / tlog.NAME, "the bundle's checkpoint",
                                       LedgerError), pol, origin, f"bundle {tlog.NAME}")
        raw = read_input(rdir / INCLUSION, "the bundle's inclusion proof", LedgerError)
        try:
            f = Fields(json.loads(raw), INCLUSION, LedgerError, ("index", "size", "proof"))
            proof = tlog.Inclusion(f.integer("index"), f.integer("size"),
                                   tuple(bytes.fromhex(h) for h in f.texts("proof")))
        except ValueError:
            raise LedgerError(f"{INCLUSION} is not an inclusion proof") from None
        if proof.index != entry.seq:
            raise LedgerError(f"{INCLUSION} proves entry {proof.index}, the release's is "
                              f"{entry.seq}")
    tlog.check_inclusion(entry, proof, cp, f"bundle {INCLUSION}" if bundle else "ledger")
    return f"entry {entry.seq} is in the signed log of {cp.size} (checkpoint, audit path)"


def verify(root: Path, policy_path: Path, text: str, digest: Digest | None = None,
           pipeline: Pipeline | None = None) -> Verdict:
    """The release ``text`` names, verified against the trust policy at ``policy_path`` and
    the channels of ``pipeline`` (the verifier's; None: the verdict says the gates were not
    checked against the channel)."""
    rdir = manifest.releases_dir(root)
    pol = policy.load(policy_path)
    bundle = (root / BUNDLE).is_file()
    # a bundle's files first: each as its listing says, none added (the listing is not
    # signed; what it protects against is a file changed or slipped in after export)
    listed = _listing(root) if bundle else None
    entries = ledger.verify(rdir, pol, check_releases=not bundle)
    if (rdir / "promotion.pending.json").exists():
        raise LedgerError("an interrupted promotion is pending (promotion.pending.json)",
                          hint="re-run `patchbake release promote` to complete or drop it")
    rid = release_of(root, text)
    rel = manifest.load_from(rdir, rid)
    out = Verdict(rel.id, rel.digest, rel.channel)
    if listed is not None:
        if listed[0] != rel.id:
            raise ReleaseError(f"{BUNDLE} is the listing of release {listed[0][:16]}, not of "
                               f"{rel.id[:16]}")
        out.checks.append(("bundle", listed[1]))
    out.checks.append(("ledger", f"{len(entries)} entries, chain and signatures intact"))
    out.checks.append(("release manifest", f"release.json hashes to its id {rel.id[:16]}…"))
    mine = ledger.find(entries, "release", release=rel.id)
    if not mine or mine[0].digest != rel.digest:
        raise ReleaseError(f"release {rel.id[:16]} has no ledger entry naming {rel.digest}")
    out.checks.append(("ledger entry", f"line {mine[0].seq + 1} records it"))
    out.checks.append(("transparency log", _in_log(rdir, entries, mine[0], rel, pol, bundle)))
    if digest is not None and digest != rel.digest:
        raise ReleaseError(f"the release is about {rel.digest}, not {digest}")
    out.checks.append(("digest", f"{rel.image} {rel.digest}"))
    vpath = rel.path.parent / manifest.VSA_NAME
    checked = vsa.verify(read_input(vpath, "the release's VSA", ReleaseError), rel, pol,
                         str(vpath.relative_to(root)))
    out.checks.append(("VSA", f"verification summary signed by {checked.signer}"))
    release_keys = (checked.keyid, *((mine[0].signature.keyid,) if mine[0].signature else ()))
    approved: list[Signed] = []
    try:
        out.checks.append(("evidence", _envelopes(root, rel, pol, mine[0].time, release_keys,
                                                  approved)))
    except EvidenceError as exc:
        raise ReleaseError(f"evidence: {exc.message}") from None
    out.checks.append(("sbom and provenance", _attestations(root, rel, pol)))
    record = rel.manifest.images[0].record
    if record:
        out.checks.append(("image record", image_record(root, rel, record)))
    out.checks.append(("gates", channel_gates(rel, pipeline, len(approved))))
    if pipeline is None:
        out.unchecked = ("no pipeline.yaml (verify in the release's repository, or name it: "
                         "patchbake --pipeline FILE release verify ...)")
    return out


def verify_image(pipeline: Any, store: Any, verdict: Verdict, ref: str) -> str:
    """The image itself (registry ref, OCI layout, archive, store name): it must be the
    release's digest and its files a fresh apply of the patch (baked.verify_image)."""

    res = baked.verify_image(pipeline, ref, store)
    if res.digest != verdict.digest:
        raise ReleaseError(f"{ref} is {res.digest}, the release is about {verdict.digest}")
    try:
        baked.raise_on_failure(res)
    except PatchbakeError as exc:
        raise ReleaseError(exc.message) from None
    verdict.checks.append(("image", f"{ref}: {res.summary()}"))
    return res.summary()
