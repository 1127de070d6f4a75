"""The ``signing:`` section of pipeline.yaml, validated once into a frozen object.

Imports nothing heavy (no cryptography): pipeline.yaml is validated on machines that
only run suites and never sign.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..userdirs import user_config_dir
from .schema import Field, Schema, validate


ENV_KEY = "PATCHBAKE_SIGNING_KEY"
PRIVATE_NAME = "signing.key"

SIGNING_SCHEMA = Schema({
    "trust_policy": Field(str, default="manifests/trust-policy.yaml",
                          help="committed trust policy (public keys only)"),
    "evidence_dir": Field(str, default="manifests/evidence"),
    "key": Field(str, default=None,
                 help="private key path; default $PATCHBAKE_SIGNING_KEY or the user config dir"),
})


def default_key_dir() -> Path:
    return user_config_dir() / "keys"


def default_private_key() -> Path:
    env = os.environ.get(ENV_KEY)
    return Path(env).expanduser() if env else default_key_dir() / PRIVATE_NAME


@dataclass(frozen=True, slots=True)
class Signing:
    trust_policy: Path
    evidence_dir: Path
    key: Path | None  # as declared; None: the default, see private_key

    def private_key(self) -> Path:
        """The signing key: the declared one, else $PATCHBAKE_SIGNING_KEY or the user config
        dir's (looked up when a command signs: one that never does needs no home directory)."""
        return self.key if self.key is not None else default_private_key()


def parse(raw: dict[str, Any] | None, root: Path, source: str = "pipeline.yaml") -> Signing:
    s = validate(raw or {}, SIGNING_SCHEMA, "signing", source)
    key = Path(s["key"]).expanduser() if s["key"] else None
    return Signing(root / s["trust_policy"], root / s["evidence_dir"], key)
