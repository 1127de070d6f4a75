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
     "verify": {"matched", "total", "base_drift"},
     "evidence": [{"suite", "path", "envelope_sha256", "keyid", "signer", "result",
                   "counts", "runner", "gpu", "capability"}],
     "benchmark": {...} | null, "approvals": [...],
     "gates": [{"channel", "gate", "status", "reason"}],
     "trust_policy_sha256": "...", "tool": "patchbake 0.1.0"}
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import __version__
from ..digest import Digest, is_hex
from ..errors import ReleaseError
from ..fsutil import canonical_json, sha256_bytes, write_once
from .gates import Table

FORMAT = "patchbake-release/1"
RELEASES_DIR = Path("manifests") / "releases"
MANIFEST_NAME = "release.json"
VSA_NAME = "vsa.dsse.json"


@dataclass(frozen=True)
class Release:
    id: str  # sha256 hex of release.json's bytes
    path: Path
    data: dict[str, Any]

    @property
    def channel(self) -> str:
        return str(self.data["channel"])

    @property
    def digest(self) -> Digest:
        return Digest.parse(self.data["images"][0]["manifest_digest"],
                            f"{self.path}: images[0].manifest_digest", ReleaseError)

    @property
    def image(self) -> str:
        return str(self.data["images"][0]["name"])

    def envelopes(self) -> list[dict[str, Any]]:
        """Every signed input the release names: evidence, benchmark, approvals."""
        out = list(self.data.get("evidence") or [])
        if self.data.get("benchmark"):
            out.append(self.data["benchmark"])
        out.extend(self.data.get("approvals") or [])
        return out


def releases_dir(root: Path) -> Path:
    return root / RELEASES_DIR


def build(table: Table, facts: dict[str, Any], pipeline_name: str, lineage: str,
          policy_bytes: bytes) -> dict[str, Any]:
    if not table.passed:
        raise ValueError("a release is made only from a table whose gates all pass")
    rec = facts.get("record") or {}
    return {
        "format": FORMAT,
        "channel": table.channel,
        "pipeline": pipeline_name,
        "lineage": lineage,
        "upstream": facts.get("upstream"),
        "patch": facts.get("patch"),
        "images": [{"name": table.image, "definition": rec.get("definition"),
                    "manifest_digest": str(table.digest), "config_digest": rec.get("config_digest"),
                    "record": rec.get("path"), "record_sha256": rec.get("sha256")}],
        "verify": facts.get("verify"),
        "evidence": [facts["evidence"][k] for k in sorted(facts.get("evidence") or {})],
        "benchmark": facts.get("benchmark"),
        "approvals": facts.get("approvals") or [],
        "gates": [d.to_json() for d in table.decisions],
        "trust_policy_sha256": sha256_bytes(policy_bytes),
        "tool": f"patchbake {__version__}",
    }


def release_id(data: dict[str, Any]) -> str:
    return sha256_bytes(canonical_json(data))


def write(root: Path, data: dict[str, Any]) -> tuple[Release, bool]:
    """Write release.json once; (release, newly written)."""
    body = canonical_json(data)
    rid = sha256_bytes(body)
    path = releases_dir(root) / rid / MANIFEST_NAME
    written = write_once(path, body)  # same id, same bytes: never a conflict
    return Release(rid, path, data), written


def parse_id(text: str) -> str:
    rid = text.removeprefix("sha256:")
    if not is_hex(rid):
        raise ReleaseError(f"'{text}' is not a release id (the 64-hex sha256 of release.json)",
                           hint="`patchbake ledger verify` lists the releases")
    return rid


def load_from(dir_: Path, rid: str) -> Release:
    """Load ``<dir_>/<rid>/release.json`` and check that its bytes hash to ``rid``."""
    path = dir_ / rid / MANIFEST_NAME
    try:
        body = path.read_bytes()
    except FileNotFoundError:
        raise ReleaseError(f"release {rid[:16]} has no manifest at {path}",
                           hint="create it with `patchbake release create`") from None
    except OSError as exc:
        raise ReleaseError(f"{path} is unreadable: {exc.strerror}") from None
    if sha256_bytes(body) != rid:
        raise ReleaseError(f"{path} hashes to {sha256_bytes(body)[:16]}…, not its release id "
                           f"{rid[:16]}…: the release manifest was altered")
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise ReleaseError(f"{path} is not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ReleaseError(f"{path} is not a {FORMAT} manifest")
    try:
        Release(rid, path, data).digest  # noqa: B018 - the shape check is the access
    except (KeyError, IndexError, TypeError):
        raise ReleaseError(f"{path} names no image") from None
    return Release(rid, path, data)


def load(root: Path, text: str) -> Release:
    return load_from(releases_dir(root), parse_id(text))
