"""CI: take the evidence the earlier release jobs handed over, and nothing else (docs/ci.md).

The `approve`, `gates` and `promote` jobs download the `evidence-*` artifacts into a scratch
folder (never the checkout), one folder per artifact, and this copies only the exact files
those jobs make, each to the one path it belongs at:

- `evidence-<sm>/<suite>.dsse.json` (a GPU leg's signed suite result; <suite> a GPU suite
  pipeline.yaml declares) -> `manifests/evidence/<hex>/<suite>.dsse.json`
- `evidence-approval/approval-<channel>-<keyid16>-<issued>.dsse.json` (the `approve` job's
  signed approval for the channel being released) -> `manifests/evidence/<hex>/` likewise

where <hex> is the digest being released. Anything else (another file name, a folder, a
link, another artifact, a file that would replace a different committed one) is refused
with a line naming it, and nothing is copied: exit 1. So a compromised GPU job can hand over
its own evidence file, which the gates then verify against the committed trust policy,
and never a trust policy, a pipeline, or another image's records. Exit 0: copied (or
nothing handed over).
"""

from __future__ import annotations

import argparse
import re
import stat
import sys
from collections.abc import Callable
from pathlib import Path

EVIDENCE_DIR = Path("manifests") / "evidence"
MAX_BYTES = 4 * 2**20  # a signed suite result or approval is a few KiB
_HEX = re.compile(r"^[0-9a-f]{64}$")
_LEG = re.compile(r"^evidence-sm[0-9]{2,3}[a-z]?$")
APPROVAL_ARTIFACT = "evidence-approval"


class Refused(Exception):
    """Something handed over is not what the jobs make: the message names it."""


def approval_name(channel: str) -> re.Pattern[str]:
    """The file name `release approve` writes for ``channel`` (release/attest.py)."""
    return re.compile(rf"^approval-{re.escape(channel)}-[0-9a-f]{{16}}-[0-9]{{8}}T[0-9]{{6}}Z"
                      r"\.dsse\.json$")


def allowed_names(artifact: str, channel: str, gpu_suites: set[str]
                  ) -> tuple[Callable[[str], bool], str] | None:
    """Which file names ``artifact`` may hand over (and how to say so); None: not taken."""
    if _LEG.match(artifact):
        names = {f"{s}.dsse.json" for s in gpu_suites}
        return names.__contains__, "a GPU suite's <suite>.dsse.json"
    if artifact == APPROVAL_ARTIFACT:
        pattern = approval_name(channel)
        return (lambda n: pattern.match(n) is not None), \
            f"approval-{channel}-<keyid16>-<issued>.dsse.json"
    return None


def check_file(f: Path, rel: Path, artifact: Path, dest: Path,
               allowed: Callable[[str], bool], what: str) -> str | None:
    """Why ``f`` is not taken (None: it may be)."""
    if f.parent != artifact or not stat.S_ISREG(f.lstat().st_mode):
        return f"{rel}: only plain files at the top of {artifact.name} are taken ({what})"
    if not allowed(f.name):
        return f"{rel}: not a file {artifact.name} hands over (only {what})"
    if f.stat().st_size > MAX_BYTES:
        return f"{rel}: {f.stat().st_size} bytes, over {MAX_BYTES}"
    if dest.exists() and dest.read_bytes() != f.read_bytes():
        return f"{rel}: {dest} is committed with other content (evidence is write-once)"
    return None


def plan(src: Path, repo: Path, digest: str, channel: str, gpu_suites: set[str]
         ) -> tuple[list[tuple[Path, Path]], list[str]]:
    """(source, destination) pairs to copy, and the refusals (empty: take them all)."""
    hexd = digest.removeprefix("sha256:")
    if not digest.startswith("sha256:") or not _HEX.match(hexd):
        raise Refused(f"DIGEST {digest!r} is not sha256:<64 hex>")
    dest_dir = repo / EVIDENCE_DIR / hexd
    pairs: list[tuple[Path, Path]] = []
    refused: list[str] = []
    for artifact in sorted(src.iterdir()):
        if artifact.is_symlink() or not artifact.is_dir():
            refused.append(f"{artifact.name}: not an artifact's folder")
            continue
        rule = allowed_names(artifact.name, channel, gpu_suites)
        if rule is None:
            refused.append(f"{artifact.name}: not an artifact this job takes (evidence-<sm> "
                           f"from a GPU leg, {APPROVAL_ARTIFACT})")
            continue
        for f in sorted(artifact.rglob("*")):
            dest = dest_dir / f.name
            why = check_file(f, f.relative_to(src), artifact, dest, *rule)
            if why:
                refused.append(why)
            elif not dest.exists():
                pairs.append((f, dest))
    return pairs, refused


def take(src: Path, repo: Path, digest: str, channel: str, gpu_suites: set[str]) -> list[Path]:
    """Copy what ``plan`` allows; refuse it all (Refused) when anything is not allowed."""
    if not src.is_dir():
        return []
    pairs, refused = plan(src, repo, digest, channel, gpu_suites)
    if refused:
        raise Refused("\n".join(f"REFUSED {line}" for line in refused))
    for f, dest in pairs:
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(f.read_bytes())
    return [dest for _, dest in pairs]


def gpu_suites_declared(repo: Path) -> set[str]:
    from patchbake import config

    return {name for name, s in config.load(repo / "pipeline.yaml").suites.items()
            if s.requires.gpu}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="take_evidence.py", description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path, help="where the evidence-* artifacts were downloaded")
    ap.add_argument("--digest", required=True, help="sha256:<hex>, the image being released")
    ap.add_argument("--channel", required=True, help="the channel being released")
    ap.add_argument("--repo", type=Path, default=Path.cwd())
    a = ap.parse_args(argv)
    try:
        taken = take(a.src, a.repo, a.digest, a.channel, gpu_suites_declared(a.repo))
    except Refused as exc:
        print(exc)
        print(f"{a.src}: nothing taken: the artifacts hold files the release jobs do not make")
        return 1
    for dest in taken:
        print(f"took {dest.relative_to(a.repo)}")
    if not taken:
        print(f"{a.src}: no new evidence handed over")
    return 0


if __name__ == "__main__":
    sys.exit(main())
