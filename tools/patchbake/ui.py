"""Printing for people (tables, progress on stderr) and for machines (--json on stdout).

Library code never prints: it accepts an optional ``Progress`` callback object from here.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from typing import TYPE_CHECKING, Any

from .digest import Digest

if TYPE_CHECKING:
    from rich.console import Console

# rich is imported where it draws (colour, a bar, a boxed table on a terminal): output to a
# pipe, a CI log or --json never draws, and a short command there skips its import (~50 ms).


# Every --json document (results on stdout, errors on stderr) carries this; bump it when a
# field is renamed or removed (adding fields keeps it).
FORMAT_VERSION = 1


def no_color() -> bool:
    """no-color.org: NO_COLOR set to a non-empty value disables colour; empty does not."""
    return bool(os.environ.get("NO_COLOR"))


def _color() -> bool:
    return not no_color() and sys.stderr.isatty()


@cache
def err_console() -> Console:
    """The rich console on stderr (made on first use, then the same one)."""
    from rich.console import Console

    return Console(stderr=True, no_color=not _color(), highlight=False, soft_wrap=True)


@cache
def out_console() -> Console:
    """The rich console on stdout. Not a terminal (CI logs, pipes): wide enough that
    digests are never folded."""
    from rich.console import Console

    tty = sys.stdout.isatty()
    return Console(no_color=no_color() or not tty, highlight=False, soft_wrap=True,
                   width=None if tty else 200)


def versioned(obj: Any) -> dict[str, Any]:
    """The document --json prints: a mapping with ``format_version`` (a list is wrapped as
    ``items``)."""
    if isinstance(obj, dict):
        return {"format_version": FORMAT_VERSION, **obj}
    return {"format_version": FORMAT_VERSION, "items": obj}


def _digest_text(value: object) -> str:
    """A Digest in a command's --json output is its ``sha256:<hex>`` text; any other
    object json cannot write is a bug, not something to stringify."""
    if isinstance(value, Digest):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(versioned(obj), indent=2, sort_keys=True,
                                default=_digest_text) + "\n")
    sys.stdout.flush()


def say(text: str) -> None:
    """A line of results on stdout (rich only on a terminal: a pipe gets the text as is)."""
    if sys.stdout.isatty():
        out_console().print(text, markup=False, highlight=False)
    else:
        sys.stdout.write(text + "\n")


def warn(text: str) -> None:
    """A diagnostic line on stderr."""
    if _color():
        err_console().print(text, markup=False, highlight=False)
    else:
        sys.stderr.write(text + "\n")


def _plain_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Aligned columns without box drawing: what a pipe or a CI log gets (and it needs no
    rich import)."""
    cells = [[str(c) for c in columns], *[[str(x) for x in r] for r in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = [title] if title else []
    for n, row in enumerate(cells):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n"


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    if not sys.stdout.isatty():
        sys.stdout.write(_plain_table(title, columns, rows))
        return
    from rich.table import Table

    t = Table(title=title, title_justify="left", show_lines=False)
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*[str(x) for x in r])
    out_console().print(t)


def kv(title: str, pairs: Sequence[tuple[str, Any]]) -> None:
    table(title, ["field", "value"], pairs)


def step(msg: str) -> None:
    if _color():
        err_console().print(f"[bold]==>[/bold] {msg}")
    else:
        sys.stderr.write(f"==> {msg}\n")
        sys.stderr.flush()


def _size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


class Progress:
    """A byte/item counter: a rich bar on a terminal; elsewhere (CI logs, pipes) a plain
    line on stderr every ``interval`` seconds while the step runs, so a long step is never
    silent."""

    def __init__(self, description: str, total: int | None, unit_bytes: bool = True,
                 interval: float | None = None) -> None:
        self.description = description
        self.total = total
        self.unit_bytes = unit_bytes
        self.done = 0
        self.interval = interval
        self._start = self._last = time.monotonic()
        self._printed = False
        self._lock = threading.Lock()  # blobs move concurrently and all report here
        self._bar: Any = None
        self._task: Any = None

    def _amount(self) -> str:
        fmt = _size if self.unit_bytes else (lambda n: f"{n:.0f} items")
        text = fmt(self.done)
        if self.total:
            text += f" of {fmt(self.total)} ({100 * self.done / self.total:.0f}%)"
        return text

    def line(self, now: float, final: bool = False) -> str:
        elapsed = max(now - self._start, 1e-9)
        rate = f", {_size(self.done / elapsed)}/s" if self.unit_bytes else ""
        state = "done" if final else "…"
        return f"{self.description}: {self._amount()}{rate}, {elapsed:.0f} s {state}"

    def advance(self, n: int) -> None:
        with self._lock:
            self.done += n
            if self._bar is not None:
                self._bar.update(self._task, advance=n)
            elif self.interval is not None:
                now = time.monotonic()
                if now - self._last >= self.interval:
                    self._last = now
                    self._printed = True
                    print(self.line(now), file=sys.stderr, flush=True)

    def finish(self) -> None:
        if self._printed:
            print(self.line(time.monotonic(), final=True), file=sys.stderr, flush=True)


def _interval() -> float:
    try:
        return max(0.0, float(os.environ.get("PATCHBAKE_PROGRESS_INTERVAL", "5")))
    except ValueError:
        return 5.0


@contextmanager
def progress(description: str, total: int | None, unit_bytes: bool = True) -> Iterator[Progress]:
    if os.environ.get("PATCHBAKE_NO_PROGRESS"):
        yield Progress(description, total, unit_bytes)
        return
    if not sys.stderr.isatty():
        p = Progress(description, total, unit_bytes, interval=_interval())
        yield p
        p.finish()
        return
    p = Progress(description, total, unit_bytes)
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )
    from rich.progress import Progress as RP

    cols: list[Any] = [TextColumn("{task.description}"), BarColumn()]
    cols += [DownloadColumn(), TransferSpeedColumn()] if unit_bytes else [MofNCompleteColumn()]
    cols.append(TimeRemainingColumn())
    with RP(*cols, console=err_console(), transient=True) as bar:
        p._bar, p._task = bar, bar.add_task(description, total=total)
        yield p
