"""More readers of named files, each given a FIFO: lock files (the store's, the ledger's),
the promotion journal, benchmark figures, a release's files on export, the latest-bake
pointer, a local index page, a Dockerfile template, and what `store fsck`/`gc` scan in
the store and the repository. Each is refused (or, for fsck and gc, skipped) at once,
never waited on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from images_support import make_repo as make_image_repo
from patchbake.digest import Digest
from patchbake.entry import main
from patchbake.errors import FetchError, ImageError, LedgerError, PatchbakeError, StoreError
from patchbake.evidence import policy
from patchbake.images import record as records
from patchbake.release import bundle, ledger, manifest, promote
from patchbake.sources import index
from patchbake.store import Store
from patchbake.storecheck import fsck, gc
from release_support import make_release, make_repo
from test_inputs_safe import promptly

FIFO = "is a FIFO (named pipe), not a regular file"


def refused(exc: BaseException | None, cls: type[PatchbakeError], code: int) -> str:
    assert isinstance(exc, cls), exc
    assert exc.exit_code == code
    line = exc.one_line()
    assert FIFO in line and "\n" not in line, line
    return line


def test_a_store_lock_file_that_is_a_fifo(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s")
    os.mkfifo(store.lock_path("source-x"))

    def take() -> None:
        with store.lock("source-x"):
            pass

    assert "lock file" in refused(promptly(take), StoreError, 13)


def test_the_ledger_lock_file_that_is_a_fifo(tmp_path: Path) -> None:
    rdir = tmp_path / "releases"
    rdir.mkdir()
    os.mkfifo(rdir / ".lock")

    def take() -> None:
        with ledger.locked(rdir):
            pass

    refused(promptly(take), LedgerError, 61)


def test_fsck_and_gc_skip_fifos_in_the_store_and_the_repository(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s")
    kept = store.put_bytes(b"named by a record")
    repo = tmp_path / "repo"
    (repo / "manifests").mkdir(parents=True)
    (repo / "manifests" / "names.json").write_text(f'{{"d": "{kept}"}}')
    os.mkfifo(repo / "manifests" / "pipe.json")
    os.mkfifo(store.root / "locks" / "held.lock")
    (store.root / "sources").mkdir(exist_ok=True)
    os.mkfifo(store.root / "sources" / "k.json")
    planted = store.root / "blobs" / "sha256" / ("e" * 64)
    os.mkfifo(planted)
    reports: list[object] = []
    assert promptly(lambda: reports.append(fsck(store, repo=repo))) is None
    [rep] = reports
    assert ("e" * 64) in rep.bad_blobs  # type: ignore[attr-defined]
    assert promptly(lambda: gc(store, repo=repo, grace_s=0)) is None
    assert store.has(kept)


def test_a_promotion_journal_that_is_a_fifo(tmp_path: Path) -> None:
    rdir = tmp_path / "releases"
    rdir.mkdir()
    os.mkfifo(rdir / promote.JOURNAL)
    refused(promptly(lambda: promote.recover(rdir, None)), LedgerError, 61)


def test_benchmark_figures_that_are_a_fifo(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    figures = tmp_path / "figures.json"
    os.mkfifo(figures)
    rc: list[int] = []
    assert promptly(lambda: rc.append(main(["release", "benchmark", str(figures), "--name",
                                            "tput", "--image", "x"]))) is None
    err = capsys.readouterr().err
    assert rc == [2] and FIFO in err and err.count("\n") == 1, err


def test_a_release_file_that_is_a_fifo_is_refused_on_export(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    k = make_repo(root, tmp_path / "keys")
    rel = make_release(root, k, "sha256:" + "ab" * 32)
    vsa = rel.path.parent / manifest.VSA_NAME
    vsa.unlink()
    os.mkfifo(vsa)
    out = tmp_path / "bundle"
    exc = promptly(lambda: bundle.export(root, root / "manifests/trust-policy.yaml", rel.id,
                                         out))
    assert isinstance(exc, PatchbakeError) and FIFO in exc.one_line(), exc
    assert not out.exists() and not out.with_name("bundle.partial").exists()
    assert isinstance(policy.load(root / "manifests/trust-policy.yaml"), policy.Policy)


def test_a_latest_pointer_that_is_a_fifo(tmp_path: Path) -> None:
    latest = tmp_path / "latest.json"
    os.mkfifo(latest)
    refused(promptly(lambda: records._pointer_digest(latest)), ImageError, 30)  # noqa: SLF001


def test_a_local_index_page_that_is_a_fifo(tmp_path: Path) -> None:
    (tmp_path / "simple" / "demo").mkdir(parents=True)
    os.mkfifo(tmp_path / "simple" / "demo" / "index.html")
    page = (tmp_path / "simple" / "demo").as_uri()
    refused(promptly(lambda: index._project_files(None, page, "index")),  # type: ignore[arg-type]  # noqa: SLF001
            FetchError, 10)


def test_a_template_that_is_a_fifo(tmp_path: Path) -> None:
    from patchbake.images import definition as image_defs
    from patchbake.images.engine_bake import render
    from patchbake.images.overlay import build_overlay
    from patchbake.images.tree import BaseTree

    repo = make_image_repo(tmp_path)
    defn = image_defs.load(repo.pipeline, "offline")
    overlay = build_overlay(defn, repo.patched, repo.pipeline.lineage(), "b",
                            Digest.from_hex("0" * 64), BaseTree({}, {}, None))
    defn.template.parent.mkdir(parents=True, exist_ok=True)
    if defn.template.exists():
        defn.template.unlink()
    os.mkfifo(defn.template)
    refused(promptly(lambda: render(defn, "overlay", "base:1", overlay, {})), ImageError, 30)
