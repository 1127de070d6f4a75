"""Inputs that are not regular files (a FIFO, a socket, a device, a directory, a link to a
FIFO) are refused at once with one line and the reader's exit code, never waited on; and
an error message that prints a hostile value (a YAML alias bomb) is bounded in time and
length."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from patchbake import config, entry
from patchbake.config import images as image_defs
from patchbake.digest import Digest
from patchbake.errors import (ConfigError, EvidenceError, GuardError, InputLimitError,
                              PatchbakeError, shown)
from patchbake.evidence import records
from patchbake.fsutil import read_input, read_optional
from patchbake.patchset.patched import read_lineage_patch
from patchbake.suites.result import SuiteResult

PROMPT_S = 5.0


def promptly(fn: Callable[[], Any]) -> BaseException | None:
    """Run ``fn`` in a thread; fail if it has not returned within PROMPT_S (a blocked
    open would otherwise hang the test run). Returns what it raised."""
    raised: list[BaseException] = []

    def call() -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test to check
            raised.append(exc)

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(PROMPT_S)
    assert not t.is_alive(), f"still blocked after {PROMPT_S} s"
    return raised[0] if raised else None


@pytest.fixture
def unix_socket(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    yield path
    s.close()


def _fifo(p: Path) -> str:
    os.mkfifo(p)
    return "a FIFO (named pipe)"


def _link_to_fifo(p: Path) -> str:
    os.mkfifo(p.with_name(p.name + ".fifo"))
    p.symlink_to(p.name + ".fifo")
    return "a FIFO (named pipe)"


def _char_device(p: Path) -> str:
    p.symlink_to(os.devnull)
    return "a character device"


def _directory(p: Path) -> str:
    p.mkdir()
    return "a directory"


SPECIALS = {"fifo": _fifo, "link to a fifo": _link_to_fifo, "char device": _char_device,
            "directory": _directory}


def _refused(fn: Callable[[], Any], cls: type[PatchbakeError], code: int, path: Path,
             kind: str) -> PatchbakeError:
    exc = promptly(fn)
    assert isinstance(exc, cls), exc
    assert exc.exit_code == code
    line = exc.one_line()
    assert "\n" not in line and str(path) in line
    assert f"is {kind}, not a regular file" in line, line
    return exc


@pytest.mark.parametrize("make", SPECIALS.values(), ids=list(SPECIALS))
def test_the_reader_refuses_what_is_not_a_regular_file(tmp_path: Path,
                                                       make: Callable[[Path], str]) -> None:
    p = tmp_path / "input"
    kind = make(p)
    _refused(lambda: read_input(p, "input", ConfigError), ConfigError, 3, p, kind)
    _refused(lambda: read_optional(p, "input", ConfigError), ConfigError, 3, p, kind)


def test_a_socket_is_refused(unix_socket: Path) -> None:
    _refused(lambda: read_input(unix_socket, "input", ConfigError), ConfigError, 3,
             unix_socket, "a socket")


def test_a_missing_file_and_the_cap(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="input .*nope does not exist"):
        read_input(tmp_path / "nope", "input", ConfigError)
    assert read_optional(tmp_path / "nope", "input", ConfigError) is None
    (tmp_path / "big").write_bytes(b"x" * 11)
    assert read_input(tmp_path / "big", "input", ConfigError, cap=11) == b"x" * 11
    with pytest.raises(InputLimitError, match="11 bytes exceeds the cap of 10") as e:
        read_input(tmp_path / "big", "input", ConfigError, cap=10)
    assert e.value.exit_code == 15


@pytest.mark.parametrize("make", SPECIALS.values(), ids=list(SPECIALS))
def test_pipeline_yaml(tmp_path: Path, make: Callable[[Path], str]) -> None:
    p = tmp_path / "pipeline.yaml"
    kind = make(p)
    _refused(lambda: config.load(p), ConfigError, 3, p, kind)


@pytest.mark.parametrize("make", SPECIALS.values(), ids=list(SPECIALS))
def test_image_definition(tmp_path: Path, make: Callable[[Path], str]) -> None:
    p = tmp_path / "serve.yaml"
    kind = make(p)
    _refused(lambda: image_defs.load_file(p, "serve", tmp_path), ConfigError, 3, p, kind)


@pytest.mark.parametrize("make", SPECIALS.values(), ids=list(SPECIALS))
def test_suite_result(tmp_path: Path, make: Callable[[Path], str]) -> None:
    p = tmp_path / "result.json"
    kind = make(p)
    exc = _refused(lambda: SuiteResult.load(p), EvidenceError, 50, p, kind)
    assert isinstance(exc, EvidenceError) and exc.reason == "unreadable"


@pytest.mark.parametrize("make", SPECIALS.values(), ids=list(SPECIALS))
def test_evidence_envelope(tmp_path: Path, make: Callable[[Path], str]) -> None:
    p = tmp_path / "toy.dsse.json"
    kind = make(p)
    # the file is read before the policy is consulted: no policy is needed to refuse it
    exc = _refused(lambda: records.verify_file(p, Digest.parse("sha256:" + "0" * 64),
                                               None),  # type: ignore[arg-type]
                   EvidenceError, 50, p, kind)
    assert isinstance(exc, EvidenceError) and exc.reason == "unreadable"


@pytest.mark.parametrize("make", SPECIALS.values(), ids=list(SPECIALS))
def test_files_txt_and_the_patch(tmp_path: Path, make: Callable[[Path], str]) -> None:
    patch, files = tmp_path / "p.patch", tmp_path / "FILES.txt"
    patch.write_bytes(b"")
    kind = make(files)
    _refused(lambda: read_lineage_patch(patch, files), GuardError, 21, files, kind)
    patch.unlink()
    files.unlink() if not files.is_dir() else files.rmdir()
    files.write_bytes(b"")
    kind = make(patch)
    _refused(lambda: read_lineage_patch(patch, files), GuardError, 21, patch, kind)


def test_the_cli_answers_a_fifo_pipeline_at_once(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "pipeline.yaml"
    os.mkfifo(fifo)
    rc: list[int] = []
    assert promptly(lambda: rc.append(entry.main(["--pipeline", str(fifo), "patch",
                                                  "check"]))) is None
    err = capsys.readouterr().err
    assert rc == [3]
    assert err.count("\n") == 1 and "is a FIFO (named pipe), not a regular file" in err


# -- bounded messages -------------------------------------------------------------------
def _bomb(levels: int = 9) -> str:
    """YAML for a list of nine aliases of nine aliases ... of one list: 9**levels items."""
    lines = ['l0: &l0 ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(lines)


def test_shown_is_bounded_in_time_and_length() -> None:
    import yaml
    doc = yaml.safe_load(_bomb())
    start = time.monotonic()
    text = shown(doc["l8"])
    assert time.monotonic() - start < 0.1
    assert len(text) <= 160 and text.startswith("[[[")
    assert shown("x" * 10_000, 40).endswith("...") and len(shown("x" * 10_000, 40)) == 40
    assert shown("torch") == "'torch'" and shown(2) == "2"


PIPELINE = """\
version: 1
name: demo
lineages:
  v1:
    name: demo
    upstream: {{kind: path, version: {version}, path: up, pins: {{torch: {pin}}}}}
    patch: patch/demo.patch
    files: patch/FILES.txt
    source_record: patch/SOURCE
"""


def _inline_bomb() -> str:
    """The bomb as one flow sequence whose items define the anchors they then repeat (a
    separate top-level key would be refused as unknown before the bomb is reached)."""
    items = ['&l0 ["x","x","x","x","x","x","x","x","x"]']
    items += [f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 9)]
    return "[" + ", ".join(items) + "]"


@pytest.mark.parametrize("field, version, pin", [
    ("maps package names to version strings", '"1.0"', _inline_bomb()),
    ("'lineages.v1.upstream.version' must be of type string", _inline_bomb(), '"2.11"'),
])
def test_an_alias_bomb_in_an_error_message(tmp_path: Path, field: str, version: str,
                                           pin: str) -> None:
    p = tmp_path / "pipeline.yaml"
    p.write_text(PIPELINE.format(version=version, pin=pin))
    start = time.monotonic()
    exc = promptly(lambda: config.load(p))
    assert time.monotonic() - start < 1.0
    assert isinstance(exc, ConfigError) and exc.exit_code == 3
    assert field in exc.one_line() and len(exc.one_line()) < 400, exc.one_line()


def test_release_inputs_that_are_fifos_are_refused_promptly(tmp_path: Path) -> None:
    """The ledger, a release's manifest and a signed statement a release names: a FIFO in
    their place is refused with the ledger's, the release's and the evidence's own exit
    codes, never waited on."""
    from patchbake.release import attest, ledger, manifest

    rdir = tmp_path / "releases"
    rdir.mkdir()
    os.mkfifo(ledger.path_of(rdir))
    exc = promptly(lambda: ledger.read(rdir))
    assert isinstance(exc, PatchbakeError) and exc.exit_code == 61, exc
    assert "is a FIFO (named pipe), not a regular file" in exc.one_line()

    rid = "0" * 64
    (rdir / rid).mkdir()
    os.mkfifo(rdir / rid / manifest.MANIFEST_NAME)
    exc = promptly(lambda: manifest.load_from(rdir, rid))
    assert isinstance(exc, PatchbakeError) and exc.exit_code == 62, exc
    assert "is a FIFO (named pipe), not a regular file" in exc.one_line()

    statement = tmp_path / "bench.dsse.json"
    os.mkfifo(statement)
    exc = promptly(lambda: attest._open(statement, Digest.of(b"x"), attest.BENCHMARK_TYPE, {}))
    assert isinstance(exc, EvidenceError) and exc.reason == "unreadable", exc


def test_a_member_name_from_the_document_is_bounded_in_the_refusal() -> None:
    """A reader names the member it refuses; where that name comes from the document (a
    probe's name), a megabyte of it is cut short, not printed whole."""
    from patchbake.fields import Fields

    doc = {"probes": {"K" * (1 << 20): 1}}
    probes = Fields(doc, "result.json", ConfigError, ("probes",)).member("probes", (),
                                                                          others=True)
    with pytest.raises(ConfigError) as e:
        for name in probes.doc:
            probes.mapping(name)
    line = e.value.one_line()
    assert line.startswith("result.json: field 'probes.KKKK") and "must be a JSON object" in line
    assert len(line) < 400
