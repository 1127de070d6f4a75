"""``patchbake report RELEASE --out DIR``: one static HTML page about a release.

Every "signed", "verified" or "passed" on the page is the result of a check made in the
same run (recheck.py): the ledger, the VSA against the trust policy, every signed input the
release recorded (bytes, signature, subject), the image record (the identity chain is shown
only when it has the recorded bytes), the channel's gates as pipeline.yaml declares them. A broken check is shown as broken, in its
place and in the verdict, and ``write`` reports it (the command then exits 64 after writing
the page). The release manifest must load (its hash is its id), or there is no page. The
next channel's own gates are evaluated now on signed inputs only (so the page says what
blocks the next step, with the gate's reason). Jinja2 with autoescape; no script, no
external asset: the style is inline and the benchmark chart is inline SVG.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from ..config import Pipeline
from ..errors import ImageError
from ..fsutil import atomic_write, read_input
from . import manifest
from .create import evaluation, previous_benchmark
from .facts import Facts
from .gates import GATES, Decision
from .recheck import Rechecked, recheck

TEMPLATE = "report.html.j2"
STORE_FREE = ("evidence", "capability", "benchmark", "approval")  # need no store


@dataclass(frozen=True)
class Bar:
    metric: str
    value: float
    unit: str
    better: str
    previous: float | None


def identity_chain(rel: manifest.Release, record: dict[str, Any] | None) -> list[tuple[str, str]]:
    up, patch = rel.manifest.upstream, rel.manifest.patch
    image = rel.manifest.images[0]
    rec = record or {}  # the image record's document as committed
    layers = rec.get("layers") or [{}]
    return [
        ("upstream pin", "-" if up is None else up.pin),
        ("sdist sha256", "-" if up is None else str(up.archive_sha256)),
        ("pristine tree digest", "-" if up is None else str(up.tree_digest)),
        ("canonical patch sha256", "-" if patch is None else patch.sha256),
        ("FILES.txt sha256", "-" if patch is None else patch.files_sha256),
        ("patched tree digest", str(rec.get("patched_tree_digest", "-"))),
        ("overlay layer diff_id", str(layers[-1].get("diff_id", "-"))),
        ("config digest", str(image.config_digest or "-")),
        ("manifest digest", str(rel.digest)),
    ]


def _next_channel(pipeline: Pipeline, rel: manifest.Release) -> tuple[str | None, list[Decision],
                                                                       Facts]:

    chs = pipeline.channels
    names = list(chs)
    if rel.channel not in chs or names.index(rel.channel) + 1 >= len(names):
        return None, [], Facts()
    nxt = chs[names[names.index(rel.channel) + 1]]
    ev = evaluation(pipeline, None, f"{rel.image}@{rel.digest}")
    ev.evaluating = nxt
    out = []
    for g in nxt.gates:
        if g.declared_in != nxt.name:
            continue
        if g.kind not in STORE_FREE:
            out.append(Decision(g.declared_in, g.kind, "error", "not evaluated in the report "
                                "(needs the store): run `patchbake release gates`"))
            continue
        try:
            st, reason = GATES[g.kind](ev, g)
        except Exception as exc:  # noqa: BLE001 - the page shows it; it blocks either way
            st, reason = "error", f"{type(exc).__name__}: {exc}"
        out.append(Decision(g.declared_in, g.kind, st,
                            reason.replace(f"{pipeline.root}/", "")))
    return nxt.name, out, ev.facts


def bars(figures: dict[str, Any], previous: dict[str, Any] | None) -> list[Bar]:
    out = []
    for metric, f in sorted(figures.items()):
        prev = (previous or {}).get(metric, {}).get("value")
        out.append(Bar(metric, float(f["value"]), str(f.get("unit", "")),
                       str(f.get("better", "")), float(prev) if prev is not None else None))
    return out


def render(pipeline: Pipeline, policy_path: Path, release: str) -> tuple[str, Rechecked]:
    rel = manifest.load(pipeline.root, release)
    checked = recheck(pipeline.root, policy_path, rel, pipeline)
    rec_path = rel.manifest.images[0].record
    # the chain is read from the record only once it has the bytes the release recorded
    # (recheck's "image record"); otherwise the page shows that check BROKEN instead
    chain_ok = not rec_path or checked.ok("image record")
    record = json.loads(read_input(pipeline.root / rec_path, "the image record", ImageError)) \
        if rec_path and chain_ok else None
    nxt, next_gates, facts = _next_channel(pipeline, rel)
    bench, bench_ok = rel.manifest.benchmark, True
    if bench is not None:
        bench_ok = checked.ok(bench.path)
    elif facts.benchmark is not None:  # verified by the next channel's gate, in this run
        bench = facts.benchmark
    previous = None
    if bench:
        # only figures measured on the same GPU are drawn against these
        before = None
        if bench.gpu is not None and bench.capability is not None:
            before = previous_benchmark(pipeline.root, policy_path)(
                nxt or rel.channel, bench.name, (bench.gpu, bench.capability))
        previous = dict(before.figures) if before else None
    env = jinja2.Environment(loader=jinja2.PackageLoader("patchbake", "data"),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    html = env.get_template(TEMPLATE).render(
        rel=rel, chain=identity_chain(rel, record) if chain_ok else [], chain_ok=chain_ok,
        checked=checked,
        next_channel=nxt, next_gates=next_gates,
        next_blocked=any(d.status != "pass" for d in next_gates),
        bench=bench, bench_ok=bench_ok,
        bars=bars(bench.figures, previous) if bench else [],
        evidence=rel.manifest.evidence)
    return html, checked


def write(pipeline: Pipeline, policy_path: Path, release: str, out: Path
          ) -> tuple[Path, Rechecked]:
    """The page, written even when a check is broken (it says which): the caller fails."""
    html, checked = render(pipeline, policy_path, release)
    out.mkdir(parents=True, exist_ok=True)
    page = out / "index.html"
    atomic_write(page, html.encode("utf-8"))
    return page, checked
