"""Promotion: a recorded release's image, by digest, into a registry, under a tag that
never moves; the statements attached beside it; a ``promotion`` entry in the ledger.

All-or-nothing, in this order (under the ledger lock):

1. the ledger verifies; the release is in it; the channel's gates are evaluated again
   now and must all pass; every signed input still has the bytes the release recorded and
   the VSA verifies (GateError 60 / LedgerError 61 otherwise: nothing was sent);
2. blobs and the manifest go up by digest (invisible: no tag names them yet), read back;
3. the statements are attached (referrers.py): evidence, benchmark, approvals, the image's
   SBOM and provenance, the VSA;
4. a journal (``promotion.pending.json``) records the signed ledger entry about to be
   appended; 5. the tag is set and read back; 6. the entry is appended, the journal removed.

Killed anywhere, the tag and the ledger agree once the journal is resolved, which every
promotion does first: a tag that was set gets its entry (roll forward), a journal whose
tag was never set is dropped. Re-running a finished promotion changes nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import Pipeline
from ..digest import Digest, differing
from ..errors import (
    ConfigError,
    EvidenceError,
    GateError,
    LedgerError,
    PatchbakeError,
    RegistryError,
    ReleaseError,
    TagMovedError,
)
from ..evidence import policy
from ..evidence.statement import PREDICATE_TYPE
from ..fsutil import atomic_write, fsync_dir, read_input, read_optional, sha256_bytes
from ..oci.registry import RegistryClient
from ..oci.registry_manifest import OCI_MANIFEST, Descriptor
from ..oci.registry_ref import RegistryRef, parse_ref
from ..store import Store
from . import create, ledger, manifest, referrers, tlog, vsa
from .attest import APPROVAL_TYPE, BENCHMARK_TYPE

JOURNAL = "promotion.pending.json"


@dataclass(frozen=True)
class Promoted:
    release: str
    to: str
    digest: Digest
    already: bool
    attached: referrers.Attached
    recovered: str | None  # what an interrupted earlier promotion came to, if any

    def to_json(self) -> dict[str, Any]:
        return {"release": self.release, "to": self.to, "digest": str(self.digest),
                "already": self.already, "attached": self.attached.dump(),
                "recovered": self.recovered}


def _tag_digest(client: RegistryClient, ref: RegistryRef) -> Digest | None:
    assert ref.tag
    got = client.fetch_manifest(ref, ref.tag, push_scope=True, missing_ok=True)
    return None if got is None else Digest.of(got[0])


def recover(rdir: Path, policy: Any) -> str | None:
    """Resolve an interrupted promotion's journal: 'rolled-forward', 'dropped' or None.
    The journal is a file in the checkout: its entry must be a canonical promotion entry
    signed by a ``release`` key before it may reach the ledger."""
    p = rdir / JOURNAL
    hint = "it is written before a tag is set and removed once the ledger records the promotion"
    raw = read_optional(p, "the promotion journal", LedgerError)
    if raw is None:
        return None
    try:
        j = json.loads(raw)
        line = str(j["entry"]).encode()
        ref = parse_ref(str(j["to"]))
    except (ValueError, KeyError, TypeError, PatchbakeError):
        raise LedgerError(f"{p} is damaged; inspect the registry tag it names and remove it",
                          hint=hint) from None
    try:
        entry = ledger.Entry.load(line, "its entry")
        if entry.kind != "promotion" or entry.to != str(ref):
            raise LedgerError("its entry is no promotion to the tag it names")
        ledger.check_signature(entry, policy, "its entry")
    except LedgerError as exc:
        raise LedgerError(f"{p}: {exc.message}; inspect the registry tag it names and "
                          "remove it", hint=hint) from None
    outcome = "dropped"
    if entry.prev == ledger.head(ledger.read(rdir)) and \
            _tag_digest(RegistryClient.for_ref(ref), ref) == entry.digest:
        ledger.append(rdir, entry)
        outcome = "rolled-forward"
    p.unlink()
    fsync_dir(rdir)
    return outcome


def check_recorded_inputs(root: Path, rel: manifest.Release, policy: Any) -> None:
    """Every signed input still holds the bytes the release recorded; the VSA verifies."""
    for e in rel.envelopes():
        path = root / e.path
        got = sha256_bytes(read_input(path, f"release {rel.id[:16]}'s signed input",
                                      GateError))
        if got != e.envelope_sha256:
            now, recorded = differing(got, e.envelope_sha256)
            raise GateError(f"release {rel.id[:16]}: {e.path} is not the envelope the "
                            f"release recorded (sha256 {now}…, recorded "
                            f"{recorded}…): re-signed or altered")
    vsa_path = rel.path.parent / manifest.VSA_NAME
    try:
        vsa.verify(read_input(vsa_path, f"release {rel.id[:16]}'s VSA", GateError), rel,
                   policy, str(vsa_path))
    except ReleaseError as exc:
        raise GateError(exc.message) from None


def statements(root: Path, rel: manifest.Release) -> list[referrers.Statement]:

    m = rel.manifest
    inputs = [*((e.path, PREDICATE_TYPE) for e in m.evidence),
              *([(m.benchmark.path, BENCHMARK_TYPE)] if m.benchmark else []),
              *((a.path, APPROVAL_TYPE) for a in m.approvals),
              *((a.path, a.predicate_type) for a in m.attestations)]
    out = [referrers.Statement(read_input(root / path, "a signed input", GateError), ptype,
                               Path(path).name)
           for path, ptype in inputs]
    out.append(referrers.Statement(read_input(rel.path.parent / manifest.VSA_NAME,
                                              "the release's VSA", GateError),
                                   vsa.PREDICATE_TYPE, f"release-{rel.id[:16]}.vsa.dsse.json"))
    return out


def load_policy(path: Path) -> Any:
    """The trust policy, or GateError: with no usable policy nothing verifies (fail-closed)."""
    try:
        return policy.load(path)
    except (ConfigError, EvidenceError) as exc:
        raise GateError(f"the trust policy is unusable, so nothing can be verified: "
                        f"{exc.message}") from None


def _dest(to: str) -> RegistryRef:
    ref = parse_ref(to)
    if not ref.tag or ref.digest:
        raise ReleaseError(f"--to {to}: name HOST:PORT/REPO:TAG (a tag, no digest); the "
                           "image goes up by its digest and the tag is set last")
    return ref


def promote(pipeline: Pipeline, store: Store, release: str, to: str, *,
            key_path: Path | None = None) -> Promoted:
    sig = pipeline.signing
    root, rdir = pipeline.root, manifest.releases_dir(pipeline.root)
    dest = _dest(to)
    pol = load_policy(sig.trust_policy)
    key = create.release_key(pipeline, pol, key_path)
    with ledger.locked(rdir):
        recovered = recover(rdir, pol)
        entries = ledger.verify(rdir, pol)
        origin = tlog.origin_of(pipeline.name)
        tlog.check_committed(rdir, entries, pol, origin)  # no append to a rolled-back log
        rel = manifest.load(root, release)
        if not ledger.find(entries, "release", release=rel.id):
            raise LedgerError(f"release {rel.id[:16]} is not in the ledger",
                              hint="`patchbake release create` records it")
        done = [e.attached for e in ledger.find(entries, "promotion", release=rel.id)
                if e.to == str(dest) and e.attached is not None]
        client = RegistryClient.for_ref(dest)
        if done and _tag_digest(client, dest) == rel.digest:
            return Promoted(rel.id, str(dest), rel.digest, True, done[-1], recovered)
        table, _ = create.gates(pipeline, store, rel.channel, str(rel.digest))
        create.require_pass(table)
        check_recorded_inputs(root, rel, pol)
        current = _tag_digest(client, dest)
        if current not in (None, rel.digest):

            raise TagMovedError(f"{dest} already points to {current}; refusing to move it to "
                                f"{rel.digest}; nothing was pushed",
                                hint="tags never move: promote under a new tag")
        client.push(store, rel.digest, dest.with_digest(rel.digest))
        data = store.read_blob(rel.digest)
        subject = Descriptor(json.loads(data).get("mediaType", OCI_MANIFEST), rel.digest,
                             len(data))
        attached = referrers.attach(client, store, dest.repo, subject, statements(root, rel))
        entry = ledger.make_entry(entries, "promotion", rel, key, to=str(dest),
                                  attached=attached)
        atomic_write(rdir / JOURNAL, json.dumps({"entry": entry.line.decode(),
                                                 "to": str(dest)}).encode())
        try:
            client.push(store, rel.digest, dest)
            if _tag_digest(client, dest) != rel.digest:
                raise RegistryError(f"{dest} does not resolve to {rel.digest} after tagging")
        except PatchbakeError:
            # failed, not killed: settle it now (a tag that did get set is recorded)
            try:
                recover(rdir, pol)
            except PatchbakeError:
                pass  # the registry is gone too: the journal stays for the next run
            raise
        ledger.append(rdir, entry)
        tlog.publish(rdir, [*entries, entry], origin, key, pol)
        (rdir / JOURNAL).unlink()
        fsync_dir(rdir)
    return Promoted(rel.id, str(dest), rel.digest, False, attached, recovered)
