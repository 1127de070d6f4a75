"""``release create``'s writes as one transaction: the release directory (release.json,
the VSA) and the ledger's ``release`` entry, or none of them for good.

Everything is made in memory first (the manifest's canonical bytes, the signed VSA, the
signed ledger entry), then written to a journal (``releases/release.pending.json``, one
atomic write), then applied: release.json, the VSA, the ledger entry, and the journal
removed. Killed anywhere (or the disk full), the journal is resolved by the next
``release create`` before anything else, under the ledger lock: if the ledger's head is
still the entry's previous one, the release is finished (rolled forward); if the ledger
already records it, the journal just goes; if the ledger moved on without it, what it had
written is removed (dropped) and that create can be run again.

The journal is a file in the checkout: its entry must be a canonical ``release`` entry
signed by a ``release`` key, and its manifest must hash to the entry's release id, before
anything of it reaches the ledger.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from ..errors import LedgerError, PatchbakeError, StoreError
from ..fsutil import atomic_write, fsync_dir, read_optional, sha256_bytes, write_once
from ..store import write_failure
from . import ledger, manifest, vsa

JOURNAL = "release.pending.json"
HINT = ("free space on that file system, then run `patchbake release create` again: it "
        f"finishes or drops the release its journal ({JOURNAL}) holds")


def _release(rdir: Path, body: bytes, data: manifest.Manifest) -> manifest.Release:
    rid = sha256_bytes(body)
    return manifest.Release(rid, rdir / rid / manifest.MANIFEST_NAME, data)


def _apply(rdir: Path, rid: str, body: bytes, vsa_bytes: bytes, entry: ledger.Entry) -> None:
    write_once(rdir / rid / manifest.MANIFEST_NAME, body)
    atomic_write(rdir / rid / manifest.VSA_NAME, vsa_bytes)
    if not ledger.find(ledger.read(rdir), "release", release=rid):
        ledger.append(rdir, entry)
    (rdir / JOURNAL).unlink()
    fsync_dir(rdir)


def _written(rdir: Path, step: Any) -> Any:
    """Run a write step; a write the file system refuses names the file and the file
    system, and says how the journal finishes the release."""
    try:
        return step()
    except OSError as exc:
        failed = write_failure(exc, rdir)
        if failed is None:
            raise
        raise StoreError(failed.message.replace("; nothing half-written was kept", ""),
                         hint=HINT) from exc


def record(rdir: Path, pol: Any, data: manifest.Manifest, key: Any
           ) -> tuple[manifest.Release, ledger.Entry | None]:
    """Under the caller's ledger lock: resolve an interrupted create, then record ``data``
    as a release (release.json, VSA, ledger entry) unless the ledger already has it.
    Returns the release and its new entry (None: it was already recorded)."""
    recover(rdir, pol)
    entries = ledger.verify(rdir, pol)
    body = data.canonical()
    rel = _release(rdir, body, data)
    if ledger.find(entries, "release", release=rel.id):
        return manifest.load_from(rdir, rel.id), None
    vsa_bytes = vsa.sign(rel, key)
    entry = ledger.make_entry(entries, "release", rel, key)
    doc = {"release": rel.id, "manifest": body.decode(), "vsa": vsa_bytes.decode(),
           "entry": entry.line.decode()}
    _written(rdir, lambda: atomic_write(rdir / JOURNAL, json.dumps(doc, sort_keys=True)
                                        .encode()))
    _written(rdir, lambda: _apply(rdir, rel.id, body, vsa_bytes, entry))
    return rel, entry


def _load(p: Path, pol: Any) -> tuple[bytes, bytes, ledger.Entry]:
    hint = "it is written before a release and removed once the ledger records it"
    raw = read_optional(p, "the release journal", LedgerError)
    assert raw is not None
    try:
        doc = json.loads(raw)
        body, vsa_bytes = str(doc["manifest"]).encode(), str(doc["vsa"]).encode()
        entry = ledger.Entry.load(str(doc["entry"]).encode(), "its entry")
        if entry.kind != "release" or entry.release != sha256_bytes(body) or \
                doc["release"] != entry.release:
            raise LedgerError("its entry is no release entry for its manifest")
        ledger.check_signature(entry, pol, "its entry")
    except (ValueError, KeyError, TypeError, PatchbakeError) as exc:
        why = exc.message if isinstance(exc, PatchbakeError) else "it is damaged"
        raise LedgerError(f"{p}: {why}; inspect it and remove it", hint=hint) from None
    return body, vsa_bytes, entry


def recover(rdir: Path, pol: Any) -> str | None:
    """Resolve an interrupted create's journal: 'rolled-forward', 'completed', 'dropped'
    or None (no journal)."""
    p = rdir / JOURNAL
    if read_optional(p, "the release journal", LedgerError) is None:
        return None
    body, vsa_bytes, entry = _load(p, pol)
    entries = ledger.read(rdir)
    if ledger.find(entries, "release", release=entry.release):
        outcome = "completed"
    elif entry.prev == ledger.head(entries) and entry.seq == len(entries):
        outcome = "rolled-forward"
    else:  # the ledger moved on without it: what it wrote is no release
        shutil.rmtree(rdir / entry.release, ignore_errors=True)
        p.unlink()
        fsync_dir(rdir)
        return "dropped"
    _written(rdir, lambda: _apply(rdir, entry.release, body, vsa_bytes, entry))
    return outcome
