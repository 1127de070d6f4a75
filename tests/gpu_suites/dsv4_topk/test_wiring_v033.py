"""The 0.33.0 call sites, read from the source (what cannot run without vLLM's kernels).

vLLM 0.33.0 emits top-k indices consumed by sparse MLA in five places beyond the knob:
the prefill chunk loop and the decode DCP merge of ``sparse_attn_indexer()``, the CPU
path ``SparseAttnIndexer.forward_cpu`` (prefill and decode), the decode backends of
``SparseIndexerTopk.forward`` (deep_select, cooperative, persistent, flashinfer, torch,
aiter, per_row; their behaviour is tested in test_backends_v033.py), and the DSV4.1
sparse-logits remap ``sparse_topk_remap``. Skipped on 0.25.1-layout trees; fails on the
pristine 0.33.0 tree.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import INDEXER_REL, INDEXER_TOPK_REL, SPARSE_MQA_LOGITS_REL
from dsv4_topk_util import KNOB
from test_wiring import _calls_named, _indexer_function, _knob_calls

pytestmark = pytest.mark.cpu

CANON_MODULE = "vllm.model_executor.layers.dsv4_topk_canon"


def _source(tree: Path, rel: str) -> ast.Module:
    path = tree / rel
    if not path.is_file():
        pytest.fail(f"{rel} is absent from {tree}")
    return ast.parse(path.read_text())


def _function(module: ast.AST, name: str, cls: str | None = None) -> ast.FunctionDef:
    scope = module
    if cls is not None:
        found = [n for n in ast.walk(module) if isinstance(n, ast.ClassDef) and n.name == cls]
        assert found, f"class {cls} not found"
        scope = found[0]
    for node in ast.walk(scope):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    pytest.fail(f"{cls + '.' if cls else ''}{name}() not found")


def _imports_canonicaliser(module: ast.Module) -> bool:
    return any(isinstance(n, ast.ImportFrom) and n.module == CANON_MODULE
               and any(a.name == "canonicalize_topk_" for a in n.names)
               for n in module.body)


@pytest.mark.parametrize("rel", [INDEXER_REL, INDEXER_TOPK_REL, SPARSE_MQA_LOGITS_REL])
def test_modules_import_the_canonicaliser(v033: Path, rel: str) -> None:
    assert _imports_canonicaliser(_source(v033, rel)), \
        f"{rel} does not import canonicalize_topk_ from {CANON_MODULE}"


def test_backend_forward_canonicalises_after_every_backend(v033: Path) -> None:
    fn = _function(_source(v033, INDEXER_TOPK_REL), "forward", "SparseIndexerTopk")
    chains = [n for n in fn.body if isinstance(n, ast.If)
              and "backend" in ast.unparse(n.test)]
    assert chains, "no backend dispatch in SparseIndexerTopk.forward"
    chain = chains[-1]
    text = ast.unparse(chain)
    for name in ("deep_select", "cooperative", "persistent", "flashinfer", "torch",
                 "aiter", "per_row"):
        assert f"'{name}'" in text, f"backend {name} missing from the dispatch"
    after = [c for c in _knob_calls(fn) if c.lineno > (chain.end_lineno or 0)]
    assert after, f"SparseIndexerTopk.forward does not canonicalise with envs.{KNOB}"
    assert not _knob_calls(chain), "canonicalise once after the dispatch, not per branch"


def test_prefill_after_dcp_merge_before_row_exchange(v033: Path) -> None:
    fn = _indexer_function((v033 / INDEXER_REL).read_text())
    loops = [n for n in ast.walk(fn) if isinstance(n, ast.For)
             and _calls_named(n, "top_k_per_row_prefill")]
    assert loops, "no prefill chunk loop calling top_k_per_row_prefill"
    merge = max(c.lineno for c in _calls_named(loops[0], "_merge_dcp_topk_global"))
    after = [c for c in _knob_calls(loops[0]) if c.lineno > merge]
    assert after, "the prefill indices are not canonicalised after the DCP merge"
    exchange = _calls_named(fn, "exchange_topk")
    assert exchange and min(c.lineno for c in after) < min(c.lineno for c in exchange)


def test_cpu_path_prefill_and_decode(v033: Path) -> None:
    fn = _function(_source(v033, INDEXER_REL), "forward_cpu", "SparseAttnIndexer")
    selects = sorted(c.lineno for c in _calls_named(fn, "topk_transform_512_cpu"))
    assert len(selects) == 2, "expected a prefill and a decode topk_transform_512_cpu"
    knobs = sorted(c.lineno for c in _knob_calls(fn))
    for i, line in enumerate(selects):
        nxt = selects[i + 1] if i + 1 < len(selects) else fn.end_lineno or line
        assert any(line < k <= nxt for k in knobs), \
            f"topk_transform_512_cpu at line {line} is not followed by envs.{KNOB}"


def test_sparse_logits_remap(v033: Path) -> None:
    fn = _function(_source(v033, SPARSE_MQA_LOGITS_REL), "sparse_topk_remap")
    remap = [c for c in ast.walk(fn) if isinstance(c, ast.Call)
             and "_sparse_topk_remap_kernel" in ast.unparse(c.func)]
    assert remap, "no _sparse_topk_remap_kernel launch"
    after = [c for c in _knob_calls(fn) if c.lineno > remap[0].lineno]
    assert after and "topk_indices" in ast.unparse(after[0].args[0]), \
        "sparse_topk_remap does not canonicalise topk_indices after the remap"
