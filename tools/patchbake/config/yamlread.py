"""The one way the tool reads YAML (pipeline.yaml, image definitions, the trust policy).

Refused, each with one line naming the file: more than ``PATCHBAKE_YAML_BYTES`` bytes or
nesting deeper than ``PATCHBAKE_YAML_DEPTH`` (InputLimitError, exit 15; the depth is
measured on the token stream before anything recursive runs, so a 20,000-deep document
cannot exhaust the stack), bytes that are not UTF-8, YAML syntax errors, and a key that
appears twice in one mapping (ConfigError, exit 3: YAML says last wins, a reviewer reads
the first).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .. import limits
from ..errors import ConfigError, InputLimitError, shown
from ..fsutil import read_input


try:  # the C parser when PyYAML has it; the constructor (duplicate check) stays Python
    _Base: type = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    _Base = yaml.SafeLoader
_OPEN = (yaml.BlockMappingStartToken, yaml.BlockSequenceStartToken,
         yaml.FlowMappingStartToken, yaml.FlowSequenceStartToken)
_CLOSE = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)


class _DuplicateKey(Exception):
    def __init__(self, key: Any, line: int) -> None:
        super().__init__(key)
        self.key, self.line = key, line


class _Loader(_Base):  # type: ignore[misc]  # a base chosen at import
    """The safe loader, refusing a key that appears twice in one mapping."""

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                dup = key in seen
            except TypeError:  # an unhashable key: the base class reports it
                break
            if dup:
                raise _DuplicateKey(key, key_node.start_mark.line + 1)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]


_Loader.add_constructor("tag:yaml.org,2002:map", _Loader.construct_yaml_map)


def _tokens(text: str, cap: int) -> Any:
    depth = 0
    for tok in yaml.scan(text, Loader=_Base):
        depth += isinstance(tok, _OPEN) - isinstance(tok, _CLOSE)
        yield tok
        if depth > cap:
            return


def _depth(text: str, cap: int) -> int:
    """The deepest nesting, or the first depth past ``cap`` (the scan stops there)."""
    deepest = depth = 0
    try:
        tokens = list(_tokens(text, cap))
    except yaml.YAMLError as exc:
        # PyYAML 6.0.4 and later stop deep nesting in the scanner themselves: that is the
        # same refusal as ours, not a syntax error
        if "nesting depth" in str(getattr(exc, "problem", "") or exc):
            return cap + 1
        raise
    for tok in tokens:
        if isinstance(tok, _OPEN):
            depth += 1
            deepest = max(deepest, depth)
            if deepest > cap:
                return deepest
        elif isinstance(tok, _CLOSE):
            depth -= 1
    return deepest


def parse_text(data: bytes, name: str) -> Any:
    """YAML bytes -> data, under the caps and rules above; ``name`` appears in errors."""
    lim = limits.current()
    if len(data) > lim.yaml_bytes:
        raise InputLimitError(f"{name}: {len(data)} bytes exceeds the cap of {lim.yaml_bytes} "
                              "for a YAML file", hint=f"raise {limits.ENV['yaml_bytes']} if "
                                                      "the file is genuine")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{name}: not UTF-8 (byte {exc.start}: {data[exc.start:exc.start + 1]!r})",
                          hint="save the file as UTF-8") from None
    try:
        deep = _depth(text, lim.yaml_depth)
        if deep > lim.yaml_depth:
            raise InputLimitError(f"{name}: nesting deeper than {lim.yaml_depth}, the cap; "
                                  "refusing it", hint=f"raise {limits.ENV['yaml_depth']} "
                                                            "if the file is genuine")
        return yaml.load(text, Loader=_Loader)
    except _DuplicateKey as exc:
        raise ConfigError(f"{name}: key {shown(exc.key)} appears twice in one mapping (line "
                          f"{exc.line}); YAML would silently keep the last",
                          hint="remove one of them") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{name}: not valid YAML{at}: "
                          f"{getattr(exc, 'problem', None) or exc}") from None
    except RecursionError:
        raise InputLimitError(f"{name}: nested too deeply to read") from None


def load_file(path: Path, what: str | None = None) -> Any:
    """Read and parse ``path``; a missing or unreadable file is a ConfigError."""
    return parse_text(_read(path, what), path.name)


def _read(path: Path, what: str | None) -> bytes:
    return read_input(path, what or "file", ConfigError, limits.current().yaml_bytes,
                      hint=f"raise {limits.ENV['yaml_bytes']} if the file is genuine")
