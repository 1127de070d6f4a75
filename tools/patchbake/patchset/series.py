"""Split series: ``patch/series/series`` names patches applied in order to the pristine tree.

``verify_series`` proves the series reproduces the canonical patch: both are applied
strictly (the series patch by patch, each to the result of the ones before) to the
touched files of the pristine tree; the results must agree on every path either touches,
and the series' tree digest -- pristine digest with those paths replaced -- must equal
the canonical patched tree's. ``split_series`` writes one patch per workspace commit.
"""

from __future__ import annotations

import hashlib
import re
from functools import partial
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ApplyError, GuardError, PatchError, SeriesError
from ..fsutil import atomic_write, read_input
from ..sources import fetch
from ..sources.digest import MODE_EXEC, MODE_FILE, Entry, digest_entries, tree_entries
from ..store import Store
from .apply import Base, apply_patch
from .diffparse import parse_patch
from .export import _is_ancestor, _read_refs, _resolve
from .filelist import sort_key
from .gitcmd import canonical_diff, git, held_scratch_repo
from .paths import to_bytes
from .treeio import TreeReader

SERIES_FILE = "series"


@dataclass(frozen=True)
class SeriesResult:
    patches: list[str]
    paths: int  # paths touched by the series or the canonical patch
    series_digest: str
    canonical_digest: str


def read_series(series_dir: Path) -> list[str]:
    f = series_dir / SERIES_FILE
    text = read_input(f, "series file", SeriesError, missing=partial(
        SeriesError, hint="write one with `patchbake series split --from DIR`")
    ).decode("utf-8")
    names = [ln.split("#", 1)[0].strip() for ln in text.splitlines()]
    names = [n for n in names if n]
    if not names:
        raise SeriesError(f"{f} names no patches")
    for n in names:
        if "/" in n or n.startswith(".") or not (series_dir / n).is_file():
            raise SeriesError(f"{f}: '{n}' is not a patch file in {series_dir}")
    return names


State = dict[str, Base]


def _apply_seq(patches: list[tuple[str, bytes]], pristine: Path) -> State:
    reader = TreeReader(pristine)
    state: State = {}

    def read(path: str) -> Base:
        return state[path] if path in state else reader(path)

    for name, data in patches:
        try:
            patch = parse_patch(data, name)
            outcomes = apply_patch(patch, read, pristine=not state)
        except (PatchError, ApplyError) as exc:
            raise SeriesError(f"series patch {name}: {exc.one_line()}") from None
        for p, o in outcomes.items():
            state[p] = None if o.post is None else (o.post, o.post_mode or "100644")
    return state


def _digest_with(pristine: Path, state: State) -> str:
    """Tree digest of the pristine tree with ``state`` overlaid (same format as sources)."""
    entries = {e.path: e for e in tree_entries(pristine)}
    for path, v in state.items():
        key = to_bytes(path)
        if v is None:
            entries.pop(key, None)
        else:
            mode = MODE_EXEC if v[1] == "100755" else MODE_FILE
            entries[key] = Entry(key, mode, hashlib.sha256(v[0]).hexdigest())
    return str(digest_entries([entries[k] for k in sorted(entries)]))


def verify_series(lineage: Any, store: Store) -> SeriesResult:
    if lineage.series is None:
        raise SeriesError(f"lineage {lineage.key} declares no series directory in pipeline.yaml")
    names = read_series(lineage.series)
    fetched = fetch(lineage, store)
    series = _apply_seq([(n, read_input(lineage.series / n, "series patch", SeriesError))
                         for n in names], fetched.root)
    canonical = _apply_seq([(lineage.patch.name, read_input(lineage.patch, "patch", GuardError))],
                           fetched.root)
    reader = TreeReader(fetched.root)
    paths = sorted(set(series) | set(canonical), key=sort_key)
    for p in paths:
        a = series[p] if p in series else reader(p)
        b = canonical[p] if p in canonical else reader(p)
        if a != b:
            what = "is absent" if a is None else "differs in mode" if b and a[0] == b[0] \
                else "differs in content"
            raise SeriesError(f"the series does not reproduce the canonical patch: first "
                              f"differing file {p} (after the series it {what})",
                              hint="re-split with `patchbake series split --from DIR`")
    sd, cd = _digest_with(fetched.root, series), _digest_with(fetched.root, canonical)
    if sd != cd:
        raise SeriesError(f"series tree digest {sd} differs from the canonical {cd}")
    return SeriesResult(names, len(paths), sd, cd)


def _slug(subject: str) -> str:
    s = re.sub(r"[^A-Za-z0-9]+", "-", subject).strip("-").lower()
    return s[:52].rstrip("-") or "change"


def split_series(lineage: Any, store: Store, workspace: Path) -> list[str]:
    """One canonical patch per commit after the pristine one (first-parent, no merges)."""
    if lineage.series is None:
        raise SeriesError(f"lineage {lineage.key} declares no series directory in pipeline.yaml")
    o = _resolve(str(workspace))
    pristine = _read_refs(o, lineage.upstream.pin, None).pristine
    if not _is_ancestor(o.repo, pristine, o.commit):
        raise SeriesError(f"{o.commit[:12]} does not descend from the pristine commit")
    revs = git(["rev-list", "--reverse", "--parents", f"{pristine}..{o.commit}"],
               cwd=o.repo).text.split("\n")
    commits = [ln.split() for ln in revs if ln.strip()]
    if not commits:
        raise SeriesError(f"{workspace} has no commits after the pristine one")
    names: list[str] = []
    with held_scratch_repo(store.root / "tmp", [o.objects]) as scratch:
        for commit, *parents in commits:
            if len(parents) != 1:
                raise SeriesError(f"commit {commit[:12]} is a merge; a series needs a linear "
                                  "history (rebase it)")
            subject = git(["log", "-1", "--format=%s", commit], cwd=o.repo).text.strip()
            data = canonical_diff(scratch, parents[0], commit)
            if not data:
                continue  # e.g. the workspace's "no patch yet" commit: nothing to apply
            name = f"{len(names) + 1:04d}-{_slug(subject.removeprefix('patchbake: '))}.patch"
            atomic_write(lineage.series / name, data)
            names.append(name)
    if not names:
        raise SeriesError(f"the commits after the pristine one in {workspace} change nothing")
    for old in lineage.series.glob("*.patch"):
        if old.name not in names:
            old.unlink()
    atomic_write(lineage.series / SERIES_FILE, ("".join(f"{n}\n" for n in names)).encode())
    return names
