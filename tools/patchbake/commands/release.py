"""`patchbake release gates|create|promote|verify|export|approve|benchmark`,
`patchbake ledger verify` and `patchbake report`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from .. import ui
from ..cli import Ctx, complete_channels, complete_images, pass_ctx
from ..digest import Digest
from ..errors import (
    EvidenceError,
    GateError,
    LedgerError,
    ReleaseError,
    ReportBrokenError,
    UsageError,
)
from ..fsutil import output_to, read_input

# The release stage is imported inside each command: it signs and verifies with
# cryptography, which machines that only run suites (the GPU box) lack, and
# `patchbake --help` and `patchbake run` (print_table) load this module there too.

KEY_HELP = "private key [default: signing.key from pipeline.yaml, $PATCHBAKE_SIGNING_KEY, " \
           "or the user config dir]"


def print_table(table: Any, verdict: bool = True) -> None:
    """The gate table, then its verdict; ``verdict=False`` where the command's error line
    says it (a blocked `release gates`), so the sentence is printed once."""
    ui.table(f"gates of channel '{table.channel}' for {table.image} {table.digest}",
             ["channel", "gate", "status", "reason"],
             [(d.channel, d.gate, d.status.upper(), d.reason) for d in table.decisions])
    if verdict:
        ui.out_console().print(("PASS: " if table.passed else "BLOCKED: ") + table.verdict(),
                               markup=False)


def _store(ctx: Ctx) -> Any:
    return ctx.store


@click.group("release")
def release_group() -> None:
    """Release channels: gates, release records, promotion, offline verify."""


@release_group.command("gates")
@click.option("--channel", required=True, help="channel whose gates to evaluate",
              shell_complete=complete_channels)
@click.option("--image", "image_ref", required=True, help="image: definition, digest, name@digest",
              shell_complete=complete_images)
@pass_ctx
def gates_cmd(ctx: Ctx, channel: str, image_ref: str) -> None:
    """Evaluate a channel's gates for an image; change nothing. Exit 60 when blocked."""
    from ..release import create

    table, _ = create.gates(ctx.pipeline, ctx.store, channel, image_ref, ctx.lineage_key)
    if ctx.as_json:
        ui.emit_json(table.to_json())
    else:
        print_table(table, verdict=table.passed)
    if not table.passed:
        raise GateError(table.verdict())


@release_group.command("create")
@click.option("--channel", required=True, shell_complete=complete_channels)
@click.option("--image", "image_ref", required=True, shell_complete=complete_images)
@click.option("--key", "key_path", type=click.Path(path_type=Path), default=None, help=KEY_HELP)
@pass_ctx
def create_cmd(ctx: Ctx, channel: str, image_ref: str, key_path: Path | None) -> None:
    """Gates pass -> release manifest, signed VSA, ledger entry (all or nothing)."""
    from ..release import create

    made = create.create(ctx.pipeline, ctx.store, channel, image_ref, key_path=key_path,
                         lineage=ctx.lineage_key)
    rel = made.release
    if ctx.as_json:
        ui.emit_json({"release": rel.id, "path": str(rel.path), "new": made.new,
                      "channel": rel.channel, "digest": str(rel.digest),
                      "gates": made.table.to_json()})
        return
    print_table(made.table)
    ui.kv("release" if made.new else "release (already recorded; nothing written)",
          [("release id", rel.id), ("channel", rel.channel),
           ("image", f"{rel.image} {rel.digest}"),
           ("manifest", rel.path), ("ledger entry", made.entry.hash if made.entry else "-")])


@release_group.command("promote")
@click.argument("release")
@click.option("--to", "to", required=True, help="HOST:PORT/REPO:TAG")
@click.option("--key", "key_path", type=click.Path(path_type=Path), default=None, help=KEY_HELP)
@pass_ctx
def promote_cmd(ctx: Ctx, release: str, to: str, key_path: Path | None) -> None:
    """Copy a release's image by digest, attach its statements, tag, record (all or nothing)."""
    from ..release import promote

    done = promote.promote(ctx.pipeline, ctx.store, release, to, key_path=key_path)
    if ctx.as_json:
        ui.emit_json(done.to_json())
        return
    att = done.attached
    ui.kv("promoted" if not done.already else "already promoted (nothing changed)",
          [("release", done.release), ("to", done.to), ("digest", done.digest),
           ("statements", f"{len(att.manifests)} via {att.mode}"
                          + (f" (+ {att.att_tag})" if att.att_tag else "")),
           ("recovered", done.recovered or "-")])


def _root_and_policy(ctx: Ctx, bundle: Path | None,
                     trust_policy: Path | None = None) -> tuple[Path, Path]:
    """The tree to verify and the trust policy to verify it with. A bundle's own copy of
    a trust policy is never the anchor (whoever made the bundle chose it): the policy is
    the one named with --trust-policy, else this repository's."""
    if bundle is not None:
        from ..release.bundle import BUNDLE

        if not (bundle / BUNDLE).is_file():
            raise ReleaseError(f"{bundle} is not a release bundle (no {BUNDLE})",
                               hint="make one with `patchbake release export RELEASE --to DIR`")
        if trust_policy is None and not ctx.has_pipeline():
            raise UsageError("verifying a bundle outside a repository needs the trust policy "
                             "you hold: pass --trust-policy FILE",
                             hint="the bundle's own copy is never the anchor: whoever made "
                                  "the bundle chose it")
        return bundle.resolve(), trust_policy or ctx.pipeline.signing.trust_policy
    return ctx.pipeline.root, trust_policy or ctx.pipeline.signing.trust_policy


@release_group.command("verify")
@click.argument("ref", required=False)
@click.option("--bundle", type=click.Path(path_type=Path), default=None,
              help="an exported bundle directory (default: this repository)")
@click.option("--image", "image_ref", default=None,
              help="also verify this image (registry ref, OCI layout, archive, store name)")
@click.option("--digest", default=None, help="the image digest you expect the release names")
@click.option("--trust-policy", "trust_policy", type=click.Path(path_type=Path), default=None,
              help="the trust policy you hold (default: this repository's; never the "
                   "bundle's own copy)")
@click.option("--from-registry", "from_registry", default=None, metavar="HOST:PORT/REPO@DIGEST",
              help="also read back the statements attached to this image in a registry and "
                   "verify each (REF, when given, names the release; default: the latest "
                   "release of that digest)")
@pass_ctx
def verify_cmd(ctx: Ctx, ref: str | None, bundle: Path | None, image_ref: str | None,
               digest: str | None, trust_policy: Path | None,
               from_registry: str | None) -> None:
    """Verify a release offline: ledger, manifest hash, VSA, evidence, and the channel's
    gates as this pipeline.yaml declares them (a bundle outside a repository: say so, or
    name one with --pipeline); with --from-registry, also what is attached to the image."""
    from ..release import bundle as bundlemod

    root, policy_path = _root_and_policy(ctx, bundle, trust_policy)
    want = None if digest is None else Digest.parse(digest, "--digest", UsageError)
    where = None if from_registry is None else _registry_image(from_registry, want)
    if ref is None and where is None:
        raise UsageError("name the release (an id, or sha256:DIGEST), or the image with "
                         "--from-registry HOST:PORT/REPO@sha256:DIGEST")
    if where is not None:
        want = where.digest
    # the channels, like the trust policy, are the verifier's: this repository's
    # pipeline.yaml (or --pipeline FILE), never anything a bundle carries
    pipeline = ctx.pipeline if bundle is None or ctx.has_pipeline() else None
    verdict = bundlemod.verify(root, policy_path, ref or str(want), want, pipeline)
    if image_ref:
        bundlemod.verify_image(ctx.pipeline, ctx.store, verdict, image_ref)
    back = None if where is None else _read_back(root, policy_path, verdict.release, where)
    if ctx.as_json:
        ui.emit_json({**verdict.to_json(),
                      **({} if back is None else {"registry": back.to_json()})})
        return
    ui.table(f"release {verdict.release}", ["check", "detail"], verdict.checks)
    if back is not None:
        ui.table(f"attached to {back.ref} (read from the {back.source})",
                 ["statement", "status", "signer", "envelope sha256", "detail"],
                 [(r.statement, r.status, r.signer,
                   "-" if r.envelope is None else r.envelope.hex[:16] + "…", r.detail)
                  for r in back.rows])
    ui.out_console().print(verdict.summary() + ("" if back is None else
                           f"; {back.count('recorded')} recorded statements attached in "
                           f"{back.ref.split('@')[0]}, {back.count('extra')} extra"),
                           markup=False)


def _registry_image(text: str, digest: Digest | None) -> Any:
    from ..oci.registry_ref import parse_ref

    where = parse_ref(text)
    if where.digest is None:
        raise UsageError(f"--from-registry {text}: name the image by digest "
                         "(HOST:PORT/REPO@sha256:...): a tag can move",
                         hint="`patchbake ledger verify` lists each release's digest")
    if digest is not None and digest != where.digest:
        raise UsageError(f"--digest {digest} and --from-registry {text} name two images")
    return where


def _read_back(root: Path, policy_path: Path, release: str, where: Any) -> Any:
    from ..evidence import policy
    from ..oci.registry import RegistryClient
    from ..release import manifest, readback

    rel = manifest.load_from(manifest.releases_dir(root), release)
    return readback.verify(RegistryClient.for_ref(where), where, rel, policy.load(policy_path))


@release_group.command("export")
@click.argument("release")
@click.option("--to", "dest", required=True, type=click.Path(path_type=Path))
@pass_ctx
def export_cmd(ctx: Ctx, release: str, dest: Path) -> None:
    """Write an offline bundle (manifest, ledger slice, evidence, VSA, policy, record)."""
    from ..release import bundle as bundlemod

    with output_to(dest, "--to"):
        out = bundlemod.export(ctx.pipeline.root, ctx.pipeline.signing.trust_policy, release,
                               dest)
    listing = json.loads((out / bundlemod.BUNDLE).read_bytes())
    if ctx.as_json:
        ui.emit_json({"bundle": str(out), **listing})
        return
    ui.table(f"bundle {out}", ["file", "sha256"], sorted(listing["files"].items()))


def _lifetime(text: str) -> Any:
    """``7d``, ``36h`` or ``90m`` as a timedelta."""
    from datetime import timedelta

    units = {"d": "days", "h": "hours", "m": "minutes"}
    number, unit = text[:-1], text[-1:]
    if unit not in units or not number.isdigit():
        raise UsageError(f"--expires-in {text!r}: give a number of days, hours or minutes "
                         "(7d, 36h, 90m)")
    return timedelta(**{units[unit]: int(number)})


def signing_key(ctx: Ctx, key_path: Path | None, trusted_for: Callable[[Any], bool],
                what: str, hint: str) -> Any:
    """The private key, refused before any effect unless the trust policy trusts it for
    ``what`` (EvidenceError, reason not-allowed: its signature would not count)."""
    from ..evidence import keys, policy

    key_file = key_path or ctx.pipeline.signing.private_key()
    key = keys.load_private(key_file)
    pol = policy.load(ctx.pipeline.signing.trust_policy)
    trusted = pol.keys.get(keys.keyid_of(key.public_key()))
    if trusted is None or not trusted_for(trusted):
        raise EvidenceError(f"the signing key {key_file} may not sign {what} in "
                            f"{pol.path.name}: its signature would not count; nothing was "
                            "written", reason="not-allowed", hint=hint)
    return key, trusted


@release_group.command("approve")
@click.option("--channel", required=True, shell_complete=complete_channels)
@click.option("--image", "image_ref", required=True, shell_complete=complete_images)
@click.option("--note", default="", help="why (kept in the signed approval)")
@click.option("--expires-in", "expires_in", default="7d", show_default=True,
              help="how long the approval counts (7d, 36h, 90m; at most 30d)")
@click.option("--key", "key_path", type=click.Path(path_type=Path), default=None, help=KEY_HELP)
@pass_ctx
def approve_cmd(ctx: Ctx, channel: str, image_ref: str, note: str, expires_in: str,
                key_path: Path | None) -> None:
    """Sign an approval of the release an image would make in a channel now: the image, the
    channel, the lineage and every signed input of the channel's signed gates (the key needs
    role approver for the channel)."""
    from ..config import channels
    from ..release import attest, create, gates

    channels.get(ctx.pipeline.channels, channel)  # an unknown channel, before any key
    lifetime = _lifetime(expires_in)
    ev = create.evaluation(ctx.pipeline, None, image_ref, ctx.lineage_key)
    key, trusted = signing_key(ctx, key_path, lambda t: t.approves(channel),
                               f"approvals for '{channel}' (role approver)",
                               "an approver's key (`roles: [approver]`, its channels) signs "
                               "approvals")
    basis, decided = gates.approval_basis(ev, channel)
    blocked = [d for d in decided if d.status != "pass"]
    if blocked:
        raise GateError(f"'{channel}' gate {blocked[0].gate} does not pass for {ev.digest}: "
                        f"{blocked[0].reason}; an approval names the signed inputs of a "
                        "release that can be made, so nothing was signed")
    path = attest.sign_approval(ev.evidence_dir, channel, ev.image, ev.digest, trusted.name,
                                note, key, basis, lifetime=lifetime)
    ui.emit_json({"approval": str(path)}) if ctx.as_json else ui.out_console().print(str(path))


@release_group.command("benchmark")
@click.argument("figures", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("--name", required=True, help="the benchmark's name (channels: benchmark.name)")
@click.option("--image", "image_ref", required=True)
@click.option("--key", "key_path", type=click.Path(path_type=Path), default=None, help=KEY_HELP)
@pass_ctx
def benchmark_cmd(ctx: Ctx, figures: Path, name: str, image_ref: str,
                  key_path: Path | None) -> None:
    """Sign benchmark figures (JSON: {"figures": {metric: {value, unit, better}},
    "environment": {"gpu": ..., "capability": "8.9", ...}}) measured on an image."""
    from ..release import attest, create

    try:  # first: a FIFO given as the figures is refused before any other work
        doc = json.loads(read_input(figures, "benchmark figures", UsageError))
    except ValueError as exc:
        raise UsageError(f"{figures} is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{figures} is not a JSON object with 'figures' and 'environment'")
    key, _ = signing_key(ctx, key_path, lambda t: any(
        g.covers(attest.BENCHMARK_TYPE, name) for g in t.grants),
        f"benchmark '{name}' ({attest.BENCHMARK_TYPE})",
        "extend the key's 'allow' list with that predicate type and benchmark name")
    ev = create.evaluation(ctx.pipeline, None, image_ref, ctx.lineage_key)
    path = attest.sign_benchmark(ev.evidence_dir, name, ev.image, ev.digest,
                                 doc.get("figures"), doc.get("environment"), key)
    ui.emit_json({"benchmark": str(path)}) if ctx.as_json else ui.out_console().print(str(path))


@click.group("ledger")
def ledger_group() -> None:
    """The hash-chained, signed release ledger."""


@ledger_group.command("verify")
@click.option("--known-head", "known", multiple=True, metavar="SHA256",
              help="a head printed by an earlier verify: it must still be in the chain "
                   "(the ledger only grows; repeatable)")
@click.option("--since", "since", type=click.Path(path_type=Path), metavar="CHECKPOINT",
              help="a signed checkpoint kept from earlier (manifests/releases/checkpoint): "
                   "today's ledger must extend the one it signed (no rollback, no rewrite)")
@pass_ctx
def ledger_verify_cmd(ctx: Ctx, known: tuple[str, ...], since: Path | None) -> None:
    """Check the chain, every signature, the signed checkpoint (the ledger as a Merkle
    tree), that each entry's release is committed and that every committed release has
    its entry."""
    from ..evidence import policy
    from ..release import ledger, manifest, tlog

    rdir = manifest.releases_dir(ctx.pipeline.root)
    pol = policy.load(ctx.pipeline.signing.trust_policy)
    entries = ledger.verify(rdir, pol)
    ledger.check_known(entries, known, ledger.path_of(rdir))
    if (rdir / "promotion.pending.json").exists():
        raise LedgerError("an interrupted promotion is pending (promotion.pending.json)",
                          hint="re-run `patchbake release promote` to complete or drop it")
    orphans = ledger.unrecorded(rdir, entries)
    if orphans:
        raise LedgerError(f"release {orphans[0][:16]}… is committed but no ledger entry "
                          f"records it ({len(orphans)} such): entries were cut off the "
                          "ledger, or a release was interrupted before its entry",
                          hint="an interrupted release completes with `patchbake release "
                               "create` again; otherwise restore the ledger")
    origin = tlog.origin_of(ctx.pipeline.name)
    committed = tlog.check_committed(rdir, entries, pol, origin)
    if since is not None:
        old = tlog.read_note(read_input(since, "checkpoint", LedgerError), pol, origin,
                             str(since))
        tlog.check_extends(old, entries, str(since))
    rows = [(e.seq, e.kind, e.channel, e.release[:16], e.digest, e.to or "", e.time)
            for e in entries]
    head = tlog.head_of(entries, origin)
    tree = {"size": head.size, "root": head.root.hex(),
            "checkpoint_size": committed.size if committed else None,
            "since_size": None if since is None else old.size}
    if ctx.as_json:
        ui.emit_json({"ok": True, "entries": [e.dump() for e in entries],
                      "head": ledger.head(entries), "tree": tree})
        return
    ui.table(f"ledger {ledger.path_of(rdir)}", ["seq", "kind", "channel", "release", "digest",
                                                 "to", "time"], rows)
    signed = (f"signed checkpoint covers {committed.size} of {len(entries)}" if committed
              else "no signed checkpoint yet (the ledger predates checkpoints)")
    ui.out_console().print(f"ledger intact: {len(entries)} entries, head {ledger.head(entries)}"
                           f"; tree root {head.root.hex()[:16]}…, {signed}"
                           + ("" if since is None else
                              f"; extends the checkpoint of {old.size} in {since}"),
                           markup=False)


@ledger_group.command("checkpoint")
@click.option("--key", "key_path", type=click.Path(path_type=Path), default=None, help=KEY_HELP)
@pass_ctx
def ledger_checkpoint_cmd(ctx: Ctx, key_path: Path | None) -> None:
    """Sign the checkpoint of a ledger that verifies (release create and promote do this
    with every entry; this signs one for a ledger without it). Keep a copy: `ledger verify
    --since FILE` later shows the ledger only grew."""
    from ..evidence import policy
    from ..release import create, ledger, manifest, tlog

    rdir = manifest.releases_dir(ctx.pipeline.root)
    pol = policy.load(ctx.pipeline.signing.trust_policy)
    key = create.release_key(ctx.pipeline, pol, key_path)
    origin = tlog.origin_of(ctx.pipeline.name)
    with ledger.locked(rdir):
        entries = ledger.verify(rdir, pol)
        if (rdir / tlog.NAME).exists():
            tlog.check_committed(rdir, entries, pol, origin)  # only ever extended
        note = tlog.publish(rdir, entries, origin, key, pol)
    if ctx.as_json:
        ui.emit_json({"checkpoint": note.decode(), "path": str(rdir / tlog.NAME)})
        return
    ui.out_console().print(note.decode(), markup=False, end="")


@click.command("report")
@click.argument("release")
@click.option("--out", "out", required=True, type=click.Path(path_type=Path))
@pass_ctx
def report_cmd(ctx: Ctx, release: str, out: Path) -> None:
    """Write a static HTML page about a release (no external assets); every "signed" on it
    is checked in this run. Exit 64 (after writing the page) when a check is broken."""
    from ..release import report

    with output_to(out, "--out"):
        page, checked = report.write(ctx.pipeline, ctx.pipeline.signing.trust_policy, release,
                                     out)
    if checked.broken:
        first = checked.broken[0]
        raise ReportBrokenError(f"{page} shows {len(checked.broken)} broken check(s); first: "
                                f"{first.subject}: {first.detail}",
                                hint="restore the file from the commit that recorded the "
                                     "release, or `patchbake release verify` it")
    ui.emit_json({"report": str(page)}) if ctx.as_json else ui.out_console().print(str(page))
