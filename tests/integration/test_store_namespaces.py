"""A store shared by two PID namespaces (two containers on one host): a writer in one is
never swept by a ``gc`` or a store opening in the other (``unshare --pid --fork``).

The writer's process id is chosen to name no process outside its namespace, which is
exactly what made the old liveness test (``kill(pid, 0)``) call it dead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from patchbake.store import Store

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                       reason="needs root and unshare(1) for a new PID namespace"),
]
TOOLS = Path(__file__).resolve().parents[2] / "tools"

# In the new namespace /proc is still the outer one: a pid that exists there is one the
# outer namespace uses, so the writer forks until its own number is free outside.
WRITER = """
import os, sys
from patchbake import staging
from patchbake.store import Store
while True:
    child = os.fork()
    if child == 0:
        me = os.getpid()
        if os.path.exists(f"/proc/{me}"):
            os._exit(3)
        store = Store.open(sys.argv[1], sweep=False)
        d = store.tmpdir("extract")
        (d / "tree").mkdir()
        (d / "tree" / "half.py").write_bytes(b"x = 1\\n")
        fd, blob = staging.new_file(store.root / "tmp", f"blob.{me}.")
        print(me, d, blob, flush=True)
        sys.stdin.readline()  # working until told to finish
        os._exit(0)
    _, status = os.waitpid(child, 0)
    if os.waitstatus_to_exitcode(status) != 3:
        break
"""


def test_a_writer_in_another_pid_namespace_is_not_swept(tmp_path: Path) -> None:
    root = tmp_path / "store"
    Store.open(root)
    env = {**os.environ, "PYTHONPATH": str(TOOLS)}
    writer = subprocess.Popen(["unshare", "--pid", "--fork", sys.executable, "-c", WRITER,
                               str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=env)
    try:
        assert writer.stdout is not None and writer.stdin is not None
        pid, staged, blob = writer.stdout.readline().split()
        assert not os.path.exists(f"/proc/{pid}")  # its number names nothing out here
        gc = subprocess.run([sys.executable, "-m", "patchbake", "store", "gc", "--grace", "0"],
                            env={**env, "PATCHBAKE_HOME": str(root)}, capture_output=True,
                            text=True, timeout=120)
        assert gc.returncode == 0, gc.stderr
        Store.open(root)  # every command sweeps when it opens the store
        assert (Path(staged) / "tree" / "half.py").is_file() and Path(blob).is_file()
        fsck = subprocess.run([sys.executable, "-m", "patchbake", "store", "fsck", "--json"],
                              env={**env, "PATCHBAKE_HOME": str(root)}, capture_output=True,
                              text=True, timeout=120)
        assert json.loads(fsck.stdout)["litter"] == [], fsck.stdout  # nor reported as litter
        writer.stdin.write("done\n")
        writer.stdin.flush()
        assert writer.wait(timeout=60) == 0
    finally:
        writer.kill()
        writer.wait()
    # its writer gone, the same entries are litter and the next opening reclaims them
    swept = Store.open(root, sweep=False).sweep_tmp()
    assert sorted(map(str, swept)) == sorted([staged, blob])
