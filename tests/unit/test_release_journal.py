"""``release create``'s writes are one transaction (release/journal.py): interrupted
anywhere, the next create finishes it or drops it; the ledger never lacks a release it
has the directory of. A refused write names the file and its file system."""

from __future__ import annotations

import errno
import hashlib
import json
from pathlib import Path

import pytest
from patchbake import config
from patchbake.digest import Digest
from patchbake.errors import LedgerError, StoreError
from patchbake.evidence import keys, policy
from patchbake.release import create, gates, journal, ledger, manifest
from release_support import IMAGE, Keys, make_release, make_repo, sign_all

DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32


def release_data(root: Path, k: Keys, digest: str) -> manifest.Manifest:
    sign_all(root, k, IMAGE, digest)
    p = config.load(root / "pipeline.yaml")
    ev = create.evaluation(p, None, f"{IMAGE}@{digest}")
    decisions = [gates.Decision(g.declared_in, g.kind, *gates.GATES[g.kind](ev, g))
                 for g in p.channels["sm89-stable"].gates
                 if g.kind in ("evidence", "capability", "benchmark", "approval")]
    table = gates.Table("sm89-stable", IMAGE, Digest.parse(digest), decisions)
    return manifest.build(table, ev.facts, p.name, "v0.25.1",
                          (root / "manifests/trust-policy.yaml").read_bytes())


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, Keys, policy.Policy, object]:
    root = tmp_path / "repo"
    k = make_repo(root, tmp_path / "keys")
    return root, k, policy.load(root / "manifests/trust-policy.yaml"), keys.load_private(k.release)


def rdir(root: Path) -> Path:
    return manifest.releases_dir(root)


def interrupted(*_a: object) -> None:
    raise KeyboardInterrupt


def test_a_create_killed_before_its_entry_is_finished_by_the_next(
        repo: tuple[Path, Keys, policy.Policy, object], monkeypatch: pytest.MonkeyPatch) -> None:
    root, k, pol, key = repo
    data = release_data(root, k, DIGEST)

    with monkeypatch.context() as m:  # SIGTERM/Ctrl-C between the VSA and the entry
        m.setattr(ledger, "append", interrupted)
        with pytest.raises(KeyboardInterrupt):
            journal.record(rdir(root), pol, data, key)
    assert (rdir(root) / journal.JOURNAL).exists()
    assert ledger.unrecorded(rdir(root), ledger.read(rdir(root)))  # what verify would see
    assert journal.recover(rdir(root), pol) == "rolled-forward"
    entries = ledger.verify(rdir(root), pol)
    assert ledger.unrecorded(rdir(root), entries) == [] and len(entries) == 1
    assert not (rdir(root) / journal.JOURNAL).exists()
    rel, again = journal.record(rdir(root), pol, data, key)  # idempotent afterwards
    assert again is None and (rel.path.parent / manifest.VSA_NAME).is_file()


def test_a_journal_the_ledger_moved_past_is_dropped_with_what_it_wrote(
        repo: tuple[Path, Keys, policy.Policy, object], monkeypatch: pytest.MonkeyPatch) -> None:
    root, k, pol, key = repo
    data = release_data(root, k, OTHER)
    with monkeypatch.context() as m:
        m.setattr(ledger, "append", interrupted)
        with pytest.raises(KeyboardInterrupt):
            journal.record(rdir(root), pol, data, key)
    pending = json.loads((rdir(root) / journal.JOURNAL).read_bytes())["release"]
    make_release(root, k, DIGEST)  # another writer's release moved the ledger on
    assert journal.recover(rdir(root), pol) == "dropped"
    assert not (rdir(root) / pending).exists()
    assert ledger.unrecorded(rdir(root), ledger.verify(rdir(root), pol)) == []


def test_a_forged_journal_never_reaches_the_ledger(
        repo: tuple[Path, Keys, policy.Policy, object]) -> None:
    root, k, pol, _key = repo
    data = release_data(root, k, DIGEST)
    body = data.canonical()
    rel = manifest.Release(hashlib.sha256(body).hexdigest(),
                           rdir(root) / "x" / manifest.MANIFEST_NAME, data)
    outsider = keys.load_private(k.outsider)
    entry = ledger.make_entry([], "release", rel, outsider)
    rdir(root).mkdir(parents=True, exist_ok=True)
    (rdir(root) / journal.JOURNAL).write_text(json.dumps(
        {"release": rel.id, "manifest": body.decode(), "vsa": "{}", "entry": entry.line.decode()}))
    with pytest.raises(LedgerError, match="release.pending.json"):
        journal.recover(rdir(root), pol)
    assert ledger.read(rdir(root)) == []


def test_a_full_disk_names_the_file_and_its_file_system(
        repo: tuple[Path, Keys, policy.Policy, object], monkeypatch: pytest.MonkeyPatch) -> None:
    root, k, pol, key = repo
    data = release_data(root, k, DIGEST)
    target = ledger.path_of(rdir(root))

    def full(*_a: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(target))

    monkeypatch.setattr(ledger, "write", full)
    with pytest.raises(StoreError, match=r"cannot write .*ledger.jsonl: the disk is full "
                                         r"\(the file system at /") as e:
        journal.record(rdir(root), pol, data, key)
    assert e.value.exit_code == 13 and "release create" in (e.value.hint or "")
    monkeypatch.undo()
    assert journal.recover(rdir(root), pol) == "rolled-forward"  # once there is room
    assert len(ledger.verify(rdir(root), pol)) == 1
