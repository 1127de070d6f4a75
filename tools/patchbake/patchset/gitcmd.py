"""Git for the patchset stage, under the one isolation policy (``patchbake.gitrun``);
every diff is asked for with explicit flags. Diffs run in a throw-away bare repository
that borrows the objects of the real one through ``objects/info/alternates``, so neither
that repository's config nor
its in-tree ``.gitattributes`` (diff drivers, textconv, eol filters) can change the
output; its own ``info/attributes`` unsets every attribute that could.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from ..gitrun import AUTHOR, CONFIG, FIXED_DATE, git, git_env
from ..scratch import memory_tmp
from ..staging import discard, new_dir

__all__ = ["AUTHOR", "ATTRIBUTES", "CONFIG", "DIFF_FLAGS", "FIXED_DATE", "canonical_diff",
           "DiffInFile", "canonical_diff_to", "cat_file", "git", "git_env", "held_scratch_repo",
           "memory_tmp", "objects_dir", "scratch_repo"]

# Attributes that change what git writes into a diff or a commit; "!x" makes x
# unspecified, overriding lower-precedence .gitattributes files in the tree.
ATTRIBUTES = b"* !diff !text !eol !crlf !filter !ident !working-tree-encoding !merge\n"

# The canonical diff. Renames: off (a rename is a deletion plus an addition, so every
# path's effect is explicit in FILES.txt and the applier needs no rename logic).
DIFF_FLAGS: tuple[str, ...] = (
    "-r", "-p", "--no-ext-diff", "--no-textconv", "--no-color", "--src-prefix=a/",
    "--dst-prefix=b/", "-U3", "--inter-hunk-context=0", "--diff-algorithm=myers",
    "--indent-heuristic", "--no-renames", "--full-index", "--binary", "--no-relative",
    "-O/dev/null",
)


def scratch_repo(parent: Path, alternates: Sequence[Path] = ()) -> Path:
    """A minimal bare repository (no hooks, no config of anyone else's) borrowing objects,
    in a new directory under ``parent`` that the caller removes."""
    return _init_bare(Path(tempfile.mkdtemp(prefix="patchbake-diff.", dir=parent)), alternates)


@contextmanager
def held_scratch_repo(tmp: Path, alternates: Sequence[Path] = ()) -> Iterator[Path]:
    """:func:`scratch_repo` as a staging entry of the store's ``tmp/``: held with ``flock``
    while in use (another process's sweep never takes it), removed on the way out,
    whatever ends the work (a SIGTERM leaves nothing behind)."""
    d = new_dir(tmp, "patchbake-diff.")
    try:
        yield _init_bare(d, alternates)
    finally:
        discard(d)


def _init_bare(d: Path, alternates: Sequence[Path]) -> Path:
    (d / "objects" / "info").mkdir(parents=True)
    (d / "refs" / "heads").mkdir(parents=True)
    (d / "info").mkdir()
    (d / "HEAD").write_bytes(b"ref: refs/heads/main\n")
    (d / "config").write_bytes(b"[core]\n\trepositoryformatversion = 0\n\tbare = true\n")
    (d / "info" / "attributes").write_bytes(ATTRIBUTES)
    if alternates:
        text = "".join(f"{Path(a).resolve()}\n" for a in alternates)
        (d / "objects" / "info" / "alternates").write_text(text)
    return d


def objects_dir(repo: Path) -> Path:
    """The object directory of a repository (work tree or bare)."""
    out = git(["rev-parse", "--git-path", "objects"], cwd=repo).text.strip()
    p = Path(out)
    return p if p.is_absolute() else (repo / p).resolve()


def canonical_diff(git_dir: Path, old: str, new: str) -> bytes:
    """The canonical patch between two commits or trees of ``git_dir``."""
    return git(["diff-tree", *DIFF_FLAGS, old, new, "--"], git_dir=git_dir).stdout


def canonical_diff_to(git_dir: Path, old: str, new: str, out: Path,
                      paths: Sequence[str] = ()) -> None:
    """:func:`canonical_diff` written by git into the file ``out`` (``--output``: the
    same bytes as on its standard output); ``paths``: only these (literal) paths."""
    git(["diff-tree", *DIFF_FLAGS, f"--output={out}", old, new, "--",
         *(f":(literal){p}" for p in paths)], git_dir=git_dir)


class DiffInFile:
    """:func:`canonical_diff_to` in a thread that waits on the git process.

    git writes the diff into a file, so the waiting thread wakes once, when git exits,
    rather than for every block of a pipe: it hardly competes with the caller's thread
    for the interpreter while that thread works beside git. ``slots`` bounds how many
    such gits run at once.
    """

    def __init__(self, git_dir: Path, old: str, new: str, out: Path,
                 paths: Sequence[str] = (), slots: threading.Semaphore | None = None) -> None:
        self.out = out.absolute()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(git_dir, old, new, paths, slots),
                                        name="git-diff", daemon=True)
        self._thread.start()

    def _run(self, git_dir: Path, old: str, new: str, paths: Sequence[str],
             slots: threading.Semaphore | None) -> None:
        try:
            if slots is None:
                canonical_diff_to(git_dir, old, new, self.out, paths)
            else:
                with slots:
                    canonical_diff_to(git_dir, old, new, self.out, paths)
        except BaseException as exc:  # noqa: BLE001 - re-raised by result() in the caller
            self._error = exc

    def join(self) -> None:
        self._thread.join()

    def result(self) -> bytes:
        """The diff, once git has written it; git's error if it failed."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self.out.read_bytes()


def cat_file(names: list[str], *, cwd: Path | None = None,
           git_dir: Path | None = None) -> dict[str, tuple[str, str, bytes] | None]:
    """``git cat-file --batch`` for several objects: name -> (id, type, content) or None."""
    if not names:
        return {}
    out = git(["cat-file", "--batch"], cwd=cwd, git_dir=git_dir,
              input="".join(f"{n}\n" for n in names).encode()).stdout
    found: dict[str, tuple[str, str, bytes] | None] = {}
    pos = 0
    for n in names:
        nl = out.index(b"\n", pos)
        head = out[pos:nl].split()
        pos = nl + 1
        if len(head) != 3:  # "<name> missing" / "ambiguous"
            found[n] = None
            continue
        size = int(head[2])
        found[n] = (head[0].decode(), head[1].decode(), out[pos:pos + size])
        pos += size + 1
    return found
