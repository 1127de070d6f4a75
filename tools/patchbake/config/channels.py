"""The ``channels:`` section of pipeline.yaml, validated once into frozen objects.

Channels are listed in order; each one's gates are the gates of every channel before it
plus its own, so an image in ``sm89-stable`` has passed everything ``validated`` and
``candidate`` ask for. An unknown key, an unknown gate kind or a gate without the settings
it needs is a ConfigError at load: a channel that would evaluate fewer gates than its
author meant must never load (fail-closed at the configuration too).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ..errors import ConfigError, shown
from .schema import Field, Schema, suggest, validate


# What each gate kind checks (docs/releases.md has the full table).
GATE_KINDS = {
    "guard": "the lost-line guard passes (patch, FILES.txt, pinned tree agree)",
    "record": "the image's record is committed and names this digest",
    "verify": "verify: every baked file matches a fresh apply (N/N), no problem",
    "reproducible": "a second bake in a fresh store gives the same manifest digest",
    "cuda-code": "every CUDA object of the image has SASS or PTX that runs on the target GPU",
    "evidence": "every listed suite has trusted, passing evidence for this digest",
    "capability": "GPU evidence from a device of exactly the stated compute capability",
    "benchmark": "signed benchmark figures within tolerance of the channel's last release",
    "approval": "a signed approval by a key whose trust-policy role is approver",
}
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
_CAPABILITY = re.compile(r"^\d+\.\d+$")

CHANNEL_SCHEMA = Schema({
    "description": Field(str, default=""),
    "gates": Field(list, required=True, help=f"gate kinds: {', '.join(GATE_KINDS)}"),
    "suites": Field(list, default=None, help="suites whose evidence the evidence gate needs"),
    "capability": Field(str, default=None, help='compute capability, e.g. "8.9"'),
    "cuda_target": Field(str, default=None,
                         help='the GPU the cuda-code gate checks code for, e.g. "8.9"'),
    "benchmark": Field(dict, default=None, help="{name, tolerance}"),
    "approvals": Field(int, default=1, check=lambda v: None if v >= 1 else "must be >= 1"),
})
BENCHMARK_SCHEMA = Schema({
    "name": Field(str, required=True, help="the benchmark statement's name"),
    "tolerance": Field((int, float), required=True,
                       help="largest allowed relative change, e.g. 0.10 for 10%"),
})


@dataclass(frozen=True, slots=True)
class Benchmark:
    name: str
    tolerance: float


@dataclass(frozen=True, slots=True)
class Gate:
    """One gate as configured: its kind, the channel that declared it, and settings."""

    kind: str
    declared_in: str
    suites: tuple[str, ...] = ()
    capability: str | None = None
    cuda_target: str | None = None
    benchmark: Benchmark | None = None
    approvals: int = 1


@dataclass(frozen=True, slots=True)
class Channel:
    name: str
    position: int  # in pipeline.yaml's order
    description: str
    gates: tuple[Gate, ...]  # inherited ones first, in order


def _gate(  # noqa: C901 - one branch per gate kind, each checking that kind's fields
        kind: str, name: str, c: dict[str, Any], where: str, source: str,
        suites: Mapping[str, object]) -> Gate:
    if kind == "evidence":
        if not c["suites"]:
            raise ConfigError(f"{source}: '{where}.suites' must list the suites whose "
                              "evidence the 'evidence' gate requires")
        for s in c["suites"]:
            if s not in suites:
                raise ConfigError(f"{source}: '{where}.suites' names '{s}', which is not a "
                                  f"declared suite{suggest(str(s)[:80], list(suites))}")
        return Gate(kind, name, suites=tuple(c["suites"]))
    if kind == "capability":
        cap = c["capability"]
        if not cap or not _CAPABILITY.match(cap):
            raise ConfigError(f"{source}: '{where}.capability' must be a compute capability "
                              "such as \"8.9\" (the 'capability' gate needs it)")
        return Gate(kind, name, capability=cap)
    if kind == "cuda-code":
        target = c["cuda_target"]
        if not target or not _CAPABILITY.match(target):
            raise ConfigError(f"{source}: '{where}.cuda_target' must be a compute capability "
                              "such as \"8.9\" (the 'cuda-code' gate needs it)")
        return Gate(kind, name, cuda_target=target)
    if kind == "benchmark":
        if c["benchmark"] is None:
            raise ConfigError(f"{source}: '{where}.benchmark' ({{name, tolerance}}) is needed "
                              "by the 'benchmark' gate")
        b = validate(c["benchmark"], BENCHMARK_SCHEMA, f"{where}.benchmark", source)
        if not 0 <= float(b["tolerance"]) < 1:
            raise ConfigError(f"{source}: '{where}.benchmark.tolerance' must be in [0, 1)")
        return Gate(kind, name, benchmark=Benchmark(b["name"], float(b["tolerance"])))
    if kind == "approval":
        return Gate(kind, name, approvals=int(c["approvals"]))
    return Gate(kind, name)


def parse(raw: dict[str, Any] | None, suites: Mapping[str, object],
          source: str = "pipeline.yaml") -> Mapping[str, Channel]:
    """Validate ``channels:``; returns channels by name, in declared order."""
    out: dict[str, Channel] = {}
    inherited: list[Gate] = []
    for i, (name, body) in enumerate((raw or {}).items()):
        where = f"channels.{name}"
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigError(f"{source}: channel name {shown(name)} must be lowercase letters, "
                              "digits, '-', '_' or '.'")
        c = validate(body, CHANNEL_SCHEMA, where, source)
        own: list[Gate] = []
        for kind in c["gates"]:
            if kind not in GATE_KINDS:
                raise ConfigError(f"{source}: '{where}.gates' names unknown gate kind "
                                  f"{shown(kind)}{suggest(str(kind)[:80], list(GATE_KINDS))} "
                                  f"(kinds: {', '.join(GATE_KINDS)})")
            if any(g.kind == kind for g in [*inherited, *own]):
                raise ConfigError(f"{source}: '{where}.gates' repeats gate '{kind}' (a channel "
                                  "already has the gates of the channels before it)")
            own.append(_gate(kind, name, c, where, source, suites))
        for key, needs in (("suites", "evidence"), ("capability", "capability"),
                           ("benchmark", "benchmark"), ("cuda_target", "cuda-code")):
            if c[key] is not None and needs not in c["gates"]:
                raise ConfigError(f"{source}: '{where}.{key}' is set but the channel has no "
                                  f"'{needs}' gate")
        inherited.extend(own)
        out[name] = Channel(name, i, c["description"], tuple(inherited))
    return MappingProxyType(out)


def get(channels: Mapping[str, Channel], name: str, source: str = "pipeline.yaml") -> Channel:
    if name not in channels:
        known = ", ".join(channels) or "none declared"
        raise ConfigError(f"{source}: no channel '{name}'{suggest(name, list(channels))} "
                          f"(channels: {known})")
    return channels[name]


def previous(channels: Mapping[str, Channel], name: str) -> Channel | None:
    """The channel before ``name`` in order (what an image must already be in)."""
    names = list(channels)
    i = names.index(name)
    return channels[names[i - 1]] if i > 0 else None
