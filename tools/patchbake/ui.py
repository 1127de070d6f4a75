"""Printing for people (tables, progress on stderr) and for machines (--json on stdout).

Library code never prints: it accepts an optional ``Progress`` callback object from here.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.table import Table


def _color() -> bool:
    return "NO_COLOR" not in os.environ and sys.stderr.isatty()


err = Console(stderr=True, no_color=not _color(), highlight=False, soft_wrap=True)
# Not a terminal (CI logs, pipes): wide enough that digests are never folded.
out = Console(no_color="NO_COLOR" in os.environ or not sys.stdout.isatty(), highlight=False,
              soft_wrap=True, width=None if sys.stdout.isatty() else 200)


def emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    sys.stdout.flush()


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    t = Table(title=title, title_justify="left", show_lines=False)
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*[str(x) for x in r])
    out.print(t)


def kv(title: str, pairs: Sequence[tuple[str, Any]]) -> None:
    table(title, ["field", "value"], pairs)


def step(msg: str) -> None:
    err.print(f"[bold]==>[/bold] {msg}" if _color() else f"==> {msg}")


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
    with RP(*cols, console=err, transient=True) as bar:
        p._bar, p._task = bar, bar.add_task(description, total=total)
        yield p
