"""``series verify --independent``: can each slice be reviewed (and applied) on its own?

The fork workflow splits a change into pull requests that are each reviewable against the
upstream tree, and whose union reproduces the validated tree byte for byte. So, beyond
:func:`verify_series` (the series in order gives the canonical tree digest), every
series patch must apply strictly, alone, to the pristine tree. For a slice that does
not, the slices it needs are found by elimination: start from every slice before it
(which must work: the series applies in order), drop each one whose absence still lets
it apply; what is left is what it depends on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import SeriesError
from ..fsutil import read_input
from ..sources import fetch
from ..store import Store
from .diffparse import parse_patch
from .series import _apply_seq, read_series, verify_series


@dataclass(frozen=True)
class Slice:
    name: str
    files: tuple[str, ...]
    alone: bool
    why: str | None  # why it does not apply alone
    needs: tuple[str, ...]  # earlier slices it cannot do without

    def as_json(self) -> dict[str, Any]:
        return {"patch": self.name, "files": list(self.files), "applies_alone": self.alone,
                "why": self.why, "needs": list(self.needs)}


@dataclass(frozen=True)
class IndependentResult:
    slices: tuple[Slice, ...]
    series_digest: str
    canonical_digest: str

    @property
    def independent(self) -> bool:
        return all(s.alone for s in self.slices)

    def as_json(self) -> dict[str, Any]:
        return {"independent": self.independent, "series_digest": self.series_digest,
                "canonical_digest": self.canonical_digest,
                "slices": [s.as_json() for s in self.slices]}


def _applies(patches: list[tuple[str, bytes]], pristine: Any) -> str | None:
    try:
        _apply_seq(patches, pristine)
    except SeriesError as exc:
        return exc.one_line()
    return None


def _needs(k: int, patches: list[tuple[str, bytes]], pristine: Any) -> tuple[str, ...]:
    kept = list(range(k))
    for j in reversed(range(k)):
        trial = [i for i in kept if i != j]
        if _applies([patches[i] for i in trial] + [patches[k]], pristine) is None:
            kept = trial
    return tuple(patches[i][0] for i in kept)


def verify_independent(lineage: Any, store: Store) -> IndependentResult:
    whole = verify_series(lineage, store)  # in order: the canonical tree digest
    assert lineage.series is not None
    names = read_series(lineage.series)
    patches = [(n, read_input(lineage.series / n, "series patch", SeriesError)) for n in names]
    pristine = fetch(lineage, store).root
    slices = []
    for k, (name, data) in enumerate(patches):
        files = tuple(f.path for f in parse_patch(data, name).files)
        why = _applies([(name, data)], pristine)
        needs = _needs(k, patches, pristine) if why else ()
        slices.append(Slice(name, files, why is None, why, needs))
    return IndependentResult(tuple(slices), whole.series_digest, whole.canonical_digest)
