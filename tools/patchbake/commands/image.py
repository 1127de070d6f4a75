"""``patchbake bake``, ``patchbake verify`` and ``patchbake image ls|show|standin|export|
materialise``. Printing lives here; the work is in ``patchbake.bake`` and
``patchbake.identity``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from .. import ui
from ..images.bake import bake_image
from ..cli import Ctx, complete_images, pass_ctx
from ..cuda.check import check_image
from ..cuda.verdict import Target
from ..digest import Digest
from ..errors import ImageError
from ..verify.baked import materialise, raise_on_failure, verify_image
from ..images import definition as definitions
from ..images import record
from ..images.refs import resolve
from ..images.servingbase import build_serving_base
from ..images.standin import build_standin
from ..oci import engine, layout
from ..oci.archive import docker_archive, export_docker_archive
from ..fsutil import output_to
from .names import did_you_mean


@click.command("bake")
@click.argument("image", required=False, shell_complete=complete_images)
@click.option("--docker-archive", "archive", type=click.Path(path_type=Path), default=None,
              help="also write a `docker load`-able archive of the image here")
@click.option("--backend", type=click.Choice(["embedded", "engine"]), default="embedded",
              show_default=True, help="embedded: one deterministic layer, no daemon; "
              "engine: docker build --network none (not reproducible)")
@pass_ctx
def bake_cmd(ctx: Ctx, image: str | None, archive: Path | None, backend: str) -> None:
    """Bake IMAGE (a definition from pipeline.yaml; default: the offline one)."""
    if not ctx.as_json:
        ui.step(f"bake {image or '(default image)'}")
    res = bake_image(ctx.pipeline, image, ctx.store, lineage=ctx.lineage_key, backend=backend,
                     docker_archive=archive)
    if ctx.as_json:
        ui.emit_json(res.to_json())
        return
    for w in res.warnings:
        ui.warn(f"warning: {w}")
    ui.kv(f"{res.image}: {'cached (nothing changed)' if res.cached else 'baked'}", [
        ("manifest digest", res.digest), ("config digest (Image ID)", res.config_digest),
        ("layers", len(res.layers)), ("our layer", res.layers[-1]),
        ("baked files", res.baked_files), ("base", f"{res.base['name']}@{res.base['digest']}"),
        ("mode / backend", f"{res.mode} / {res.backend}"), ("record", res.record),
        *([("docker archive", res.docker_archive)] if res.docker_archive else []),
    ])


@click.command("verify")
@click.argument("ref", shell_complete=complete_images)
@click.option("--site-packages", default=None,
              help="must agree with the definition's (where to look is never read from the "
                   "image's labels)")
@click.option("--definition", default=None,
              help="the image definition REF is checked against (default: the definition "
                   "REF names, or the one whose image record names REF's digest)")
@click.option("--no-cache", is_flag=True,
              help="re-parse every layer (layer ops are otherwise memoised by layer digest; "
                   "every byte is hashed either way)")
@pass_ctx
def verify_cmd(ctx: Ctx, ref: str, site_packages: str | None, definition: str | None,
               no_cache: bool) -> None:
    """Verify REF's vLLM files against a fresh strict apply of the patch.

    REF: a definition (its latest bake), sha256:<manifest>, an OCI layout dir, a
    docker-archive file, docker:NAME, or HOST:PORT/repo@sha256:<digest>.
    """
    with did_you_mean(ctx, ref, early=True), ui.progress("verify: layers read", None) as bar:
        res = verify_image(ctx.pipeline, ref, ctx.store, ctx.lineage_key,
                           site_packages=site_packages, definition=definition,
                           use_cache=not no_cache, progress=bar.advance)
    if ctx.as_json:
        ui.emit_json(res.to_json())
    else:
        d = res.base_drift
        ui.kv(f"verify {ref}", [
            ("digest", res.digest), ("config digest", res.config_digest),
            ("checked", res.extra.get("selected") or res.kind),
            ("against", res.extra.get("expected_from", "")),
            ("layers", (f"{len(res.layers)} (each digest and diff_id checked to EOF; "
                        f"{sum(x['from'] == 'base' for x in res.layers)} from the base)")),
            ("baked files", res.summary()),
            ("base drift", (f"{d['unchanged']} unchanged, {d['counts']['changed']} changed, "
                            f"{d['counts']['missing']} missing, {d['counts']['extra']} extra "
                            f"(excluded: {', '.join(d['excluded_generated']) or 'none'})")),
        ])
        if res.mismatched:
            ui.table("mismatched files", ["path", "expected (fresh apply)", "found (image)",
                                          "why"],
                     [(m["path"], m["expected"], m["found"], m["why"]) for m in res.mismatched])
        for p in res.problems:
            ui.warn(f"problem: {p}")
        for kind in ("changed", "missing", "extra"):
            paths = d[kind]
            if paths:
                ui.warn(f"base drift, {kind}: {', '.join(paths[:10])}"
                             + (f" (+{len(paths) - 10} more)" if len(paths) > 10 else ""))
        if res.ok:
            ui.say(res.summary())
    raise_on_failure(res)


@click.group("image")
def image_group() -> None:
    """Image definitions, the offline stand-in base, export, materialise, SBOM and
    provenance."""


@image_group.command("ls")
@pass_ctx
def image_ls(ctx: Ctx) -> None:
    """Definitions with their latest recorded bake, and images named in the store."""
    rows: list[dict[str, Any]] = []
    for name in definitions.names(ctx.pipeline):
        try:
            digest = record.latest(ctx.pipeline.root, name).manifest_digest
        except ImageError:
            digest = None
        rows.append({"definition": name,
                     "file": os.path.relpath(ctx.pipeline.images[name], ctx.pipeline.root),
                     "latest": digest, "in_store": bool(digest and ctx.store.has(digest)),
                     "superseded": sorted(record.superseded(ctx.pipeline.root, name))})
    named = {n: d.digest for n, d in layout.refs(ctx.store).items()}
    if ctx.as_json:
        ui.emit_json({"definitions": rows, "store": named})
        return
    ui.table("image definitions", ["definition", "file", "latest bake", "in store",
                                   "superseded"],
             [(r["definition"], r["file"], r["latest"] or "-", r["in_store"],
               len(r["superseded"])) for r in rows])
    ui.table(f"images in the store ({ctx.store.root})", ["name", "manifest digest"],
             sorted(named.items()))


def _inspected(res: Any) -> dict[str, Any]:
    img = res.image
    cfg = img.config
    return {"ref": res.ref, "kind": res.kind, "definition": res.definition,
            "chosen": res.chosen or None, "manifest_digest": str(img.manifest_digest),
            "media_type": img.media_type, "manifest_size": len(img.manifest_bytes),
            "config_digest": str(img.config_desc.digest),
            "platform": "/".join(str(cfg.get(k)) for k in ("os", "architecture")
                                 if cfg.get(k)) or None,
            "created": cfg.get("created"), "labels": img.labels,
            "layers": [{"digest": str(d.digest), "diff_id": str(diff), "size": d.size,
                        "media_type": d.media_type}
                       for d, diff in zip(img.layers, img.diff_ids, strict=False)]}


@image_group.command("inspect")
@click.argument("ref", shell_complete=complete_images)
@click.option("-q", "--quiet", is_flag=True, help="print only the manifest digest")
@pass_ctx
def image_inspect(ctx: Ctx, ref: str, quiet: bool) -> None:
    """Manifest, config, layers and labels of REF, and its identity chain (manifest
    digest, config digest = the engine's image ID, each layer's digest and diff_id).

    REF: a definition, a store name, sha256:<hex> (or a unique prefix), docker:NAME, an
    OCI layout DIR[@...], a docker-archive file or HOST:PORT/REPO:TAG|@sha256:<hex>.

    \b
    Examples:
      patchbake image inspect sm89-serving-offline
      patchbake image inspect -q 127.0.0.1:5000/vllm-sm89:0.25.1-dsv4
      patchbake image inspect ./layout-dir --json
    """
    with did_you_mean(ctx, ref), resolve(ctx.store, ref, ctx.pipeline) as res:
        doc = _inspected(res)
    if quiet:
        click.echo(doc["manifest_digest"])
        return
    if ctx.as_json:
        ui.emit_json(doc)
        return
    ui.kv(f"image {ref}", [(k, doc[k]) for k in (
        "kind", "definition", "manifest_digest", "media_type", "config_digest", "platform",
        "created") if doc[k] is not None])
    # an uncompressed layer's diff_id is its digest: said in a word, the table stays narrow
    ui.table("layers", ["#", "digest", "diff_id", "size"],
             [(i, layer["digest"], "= digest" if layer["diff_id"] == layer["digest"]
               else layer["diff_id"], layer["size"]) for i, layer in enumerate(doc["layers"], 1)])
    if doc["labels"]:
        ui.table("labels", ["label", "value"], sorted(doc["labels"].items()))


@image_group.command("show")
@click.argument("name", shell_complete=complete_images)
@pass_ctx
def image_show(ctx: Ctx, name: str) -> None:
    """The validated (effective) definition NAME."""
    d = definitions.load(ctx.pipeline, name)
    fields = {"name": d.name, "file": str(d.path.relative_to(ctx.pipeline.root)),
              "base.source": d.base.source, "base.name": d.base.name,
              "base.digest": d.base.digest, "base.platform": d.base.platform,
              "base.platform_digest": d.base.platform_digest,
              "base.verified": d.base.verified, "site_packages": d.site_packages,
              "mode": d.mode, "lineage": d.lineage or None,
              "startup_allow": [f"{p} sha256:{h}" for p, h in d.startup_allow],
              "template": str(d.template.relative_to(ctx.pipeline.root)),
              "torch_cuda_arch_list": d.torch_cuda_arch_list, "fingerprint": d.fingerprint}
    if ctx.as_json:
        ui.emit_json(fields)
    else:
        ui.kv(f"image definition {name}", list(fields.items()))


@image_group.command("standin")
@click.option("--with-python", is_flag=True,
              help="add the host's python3 and busybox (for running verify.py in a container)")
@click.option("--site-packages", default="/usr/local/lib/python3.12/dist-packages",
              show_default=True)
@click.option("--docker-archive", "archive", type=click.Path(path_type=Path), default=None)
@pass_ctx
def image_standin(ctx: Ctx, with_python: bool, site_packages: str, archive: Path | None) -> None:
    """Build the offline stand-in base from the pinned sdist (deterministic)."""
    variant = "with-python" if with_python else "plain"
    s = build_standin(ctx.store, ctx.lineage(), site_packages, variant=variant)
    if archive:
        short = s.manifest.digest.short()
        export_docker_archive(ctx.store, s.manifest.digest, archive,
                              [f"patchbake/standin-{variant}:{short}"])
    out = {"digest": str(s.manifest.digest), "config_digest": str(s.config_digest),
           "layers": [str(d) for d in s.layers], "files": s.files, "variant": variant, "cached": s.cached,
           "docker_archive": str(archive) if archive else None}
    if ctx.as_json:
        ui.emit_json(out)
    else:
        ui.kv(f"stand-in base ({variant})", list(out.items()))


@image_group.command("base")
@click.option("--lineage", "lineage_key", default=None,
              help="the lineage whose lock is built (default: the global --lineage, or "
                   "pipeline.yaml's default)")
@pass_ctx
def image_base(ctx: Ctx, lineage_key: str | None) -> None:
    """Build the serving base from the lineage's lock (no daemon; reproducible).

    Downloads what the store lacks (wheels through pip, Debian packages through apt's
    sources), each checked against the lock's sha256."""
    lineage = ctx.pipeline.lineage(lineage_key or ctx.lineage_key)
    if not ctx.as_json:
        ui.step(f"serving base of lineage {lineage.key} from {lineage.lock}")
    with ui.progress("serving base: layer bytes written", None) as bar:
        base = build_serving_base(ctx.store, lineage, step=ui.step, advance=bar.advance)
    out = base.to_json()
    if ctx.as_json:
        ui.emit_json(out)
        return
    pairs: dict[tuple[str, str], list[str]] = {}
    for c in base.conflicts:
        pairs.setdefault((c.dropped, c.kept), []).append(c.path)
    for (dropped, kept), paths in sorted(pairs.items()):
        ui.warn(f"warning: {len(paths)} path(s) written by both {dropped} and {kept} with "
                f"different bytes (first: {paths[0]}); {kept}'s are installed, the later in "
                "install order (--json lists them all)")
    for f in base.record_fixed:
        ui.warn(f"note: {f}: the wheel's RECORD gives another size; installed as it is in "
                "the pinned wheel, RECORD written with its real hash")
    ui.kv(f"serving base {lineage.key}: {'cached' if base.cached else 'built'}", [
        ("manifest digest", base.manifest.digest), ("config digest", base.config_digest),
        ("lock digest", base.lock_digest), ("size", out["size"]),
        ("seconds", out["seconds"])])
    ui.table("layers", ["layer", "digest", "size", "files", "wheels", "cached"],
             [(x["group"], x["digest"], x["size"], x["files"], x["wheels"], x["cached"])
              for x in out["layers"]])


@image_group.command("export")
@click.argument("ref", shell_complete=complete_images)
@click.argument("dest", type=click.Path(path_type=Path))
@click.option("--tag", default=None, help="RepoTag for docker load (default: from REF)")
@pass_ctx
def image_export(ctx: Ctx, ref: str, dest: Path, tag: str | None) -> None:
    """Write REF (definition, store name or digest) as a docker-archive to DEST."""
    with did_you_mean(ctx, ref), resolve(ctx.store, ref, ctx.pipeline) as res:
        if res.kind not in ("definition", "store"):
            raise ImageError(f"export reads images from the store; {ref} is a {res.kind}")
        digest = res.image.manifest_digest
    with output_to(dest, "DEST"):
        export_docker_archive(ctx.store, digest, dest,
                              [tag or f"patchbake/{ref.replace(':', '-')}:{digest.short()}"])
    ui.say(f"{dest}: {digest}")


@image_group.command("load")
@click.argument("ref")
@click.option("--tag", default=None, help="the name it gets in the engine (default: from REF)")
@pass_ctx
def image_load(ctx: Ctx, ref: str, tag: str | None) -> None:
    """Load REF (definition, store name or digest) into the Docker engine (`docker load`
    of a docker-archive streamed from the store: no copy on disk)."""
    with did_you_mean(ctx, ref), resolve(ctx.store, ref, ctx.pipeline) as res:
        if res.kind not in ("definition", "store"):
            raise ImageError(f"load reads images from the store; {ref} is a {res.kind}")
        digest = res.image.manifest_digest
        config = res.image.config_desc.digest
    name = tag or f"patchbake/{ref.replace(':', '-')}:{digest.short()}"
    if not ctx.as_json:
        ui.step(f"docker load {name}")
    engine.load_stream(docker_archive(ctx.store, digest, [name]), name)
    out = {"tag": name, "digest": str(digest), "image_id": str(config)}
    if ctx.as_json:
        ui.emit_json(out)
    else:
        ui.kv(f"loaded into the engine: {name}", list(out.items()))


@image_group.command("materialise")
@click.argument("ref", shell_complete=complete_images)
@click.argument("dest", type=click.Path(path_type=Path))
@pass_ctx
def image_materialise(ctx: Ctx, ref: str, dest: Path) -> None:
    """Write REF's verified vLLM tree (all layers, whiteouts applied) to DEST/vllm."""
    with did_you_mean(ctx, ref), output_to(dest, "DEST"):
        out = materialise(ctx.store, ref, dest, pipeline=ctx.pipeline)
    ui.say(str(out / "vllm"))


@image_group.command("cuda-code")
@click.argument("ref", shell_complete=complete_images)
@click.option("--target", default="8.9", show_default=True,
              help="compute capability the code must run on")
@pass_ctx
def image_cuda_code(ctx: Ctx, ref: str, target: str) -> None:
    """The CUDA code (SASS architectures, PTX) of every ELF object in REF, and whether
    each runs on TARGET. Exit 39 when a CUDA object has no code for it.

    REF: as for `patchbake verify`. Exemptions come from REF's definition (the one REF
    names, or the one whose image record names REF's digest), never from the image.
    """
    goal = Target.parse(target)
    with did_you_mean(ctx, ref), resolve(ctx.store, ref, ctx.pipeline) as res, \
            ui.progress("cuda-code: layers read", None) as bar:
        name = res.definition or _recorded_definition(ctx, res.image.manifest_digest)
        defn = definitions.load(ctx.pipeline, name) if name else None
        tmp = ctx.store.tmpdir("cuda-code")
        try:
            report = check_image(res.image, res.blobs, ref, goal, tmp,
                                 dict(defn.cuda_exempt) if defn else None, bar.advance)
        finally:
            ctx.store.discard(tmp)
    if ctx.as_json:
        ui.emit_json({**report.to_json(), "definition": name,
                      "expect": defn.cuda_expect if defn else None})
    else:
        ui.table(f"CUDA code in {ref} ({report.digest}), target {goal}",
                 ["path", "SASS", "PTX", "verdict"],
                 [(o.path, " ".join(o.sass) or "-", " ".join(o.ptx) or "-",
                   o.verdict if o.verdict in ("pass", "not-cuda") else f"{o.verdict}: {o.why}")
                  for o in report.objects])
        ui.say(report.summary())
    report.raise_on_failure()


def _recorded_definition(ctx: Ctx, digest: Digest) -> str | None:
    rec = record.find(ctx.pipeline.root, digest)
    return rec.definition if rec else None
def _add_attest_commands() -> None:
    from .attest import provenance_cmd, sbom_cmd
    image_group.add_command(sbom_cmd)
    image_group.add_command(provenance_cmd)


_add_attest_commands()
