"""Evaluating a channel for an image, and creating a release from a passing evaluation.

``create`` is all-or-nothing and idempotent: gates are evaluated (nothing is written if
any blocks), the image's signed SBOM and provenance written once, the release manifest is written once under its id, the VSA beside it, and
the ledger's ``release`` entry appended last under the ledger lock. Re-running with
nothing changed finds the release already in the ledger and writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import Pipeline, channels
from ..errors import ConfigError, EvidenceError, GateError, ReleaseError
from ..evidence import keys, policy
from ..fsutil import read_input
from ..images import definition as definitions
from ..store import Store
from ..suites import image as imagemod
from . import attest, facts, imageattest, journal, ledger, manifest, tlog
from .gates import Evaluation, Table, evaluate


@dataclass(frozen=True)
class Created:
    release: manifest.Release
    table: Table
    new: bool  # False: the same release was already recorded
    entry: ledger.Entry | None


def previous_benchmark(root: Path, trust_policy: Path
                       ) -> Callable[[str, str, tuple[str, str]], facts.Benchmark | None]:
    """The benchmark record of the channel's latest release whose figures were measured on
    the given GPU and capability, per the ledger as stored (verified itself before anything
    is promoted or created). The record is checked against the envelope it names, which
    must still verify: a release whose record says other than what was signed refuses."""
    releases_dir = manifest.releases_dir(root)

    def lookup(channel: str, name: str, where: tuple[str, str]) -> facts.Benchmark | None:
        pol = None
        for e in reversed(ledger.find(ledger.read(releases_dir), "release", channel=channel)):
            rel = manifest.load_from(releases_dir, e.release)
            b = rel.manifest.benchmark
            if b is None or b.name != name or (b.gpu, b.capability) != where:
                continue
            pol = pol or policy.load(trust_policy)
            try:
                signed = attest.verify_benchmark(root / b.path, rel.digest, pol, name)
            except EvidenceError as exc:
                raise ReleaseError(f"release {e.release[:16]}…, the last '{channel}' release "
                                   f"measured on {where[0]}: {exc.message}") from None
            problem = "its envelope was re-signed" \
                if signed.envelope_sha256 != b.envelope_sha256 else \
                attest.recorded_disagreement(b.figures, b.gpu, b.capability, signed)
            if problem:
                raise ReleaseError(f"release {e.release[:16]}…'s benchmark record is not what "
                                   f"{b.path} signed: {problem}")
            return b
        return None
    return lookup


def evaluation(pipeline: Pipeline, store: Store | None, ref: str,
               lineage: str | None = None) -> Evaluation:

    resolved = imagemod.digest_only(ref, pipeline)
    if resolved is None:
        if store is None:
            raise ReleaseError(f"'{ref}' names no digest and there is no store to resolve it")
        resolved = imagemod.identify(store, ref, pipeline)
    rec = imagemod.find_record(pipeline.root, resolved.digest)
    name = rec.definition if rec and resolved.name.startswith("sha256:") \
        else resolved.name
    defn = None
    if rec and rec.definition in pipeline.images:

        defn = definitions.load(pipeline, rec.definition)
    sig = pipeline.signing
    # the lineage the image was baked from (its definition names it), not the default
    return Evaluation(pipeline, store, pipeline.lineage_for(defn, lineage), name.split("@")[0],
                      resolved.digest, sig.evidence_dir, sig.trust_policy,
                      previous_benchmark(pipeline.root, sig.trust_policy))


def gates(pipeline: Pipeline, store: Store | None, channel: str, ref: str,
          lineage: str | None = None, *, verified: Any = None) -> tuple[Table, Evaluation]:
    """The channel's gate table for ``ref``. ``verified``: a VerifyResult of this very
    digest that the caller just computed (the main job), used instead of a second run."""
    ev = evaluation(pipeline, store, ref, lineage)
    if verified is not None and verified.digest == ev.digest:
        ev.memo("verify", lambda: verified)
    return evaluate(ev, channels.get(pipeline.channels, channel, pipeline.path.name)), ev


def require_pass(table: Table) -> None:
    if not table.passed:
        first = table.blocking[0]
        raise GateError(f"channel '{table.channel}' is blocked for {table.digest}: "
                        f"{first.gate}: {first.reason}",
                        hint=f"{len(table.blocking)} gate(s) do not pass; see `patchbake "
                             f"release gates --channel {table.channel} --image "
                             f"{table.digest}`")


def release_key(pipeline: Pipeline, pol: policy.Policy, key_path: Path | None) -> Any:
    """The private key that signs VSAs and ledger entries: refused, before anything is
    written or pushed, unless the trust policy gives it the 'release' role (every command
    that signs as a release manager asks here)."""
    sig = pipeline.signing
    key_file = key_path or sig.private_key()
    key = keys.load_private(key_file)
    if keys.keyid_of(key.public_key()) not in pol.with_role("release"):
        raise ReleaseError(f"the signing key {key_file} has no 'release' role in "
                           f"{sig.trust_policy.name}: it cannot sign VSAs or ledger entries",
                           hint="add `roles: [release]` to its entry (policy version 2)")
    return key


def create(pipeline: Pipeline, store: Store, channel: str, ref: str, *,
           key_path: Path | None = None, lineage: str | None = None) -> Created:
    sig = pipeline.signing
    rdir = manifest.releases_dir(pipeline.root)
    pol = policy.load(sig.trust_policy)
    key = release_key(pipeline, pol, key_path)
    table, ev = gates(pipeline, store, channel, ref, lineage)
    require_pass(table)
    # the image's SBOM and provenance, signed by the release's key: written once (the same
    # bake gives the same bytes), recorded in the manifest, so the VSA covers them
    attestations = imageattest.make(pipeline, ev.digest, key, pol)
    data = manifest.build(table, ev.facts, pipeline.name, ev.lineage.key,
                          read_input(sig.trust_policy, "the trust policy", ConfigError),
                          attestations)
    origin = tlog.origin_of(pipeline.name)
    with ledger.locked(rdir):  # one transaction: release dir and ledger entry (journal.py)
        journal.recover(rdir, pol)
        # no append to a rolled-back log
        tlog.check_committed(rdir, ledger.verify(rdir, pol), pol, origin)
        rel, entry = journal.record(rdir, pol, data, key)
        # the checkpoint covers the whole ledger: this entry, and one a crash left unsigned
        tlog.catch_up(rdir, ledger.verify(rdir, pol), origin, key, pol)
    return Created(rel, table, entry is not None, entry)
