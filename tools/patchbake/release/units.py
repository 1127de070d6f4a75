"""Units of benchmark figures: every signed figure names its unit, and two figures are
compared only after both are converted to their dimension's base unit.

Without units a figure re-measured in another unit (12.9 ms, then 0.0155 s) compares as a
thousandfold improvement; with them it is a 20 % regression. A unit outside this table, or
two figures of different dimensions (ms against tokens/s), cannot be compared: the
benchmark gate fails closed.
"""

from __future__ import annotations

from typing import Any

# unit -> (dimension, factor to the dimension's base unit)
UNITS: dict[str, tuple[str, float]] = {
    "ns": ("time", 1e-9), "us": ("time", 1e-6), "ms": ("time", 1e-3), "s": ("time", 1.0),
    "B": ("bytes", 1.0), "KiB": ("bytes", 2.0 ** 10), "MiB": ("bytes", 2.0 ** 20),
    "GiB": ("bytes", 2.0 ** 30), "kB": ("bytes", 1e3), "MB": ("bytes", 1e6),
    "GB": ("bytes", 1e9),
    "B/s": ("bandwidth", 1.0), "MB/s": ("bandwidth", 1e6), "GB/s": ("bandwidth", 1e9),
    "MiB/s": ("bandwidth", 2.0 ** 20), "GiB/s": ("bandwidth", 2.0 ** 30),
    "tokens/s": ("token rate", 1.0), "requests/s": ("request rate", 1.0),
    "TFLOP/s": ("compute rate", 1e12), "GFLOP/s": ("compute rate", 1e9),
    "1": ("ratio", 1.0), "x": ("ratio", 1.0), "%": ("ratio", 0.01),
}


def unit_problem(figure: dict[str, Any]) -> str | None:
    unit = figure.get("unit")
    if unit is None:
        return "has no 'unit'"
    if unit not in UNITS:
        return f"has unit {unit!r}, not one of {', '.join(UNITS)}"
    return None


def base_value(figure: dict[str, Any]) -> tuple[str, float]:
    """(dimension, value in the dimension's base unit); ValueError names what is wrong."""
    problem = unit_problem(figure)
    if problem:
        raise ValueError(f"the figure {problem}")
    dimension, factor = UNITS[figure["unit"]]
    return dimension, float(figure["value"]) * factor


def comparable(old: dict[str, Any], new: dict[str, Any]) -> tuple[float, float]:
    """Both figures in one unit, or ValueError when they cannot be compared."""
    old_dim, old_v = base_value(old)
    new_dim, new_v = base_value(new)
    if old_dim != new_dim:
        raise ValueError(f"measured as {old_dim} ({old['unit']}) before and as {new_dim} "
                         f"({new['unit']}) now: not comparable")
    return old_v, new_v
