"""Printing for people (tables, progress on stderr) and for machines (--json on stdout).

Library code never prints: it accepts an optional ``Progress`` callback object from here.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


def _color() -> bool:
    return "NO_COLOR" not in os.environ and sys.stderr.isatty()


_consoles: dict[str, Console] = {}


def __getattr__(name: str) -> Console:
    """``ui.err`` and ``ui.out``: rich consoles made on first use, so commands that print
    only JSON (and the guard's hot path) never import rich."""
    if name not in ("err", "out"):
        raise AttributeError(name)
    if name not in _consoles:
        from rich.console import Console

        if name == "err":
            _consoles[name] = Console(stderr=True, no_color=not _color(), highlight=False,
                                      soft_wrap=True)
        else:
            # Not a terminal (CI logs, pipes): wide enough that digests are never folded.
            tty = sys.stdout.isatty()
            _consoles[name] = Console(no_color="NO_COLOR" in os.environ or not tty,
                                      highlight=False, soft_wrap=True,
                                      width=None if tty else 200)
    return _consoles[name]


def emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    sys.stdout.flush()


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    from rich.table import Table

    t = Table(title=title, title_justify="left", show_lines=False)
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*[str(x) for x in r])
    __getattr__("out").print(t)


def kv(title: str, pairs: Sequence[tuple[str, Any]]) -> None:
    table(title, ["field", "value"], pairs)


def step(msg: str) -> None:
    __getattr__("err").print(f"[bold]==>[/bold] {msg}" if _color() else f"==> {msg}")


class Progress:
    """A byte/item counter bound to a rich progress bar, silent when stderr is not a TTY."""

    def __init__(self, description: str, total: int | None) -> None:
        self.description = description
        self.total = total
        self._bar: Any = None
        self._task: Any = None

    def advance(self, n: int) -> None:
        if self._bar is not None:
            self._bar.update(self._task, advance=n)


@contextmanager
def progress(description: str, total: int | None, unit_bytes: bool = True) -> Iterator[Progress]:
    p = Progress(description, total)
    if not sys.stderr.isatty() or os.environ.get("PATCHBAKE_NO_PROGRESS"):
        yield p
        return
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
    with RP(*cols, console=__getattr__("err"), transient=True) as bar:
        p._bar, p._task = bar, bar.add_task(description, total=total)
        yield p
