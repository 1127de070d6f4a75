"""Resource caps: nothing the tool reads or fetches is unbounded.

Each cap has a default sized well above what the real inputs need (the vLLM sdist is
~30 MB packed, ~5,000 members, ~150 MB unpacked) and an environment override, read when a
cap is first needed so a test or a CI job can tighten it. docs/RELIABILITY.md lists them.
A cap that trips raises its own error class: ArchiveLimitError (14) for archives,
InputLimitError (15) for YAML/JSON, DeadlineError (16) for the network budget.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

from .errors import ConfigError

MiB = 1 << 20


@dataclass(frozen=True, slots=True)
class Limits:
    """The caps in force (defaults, or ``PATCHBAKE_<FIELD>`` overrides)."""

    # extraction (sources/extract.py)
    extract_total_bytes: int = 2048 * MiB
    extract_members: int = 100_000
    extract_member_bytes: int = 512 * MiB
    name_bytes: int = 255  # one path component (NAME_MAX)
    path_bytes: int = 1024  # a whole member path
    # YAML read by the tool (pipeline.yaml, image definitions, trust policy)
    yaml_bytes: int = 1 * MiB
    yaml_depth: int = 64
    # network (netpolicy.py): per request, and per operation (push, pull, fetch)
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 15.0
    attempts: int = 5
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    max_retry_after_s: float = 30.0
    deadline_s: float = 900.0
    min_rate_bps: int = 1024  # a body slower than this over a read timeout is retried
    requests_base: int = 40
    requests_per_blob: int = 12


# field -> environment variable
ENV = {f.name: "PATCHBAKE_" + f.name.upper() for f in fields(Limits)}


def current() -> Limits:
    """The defaults, with any ``PATCHBAKE_<FIELD>`` environment override applied."""
    kw: dict[str, int | float] = {}
    for f in fields(Limits):
        name = f.name
        raw = os.environ.get(ENV[name])
        if raw is None or raw == "":
            continue
        typ = float if isinstance(f.default, float) else int
        try:
            value = typ(raw)
        except ValueError:
            raise ConfigError(f"{ENV[name]}={raw!r} is not a number") from None
        if value <= 0:
            raise ConfigError(f"{ENV[name]}={raw!r} must be positive")
        kw[name] = value
    return Limits(**kw)  # type: ignore[arg-type]
