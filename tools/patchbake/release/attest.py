"""Benchmark figures and approvals: small in-toto statements about one image digest.

Both live beside the test evidence (``<evidence_dir>/<image-hex>/``), are DSSE envelopes
signed with Ed25519 (evidence/dsse.py), and are verified fail-closed:

- ``benchmark-<name>.dsse.json``: predicate ``urn:patchbake:predicate:benchmark:v1``,
  figures ``{metric: {value, unit, better}}`` and the environment they ran on; the signer
  needs a trust-policy grant for that predicate type and the benchmark's name.
- ``approval-<channel>-<keyid16>.dsse.json``: predicate
  ``urn:patchbake:predicate:approval:v1`` naming the channel; the signer's role must be
  ``approver`` for that channel (policy version 2).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ..digest import Digest
from ..errors import EvidenceError, refuse_evidence
from ..evidence import dsse
from ..evidence.intoto import Statement
from ..evidence.keys import keyid_of
from ..evidence.policy import Policy
from . import units
from ..fsutil import pretty_json, read_input, sha256_bytes, write_once

BENCHMARK_TYPE = "urn:patchbake:predicate:benchmark:v1"
APPROVAL_TYPE = "urn:patchbake:predicate:approval:v1"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


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


def sign_benchmark(evidence_dir: Path, name: str, image: str, digest: Digest,
                   figures: dict[str, Any], environment: dict[str, Any],
                   key: Ed25519PrivateKey) -> Path:
    """Sign benchmark ``figures`` measured on ``image``@``digest``."""
    check_figures(figures, f"benchmark '{name}'")
    payload = _statement(image, digest, BENCHMARK_TYPE, {
        "name": name, "figures": figures, "environment": environment})
    return _write(benchmark_path(evidence_dir, digest, name), payload, key)


def sign_approval(evidence_dir: Path, channel: str, image: str, digest: Digest, approver: str,
                  note: str, key: Ed25519PrivateKey) -> Path:
    payload = _statement(image, digest, APPROVAL_TYPE, {
        "channel": channel, "approver": approver, "note": note})
    path = approval_dir(evidence_dir, digest) / \
        f"approval-{channel}-{keyid_of(key.public_key())[:16]}.dsse.json"
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


def verify_approvals(evidence_dir: Path, digest: Digest, policy: Policy, channel: str
                     ) -> tuple[list[Signed], list[str]]:
    """(approvals that verify for ``channel``, reasons the others do not)."""
    good: list[Signed] = []
    bad: list[str] = []
    approvers = {k: t.key for k, t in policy.keys.items() if t.approves(channel)}
    for path in sorted(approval_dir(evidence_dir, digest).glob(f"approval-{channel}-*.dsse.json")):
        try:
            keyid, pred, data = _open(path, digest, APPROVAL_TYPE, approvers)
            if pred.get("channel") != channel:
                refuse_evidence("bad-predicate", f"{path}: approves channel {pred.get('channel')!r}, not "
                     f"{channel!r}")
        except EvidenceError as exc:
            bad.append(exc.one_line())
            continue
        if all(g.keyid != keyid for g in good):  # one key approves once
            good.append(Signed(path, keyid, policy.keys[keyid].name, pred, sha256_bytes(data)))
    return good, bad
