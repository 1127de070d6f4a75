"""Wrong answers fixed by the reliability work: identical definitions under two names,
SIGTERM handling, the URL rule on every hop, litter naming."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from images_support import make_repo
from patchbake.images.bake import bake_image, latest_digest
from patchbake.errors import RegistryError
from patchbake.oci import layout
from patchbake.oci.registry_ref import check_url_allowed
from patchbake.fsutil import staging_owner
from patchbake.store import Store, is_litter


def test_identical_definitions_are_two_bakes_each_found_by_name(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    text = (repo.root / "images" / "offline.yaml").read_text()
    repo.define("twin", text)
    from patchbake import config

    pipeline = config.load(repo.root / "pipeline.yaml")
    a = bake_image(pipeline, "offline", repo.store, patched=repo.patched)
    b = bake_image(pipeline, "twin", repo.store, patched=repo.patched)
    assert not b.cached and b.image == "twin" and a.digest != b.digest
    assert latest_digest(pipeline, "twin") == b.digest
    assert layout.lookup(repo.store, "twin").digest == b.digest


@pytest.mark.parametrize("url", [
    "http://[::1]@registry.test/v2/", "http://localhost:1@registry.test/v2/",
    "http://user:pw@127.0.0.1:5000/v2/", "http://127.0.0.1\\@registry.test/",
    "http://127.0.0.1.registry.test/", "http://registry.test/", "ftp://127.0.0.1/",
    "http://127.0.0.1 @registry.test/",
])
def test_plain_http_rule_cannot_be_bypassed(url: str) -> None:
    with pytest.raises(RegistryError, match="refusing") as e:
        check_url_allowed(url)
    assert e.value.exit_code == 31


@pytest.mark.parametrize("url", ["http://127.0.0.1:5000/v2/", "http://[::1]:5000/v2/",
                                 "http://localhost/v2/", "https://registry.test/v2/"])
def test_allowed_urls(url: str) -> None:
    check_url_allowed(url)


def test_litter_is_told_apart_by_writer_pid(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s")
    mine = store.tmpdir("extract")
    assert staging_owner(mine.name) == os.getpid() and not is_litter(mine)
    dead = store.root / "tmp" / "extract.999999999.abc"
    dead.mkdir()
    assert is_litter(dead)
    assert Store.open(tmp_path / "s").sweep_tmp() == [] and not dead.exists()
    assert mine.exists()
