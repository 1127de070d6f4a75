"""`patchbake init`: a new pipeline.yaml pinned through pip's configured index (here a
PEP 503 tree on disk, which pip reads as well), outside any repository."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from patchbake import config
from patchbake.entry import main

SHA = hashlib.sha256(b"sdist bytes").hexdigest()


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "simple"
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "index.html").write_text(
        "<html><body>\n"
        f'<a href="vllm-0.25.1.tar.gz#sha256={SHA}">vllm-0.25.1.tar.gz</a>\n'
        '<a href="vllm-0.26.0.tar.gz">vllm-0.26.0.tar.gz</a>\n'
        f'<a href="vllm-0.25.1-py3-none-any.whl#sha256={SHA}">vllm-0.25.1-py3-none-any.whl</a>\n'
        "</body></html>\n")
    monkeypatch.setenv("PIP_INDEX_URL", root.as_uri())
    monkeypatch.setenv("PIP_CONFIG_FILE", str(tmp_path / "no-pip.conf"))
    monkeypatch.delenv("PATCHBAKE_PIPELINE", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return root


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_init_writes_a_pipeline_that_loads_with_the_indexs_pin(
        index: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, "--json", "init", "--vllm", "0.25.1", "--name", "my-fix")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["lineage"] == "v0.25.1" and doc["sha256"] == SHA
    assert doc["sdist"] == "vllm-0.25.1.tar.gz" and doc["index"] == "PIP_INDEX_URL"
    p = config.load(Path("pipeline.yaml"))
    up = p.lineage().upstream
    assert (up.kind, up.version, up.filename, up.sha256) == ("index", "0.25.1",
                                                             "vllm-0.25.1.tar.gz", SHA)
    assert p.lineage().patch.name == "my-fix-v0.25.1.patch"
    assert str(index) not in Path("pipeline.yaml").read_text()  # no index address written


def test_init_never_overwrites(index: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Path("pipeline.yaml").write_text("mine\n")
    rc, _, err = run(capsys, "init", "--vllm", "0.25.1")
    assert rc == 3 and "pipeline.yaml already exists; nothing was written" in err
    assert Path("pipeline.yaml").read_text() == "mine\n"


@pytest.mark.parametrize("argv, code, message", [
    (["--vllm", "latest"], 2, "--vllm 'latest' is not a version such as 0.25.1"),
    (["--vllm", "0.25.1", "--name", "My Fix"], 2, "--name 'My Fix' is not a patch name"),
    (["--vllm", "0.9.9"], 10, "has no sdist of version 0.9.9 (newest: 0.25.1, 0.26.0)"),
    (["--vllm", "0.26.0"], 10, "the index states no sha256 for vllm-0.26.0.tar.gz"),
])
def test_init_refuses_what_it_cannot_pin(index: Path, capsys: pytest.CaptureFixture[str],
                                         argv: list[str], code: int, message: str) -> None:
    rc, _, err = run(capsys, "init", *argv)
    assert rc == code and message in err, err
    assert not Path("pipeline.yaml").exists()


def test_outside_a_repository_commands_say_what_they_need(
        index: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, "run")
    assert rc == 3 and "no pipeline.yaml in" in err and "patchbake init --vllm VERSION" in err
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "bundle.json").write_text("{}")
    rc, _, err = run(capsys, "release", "verify", "b3df6796ec1c0ed1", "--bundle", str(bundle))
    assert rc == 2 and "pass --trust-policy FILE" in err, err
