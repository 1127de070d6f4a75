"""`patchbake suites list|run|bundle` (also called as `patchbake fixtures`): declared suites,
run against one exact image."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import Any

import click

from .. import ui
from ..verify import baked
from ..cli import Ctx, complete_images, complete_suites, pass_ctx
from ..config import suites as suitesmod
from ..digest import Digest
from ..errors import SuiteError, UsageError
from ..verify.expected import image_definition
from ..fsutil import atomic_write, output_to
from ..oci import image as oci_image
from ..sources import fetch
from ..sources.digest import tree_digest
from ..suites import files as filesmod
from ..suites import image as imagemod
from ..suites.bundle import bundle
from ..suites.docker import DockerRunner
from ..suites.host import HostRunner
from ..suites.run import run_suite
from .names import did_you_mean


@click.group("suites")
def suites_group() -> None:
    """Fixture suites run against an exact image (alias: fixtures).

    The docker or host runner runs a suite here; `suites bundle` carries images to a GPU
    machine.
    """


@suites_group.command("list")
@pass_ctx
def suites_list(ctx: Ctx) -> None:
    """Declared suites (every declaration is validated)."""
    suites = ctx.pipeline.suites
    if ctx.as_json:
        ui.emit_json({k: s.declaration() for k, s in suites.items()})
        return
    ui.table("suites", ["suite", "runner", "gpu", "capability", "min tests", "repeats",
                        "patch-sensitive", "path"],
             [(s.name, s.runner, "yes" if s.requires.gpu else "no", s.requires.capability or "-",
               s.requires.min_tests, s.repeats, "yes" if s.patch_sensitive else "no", s.rel_path)
              for s in suites.values()])


def _pristine(ctx: Ctx, given: Path | None, image: str | None, site_packages: str | None,
              lineage: Any) -> Any:
    def provide() -> tuple[Path, str]:
        if image is not None:
            ref = imagemod.identify(ctx.store, image, ctx.pipeline)
            tmp = Path(tempfile.mkdtemp(prefix="patchbake-pristine."))
            atexit.register(shutil.rmtree, tmp, True)
            dest = tmp / "tree"
            baked.materialise(ctx.store, ref.digest, dest, pipeline=ctx.pipeline,
                                 site_packages=site_packages)
            return dest, (f"the unpatched base image {ref.digest} (its vllm/ tree "
                          f"{tree_digest(dest / 'vllm')})")
        if given is not None:
            return given, f"given directory {given} (tree {tree_digest(given)})"
        f = fetch(lineage, ctx.store, base=ctx.pipeline.root)
        return f.root, f"pristine upstream {f.pin} (tree {f.tree_digest})"

    return provide


def _bundled_image(ctx: Ctx, text: str, carried: filesmod.FilesBundle) -> imagemod.SuiteImage:
    """The image a files bundle carries, when ``text`` names it (its digest, or a definition
    whose committed record does): the store need not hold it."""
    ref = imagemod.digest_only(text, ctx.pipeline)
    if ref is None and ctx.store.root.is_dir():
        with did_you_mean(ctx, text):
            ref = imagemod.identify(ctx.store, text, ctx.pipeline)
    if ref is None:
        raise UsageError(f"--image {text}: name the bundled image by its digest "
                         f"({carried.image_digest}) or its definition")
    if ref.digest != carried.image_digest:
        raise SuiteError(f"{carried.root} carries the files of {carried.image_digest}, not of "
                         f"--image {text} ({ref.digest})")
    config = Digest.parse(carried.doc["image"]["config_digest"], "the bundle's config digest",
                          SuiteError)
    return imagemod.SuiteImage(ref.name, ref.digest, config)


def _bundled_pristine(carried: filesmod.FilesBundle) -> Any:
    def provide() -> tuple[Path, str]:
        tmp = Path(tempfile.mkdtemp(prefix="patchbake-pristine."))
        atexit.register(shutil.rmtree, tmp, True)
        tree = filesmod.pristine_tree(carried, tmp / "tree")
        return tree, (f"the unpatched base {carried.doc['base']} from files bundle "
                      f"{carried.root} (its vllm/ tree {carried.doc['pristine_vllm_digest']})")
    return provide


@suites_group.command("run")
@click.argument("suite_name", metavar="SUITE", shell_complete=complete_suites)
@click.option("--image", "image_ref", required=True,
              help="image: definition/store name, sha256:DIGEST or name@sha256:DIGEST",
              shell_complete=complete_images)
@click.option("--runner", type=click.Choice(["docker", "host"]), default=None,
              help="override the suite's declared runner")
@click.option("--results-out", type=click.Path(path_type=Path), default=None,
              help="write the unsigned result document here (sign it with `evidence sign`)")
@click.option("--pristine-tree", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="pristine tree for the patch-sensitivity probe [default: fetch the "
                   "lineage's upstream]")
@click.option("--pristine-image", default=None,
              help="take the pristine tree from this image's layers (e.g. the unpatched "
                   "base by digest) instead of fetching the upstream sdist")
@click.option("--files", "files_dir", default=None,
              type=click.Path(path_type=Path, file_okay=False),
              help="run on the image's files from a files bundle (`suites bundle --files`), "
                   "for a machine that cannot hold the image; host runner, and the probe "
                   "runs on the bundle's unpatched base files")
@pass_ctx
def suites_run(ctx: Ctx, suite_name: str, image_ref: str, runner: str | None,
                 results_out: Path | None, pristine_tree: Path | None,
                 pristine_image: str | None, files_dir: Path | None) -> None:
    """Run SUITE against the exact image; exit 40 unless it passed and its probes hold."""
    p = ctx.pipeline
    suite = suitesmod.get(p.suites, suite_name, p.path.name)
    carried = None
    if files_dir is not None:
        if pristine_tree or pristine_image or runner == "docker":
            raise UsageError("--files runs with the host runner and probes on the bundle's "
                             "own base files: leave out --runner docker, --pristine-tree "
                             "and --pristine-image")
        carried = filesmod.check(files_dir)
        ref = _bundled_image(ctx, image_ref, carried)
    else:
        with did_you_mean(ctx, image_ref):
            ref = imagemod.identify(ctx.store, image_ref, p)

    # the pristine probe and the recorded pins are the image's own lineage's
    lineage = p.lineage_for(image_definition(
        p, definition=image_ref if image_ref in p.images else None, manifest_digest=ref.digest),
        ctx.lineage_key)
    kind = "host" if carried is not None else runner or suite.runner
    if kind == "docker":
        r: Any = DockerRunner(p.root, ctx.store)
    else:
        r = HostRunner(p.root, ctx.store, pipeline=p, files=carried)
    sp = None
    if pristine_image:
        img = oci_image.load_image(oci_image.StoreBlobs(ctx.store), ref.digest)
        sp = img.labels.get("dev.patchbake.site-packages")
    provide = _bundled_pristine(carried) if carried is not None else \
        _pristine(ctx, pristine_tree, pristine_image, sp, lineage)
    result = run_suite(suite, ref, r, provide, log=ui.step, pins=lineage.upstream.pins)
    if results_out:
        atomic_write(results_out, result.dump())
    if ctx.as_json:
        ui.emit_json(result.to_json())
    else:
        probes = result.probes
        ui.kv(f"suite {suite.name} on {ref.name}", [
            ("image", ref.digest), ("runner", kind), ("result", result.result),
            ("counts", " ".join(f"{k}={n}" for k, n in result.counts.items())),
            ("failing", ", ".join(result.failed_tests[:5]) or "-"),
            ("patch sensitivity", probes["patch_sensitivity"]["status"]),
            ("determinism", (f"{probes['determinism']['status']} "
                             f"({probes['determinism']['repeats']} runs)")),
            ("gpu", result.environment.get("gpu_name") or "-"),
            ("results", str(results_out) if results_out else "-")])
    if result.result != "PASSED":
        raise SuiteError(f"suite '{suite.name}' failed on {ref.digest}: "
                         + "; ".join(result.problems))
    flags = [v.get("reason", k) for k, v in result.probes.items()
             if v.get("status") == "flagged"]
    if flags:
        raise SuiteError(f"suite '{suite.name}' passed but cannot count as evidence: "
                         + "; ".join(str(f) for f in flags))


@suites_group.command("bundle")
@click.argument("images", nargs=-1, required=True)
@click.option("--out", "out", required=True, type=click.Path(path_type=Path, file_okay=False),
              help="new directory to fill: a store (use it as PATCHBAKE_HOME on the GPU box), "
                   "or with --files a files bundle (`suites run --files DIR`)")
@click.option("--files", "as_files", is_flag=True,
              help="carry one image's files instead of its blobs: its installed vllm/ and "
                   "dist-info, the --dist distributions, RECORDs of all, the base's "
                   "unpatched files (for an image too large to move)")
@click.option("--dist", "dists", multiple=True, metavar="NAME",
              help="with --files: a distribution of the image to carry too (repeatable)")
@click.option("--leave", "leave", multiple=True, metavar="PATH=REASON",
              help="with --files: a file or directory under site-packages left behind, and "
                   "why (repeatable; the manifest and the suite result list it)")
@pass_ctx
def suites_bundle(ctx: Ctx, images: tuple[str, ...], out: Path, as_files: bool,
                  dists: tuple[str, ...], leave: tuple[str, ...]) -> None:
    """Copy IMAGES (manifest, config, layers) into a fresh store for a machine with no
    network and no registry; each blob is re-hashed on the way in. With --files, one
    image's files (checked against its layers) for a machine that cannot hold the image.

    \b
    Examples:
      patchbake suites bundle sm89-serving-offline --out .devfix/store
      patchbake suites bundle --files sm89-serving-local --dist pydantic \\
          --leave 'vllm/vllm-rs=the HTTP front end' --out .carry
    """
    if (dists or leave) and not as_files:
        raise UsageError("--dist and --leave go with --files")
    if as_files and len(images) != 1:
        raise UsageError("--files carries one image's files; name exactly one image")
    refs = []
    for i in images:
        with did_you_mean(ctx, i):
            refs.append(imagemod.identify(ctx.store, i, ctx.pipeline))
    with output_to(out, "--out"):
        if as_files:
            made = filesmod.make(ctx.store, refs[0], filesmod.Selection.of(dists, leave), out)
        else:
            made = bundle(ctx.store, refs, out)
    if ctx.as_json:
        ui.emit_json(made)
    else:
        ui.kv(f"bundle {out}", [(k, v) for k, v in made.items()])
