"""``Record``: ``typing.NamedTuple`` to the type checker, ``collections.namedtuple`` at run time.

``typing.NamedTuple`` costs every short command's start-up an import of typing and, per
class, a ``ForwardRef`` compiled for each field's annotation. ``class X(Record)`` builds
the same class with collections.namedtuple alone: the fields are the annotated names in
order, class-level values are their defaults, and the methods, properties and docstring
of the class body are copied onto it. As with typing.NamedTuple, a default may not be
followed by a field without one, namedtuple's own attributes cannot be replaced, and
methods cannot use ``super()``; unlike it, a mutable default (a list, dict or set that
every record would share) is refused.
"""

from __future__ import annotations

import collections

__all__ = ["Record", "SlotsRecord"]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NamedTuple as Record
else:
    _BODY_ONLY = frozenset({"__module__", "__qualname__", "__annotations__", "__orig_bases__"})
    # what namedtuple defines and a class body must not replace (as typing.NamedTuple)
    _RESERVED = frozenset({"__new__", "__init__", "__slots__", "__getnewargs__", "_fields",
                           "_field_defaults", "_make", "_replace", "_asdict", "_source"})

    def _fields_of(name, ns):
        """The field names (annotated, in order) and the trailing defaults, checked."""
        if "__annotations__" not in ns and "__annotate__" in ns:
            raise TypeError(f"{name}: a Record's module needs "
                            "`from __future__ import annotations`")
        fields = list(ns.get("__annotations__", {}))
        defaults = []
        for f in fields:
            if f in ns:
                if isinstance(ns[f], (list, dict, set, bytearray)):
                    raise TypeError(f"{name}: field {f!r} has a mutable default, which "
                                    "every record would share")
                defaults.append(ns[f])
            elif defaults:
                raise TypeError(f"{name}: field {f!r} without a default follows one with")
        taken = _RESERVED.intersection(ns)
        if taken:
            raise AttributeError(f"{name}: cannot overwrite {', '.join(sorted(taken))}")
        return fields, defaults

    class _RecordMeta(type):
        def __new__(mcls, name, bases, ns):  # noqa: N804 - a metaclass's first argument
            if ns.get("_record_base"):
                return super().__new__(mcls, name, bases, ns)
            if bases != (Record,):
                raise TypeError(f"{name}: a Record derives from Record alone")
            if "__classcell__" in ns:
                raise TypeError(f"{name}: a Record's methods cannot use super() or __class__")
            fields, defaults = _fields_of(name, ns)
            cls = collections.namedtuple(name, fields, defaults=defaults or None,
                                         module=ns.get("__module__"))
            for key, value in ns.items():
                if key in _BODY_ONLY or key in fields or (key == "__doc__" and value is None):
                    continue
                setattr(cls, key, value)
            cls.__qualname__ = ns.get("__qualname__", name)
            cls.__annotations__ = dict(ns.get("__annotations__", {}))
            return cls

    class Record(metaclass=_RecordMeta):
        _record_base = True


class SlotsRecord:
    """For the few records the code fills in after creation (a parsed section, a report):
    a plain class with ``__slots__`` gets from this what a mutable dataclass had --
    equality field by field within the same class, a repr, and no hash."""

    __slots__: tuple[str, ...] = ()

    def _slot_names(self) -> tuple[str, ...]:
        """Every slot of the class and its bases, base first."""
        return tuple(k for c in reversed(type(self).__mro__)
                     for k in c.__dict__.get("__slots__", ()))

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, k) == getattr(other, k) for k in self._slot_names())

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={getattr(self, k)!r}" for k in self._slot_names())
        return f"{type(self).__name__}({inner})"
