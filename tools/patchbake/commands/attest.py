"""``patchbake image sbom REF`` and ``patchbake image provenance REF``: the documents a
release signs, shown (a table for people, the document itself with ``--json``) or written
with ``--out`` (the bare CycloneDX BOM; the provenance as its in-toto statement). They are
made from the image's committed record: no store, no registry."""

from __future__ import annotations

from pathlib import Path

import click

from .. import ui
from ..cli import Ctx, pass_ctx
from ..errors import ImageError
from ..fsutil import atomic_write, output_to, pretty_json
from ..release import imageattest
from ..suites import image as imagemod


def _documents(ctx: Ctx, ref: str) -> imageattest.Documents:
    resolved = imagemod.digest_only(ref, ctx.pipeline) or \
        imagemod.identify(ctx.store, ref, ctx.pipeline)
    docs = imageattest.documents(ctx.pipeline, resolved.digest)
    if docs is None:
        named = ref if ref == str(resolved.digest) else f"{ref} ({resolved.digest})"
        raise ImageError(f"{named} has no committed image record: its SBOM "
                         "and provenance are made from the bake's record",
                         hint="bake it with `patchbake bake` and commit manifests/images/")
    return docs


def _short(hex_: str | None) -> str:
    return "-" if not hex_ else hex_[:12] + "…"


@click.command("sbom")
@click.argument("ref")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="write the CycloneDX JSON document here")
@pass_ctx
def sbom_cmd(ctx: Ctx, ref: str, out: Path | None) -> None:
    """The CycloneDX SBOM of REF (a definition's latest bake, sha256:<manifest>,
    name@sha256:<manifest>, or a store name)."""
    docs = _documents(ctx, ref)
    bom = dict(docs.sbom.predicate)
    if out is not None:
        with output_to(out, "--out"):
            atomic_write(out, pretty_json(bom))
    if ctx.as_json:
        ui.emit_json(bom)
        return
    b = docs.facts
    ui.kv(f"SBOM of {b.definition}", [
        ("image", f"{b.definition}@{b.digest}"), ("format", f"CycloneDX {bom['specVersion']}"),
        ("lock", f"{b.lock.path} ({b.lock.digest})" if b.lock else "none (stand-in base: the "
                                                                 "sdist's files, patched)"),
        ("components", len(bom["components"])), ("record", docs.record),
        *([("written", out)] if out is not None else [])])
    rows = []
    for c in bom["components"]:
        sha = (c.get("hashes") or [{}])[0].get("content")
        modified = "patched" if "pedigree" in c else ""
        rows.append((c["name"], c["version"], c.get("purl", "-"), _short(sha), modified))
    ui.table("components", ["name", "version", "purl", "sha256", ""], rows)


@click.command("provenance")
@click.argument("ref")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="write the in-toto statement (SLSA provenance v1) here")
@pass_ctx
def provenance_cmd(ctx: Ctx, ref: str, out: Path | None) -> None:
    """The SLSA provenance v1 of REF's bake (an in-toto Statement v1)."""
    docs = _documents(ctx, ref)
    doc = docs.provenance.to_json()
    if out is not None:
        with output_to(out, "--out"):
            atomic_write(out, pretty_json(doc))
    if ctx.as_json:
        ui.emit_json(doc)
        return
    bd = doc["predicate"]["buildDefinition"]
    ui.kv(f"provenance of {docs.facts.definition}", [
        ("subject", f"{docs.facts.definition}@{docs.facts.digest}"),
        ("buildType", bd["buildType"]),
        ("builder", doc["predicate"]["runDetails"]["builder"]["id"]),
        *((f"parameter {k}", v) for k, v in bd["externalParameters"].items()),
        *([("written", out)] if out is not None else [])])
    ui.table("resolved dependencies", ["name", "digest"],
             [(d["name"], ", ".join(f"{a}:{_short(v)}" for a, v in d["digest"].items()))
              for d in bd["resolvedDependencies"]])
