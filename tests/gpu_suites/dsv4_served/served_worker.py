"""One engine, one knob value: serve the tiny model's prompts alone and in batches.

Run by the suite in a fresh process per knob value (vLLM reads its envs once at start
and caches them), with ``vllm`` importable from the tree under test. Writes one JSON
document: every completion's token ids and the exact bits of its logprobs, the knob
value vLLM's envs reports, and where each loaded module and shared object came from.

    python3 served_worker.py --model DIR --out run.json   # knob from the environment
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_model import prompt_ids  # noqa: E402

KNOB = "VLLM_DSV4_DETERMINISTIC_TOPK"
# below 2,048 tokens (the top-k is a no-op), above it, and above the ~11k point where
# the seed saw a second source; D is a second 4k prompt to change batch composition
PROMPTS = {"A1k": (1024, 1), "B4k": (4096, 2), "C12k": (12288, 3), "D4k": (4096, 4)}
SCENARIOS = {
    "alone-A1k": ["A1k"], "alone-B4k": ["B4k"], "alone-C12k": ["C12k"],
    "batch-ABC": ["A1k", "B4k", "C12k"], "batch-CBA": ["C12k", "B4k", "A1k"],
    "batch-DCB": ["D4k", "C12k", "B4k"],
}
RUNS = 2
MAX_TOKENS = 16


def origins(roots: list[Path]) -> dict[str, object]:
    """Which loaded files came from the bundle (the image's) and which from the machine."""
    def side(path: str) -> str:
        p = Path(path).resolve()
        return "image" if any(p.is_relative_to(r) for r in roots) else "machine"

    mods: dict[str, set[str]] = {"image": set(), "machine": set()}
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None)
        if f:
            mods[side(f)].add(name.split(".")[0])
    sos: dict[str, set[str]] = {"image": set(), "machine": set()}
    for line in Path("/proc/self/maps").read_text().splitlines():
        path = line.split()[-1] if len(line.split()) >= 6 else ""
        if ".so" in path and path.startswith("/"):
            sos[side(path)].add(path)
    return {"packages": {k: sorted(v) for k, v in mods.items()},
            "shared_objects": {k: sorted(v) for k, v in sos.items()}}


class IndexCapture:
    """The indexer's selected indices at prefill, taken by a forward hook on vLLM's own
    ``Indexer`` modules (eager mode: the hook runs after the top-k and the knob's sort,
    before the sparse attention reads the buffer)."""

    def __init__(self) -> None:
        self.active: str | None = None
        self.taken: dict[str, list[object]] = {}
        self.first: dict[str, list[object]] = {}
        self.errors: list[str] = []

    def hook(self, module: object, inputs: tuple, output: object) -> None:
        if self.active is None:
            return
        import torch

        try:
            buf = output if isinstance(output, torch.Tensor) else module.topk_indices_buffer  # type: ignore[attr-defined]
            got = self.taken.setdefault(self.active, [])
            if len(got) < self.layers:  # the prefill's forward only
                got.append(buf[:inputs[0].shape[0]].cpu())
        except Exception as e:  # noqa: BLE001 - a broken probe must not stop the engine
            self.errors.append(repr(e)[:300])

    def install(self, model: object) -> int:
        mods = [m for m in model.modules() if type(m).__name__ == "Indexer"]  # type: ignore[attr-defined]
        for m in mods:
            m.register_forward_hook(self.hook)
        self.layers = len(mods)
        return len(mods)

    def compare(self, scenario: str, run: int) -> dict[str, object] | None:
        """Run 0 keeps the tensors; later runs report how many rows differ from it."""
        import torch

        now = self.taken.pop(scenario, [])
        if run == 0 or scenario not in self.first:
            self.first[scenario] = now
            return None
        rows = order = sets = 0
        for a, b in zip(self.first[scenario], now):
            rows += a.shape[0]
            order += int((a != b).any(dim=-1).sum())
            sets += int((torch.sort(a, dim=-1).values != torch.sort(b, dim=-1).values)
                        .any(dim=-1).sum())
        return {"scenario": scenario, "run": run, "layers": len(now), "rows": rows,
                "rows_in_another_order": order, "rows_with_another_set": sets}


def completion(out: object) -> dict[str, object]:
    c = out.outputs[0]  # type: ignore[attr-defined]
    lps = [step[tok].logprob for step, tok in zip(c.logprobs, c.token_ids)]
    record = {"tokens": list(c.token_ids), "logprobs": [float(x).hex() for x in lps]}
    record["sha256"] = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()
    return record


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--roots", type=Path, nargs="*", default=[],
                    help="directories whose files count as the image's")
    args = ap.parse_args()
    t0 = time.time()
    import vllm.envs as envs
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    # vLLM picks the sparse MLA backend (FlashAttention-3's on sm90); PATCHBAKE_SERVED_BACKEND
    # names another (FLASHMLA_SPARSE) to see whether the indices' order reaches its output
    backend = os.environ.get("PATCHBAKE_SERVED_BACKEND") or None
    llm = LLM(model=str(args.model), tokenizer=str(args.model), load_format="dummy",
              dtype="bfloat16", enforce_eager=True, max_model_len=16384,
              max_num_batched_tokens=16384, max_num_seqs=8, enable_prefix_caching=False,
              gpu_memory_utilization=0.2, seed=0, attention_backend=backend)
    started = time.time() - t0
    capture = IndexCapture()
    hooked = llm.apply_model(capture.install)
    backends = llm.apply_model(lambda model: sorted(
        {type(m.impl).__name__ for m in model.modules() if hasattr(m, "impl")}))
    prompts = {k: TokensPrompt(prompt_token_ids=prompt_ids(n, s)) for k, (n, s) in PROMPTS.items()}
    samplings = {
        "greedy": SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, logprobs=1,
                                 ignore_eos=True),
        "seeded": SamplingParams(temperature=1.0, seed=1234, max_tokens=MAX_TOKENS,
                                 logprobs=1, ignore_eos=True),
    }
    results, indices = [], []
    for run in range(RUNS):
        for scen, names in SCENARIOS.items():
            for sname, sp in samplings.items():
                capture.active = scen if scen.startswith("alone") and sname == "greedy" else None
                outs = llm.generate([prompts[n] for n in names], sp, use_tqdm=False)
                if capture.active:
                    capture.active = None
                    diff = capture.compare(scen, run)
                    if diff:
                        indices.append(diff)
                for name, out in zip(names, outs):
                    results.append({"run": run, "scenario": scen, "sampling": sname,
                                    "prompt": name, **completion(out)})
    doc = {
        "knob_env": os.environ.get(KNOB),
        "knob_seen_by_vllm": getattr(envs, KNOB, None),
        "vllm_file": envs.__file__,
        "engine_start_s": round(started, 1),
        "total_s": round(time.time() - t0, 1),
        "results": results,
        "indexer_modules_hooked": hooked,
        "attention_impls": backends,
        "indices_vs_run0": indices,
        "index_capture_errors": capture.errors[:5],
        "origins": origins([r.resolve() for r in args.roots]),
    }
    args.out.write_text(json.dumps(doc, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
