"""`patchbake report` says "signed" or "verified" only of what it checked in the same run:
a deleted or corrupted VSA, a corrupted evidence envelope, a broken ledger show as BROKEN
on the page, and the command exits 64 after writing it (the browser test is
tests/integration/test_release_report.py)."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from patchbake.entry import main
from patchbake.errors import ReportBrokenError
from patchbake.release import ledger, manifest
from release_support import Keys, cli_repo, make_release

DIGEST = "sha256:" + "5e" * 32


@pytest.fixture
def released(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
             ) -> tuple[Path, Keys, manifest.Release]:
    root, k = cli_repo(tmp_path, monkeypatch)
    return root, k, make_release(root, k, DIGEST)


def page_text(out: Path) -> str:
    body = re.sub(r"(?s)<style[^>]*>.*?</style>", " ", (out / "index.html").read_text())
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())


def verdict(out: Path) -> str:
    m = re.search(r'(?s)<div class="banner [^"]+" id="verdict">(.*?)</div>',
                  (out / "index.html").read_text())
    assert m
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", m.group(1))).split())


def _flip(path: Path) -> None:
    env = json.loads(path.read_text())
    payload = bytearray(env["payload"].encode())
    payload[20] = ord("B") if payload[20] != ord("B") else ord("C")
    env["payload"] = payload.decode()
    path.write_text(json.dumps(env))


def test_an_intact_release_is_reported_as_checked_in_this_run(
        released: tuple[Path, Keys, manifest.Release], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    _, _, rel = released
    out = tmp_path / "report"
    assert main(["report", rel.id, "--out", str(out)]) == 0, capsys.readouterr().err
    said = verdict(out)
    assert "Checked in this run: the decision is signed by release" in said
    assert "4 signed statement(s) verify" in said  # 2 evidence, benchmark, approval
    text = page_text(out)
    assert "BROKEN" not in text and "Checks made in this run" in text
    assert "signed by evidence, about " + DIGEST in text


def _vsa(root: Path, rel: manifest.Release) -> Path:
    return rel.path.parent / manifest.VSA_NAME


def _evidence(root: Path, rel: manifest.Release) -> Path:
    return root / "manifests/evidence" / DIGEST[7:] / "dsv4-topk-gpu.dsse.json"


BREAKS: dict[str, tuple[Callable[[Path, manifest.Release], Path], Callable[[Path], object],
                        str, str]] = {
    "VSA deleted": (_vsa, lambda p: p.unlink(), "VSA", "the release's VSA"),
    "VSA corrupted": (_vsa, _flip, "VSA", "does not verify"),
    "VSA re-signed by an evidence key": (
        _vsa, lambda p: p.write_text(p.read_text().replace('"keyid": "', '"keyid": "00', 1)),
        "VSA", "only a key whose trust-policy role is 'release' signs VSAs"),
    "evidence corrupted": (_evidence, _flip, "dsv4-topk-gpu.dsse.json", "does not verify"),
    "evidence deleted": (_evidence, lambda p: p.unlink(), "dsv4-topk-gpu.dsse.json",
                         "dsv4-topk-gpu.dsse.json does not exist"),
    "ledger altered": (lambda root, rel: manifest.releases_dir(root) / ledger.NAME,
                       lambda p: p.write_bytes(p.read_bytes().replace(
                           b'"channel":"sm89-stable"', b'"channel":"sm89-stablE"', 1)),
                       "ledger", "ledger.jsonl:1"),
}


@pytest.mark.parametrize("name", list(BREAKS))
def test_a_broken_record_is_shown_broken_never_signed(
        released: tuple[Path, Keys, manifest.Release], tmp_path: Path,
        capsys: pytest.CaptureFixture[str], name: str) -> None:
    root, _, rel = released
    target, mutate, subject, reason = BREAKS[name]
    mutate(target(root, rel))
    out = tmp_path / "report"
    capsys.readouterr()
    assert main(["report", rel.id, "--out", str(out)]) == ReportBrokenError.exit_code == 64
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.splitlines()) == 1
    assert "broken check(s); first:" in captured.err and subject in captured.err
    said = verdict(out)
    assert said.startswith("BROKEN:") and reason in said, said
    text = page_text(out)
    assert "the decision is signed" not in text and "Checked in this run" not in text
    assert str(root) not in text
    if subject == "VSA":
        assert "(unverified record)" in text
    if subject == "dsv4-topk-gpu.dsse.json":  # its matrix row: BROKEN, not its signer
        row = re.search(r"dsv4-topk-gpu NVIDIA L40S 8\.9 \S+ (.{0,40})", text)
        assert row and row.group(1).startswith("BROKEN"), text
    if subject == "ledger":
        assert "No entry is shown" in text
