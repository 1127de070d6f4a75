"""What a release records about its inputs: the facts the gates gather while they evaluate
(gates.py) and the release manifest keeps (manifest.py), each a frozen record with one
``load`` (from the manifest's JSON, through ``Fields``) and one ``dump`` (its JSON object,
member for member what the manifest holds, so the bytes and the release id never change).

Hashes of files and envelopes are bare sha256 hex (``str``); image and tree identities
are ``Digest``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..digest import Digest
from ..fields import Fields


@dataclass(frozen=True, slots=True)
class Upstream:
    pin: str
    archive_sha256: str | None  # None: a source that is no pinned archive
    tree_digest: Digest

    KEYS = ("pin", "archive_sha256", "tree_digest")

    @classmethod
    def load(cls, f: Fields) -> Upstream:
        return cls(f.text("pin"), f.opt_hex("archive_sha256"), f.digest("tree_digest"))

    def dump(self) -> dict[str, Any]:
        return {"pin": self.pin, "archive_sha256": self.archive_sha256,
                "tree_digest": str(self.tree_digest)}


@dataclass(frozen=True, slots=True)
class Patch:
    path: str  # repository-relative
    sha256: str
    files_sha256: str

    KEYS = ("path", "sha256", "files_sha256")

    @classmethod
    def load(cls, f: Fields) -> Patch:
        return cls(f.text("path"), f.hex("sha256"), f.hex("files_sha256"))

    def dump(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "files_sha256": self.files_sha256}


@dataclass(frozen=True, slots=True)
class Record:
    """The committed image record the record gate checked (gathered, not loaded: the
    manifest keeps it inside ``images[0]``)."""

    path: str
    definition: str
    config_digest: Digest
    sha256: str


@dataclass(frozen=True, slots=True)
class Image:
    name: str
    definition: str | None
    manifest_digest: Digest
    config_digest: Digest | None
    record: str | None  # repository-relative path of the image record
    record_sha256: str | None

    KEYS = ("name", "definition", "manifest_digest", "config_digest", "record",
            "record_sha256")

    @classmethod
    def load(cls, f: Fields) -> Image:
        return cls(f.text("name"), f.opt_text("definition"), f.digest("manifest_digest"),
                   f.opt_digest("config_digest"), f.opt_text("record"),
                   f.opt_hex("record_sha256"))

    def dump(self) -> dict[str, Any]:
        return {"name": self.name, "definition": self.definition,
                "manifest_digest": str(self.manifest_digest),
                "config_digest": None if self.config_digest is None else str(self.config_digest),
                "record": self.record, "record_sha256": self.record_sha256}


@dataclass(frozen=True, slots=True)
class Verification:
    """The verify gate's result: baked files matched against a fresh apply."""

    matched: int
    total: int
    config_digest: Digest
    base_drift: dict[str, int]  # changed / missing / extra

    KEYS = ("matched", "total", "config_digest", "base_drift")

    @classmethod
    def load(cls, f: Fields) -> Verification:
        return cls(f.integer("matched"), f.integer("total"), f.digest("config_digest"),
                   f.counts("base_drift"))

    def dump(self) -> dict[str, Any]:
        return {"matched": self.matched, "total": self.total,
                "config_digest": str(self.config_digest), "base_drift": self.base_drift}


@dataclass(frozen=True, slots=True)
class Evidence:
    """One suite's signed evidence, as the evidence or capability gate trusted it."""

    suite: str
    path: str
    envelope_sha256: str
    keyid: str
    signer: str
    result: str
    counts: dict[str, int]
    runner: str
    gpu: str | None
    capability: str | None

    KEYS = ("suite", "path", "envelope_sha256", "keyid", "signer", "result", "counts",
            "runner", "gpu", "capability")

    @classmethod
    def load(cls, f: Fields) -> Evidence:
        return cls(f.text("suite"), f.text("path"), f.hex("envelope_sha256"), f.text("keyid"),
                   f.text("signer"), f.text("result"), f.counts("counts"), f.text("runner"),
                   f.opt_text("gpu"), f.opt_text("capability"))

    def dump(self) -> dict[str, Any]:
        return {"suite": self.suite, "path": self.path, "envelope_sha256": self.envelope_sha256,
                "keyid": self.keyid, "signer": self.signer, "result": self.result,
                "counts": self.counts, "runner": self.runner, "gpu": self.gpu,
                "capability": self.capability}


@dataclass(frozen=True, slots=True)
class Benchmark:
    name: str
    path: str
    keyid: str
    envelope_sha256: str
    # {metric: {value, unit, better}} as signed; attest.check_figures checked its shape
    figures: dict[str, Any]
    # where they were measured, as the signed environment names it; figures from another
    # GPU are not compared with these (absent in releases made before it was recorded)
    gpu: str | None = None
    capability: str | None = None

    KEYS = ("name", "path", "keyid", "envelope_sha256", "figures")
    OPTIONAL = ("gpu", "capability")

    @classmethod
    def load(cls, f: Fields) -> Benchmark:
        return cls(f.text("name"), f.text("path"), f.text("keyid"), f.hex("envelope_sha256"),
                   f.mapping("figures"), f.opt_text("gpu"), f.opt_text("capability"))

    def dump(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "path": self.path, "keyid": self.keyid,
                               "envelope_sha256": self.envelope_sha256, "figures": self.figures}
        if self.gpu is not None or self.capability is not None:
            out.update(gpu=self.gpu, capability=self.capability)
        return out


@dataclass(frozen=True, slots=True)
class Approval:
    path: str
    keyid: str
    signer: str
    envelope_sha256: str

    KEYS = ("path", "keyid", "signer", "envelope_sha256")

    @classmethod
    def load(cls, f: Fields) -> Approval:
        return cls(f.text("path"), f.text("keyid"), f.text("signer"), f.hex("envelope_sha256"))

    def dump(self) -> dict[str, Any]:
        return {"path": self.path, "keyid": self.keyid, "signer": self.signer,
                "envelope_sha256": self.envelope_sha256}


@dataclass(frozen=True, slots=True)
class Attestation:
    """The image's SBOM or provenance, signed by the key that created the release
    (release/imageattest.py)."""

    kind: str  # "sbom" | "provenance"
    path: str  # repository-relative
    predicate_type: str
    envelope_sha256: str
    keyid: str
    signer: str

    KEYS = ("kind", "path", "predicate_type", "envelope_sha256", "keyid", "signer")
    KINDS = ("sbom", "provenance")

    @classmethod
    def load(cls, f: Fields) -> Attestation:
        return cls(f.one_of("kind", cls.KINDS), f.text("path"), f.text("predicate_type"),
                   f.hex("envelope_sha256"), f.text("keyid"), f.text("signer"))

    def dump(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.path, "predicate_type": self.predicate_type,
                "envelope_sha256": self.envelope_sha256, "keyid": self.keyid,
                "signer": self.signer}


# what release.envelopes() lists: every signed input, each with its path and sha256
SignedInput = Evidence | Benchmark | Approval | Attestation


@dataclass(slots=True)
class Facts:
    """What the gates gathered while evaluating, filled in gate by gate (a gate that did
    not run leaves its fact unset)."""

    upstream: Upstream | None = None
    patch: Patch | None = None
    record: Record | None = None
    verify: Verification | None = None
    evidence: dict[str, Evidence] = field(default_factory=dict)  # by suite
    benchmark: Benchmark | None = None
    approvals: list[Approval] = field(default_factory=list)
