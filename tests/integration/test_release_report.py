"""`patchbake report` in a real browser: Debian's chromium, headless, renders the page
(--dump-dom) and takes a screenshot; the assertions are on what a person sees. The
screenshot is kept as a test artifact (tests/artifacts/, or $PATCHBAKE_TEST_ARTIFACTS)."""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from patchbake.entry import main
from patchbake.release import manifest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from release_support import make_release, make_repo

pytestmark = pytest.mark.integration

DIGEST = "sha256:" + "5e" * 32
ARTIFACTS = Path(os.environ.get("PATCHBAKE_TEST_ARTIFACTS",
                                Path(__file__).resolve().parents[1] / "artifacts"))


def chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("chromium")
    if not exe:
        pytest.skip("chromium is not installed (make setup installs Debian's chromium)")
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    return subprocess.run(
        [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", *args],
        capture_output=True, text=True, timeout=120, check=False)


def visible_text(dom: str) -> str:
    body = re.sub(r"(?s)<(style|script)[^>]*>.*?</\1>", " ", dom)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())


def _report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capability: str
            ) -> tuple[manifest.Release, Path]:
    """A release into 'validated' whose evidence and figures come from a GPU of
    ``capability``, and the report page made of it."""
    root = tmp_path / "repo"
    k = make_repo(root, tmp_path / "keys")
    rel = make_release(root, k, DIGEST, channel="validated", capability=capability)
    monkeypatch.setenv("PATCHBAKE_PIPELINE", str(root / "pipeline.yaml"))
    monkeypatch.setenv("PATCHBAKE_HOME", str(tmp_path / "store"))
    out = tmp_path / "report"
    assert main(["report", rel.id, "--out", str(out)]) == 0
    return rel, out / "index.html"


def test_report_shows_the_digest_and_the_blocked_gate_with_its_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rel, page = _report(tmp_path, monkeypatch, "9.0")
    source = page.read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", source), "external asset"
    assert "<script" not in source

    dom = chromium(tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-1000:]
    text = visible_text(dom.stdout)
    assert DIGEST in text and rel.id in text
    assert "Next channel 'sm89-stable' is BLOCKED" in text
    assert "capability : missing input: no passing GPU evidence from a compute capability " \
           "8.9 device (sm89 evidence)" in text
    assert "dsv4-topk-gpu NVIDIA H200 9.0" in text  # the evidence matrix row
    # the figures were measured on the H200 too: sm89-stable's benchmark gate says why it
    # does not take them, and the page draws no chart of figures no gate accepted
    assert "benchmark : benchmark 'dsv4-topk-gpu': measured on NVIDIA H200 (compute " \
           "capability 9.0), but 'sm89-stable' releases for 8.9" in text
    assert "No benchmark figures for this digest." in text and "<svg" not in dom.stdout

    shot = tmp_path / "report.png"
    got = chromium(tmp_path, f"--screenshot={shot}", "--window-size=1200,1600", page.as_uri())
    assert got.returncode == 0 and shot.stat().st_size > 10_000, got.stderr[-1000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shot, ARTIFACTS / "release-report.png")


def test_report_draws_the_figures_the_next_channel_takes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Evidence and figures from an L40S (8.9): sm89-stable's benchmark gate takes them (the
    first figures from that GPU are the baseline) and the page draws them."""
    _, page = _report(tmp_path, monkeypatch, "8.9")
    dom = chromium(tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-1000:]
    text = visible_text(dom.stdout)
    assert "benchmark PASS 2 signed figures from NVIDIA L40S (compute capability 8.9)" in text
    assert "<svg" in dom.stdout and 'id="bench-chart"' in dom.stdout
    assert "fused_us[15x512]" in text
