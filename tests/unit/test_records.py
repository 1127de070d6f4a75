"""Records are frozen slotted dataclasses: equal within their class only, immutable, not tuples."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pickle
import pkgutil

import patchbake
import pytest
from patchbake.digest import Digest
from patchbake.oci.layout import _Candidate
from patchbake.oci.registry_ref import RegistryRef
from patchbake.patchset.guard import Problem, Report

# a str subclass with __slots__ = (): its own type, not a record
NOT_RECORDS = {"patchbake.digest.Digest"}


def _package_classes() -> list[type]:
    found = []
    for info in pkgutil.walk_packages(patchbake.__path__, "patchbake."):
        if info.name.endswith("__main__"):  # runs the CLI when imported
            continue
        module = importlib.import_module(info.name)
        found += [c for c in vars(module).values()
                  if inspect.isclass(c) and c.__module__ == module.__name__]
    return found


def test_one_record_idiom() -> None:
    """No namedtuple and no hand-written __slots__ class is left in the package."""
    classes = _package_classes()
    assert len(classes) > 100
    tuples = [c.__qualname__ for c in classes if issubclass(c, tuple)]
    hand = [f"{c.__module__}.{c.__qualname__}" for c in classes
            if "__slots__" in vars(c) and not dataclasses.is_dataclass(c)]
    assert tuples == [] and set(hand) <= NOT_RECORDS, (tuples, hand)


def test_equal_within_a_class_only() -> None:
    d = Digest.of(b"v")
    ref = RegistryRef("h", "r", None, d)
    assert ref == RegistryRef("h", "r", None, d) and ref != RegistryRef("h", "r", "t", d)
    assert hash(ref) == hash(RegistryRef("h", "r", None, d))
    # the same values in another record class, or as a tuple, are not the same record
    assert _Candidate(d, "h", "r", "v") != ("h", "r", None, d)  # type: ignore[comparison-overlap]
    assert ref != _Candidate(d, "h", "r", "v")  # type: ignore[comparison-overlap]
    assert Problem("k", None, "m") != ("k", None, "m")  # type: ignore[comparison-overlap]


def test_immutable_and_not_a_tuple() -> None:
    p = Problem("k", "a.py", "m")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.kind = "other"  # type: ignore[misc]
    assert not hasattr(p, "__dict__")  # slotted
    with pytest.raises(TypeError):
        iter(p)  # type: ignore[call-overload]
    assert dataclasses.replace(p, kind="other") == Problem("other", "a.py", "m")
    assert pickle.loads(pickle.dumps(p)) == p


def test_report_as_json_lists_problems_as_objects() -> None:
    r = Report(False, 1, 2, 3, "ab" * 32, (Problem("count", "a.py", "m"),))
    assert r.as_json()["problems"] == [{"kind": "count", "path": "a.py", "message": "m"}]
