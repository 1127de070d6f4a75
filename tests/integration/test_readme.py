"""The README's commands, run as written, in order, in a fresh copy of the repository after
`make demo` (here: `patchbake run`, what `make demo` runs once the tool is installed).

Which blocks run (generic: whatever blocks the README has):

- every fenced block whose info string is ``sh`` runs, as one ``bash -euo pipefail``
  script, in the copy's root, blocks in README order, all sharing one scratch store;
- a block right after a line ``<!-- readme-test: skip REASON -->`` is not run (the
  two make targets: the suite itself runs under `make test`);
- other fences (``text``, ``console``, ``yaml``...) are shown output or files, never run;
- ``127.0.0.1:5000`` (the registry `make services` starts) is replaced by a private
  loopback registry of this test's, so tags pushed by earlier runs cannot collide;
- the whole chain runs twice in the same copy: a user runs it again (the workspace is
  reused, pushes of the same digest are no-ops, nothing refuses what it made itself).

`patchbake` on PATH is this checkout's tool, run by the test's interpreter.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from images_repo import seed_sdist

pytestmark = [pytest.mark.integration, pytest.mark.sdist, pytest.mark.registry]

REPO = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(\S*)\s*$")
SKIP = re.compile(r"^<!--\s*readme-test:\s*skip\b(.*?)-->\s*$")
README_REGISTRY = "127.0.0.1:5000"


def readme_blocks(text: str) -> list[tuple[int, str, str | None]]:
    """(line number, script, skip reason or None) of every ``sh`` block, in order."""
    blocks: list[tuple[int, str, str | None]] = []
    lines = text.splitlines()
    i, last_text = 0, ""
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            if lines[i].strip():
                last_text = lines[i].strip()
            i += 1
            continue
        lang, start = m.group(1), i
        i += 1
        body = []
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        if lang == "sh":
            skip = SKIP.match(last_text)
            blocks.append((start + 1, "\n".join(body) + "\n",
                           skip.group(1).strip() or "marked" if skip else None))
        last_text = ""
    return blocks


def test_block_extraction_and_markers() -> None:
    text = ("intro\n<!-- readme-test: skip needs root -->\n\n```sh\nmake test\n```\n"
            "```text\noutput\n```\n```sh\npatchbake fetch\n```\n")
    assert readme_blocks(text) == [(4, "make test\n", "needs root"),
                                   (10, "patchbake fetch\n", None)]


def test_chain_names_its_prerequisites() -> None:
    """The chain's introduction says which make target each kind of block needs: a reader
    who ran only `make demo` learns why the suite line fails before running it."""
    text = (REPO / "README.md").read_text()
    intro = text[text.index("## The chain, one command each"):]
    intro = intro[:intro.index("```")]
    for target in ("`make demo`", "`make services`", "`make setup-suite`"):
        assert target in " ".join(intro.split()), target
    assert "runs again" in intro


def _copy_repo(dest: Path) -> Path:
    """Tracked and untracked-but-not-ignored files: what a fresh clone of this work holds."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                            "--exclude-standard"], cwd=REPO, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


@pytest.mark.slow
def test_readme_commands_run_as_written(tmp_path: Path, shared_home: Path,
                                        registry: str) -> None:
    blocks = readme_blocks((REPO / "README.md").read_text())
    runnable = [b for b in blocks if b[2] is None]
    assert runnable, "the README has no runnable sh block"
    root = _copy_repo(tmp_path / "clone")
    home = tmp_path / "home"
    seed_sdist(shared_home, home)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    shim = bindir / "patchbake"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m patchbake "$@"\n')
    shim.chmod(0o755)
    env = {**os.environ, "PATCHBAKE_HOME": str(home), "PATCHBAKE_NO_PROGRESS": "1",
           "NO_COLOR": "1", "PYTHONPATH": str(root / "tools"),
           "PATH": f"{bindir}:{os.environ['PATH']}"}
    env.pop("PATCHBAKE_PIPELINE", None)

    def bash(script: str, where: str) -> None:
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=root, env=env,
                           capture_output=True, text=True, timeout=1800, check=False)
        assert r.returncode == 0, (f"{where} exited {r.returncode}\n--- script\n{script}"
                                   f"--- stdout\n{r.stdout[-3000:]}\n--- stderr\n"
                                   f"{r.stderr[-3000:]}")

    bash("patchbake run\n", "make demo's `patchbake run`")
    for attempt in ("", " (second run of the chain)"):
        for line, script, _ in runnable:
            bash(script.replace(README_REGISTRY, registry),
                 f"README.md block at line {line}{attempt}")
