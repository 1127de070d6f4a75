"""Release manifests: what one release is, as canonical JSON; its sha256 is the release id.

``manifests/releases/<release-id>/release.json`` (canonical JSON: sorted keys, compact
separators, UTF-8) and, beside it, ``vsa.dsse.json`` (vsa.py). A manifest holds no time
and no host, so creating the same release twice gives the same id and the same bytes.

Format ``patchbake-release/1``::

    {"format": "patchbake-release/1", "channel": "validated", "pipeline": "vllm-sm89",
     "lineage": "v0.25.1",
     "upstream": {"pin", "archive_sha256", "tree_digest"},
     "patch": {"path", "sha256", "files_sha256"},
     "images": [{"name", "definition", "manifest_digest", "config_digest",
                 "record", "record_sha256"}],
     "verify": {"matched", "total", "config_digest", "base_drift"},
     "evidence": [{"suite", "path", "envelope_sha256", "keyid", "signer", "result",
                   "counts", "runner", "gpu", "capability"}],
     "benchmark": {...} | null, "approvals": [...],
     "gates": [{"channel", "gate", "status", "reason"}],
     "trust_policy_sha256": "...", "tool": "patchbake 0.1.0",
     "attestations": [{"kind", "path", "predicate_type", "envelope_sha256", "keyid",
                       "signer"}]}

``attestations`` (the image's signed SBOM and SLSA provenance, release/imageattest.py) is
present when the release has them, which every release of an image with a committed
record does; a manifest without it (an image without record, or a release made before
they existed) keeps its bytes and its id.

``upstream``, ``patch`` and ``verify`` are null, and ``images[0]``'s record members too,
when the channel's gates did not look at them. ``Manifest`` is the typed document, with
one ``load`` (every member present and of its type, none unknown) and one ``dump``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import __version__
from ..digest import Digest, differing, expand, is_hex, is_short
from ..errors import ReleaseError
from ..fsutil import canonical_json, read_input, sha256_bytes, write_once
from .facts import (
    Approval,
    Attestation,
    Benchmark,
    Evidence,
    Facts,
    Image,
    Patch,
    SignedInput,
    Upstream,
    Verification,
)
from ..fields import Fields
from .gates import Decision, Table

FORMAT = "patchbake-release/1"
RELEASES_DIR = Path("manifests") / "releases"
MANIFEST_NAME = "release.json"
VSA_NAME = "vsa.dsse.json"
KEYS = ("format", "channel", "pipeline", "lineage", "upstream", "patch", "images", "verify",
        "evidence", "benchmark", "approvals", "gates", "trust_policy_sha256", "tool")


@dataclass(frozen=True, slots=True)
class Manifest:
    channel: str
    pipeline: str
    lineage: str
    upstream: Upstream | None
    patch: Patch | None
    images: tuple[Image, ...]  # one today: the image the gates evaluated
    verify: Verification | None
    evidence: tuple[Evidence, ...]  # sorted by suite
    benchmark: Benchmark | None
    approvals: tuple[Approval, ...]
    gates: tuple[Decision, ...]
    trust_policy_sha256: str
    tool: str
    attestations: tuple[Attestation, ...] = ()  # sbom, provenance

    @classmethod
    def load(cls, doc: object, where: str) -> Manifest:
        """The one edge: ``doc`` (release.json's bytes, or its parsed JSON) as a Manifest,
        or a ReleaseError naming ``where`` and the member at fault."""
        if isinstance(doc, bytes):
            try:
                doc = json.loads(doc)
            except ValueError as exc:
                raise ReleaseError(f"{where} is not JSON: {exc}") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ReleaseError(f"{where} is not a {FORMAT} manifest")
        f = Fields(doc, where, ReleaseError, KEYS, ("attestations",))
        images = tuple(Image.load(i) for i in f.members("images", Image.KEYS))
        if not images:
            raise ReleaseError(f"{where} names no image")
        return cls(
            f.text("channel"), f.text("pipeline"), f.text("lineage"),
            Upstream.load(f.member("upstream", Upstream.KEYS)) if f.has("upstream") else None,
            Patch.load(f.member("patch", Patch.KEYS)) if f.has("patch") else None,
            images,
            Verification.load(f.member("verify", Verification.KEYS)) if f.has("verify")
            else None,
            tuple(Evidence.load(e) for e in f.members("evidence", Evidence.KEYS)),
            Benchmark.load(f.member("benchmark", Benchmark.KEYS, Benchmark.OPTIONAL)) if f.has("benchmark")
            else None,
            tuple(Approval.load(a) for a in f.members("approvals", Approval.KEYS)),
            tuple(Decision.load(g) for g in f.members("gates", Decision.KEYS)),
            f.hex("trust_policy_sha256"), f.text("tool"),
            tuple(Attestation.load(a) for a in f.members("attestations", Attestation.KEYS))
            if "attestations" in f.doc else ())

    def dump(self) -> dict[str, Any]:
        """The JSON object release.json holds (its canonical bytes hash to the release id)."""
        return {
            "format": FORMAT, "channel": self.channel, "pipeline": self.pipeline,
            "lineage": self.lineage,
            "upstream": None if self.upstream is None else self.upstream.dump(),
            "patch": None if self.patch is None else self.patch.dump(),
            "images": [i.dump() for i in self.images],
            "verify": None if self.verify is None else self.verify.dump(),
            "evidence": [e.dump() for e in self.evidence],
            "benchmark": None if self.benchmark is None else self.benchmark.dump(),
            "approvals": [a.dump() for a in self.approvals],
            "gates": [g.dump() for g in self.gates],
            "trust_policy_sha256": self.trust_policy_sha256, "tool": self.tool,
            **({"attestations": [a.dump() for a in self.attestations]}
               if self.attestations else {}),
        }

    def canonical(self) -> bytes:
        return canonical_json(self.dump())

    def release_id(self) -> str:
        return sha256_bytes(self.canonical())


@dataclass(frozen=True, slots=True)
class Release:
    id: str  # sha256 hex of release.json's bytes
    path: Path
    manifest: Manifest

    @property
    def channel(self) -> str:
        return self.manifest.channel

    @property
    def digest(self) -> Digest:
        return self.manifest.images[0].manifest_digest

    @property
    def image(self) -> str:
        return self.manifest.images[0].name

    def envelopes(self) -> list[SignedInput]:
        """Every signed input the release names: evidence, benchmark, approvals, the
        image's SBOM and provenance."""
        m = self.manifest
        return [*m.evidence, *([m.benchmark] if m.benchmark else []), *m.approvals,
                *m.attestations]


def releases_dir(root: Path) -> Path:
    return root / RELEASES_DIR


def build(table: Table, facts: Facts, pipeline_name: str, lineage: str,
          policy_bytes: bytes, attestations: tuple[Attestation, ...] = ()) -> Manifest:
    if not table.passed:
        raise ValueError("a release is made only from a table whose gates all pass")
    rec = facts.record
    image = Image(table.image, None if rec is None else rec.definition, table.digest,
                  None if rec is None else rec.config_digest, None if rec is None else rec.path,
                  None if rec is None else rec.sha256)
    return Manifest(
        table.channel, pipeline_name, lineage, facts.upstream, facts.patch, (image,),
        facts.verify, tuple(facts.evidence[k] for k in sorted(facts.evidence)),
        facts.benchmark, tuple(facts.approvals), tuple(table.decisions),
        sha256_bytes(policy_bytes), f"patchbake {__version__}", attestations)


def write(root: Path, data: Manifest) -> tuple[Release, bool]:
    """Write release.json once; (release, newly written)."""
    body = data.canonical()
    rid = sha256_bytes(body)
    path = releases_dir(root) / rid / MANIFEST_NAME
    written = write_once(path, body)  # same id, same bytes: never a conflict
    return Release(rid, path, data), written


def parse_id(text: str, dir_: Path) -> str:
    """The release id ``text`` names: in full, or a unique prefix (>= 12 hex digits, as
    `ledger verify` shows them) of a release under ``dir_``."""
    if not is_short(text):
        raise ReleaseError(f"'{text}' is not a release id (the 64-hex sha256 of release.json, "
                           "or a unique prefix of at least 12)",
                           hint="`patchbake ledger verify` lists the releases")
    known = [Digest.from_hex(p.name) for p in (dir_.iterdir() if dir_.is_dir() else ())
             if is_hex(p.name)]
    return expand(text, known, "release id", ReleaseError,
                  missing_hint="`patchbake ledger verify` lists the releases").hex


def load_from(dir_: Path, rid: str) -> Release:
    """Load ``<dir_>/<rid>/release.json`` and check that its bytes hash to ``rid``."""
    path = dir_ / rid / MANIFEST_NAME
    body = read_input(path, f"release {rid[:16]}'s manifest", ReleaseError,
                      missing=lambda _: ReleaseError(
                          f"release {rid[:16]} has no manifest at {path}",
                          hint="create it with `patchbake release create`"))
    if sha256_bytes(body) != rid:
        got, want = differing(sha256_bytes(body), rid, 16)
        raise ReleaseError(f"{path} hashes to {got}…, not its release id "
                           f"{want}…: the release manifest was altered")
    data = Manifest.load(body, str(path))
    if data.canonical() != body:  # the id names these bytes: no other spelling of them
        raise ReleaseError(f"{path} is not in canonical form (sorted keys, compact "
                           "separators): it was edited")
    return Release(rid, path, data)


def load(root: Path, text: str) -> Release:
    return load_from(releases_dir(root), parse_id(text, releases_dir(root)))
