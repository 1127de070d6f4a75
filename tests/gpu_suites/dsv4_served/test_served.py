"""vLLM's engine serving the tiny DeepSeek sparse-attention model: is it reproducible?

Each knob value runs one engine (``served_worker.py``) that serves prompts of 1k, 4k and
12k tokens alone and in three batches of different composition and order, twice, greedy
and seeded. The claim under test: with the knob at 1 (ascending) or 2 (descending) every
prompt's completion (token ids and the exact bits of its logprobs) is the same in every
run and every batch. With 0 (vLLM's own behaviour) the suite reports what differs.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict

import pytest

pytestmark = pytest.mark.gpu

SAMPLINGS = ("greedy", "seeded")
LONG = ("B4k", "C12k", "D4k")  # above index_topk: the top-k really selects


def digests(doc: dict, sampling: str) -> dict[str, dict[str, list[str]]]:
    """prompt -> digest -> the (run, scenario) pairs that gave it."""
    seen: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for r in doc["results"]:
        if r["sampling"] == sampling:
            seen[r["prompt"]][r["sha256"]].append(f"run{r['run']}/{r['scenario']}")
    return seen


def describe(seen: dict[str, dict[str, list[str]]]) -> dict[str, int]:
    return {prompt: len(ds) for prompt, ds in sorted(seen.items())}


@pytest.mark.parametrize("knob", ["0", "1", "2"])
def test_knob_reaches_the_engine(run_of, knob: str, record_property) -> None:
    doc = run_of(knob)
    record_property("knob_seen_by_vllm", str(doc["knob_seen_by_vllm"]))
    record_property("engine_start_s", str(doc["engine_start_s"]))
    # vLLM's own env parser must know the knob and hold the value the engine started with
    # (on the pristine tree it does not exist: None).
    assert doc["knob_seen_by_vllm"] == int(knob), (
        f"vllm.envs reports {doc['knob_seen_by_vllm']!r} for {knob}: the tree "
        f"({doc['vllm_file']}) does not register the knob")


@pytest.mark.parametrize("sampling", SAMPLINGS)
@pytest.mark.parametrize("knob", ["1", "2"])
def test_bit_identical_across_runs_and_batches(run_of, knob: str, sampling: str,
                                               record_property) -> None:
    seen = digests(run_of(knob), sampling)
    record_property("completions_sha256", hashlib.sha256(json.dumps(
        {p: sorted(ds) for p, ds in sorted(seen.items())}).encode()).hexdigest())
    varying = {p: dict(ds) for p, ds in seen.items() if len(ds) > 1}
    assert not varying, (f"{sampling} completions differ across runs or batches with the "
                         f"knob at {knob}: {json.dumps(varying)[:1500]}")


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_knob_off_is_reported(run_of, sampling: str, record_property) -> None:
    """vLLM's own behaviour: recorded (distinct completions per prompt), not judged."""
    seen = digests(run_of("0"), sampling)
    record_property("distinct_completions_per_prompt", json.dumps(describe(seen)))
    assert set(seen) == {"A1k", "B4k", "C12k", "D4k"}


def test_short_context_is_untouched(run_of) -> None:
    """Below index_topk the selection is a no-op: sorting must change nothing there."""
    for sampling in SAMPLINGS:
        off, on = digests(run_of("0"), sampling)["A1k"], digests(run_of("1"), sampling)["A1k"]
        assert len(off) == 1 and set(off) == set(on), (
            f"{sampling}: the 1k prompt changed with the knob at 1: {dict(off)} vs {dict(on)}")


@pytest.mark.xfail(reason="measured on the H200 (2026-12-02): with dummy weights, completions "
                   "are bit-identical for any index order, on both sparse MLA backends "
                   "(docs/payload.md)", strict=False)
def test_order_reaches_the_attention(run_of) -> None:
    """The control: descending order must change long prompts' logprobs somewhere."""
    asc, desc = digests(run_of("1"), "greedy"), digests(run_of("2"), "greedy")
    changed = [p for p in LONG if set(asc[p]) != set(desc[p])]
    assert changed, ("ascending and descending order give the same bits for every long "
                     "prompt: the indices' order does not reach the attention")


@pytest.mark.parametrize("knob", ["0", "1", "2"])
def test_selected_indices_keep_their_order(run_of, knob: str, record_property) -> None:
    """The indexer's prefill output, read by a hook on vLLM's own Indexer modules: with
    the knob at 1 or 2, a row that selects the same set as in the first run holds it in
    the same order (the patch's claim: the order becomes a function of the set). A row
    whose *set* changed is the second, set-level source the patch does not address
    (docs/payload.md): recorded, not judged. With 0 (vLLM's own order) all is recorded."""
    doc = run_of(knob)
    diffs = doc["indices_vs_run0"]
    record_property("indices_vs_run0", json.dumps(diffs))
    assert sum(doc["indexer_modules_hooked"]) and diffs, "no indexer output was captured"
    if knob != "0":
        moved = [d for d in diffs if d["rows_in_another_order"] > d["rows_with_another_set"]]
        assert not moved, (f"rows with the same selected set came back in another order "
                           f"with the knob at {knob}: {moved}")
