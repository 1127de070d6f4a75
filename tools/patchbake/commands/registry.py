"""``patchbake push`` and ``patchbake pull``: move images between the store and a registry
by digest. Printing lives here; the work is in ``patchbake.oci.registry``."""

from __future__ import annotations

import sys
from typing import Any

import click

from .. import ui
from ..cli import Ctx, complete_images, pass_ctx
from ..digest import Digest
from ..errors import UsageError
from ..images.refs import store_manifest
from ..oci import layout
from ..oci.media import Descriptor
from ..oci.registry import DEFAULT_PLATFORM, PullResult, PushResult, RegistryClient, parse_pull_ref
from ..oci.registry_ref import parse_ref
from ..store import Store
from ..netpolicy import patience_help
from .names import did_you_mean

PUSH_JSON_VERSION = 1


def resolve_source(ctx: Ctx, store: Store, source: str) -> Digest:
    """The manifest digest a push sends (the images stage's resolver says which)."""
    # pipeline.yaml is read only for a name: a digest needs none
    return store_manifest(store, source, None if source.startswith("sha256:") else ctx.pipeline)


def _push_json(res: PushResult) -> dict[str, Any]:
    return {
        "version": PUSH_JSON_VERSION, "ref": res.ref, "digest": str(res.digest),
        "media_type": res.media_type, "pushed": [str(d) for d in res.uploaded],
        "mounted": [str(d) for d in res.mounted], "skipped": [str(d) for d in res.skipped],
        "manifests": [str(d) for d in res.manifests], "tag_existed": res.tag_existed,
        "bytes_uploaded": res.bytes_uploaded, "requests": res.requests,
    }


def _pull_json(res: PullResult, name: str) -> dict[str, Any]:
    return {
        "version": PUSH_JSON_VERSION, "ref": res.ref, "digest": str(res.digest),
        "media_type": res.media_type,
        "index_digest": None if res.index_digest is None else str(res.index_digest),
        "platform": res.platform, "config_digest": str(res.config_digest),
        "fetched": [str(d) for d in res.fetched], "present": [str(d) for d in res.present],
        "bytes_fetched": res.bytes_fetched, "name": name, "requests": res.requests,
    }


@click.command("push", epilog=patience_help())
@click.argument("source", shell_complete=complete_images)
@click.argument("dest")
@click.option("--mount-from", "mount_from", multiple=True, metavar="REPO",
              help="a repository on the destination registry that may hold the blobs "
                   "(cross-repository mount instead of upload); repeatable")
@pass_ctx
def push_cmd(ctx: Ctx, source: str, dest: str, mount_from: tuple[str, ...]) -> None:
    """Push SOURCE (image definition, store name or sha256:DIGEST) to DEST
    (HOST[:PORT]/repo:tag or HOST[:PORT]/repo@sha256:...). An existing tag that points
    to another digest is never moved (exit 32)."""
    ref = parse_ref(dest)
    store = ctx.store
    with did_you_mean(ctx, source):
        digest = resolve_source(ctx, store, source)
    client = RegistryClient(ref.host)
    if not ctx.as_json:
        ui.step(f"pushing {digest} to {ref}")
    with ui.progress("push", None) as bar:
        res = client.push(store, digest, ref, mount_from=mount_from, progress=bar.advance)
    for w in res.warnings:
        print(f"patchbake: warning: {w}", file=sys.stderr)
    if ctx.as_json:
        ui.emit_json(_push_json(res))
        return
    ui.kv("push", [
        ("ref", res.ref), ("digest", res.digest), ("media type", res.media_type),
        ("uploaded", f"{len(res.uploaded)} blobs, {res.bytes_uploaded} bytes"),
        ("mounted", len(res.mounted)), ("skipped (already there)", len(res.skipped)),
        ("manifests put", len(res.manifests)),
        ("tag", "already pointed here" if res.tag_existed else ("set" if ref.tag else "-")),
    ])


@click.command("pull", epilog=patience_help())
@click.argument("ref")
@click.option("--platform", default=DEFAULT_PLATFORM, show_default=True,
              help="os/arch[/variant] to take from a multi-arch index")
@pass_ctx
def pull_cmd(ctx: Ctx, ref: str, platform: str) -> None:
    """Pull REF (HOST[:PORT]/repo:tag or @sha256:...) into the store, every byte verified;
    the image is named REF in the store's index.json."""
    r = parse_pull_ref(ref)
    store = ctx.store
    client = RegistryClient(r.host)
    if not ctx.as_json:
        ui.step(f"pulling {r}")
    with ui.progress("pull", None) as bar:
        res = client.pull_image(store, r, platform=platform, progress=bar.advance)
    for w in res.warnings:
        print(f"patchbake: warning: {w}", file=sys.stderr)
    size = store.blob_path(res.digest).stat().st_size
    name = str(r)
    layout.add_ref(store, name, Descriptor(res.media_type, res.digest, size))
    if ctx.as_json:
        ui.emit_json(_pull_json(res, name))
        return
    ui.kv("pull", [
        ("ref", res.ref), ("digest", res.digest), ("config digest", res.config_digest),
        ("index digest", res.index_digest or "-"), ("platform", res.platform or "-"),
        ("fetched", f"{len(res.fetched)} blobs, {res.bytes_fetched} bytes"),
        ("already in store", len(res.present)), ("store name", name),
    ])



@click.command("tags")
@click.argument("repository", metavar="HOST[:PORT]/REPO")
@pass_ctx
def tags_cmd(ctx: Ctx, repository: str) -> None:
    """List a registry repository's tags (as `crane ls` does), one a line.

    \b
    Examples:
      patchbake tags 127.0.0.1:5000/vllm-sm89
      patchbake tags 127.0.0.1:5000/vllm-sm89 --json
    """
    r = parse_ref(repository, need_tag_or_digest=False)
    if r.tag or r.digest:
        raise UsageError(f"'{repository}' names an image; give the repository alone "
                         f"({r.host}/{r.repo})")
    tags = RegistryClient(r.host).list_tags(r)
    if ctx.as_json:
        ui.emit_json({"repository": f"{r.host}/{r.repo}", "tags": tags})
        return
    for tag in tags:
        click.echo(tag)
