"""The ``signing:`` section of pipeline.yaml, validated once into a frozen object."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..schema import Field, Schema, validate
from .keys import default_private_key

SIGNING_SCHEMA = Schema({
    "trust_policy": Field(str, default="manifests/trust-policy.yaml",
                          help="committed trust policy (public keys only)"),
    "evidence_dir": Field(str, default="manifests/evidence"),
    "key": Field(str, default=None,
                 help="private key path; default $PATCHBAKE_SIGNING_KEY or the user config dir"),
})


@dataclass(frozen=True)
class Signing:
    trust_policy: Path
    evidence_dir: Path
    key: Path


def parse(raw: dict[str, Any] | None, root: Path, source: str = "pipeline.yaml") -> Signing:
    s = validate(raw or {}, SIGNING_SCHEMA, "signing", source)
    key = Path(s["key"]).expanduser() if s["key"] else default_private_key()
    return Signing(root / s["trust_policy"], root / s["evidence_dir"], key)
