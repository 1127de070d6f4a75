"""Record builds what typing.NamedTuple builds, without typing."""

from __future__ import annotations

import pickle
from typing import NamedTuple

import pytest
from patchbake.records import Record


class Point(Record):
    """A point."""

    x: int
    y: int = 0
    label: str | None = None

    @property
    def norm1(self) -> int:
        return abs(self.x) + abs(self.y)

    def moved(self, dx: int) -> Point:
        return self._replace(x=self.x + dx)


class TypedPoint(NamedTuple):
    """A point."""

    x: int
    y: int = 0
    label: str | None = None


def test_same_shape_as_typing_namedtuple() -> None:
    assert Point._fields == TypedPoint._fields
    assert Point._field_defaults == TypedPoint._field_defaults
    assert Point.__doc__ == TypedPoint.__doc__ == "A point."
    assert Point.__module__ == __name__ and Point.__qualname__ == "Point"
    assert Point.__annotations__ == {k: v.__forward_arg__
                                     for k, v in TypedPoint.__annotations__.items()}
    p, t = Point(3, -4), TypedPoint(3, -4)
    assert tuple(p) == tuple(t) and repr(p) == repr(t).replace("TypedPoint", "Point")
    assert hash(p) == hash(t) and p._asdict() == t._asdict()


def test_methods_properties_and_pickle() -> None:
    p = Point(3, -4, "a")
    assert p.norm1 == 7 and p.moved(2) == Point(5, -4, "a")
    assert pickle.loads(pickle.dumps(p)) == p
    with pytest.raises(AttributeError):
        p.x = 1  # type: ignore[misc]


def test_refusals() -> None:
    with pytest.raises(TypeError, match="without a default follows"):
        class Bad(Record):
            a: int = 1
            b: int  # type: ignore[misc]  # the refusal under test

    with pytest.raises(TypeError, match="super"):
        class Sup(Record):
            a: int

            def r(self) -> str:
                return super().__repr__()


def test_mutable_defaults_and_namedtuple_attributes_are_refused() -> None:
    with pytest.raises(TypeError, match="mutable default"):
        class Shared(Record):
            a: dict[str, int] = {}  # noqa: RUF012

    with pytest.raises(AttributeError, match="cannot overwrite _replace"):
        class Over(Record):
            a: int

            def _replace(self, **kw: object) -> Over:  # type: ignore[misc]
                return self


def test_slots_record_equality_repr_and_no_hash() -> None:
    from patchbake.records import SlotsRecord

    class A(SlotsRecord):
        __slots__ = ("x", "y")

        def __init__(self, x: int, y: list[int]) -> None:
            self.x, self.y = x, y

    class B(A):
        __slots__ = ()

    assert A(1, [2]) == A(1, [2]) and A(1, [2]) != A(1, [3])
    assert A(1, [2]) != B(1, [2])  # another class is never equal, as with dataclasses
    assert B(1, [2]) == B(1, [2]) and B(1, [2]) != B(1, [3])  # a subclass's inherited slots
    assert repr(A(1, [2])) == "A(x=1, y=[2])" and repr(B(1, [2])) == "B(x=1, y=[2])"
    with pytest.raises(TypeError):
        hash(A(1, [2]))
    assert not hasattr(A(1, [2]), "__dict__")
