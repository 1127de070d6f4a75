"""`patchbake keys generate` and `patchbake evidence sign|verify|summary`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .. import ui
from ..cli import Ctx, complete_images, complete_suites, pass_ctx
from ..config.signing import default_key_dir
from ..digest import Digest
from ..errors import EvidenceError, PatchbakeError, UsageError
from ..evidence import facts, statement
from ..fsutil import output_to
from ..sources import fetch
from ..sources.digest import tree_digest
from ..suites import files as filesmod
from ..suites import image as imagemod
from ..suites.result import SuiteResult
from ..verify.expected import image_definition
from .names import did_you_mean

# keys, policy, records and summary import cryptography: only the commands that sign or
# verify import them, since the machines that only run suites (the GPU box) lack it and
# `patchbake --help` loads this module there too.
if TYPE_CHECKING:
    from ..evidence import records, summary


def _image(ctx: Ctx, ref: str) -> imagemod.SuiteImage:
    # A reference carrying its digest verifies with no store at all (CI, reviewers).
    with did_you_mean(ctx, ref):
        return imagemod.digest_only(ref, ctx.pipeline) or imagemod.identify(ctx.store, ref,
                                                                           ctx.pipeline)


def _verified_json(v: records.Verified) -> dict[str, Any]:
    s = v.statement
    return {"path": str(v.path), "verified": True, "keyid": v.keyid, "signer": v.signer,
            "suite": s.suite, "result": s.result, "counts": s.counts, "runner": s.runner,
            "subject": {"name": s.subject_name, "digest": str(s.subject_digest)},
            "counts_as_evidence": v.counts_as_evidence, "standing": v.standing,
            "patch_shown": v.patch_shown, "junit": v.junit,
            "envelope_sha256": v.envelope_sha256,
            "flags": s.flags}


@click.group("keys")
def keys_group() -> None:
    """Signing keys for evidence (Ed25519)."""


@keys_group.command("generate")
@click.option("--out", "out", type=click.Path(path_type=Path), default=None,
              help="directory for signing.key (0600) and signing.pub "
                   "[default: the user config dir's patchbake/keys]")
@click.option("--name", default="release", show_default=True, help="the key's name in the policy")
@click.option("--suites", default="*", show_default=True,
              help="comma-separated suite patterns the printed policy entry allows")
@pass_ctx
def keys_generate(ctx: Ctx, out: Path | None, name: str, suites: str) -> None:
    """Generate an Ed25519 key pair; print the trust-policy entry for its public key."""
    from ..evidence import keys as keymod
    from ..evidence import policy as policymod

    with output_to(out or default_key_dir(), "--out"):
        made = keymod.generate(out or default_key_dir())
    entry = policymod.render_entry(name, made.keyid, made.public_pem, "", suites.split(","),
                                   statement.PREDICATE_TYPE)
    if ctx.as_json:
        ui.emit_json({"keyid": made.keyid, "private_key": str(made.private_path),
                      "public_key": str(made.public_path), "policy_entry": entry})
        return
    ui.kv("signing key", [("keyid", made.keyid), ("private key (keep out of git)",
                                                  made.private_path),
                          ("public key", made.public_path)])
    ui.say("add under 'keys:' in the trust policy:\n" + entry.rstrip())


@click.group("evidence")
def evidence_group() -> None:
    """Signed test evidence bound to an image manifest digest."""


@evidence_group.command("sign")
@click.argument("results", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--key", "key_path", type=click.Path(path_type=Path), default=None,
              help="private key [default: signing.key from pipeline.yaml, "
                   "$PATCHBAKE_SIGNING_KEY, or the user config dir]")
@click.option("--image", "image_ref", default=None,
              help="refuse unless every result is about this image")
@pass_ctx
def evidence_sign(ctx: Ctx, results: tuple[Path, ...], key_path: Path | None,
                  image_ref: str | None) -> None:
    """Sign suite results (from `suites run --results-out`) into manifests/evidence/."""
    from ..evidence import keys as keymod
    from ..evidence import policy as policymod
    from ..evidence import records

    sig = ctx.pipeline.signing
    key_file = key_path or sig.private_key()
    key = keymod.load_private(key_file)
    loaded = [(rp, SuiteResult.load(rp)) for rp in results]
    # the key's grants, for every result, before anything is fetched or written
    pol = policymod.load(sig.trust_policy)
    keyid = keymod.keyid_of(key.public_key())
    if keyid not in pol.keys:
        raise EvidenceError(f"the signing key {key_file} ({keyid[:16]}) is not in "
                            f"{pol.path.name}: its evidence would not verify; nothing was "
                            "written", reason="untrusted-key",
                            hint="add its public key with an 'allow' grant in review")
    for rp, result in loaded:
        pol.check_allowed(keyid, statement.PREDICATE_TYPE, result.suite_name,
                          f"{rp} (nothing was written)")
    want = _image(ctx, image_ref) if image_ref else None
    rows = []
    pinned: dict[str, Digest] = {}  # each lineage's pinned vllm/ digest, fetched when needed

    def pinned_vllm_digest(image_digest: Digest) -> Digest:
        # the pin of the image's own lineage (its definition's), never just the default
        lin = ctx.pipeline.lineage_for(
            image_definition(ctx.pipeline, manifest_digest=image_digest), ctx.lineage_key)
        if lin.key not in pinned:
            f = fetch(lin, ctx.store, base=ctx.pipeline.root)
            pinned[lin.key] = tree_digest(f.root / "vllm")
        return pinned[lin.key]

    for rp, result in loaded:
        digest = result.image.digest
        if want and digest != want.digest:
            raise EvidenceError(f"{rp} is a result for image {digest}, not {want.digest}")
        carried = result.environment.get("image_files")
        if carried is not None:
            # the run's files came from a files bundle: they must be the image's, and the
            # probe's tree the unpatched base's (suites.files)
            sens = result.probes.get("patch_sensitivity") or {}
            filesmod.check_signable(ctx.store, result.image,
                                    carried if isinstance(carried, dict) else {},
                                    result.probed_pristine, sens.get("vllm_tree_digest"))
        elif result.probed_pristine:
            records.check_pristine_probe(result, pinned_vllm_digest(digest))
        path, written, stmt = records.sign_result(result, key, sig.evidence_dir)
        rows.append({"result": str(rp), "evidence": str(path), "written": written,
                     "junit": str(records.junit_path(path)) if result.junit_b64 else None,
                     "suite": stmt.suite, "outcome": stmt.result,
                     "keyid": keymod.keyid_of(key.public_key())})
    if ctx.as_json:
        ui.emit_json({"signed": rows})
    else:
        ui.table("signed evidence", ["suite", "result", "evidence", "new"],
                 [(r["suite"], r["outcome"], r["evidence"], "yes" if r["written"] else
                   "unchanged") for r in rows])


@evidence_group.command("verify")
@click.argument("file", required=False, type=click.Path(path_type=Path))
@click.option("--image", "image_ref", required=True, help="the image the evidence must be about",
              shell_complete=complete_images)
@click.option("--suite", "suite_name", default=None, metavar="SUITE",
              shell_complete=complete_suites,
              help="instead of FILE: the committed evidence for SUITE of that image "
                   "(<evidence_dir>/<manifest digest>/SUITE.dsse.json)")
@click.option("--policy", "policy_path", type=click.Path(path_type=Path), default=None,
              help="trust policy [default: signing.trust_policy from pipeline.yaml]")
@pass_ctx
def evidence_verify(ctx: Ctx, file: Path | None, image_ref: str, suite_name: str | None,
                    policy_path: Path | None) -> None:
    """Verify signature, key trust, subject digest and predicate shape (fail-closed).

    FILE is an envelope; or name the suite with --suite and the image's own evidence file
    is verified.
    """
    from ..evidence import policy as policymod
    from ..evidence import records

    if (file is None) == (suite_name is None):
        raise UsageError("give the evidence FILE or --suite SUITE (one of them)",
                         hint="e.g. `patchbake evidence verify --suite dsv4-topk-gpu "
                              "--image sm89-serving-offline`")
    ref = _image(ctx, image_ref)
    if suite_name is not None:
        file = records.evidence_path(ctx.pipeline.signing.evidence_dir, ref.digest, suite_name)
    assert file is not None
    pol = policymod.load(policy_path or ctx.pipeline.signing.trust_policy)
    v = records.verify_file(file, ref.digest, pol, suite_name)
    if ctx.as_json:
        ui.emit_json(_verified_json(v))
        return
    s = v.statement
    ui.kv("evidence verified", [("file", v.path), ("image", f"{s.subject_name} {s.subject_digest}"),
                                ("suite", s.suite), ("result", s.result),
                                ("counts", " ".join(f"{k}={n}" for k, n in s.counts.items())),
                                ("signed by", f"{v.signer} ({v.keyid[:16]})"),
                                ("JUnit beside it", v.junit),
                                ("counts as evidence", "yes" if v.counts_as_evidence else
                                 f"no ({v.standing})")])


def _facts(ctx: Ctx, ref: imagemod.SuiteImage, verify_files: bool) -> summary.ImageFacts:
    from ..evidence import summary

    patch, matched, total = facts.patch_and_match(ctx.pipeline, ctx.store, ctx.lineage(), ref,
                                                 verify_files)
    m = re.search(r"sm(\d+)", ref.name)
    return summary.ImageFacts(ref.name, ref.digest, patch, matched, total,
                              f"sm{m.group(1)}" if m else None)


@evidence_group.command("summary")
@click.option("--image", "image_ref", required=True, metavar="IMAGE",
              help="the image to summarise: a definition (its latest recorded bake), a "
                   "store name, sha256:DIGEST or NAME@sha256:DIGEST")
@click.option("--markdown", is_flag=True, help="print the reviewer paragraph as Markdown")
@click.option("--no-verify-files", is_flag=True,
              help="skip re-verifying the baked files (the paragraph then omits N/N)")
@pass_ctx
def evidence_summary(ctx: Ctx, image_ref: str, markdown: bool, no_verify_files: bool) -> None:
    """The reviewer's paragraph for an image, from verified evidence only."""
    from ..evidence import policy as policymod
    from ..evidence import records, summary

    sig = ctx.pipeline.signing
    ref = _image(ctx, image_ref)
    try:
        pol = policymod.load(sig.trust_policy)
        found = records.verify_suites(sig.evidence_dir, ref.digest, pol,
                                      sorted(ctx.pipeline.suites))
    except EvidenceError as exc:  # no policy: every suite is unverifiable, said so
        found = {s: exc for s in sorted(ctx.pipeline.suites)}
    facts = _facts(ctx, ref, not no_verify_files)
    text = summary.paragraph(facts, found)
    if ctx.as_json:
        ui.emit_json({"image": ref.name, "digest": str(ref.digest), "paragraph": text,
                      "suites": {k: (_verified_json(v) if isinstance(v, records.Verified)
                                     else records.describe_failure(v))
                                 for k, v in found.items()}})
    elif markdown:
        ui.say(text)
    else:
        ui.table(f"evidence for {ref.name} {ref.digest}", ["suite", "status", "detail"],
                 [(k, v.statement.result if isinstance(v, records.Verified) else v.reason,
                   v.standing if isinstance(v, records.Verified)
                   else (v.message if isinstance(v, PatchbakeError) else "does not count"))
                  for k, v in found.items()])
        ui.say(text)
