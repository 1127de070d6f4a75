"""A small declarative validator: unknown keys, wrong types and missing fields become
one-line ConfigErrors naming the key and the file, with "did you mean" for typos."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..digest import is_hex
from ..errors import ConfigError, shown


@dataclass(frozen=True, slots=True)
class Field:
    types: type | tuple[type, ...]
    required: bool = False
    default: Any = None
    check: Callable[[Any], str | None] | None = None  # returns a problem or None
    help: str = ""
    items: type | None = None  # for a list: the type every item must have


@dataclass(frozen=True, slots=True)
class Schema:
    fields: dict[str, Field]
    name: str = ""
    extra: Field | None = None  # schema for values under arbitrary keys


def _type_name(t: type | tuple[type, ...]) -> str:
    ts = t if isinstance(t, tuple) else (t,)
    names = {dict: "mapping", list: "list", str: "string", int: "integer", bool: "boolean",
             float: "number"}
    return " or ".join(names.get(x, x.__name__) for x in ts)


def suggest(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


def _found(value: Any) -> str:
    """What a YAML value is, in the file's words: an empty value is nothing, not NoneType."""
    if value is None:
        return "nothing (the value is empty)"
    return f"{type(value).__name__} {shown(value, 40)}"


def validate(  # noqa: C901 - one pass over a mapping's keys, each branch one schema rule
        data: Any, schema: Schema, where: str, source: str) -> dict[str, Any]:
    """Validate ``data`` (a mapping) against ``schema``. ``where`` is the dotted key path
    of this mapping; ``source`` the file it came from. Returns data with defaults."""
    label = where or "top level"
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: {label} must be a mapping, got {_found(data)}",
                          hint="docs/pipeline.md shows each section's keys")
    out: dict[str, Any] = {}
    known = list(schema.fields)
    for key, value in data.items():
        path = f"{where}.{key}" if where else str(key)
        if not isinstance(key, str):
            raise ConfigError(f"{source}: key {shown(key)} under {label} must be a string")
        spec = schema.fields.get(key) or schema.extra
        if spec is None:
            raise ConfigError(
                f"{source}: unknown key '{path}'{suggest(key, known)}"
                + ("" if suggest(key, known) else f" (allowed: {', '.join(known)})")
            )
        if isinstance(value, bool) and bool not in (
            spec.types if isinstance(spec.types, tuple) else (spec.types,)
        ):
            raise ConfigError(f"{source}: '{path}' must be of type {_type_name(spec.types)}, got boolean")
        if not isinstance(value, spec.types):
            raise ConfigError(
                f"{source}: '{path}' must be of type {_type_name(spec.types)}, "
                f"got {_found(value)}"
            )
        if spec.items is not None and isinstance(value, list):
            for i, item in enumerate(value):
                if not isinstance(item, spec.items) or isinstance(item, bool):
                    raise ConfigError(
                        f"{source}: '{path}[{i}]' must be of type {_type_name(spec.items)}, "
                        f"got {_found(item)}")
        if spec.check:
            problem = spec.check(value)
            if problem:
                raise ConfigError(f"{source}: '{path}' {problem}")
        out[key] = value
    for key, spec in schema.fields.items():
        if key not in out:
            if spec.required:
                path = f"{where}.{key}" if where else key
                raise ConfigError(f"{source}: missing required key '{path}'" +
                                  (f" ({spec.help})" if spec.help else ""))
            out[key] = spec.default
    return out


def sha256_check(value: Any) -> str | None:
    if not is_hex(value):
        return "must be 64 lowercase hex digits (a sha256)"
    return None


def one_of(*choices: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if value not in choices:
            near = suggest(value, list(choices)) if isinstance(value, str) else ""
            return f"must be one of {', '.join(choices)}, got {shown(value)}{near}"
        return None

    return check
