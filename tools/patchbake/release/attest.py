"""Benchmark figures and approvals: small in-toto statements about one image digest.

Both live beside the test evidence (``<evidence_dir>/<image-hex>/``), are DSSE envelopes
signed with Ed25519 (evidence/dsse.py), and are verified fail-closed:

- ``benchmark-<name>.dsse.json``: predicate ``urn:patchbake:predicate:benchmark:v1``,
  figures ``{metric: {value, unit, better}}`` and the environment they ran on; the signer
  needs a trust-policy grant for that predicate type and the benchmark's name.
- ``approval-<channel>-<keyid16>-<issued>.dsse.json``: predicate
  ``urn:patchbake:predicate:approval:v1`` naming the channel, the release it approves (its
  ``basis``: the lineage and every signed input the channel's signed gates read, by path and
  envelope sha256) and when it was ``issued`` and ``expires`` (RFC 3339 UTC, at most
  ``MAX_LIFETIME`` apart); the signer's role must be ``approver`` for that channel (policy
  version 2). An approval counts once per key and once per owner.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import partial
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ..digest import Digest
from ..errors import EvidenceError, UsageError, refuse_evidence
from ..evidence import dsse
from ..evidence.intoto import Statement
from ..evidence.keys import keyid_of
from ..evidence.policy import Policy
from . import gpus, units
from ..fsutil import pretty_json, read_input, sha256_bytes, write_once

BENCHMARK_TYPE = "urn:patchbake:predicate:benchmark:v1"
APPROVAL_TYPE = "urn:patchbake:predicate:approval:v1"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
LIFETIME = timedelta(days=7)  # an approval's default lifetime
MAX_LIFETIME = timedelta(days=30)  # never longer: a forgotten approval must die
SKEW = timedelta(minutes=5)  # how far in the future an approval may say it was issued
_RFC3339 = "%Y-%m-%dT%H:%M:%SZ"


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def rfc3339(when: datetime) -> str:
    return when.astimezone(timezone.utc).strftime(_RFC3339)


def parse_time(value: Any, what: str, where: str) -> datetime:
    """An RFC 3339 UTC time as patchbake writes it (``2026-12-01T05:40:00Z``)."""
    try:
        return datetime.strptime(str(value), _RFC3339).replace(tzinfo=timezone.utc)
    except ValueError:
        refuse_evidence("bad-predicate", f"{where}: its {what} {str(value)[:40]!r} is not an "
                        "RFC 3339 UTC time (YYYY-MM-DDTHH:MM:SSZ)")


@dataclass(frozen=True, slots=True)
class Basis:
    """What an approval approves besides the image digest and the channel: the lineage and
    every signed input (path, envelope sha256) the channel's signed gates read. The id of
    the release cannot be named (the release manifest records the approvals), so these
    are what bind an approval to one release."""

    lineage: str
    inputs: tuple[tuple[str, str], ...]  # sorted

    def dump(self) -> dict[str, Any]:
        return {"lineage": self.lineage,
                "inputs": [{"path": p, "sha256": h} for p, h in self.inputs]}

    @classmethod
    def load(cls, value: Any, where: str) -> Basis:
        try:
            inputs = tuple(sorted((str(i["path"]), str(i["sha256"])) for i in value["inputs"]))
            return cls(str(value["lineage"]), inputs)
        except (KeyError, TypeError):
            refuse_evidence("bad-predicate", f"{where}: names no release it approves (its "
                            "'release' must hold 'lineage' and 'inputs')")

    def mismatch(self, want: Basis) -> str | None:
        """Why an approval of ``self`` is not one of ``want`` (None: it is)."""
        if self.lineage != want.lineage:
            return f"approves lineage {self.lineage!r}, not {want.lineage!r}"
        mine, theirs = dict(self.inputs), dict(want.inputs)
        for path in sorted(set(mine) | set(theirs)):
            if path not in theirs:
                return f"approves with {path}, which this release does not have"
            if path not in mine:
                return f"was signed before {path} existed"
            if mine[path] != theirs[path]:
                return (f"approves {path} sha256 {mine[path][:12]}…, this release has "
                        f"{theirs[path][:12]}…")
        return None


@dataclass(frozen=True)
class Signed:
    path: Path
    keyid: str
    signer: str
    predicate: Mapping[str, Any]
    envelope_sha256: str


def benchmark_path(evidence_dir: Path, digest: Digest, name: str) -> Path:
    if not _NAME.match(name):
        raise EvidenceError(f"benchmark name {name!r} cannot name an evidence file")
    return evidence_dir / digest.hex / f"benchmark-{name}.dsse.json"


def approval_dir(evidence_dir: Path, digest: Digest) -> Path:
    return evidence_dir / digest.hex


def _statement(name: str, digest: Digest, ptype: str, predicate: dict[str, Any]) -> bytes:
    return Statement(name, digest, ptype, predicate).dump()


def _write(path: Path, payload: bytes, key: Ed25519PrivateKey) -> Path:
    data = pretty_json(dsse.sign(payload, key).to_json())
    try:
        write_once(path, data)
    except FileExistsError:
        refuse_evidence("exists", f"{path} already holds a different statement; it is never overwritten")
    return path


def check_figures(figures: Any, where: str) -> dict[str, dict[str, Any]]:
    if not isinstance(figures, dict) or not figures:
        refuse_evidence("bad-predicate", f"{where}: 'figures' must map metric names to figures")
    for metric, f in figures.items():
        ok = isinstance(f, dict) and isinstance(f.get("value"), (int, float)) \
            and not isinstance(f.get("value"), bool) and math.isfinite(f["value"]) \
            and f["value"] > 0 and f.get("better") in ("lower", "higher")
        if not ok:
            refuse_evidence("bad-predicate", f"{where}: figure '{metric}' needs a positive finite "
                 "'value' and 'better': lower|higher")
        problem = units.unit_problem(f)
        if problem:  # a figure without a unit cannot be compared with the next release's
            refuse_evidence("bad-predicate", f"{where}: figure '{metric}' {problem}")
    return dict(figures)


GPU_NAME_MAX = 100  # as nvidia-smi prints it; a reason that names it stays one short line


def measured_on(environment: Any) -> tuple[str, str] | None:
    """(gpu, compute capability) as signed figures name where they were measured, or None
    when they do not name both: a printable GPU name of at most GPU_NAME_MAX characters
    and a capability of the form 8.9."""
    if not isinstance(environment, dict):
        return None
    gpu, cap = environment.get("gpu"), environment.get("capability")
    if isinstance(gpu, str) and 0 < len(gpu) <= GPU_NAME_MAX and gpu.isprintable() \
            and isinstance(cap, str) and gpus.CAPABILITY.fullmatch(cap):
        return gpu, cap
    return None


def measurement_problem(environment: Any) -> str | None:
    """Why figures' environment does not say, believably, where they were measured."""
    where = measured_on(environment)
    if where is None:
        return ("the environment must name the 'gpu' and the compute 'capability' (as \"8.9\") "
                f"the figures were measured on (the gpu printable, at most {GPU_NAME_MAX} "
                "characters)")
    return gpus.claim_problem({"gpu_name": where[0], "compute_capability": where[1]})


def recorded_disagreement(figures: Mapping[str, Any], gpu: str | None, capability: str | None,
                          signed: Signed) -> str | None:
    """Where a release's benchmark record differs from the envelope it names: the figures,
    or the GPU and capability (a record made before those were recorded names neither)."""
    if dict(figures) != signed.predicate.get("figures"):
        return "its figures differ from the signed ones"
    if (gpu, capability) != (None, None) and \
            (gpu, capability) != measured_on(signed.predicate.get("environment")):
        return "the GPU and capability it records differ from the signed ones"
    return None


def sign_benchmark(evidence_dir: Path, name: str, image: str, digest: Digest,
                   figures: Any, environment: Any, key: Ed25519PrivateKey) -> Path:
    """Sign benchmark ``figures`` measured on ``image``@``digest``; the environment must
    name the GPU and compute capability (figures from another GPU are never compared)."""
    check_figures(figures, f"benchmark '{name}'")
    problem = measurement_problem(environment)
    if problem:
        refuse_evidence("bad-predicate", f"benchmark '{name}': {problem}; figures from another "
                        "GPU are never compared with them")
    payload = _statement(image, digest, BENCHMARK_TYPE, {
        "name": name, "figures": figures, "environment": environment})
    return _write(benchmark_path(evidence_dir, digest, name), payload, key)


def sign_approval(evidence_dir: Path, channel: str, image: str, digest: Digest, approver: str,
                  note: str, key: Ed25519PrivateKey, basis: Basis, *,
                  now: datetime | None = None, lifetime: timedelta = LIFETIME) -> Path:
    """Approve ``digest`` into ``channel`` as ``basis`` describes it, for ``lifetime``."""
    if not timedelta(0) < lifetime <= MAX_LIFETIME:
        raise UsageError(f"an approval lives more than 0 and at most {MAX_LIFETIME.days} days, "
                         f"not {lifetime}")
    issued = (now or utcnow()).replace(microsecond=0)
    payload = _statement(image, digest, APPROVAL_TYPE, {
        "channel": channel, "approver": approver, "note": note, "release": basis.dump(),
        "issued": rfc3339(issued), "expires": rfc3339(issued + lifetime)})
    path = approval_dir(evidence_dir, digest) / (
        f"approval-{channel}-{keyid_of(key.public_key())[:16]}-"
        f"{issued.strftime('%Y%m%dT%H%M%SZ')}.dsse.json")
    return _write(path, payload, key)


def _open(path: Path, digest: Digest, ptype: str, trusted: dict[str, Any]
          ) -> tuple[str, Mapping[str, Any], bytes]:
    data = read_input(path, "the statement", partial(EvidenceError, reason="unreadable"),
                      missing=partial(EvidenceError, reason="missing"))
    env = dsse.parse(data, str(path))
    keyid = dsse.verify(env, trusted, str(path))
    st = Statement.load(env.payload, str(path), ptype)
    if st.subject_digest != digest:
        refuse_evidence("wrong-subject", f"{path}: the statement is about {st.subject_digest}, not "
             f"{digest}")
    return keyid, st.predicate, data


def verify_benchmark(path: Path, digest: Digest, policy: Policy, name: str) -> Signed:
    keyid, pred, data = _open(path, digest, BENCHMARK_TYPE, policy.public_keys())
    if pred.get("name") != name:
        refuse_evidence("bad-predicate", f"{path}: the figures are for benchmark {pred.get('name')!r}, "
             f"not {name!r}")
    policy.check_allowed(keyid, BENCHMARK_TYPE, name, str(path))
    check_figures(pred.get("figures"), str(path))
    return Signed(path, keyid, policy.keys[keyid].name, pred, sha256_bytes(data))


def read_approval(path: Path, digest: Digest, policy: Policy, channel: str) -> Signed:
    """An approval of ``digest`` into ``channel`` signed by a key whose role is approver for
    that channel; neither its lifetime nor what it approves is judged here."""
    approvers = {k: t.key for k, t in policy.keys.items() if t.approves(channel)}
    keyid, pred, data = _open(path, digest, APPROVAL_TYPE, approvers)
    if pred.get("channel") != channel:
        refuse_evidence("bad-predicate", f"{path}: approves channel {pred.get('channel')!r}, "
                        f"not {channel!r}")
    return Signed(path, keyid, policy.keys[keyid].name, pred, sha256_bytes(data))


def check_live(pred: Mapping[str, Any], at: datetime, where: str) -> None:
    """The approval was issued, and had not expired, at ``at``; it lived at most
    MAX_LIFETIME. An approval without ``expires`` never counts."""
    if "expires" not in pred or "issued" not in pred:
        refuse_evidence("bad-predicate", f"{where}: has no expiry ('issued' and 'expires'): "
                        "an approval that never expires does not count",
                        hint="sign a new one with `patchbake release approve`")
    issued = parse_time(pred["issued"], "'issued'", where)
    expires = parse_time(pred["expires"], "'expires'", where)
    if expires - issued > MAX_LIFETIME or expires > at + MAX_LIFETIME:
        refuse_evidence("bad-predicate", f"{where}: expires {rfc3339(expires)}, beyond the "
                        f"{MAX_LIFETIME.days}-day cap on an approval's lifetime")
    if issued > at + SKEW or expires <= issued:
        refuse_evidence("bad-predicate", f"{where}: issued {rfc3339(issued)}, expires "
                        f"{rfc3339(expires)}: not a lifetime around {rfc3339(at)}")
    if expires <= at:
        refuse_evidence("bad-predicate", f"{where}: expired at {rfc3339(expires)} (now "
                        f"{rfc3339(at)})", hint="an approver signs a new one")


def verify_approvals(evidence_dir: Path, digest: Digest, policy: Policy, channel: str,
                     basis: Basis, now: datetime) -> tuple[list[Signed], list[str]]:
    """(approvals that count for ``channel`` and ``basis`` at ``now``, reasons the others do
    not). Each key, and each named owner, counts once: k-of-n means k people."""
    good: list[Signed] = []
    bad: list[str] = []
    for path in sorted(approval_dir(evidence_dir, digest).glob(f"approval-{channel}-*.dsse.json")):
        try:
            a = read_approval(path, digest, policy, channel)
            check_live(a.predicate, now, str(path))
            why = Basis.load(a.predicate.get("release"), str(path)).mismatch(basis)
            if why:
                refuse_evidence("bad-predicate", f"{path}: is for another release: it {why}")
        except EvidenceError as exc:
            bad.append(exc.one_line())
            continue
        twin = next((g for g in good
                     if policy.keys[g.keyid].same_holder(policy.keys[a.keyid])), None)
        if twin is not None:
            bad.append(f"{path}: counted once: {twin.path.name} is by the same "
                       + ("key" if twin.keyid == a.keyid
                          else f"owner ({policy.keys[a.keyid].owner.strip()})"))
            continue
        good.append(a)
    return good, bad
