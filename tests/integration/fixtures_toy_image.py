"""Tiny real OCI images in a test store, for the runners' end-to-end tests.

``toy_image`` writes one layer holding a tree's ``vllm/`` package at a site-packages path
(labelled the way patchbake bakes label it), so ``identity.materialise`` rebuilds the
tree from verified layers exactly as it does for a real bake.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import cast

from patchbake.oci import layout
from patchbake.oci.media import OCI_CONFIG, OCI_LAYER_TAR, OCI_MANIFEST
from patchbake.oci.tarwriter import file_entry, with_parents, write_layer
from patchbake.store import Store

SITE = "usr/local/lib/python3.12/dist-packages"


def toy_image(store: Store, tree: Path, name: str = "toy") -> tuple[str, str]:
    """(manifest digest, config digest) of an image holding ``tree/vllm`` under SITE, as
    the text a command line or a record carries."""
    entries = [file_entry(f"{SITE}/{p.relative_to(tree).as_posix()}", source=p)
               for p in sorted(tree.rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    data = b"".join(write_layer(with_parents(entries), 0))
    layer = str(store.put_bytes(data))
    config = {"architecture": "amd64", "os": "linux", "created": "1970-01-01T00:00:00Z",
              "config": {"Labels": {"dev.patchbake.site-packages": "/" + SITE}},
              "rootfs": {"type": "layers", "diff_ids": [layer]}, "history": []}
    cdigest, csize, _ = layout.put_json(store, config)
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                "config": {"mediaType": OCI_CONFIG, "digest": str(cdigest), "size": csize},
                "layers": [{"mediaType": OCI_LAYER_TAR, "digest": layer, "size": len(data)}]}
    mdigest, msize, mbytes = layout.put_json(store, manifest)
    assert mdigest.hex == hashlib.sha256(mbytes).hexdigest()
    from patchbake.oci.media import Descriptor

    layout.ensure_layout(store)
    layout.add_ref(store, name, Descriptor(OCI_MANIFEST, mdigest, msize))
    return str(mdigest), str(cdigest)


def define_toy(root: Path, pipeline: dict[str, object], digest: str, config_digest: str,
               name: str = "toy") -> None:
    """A definition and an image record for the toy image: where its vllm lives is read
    from them (verify and materialise never take it from the image's own label)."""
    import json

    (root / "images").mkdir(exist_ok=True)
    (root / "images" / f"{name}.yaml").write_text(
        "version: 1\nbase:\n  source: standin\n  name: toy-base\n"
        f"  digest: sha256:{'0' * 64}\nsite_packages: /{SITE}\nmode: overlay\n")
    images = cast("dict[str, str]", pipeline.setdefault("images", {}))
    images[name] = f"images/{name}.yaml"
    rec = root / "manifests" / "images" / name / f"{digest.removeprefix('sha256:')}.json"
    rec.parent.mkdir(parents=True, exist_ok=True)
    from patchbake.images.record import RECORD_FORMAT

    rec.write_text(json.dumps({"format": RECORD_FORMAT, "definition": name,
                               "manifest_digest": digest, "config_digest": config_digest,
                               "patch": {"sha256": "0" * 64}, "site_packages": f"/{SITE}"}))
