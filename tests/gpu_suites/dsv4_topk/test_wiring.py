"""The patch is present and wired: the module, the env knob, the two call sites.

All of this fails on the pristine upstream tree, where none of it exists.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from dsv4_topk_util import KNOB

pytestmark = pytest.mark.cpu


def test_module_imports_only_torch_and_triton(canon_path: Path) -> None:
    tree = ast.parse(canon_path.read_text())
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative import: the module must load on its own"
            roots.add((node.module or "").split(".")[0])
    assert roots <= {"__future__", "torch", "triton"}, sorted(roots)
    assert "torch" in roots and "triton" in roots


def test_module_loads_by_path(canon) -> None:
    for name in ("canonicalize_topk_", "MODE_OFF", "MODE_ASCENDING", "MODE_DESCENDING"):
        assert hasattr(canon, name), name
    assert (canon.MODE_OFF, canon.MODE_ASCENDING, canon.MODE_DESCENDING) == (0, 1, 2)


def _type_checking_annotations(source: str) -> dict[str, ast.AnnAssign]:
    out = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) \
                and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    out[stmt.target.id] = stmt
    return out


def test_knob_declared_like_the_other_envs(envs_path: Path) -> None:
    ann = _type_checking_annotations(envs_path.read_text())
    assert KNOB in ann, f"{KNOB} is not declared in envs.py's TYPE_CHECKING block"
    stmt = ann[KNOB]
    assert ast.unparse(stmt.annotation) == "int"
    assert stmt.value is not None and ast.literal_eval(stmt.value) == 0


def test_knob_registered_with_default_off(load_envs) -> None:
    envs = load_envs(None)
    assert KNOB in envs.environment_variables
    assert getattr(envs, KNOB) == 0


@pytest.mark.parametrize("value,expected", [("0", 0), ("1", 1), ("2", 2)])
def test_knob_values(load_envs, value: str, expected: int) -> None:
    assert getattr(load_envs(value), KNOB) == expected


@pytest.mark.parametrize("value", ["3", "-1", "yes", ""])
def test_knob_rejects_other_values(load_envs, value: str) -> None:
    envs = load_envs(value)
    with pytest.raises(ValueError):
        getattr(envs, KNOB)


def _knob_calls(node: ast.AST) -> list[ast.Call]:
    """Calls that pass envs.<KNOB> as an argument."""
    found = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            for arg in list(sub.args) + [kw.value for kw in sub.keywords]:
                if isinstance(arg, ast.Attribute) and arg.attr == KNOB \
                        and isinstance(arg.value, ast.Name) and arg.value.id == "envs":
                    found.append(sub)
    return found


def _calls_named(node: ast.AST, name: str) -> list[ast.Call]:
    out = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            f = sub.func
            if (isinstance(f, ast.Attribute) and f.attr == name) or \
                    (isinstance(f, ast.Name) and f.id == name):
                out.append(sub)
    return out


def _indexer_function(source: str) -> ast.FunctionDef:
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == "sparse_attn_indexer":
            return node
    pytest.fail("sparse_attn_indexer() not found in the indexer module")


def test_canonicaliser_imported_from_its_module(indexer_source: str) -> None:
    for node in ast.parse(indexer_source).body:
        if isinstance(node, ast.ImportFrom) and \
                node.module == "vllm.model_executor.layers.dsv4_topk_canon":
            return
    pytest.fail("the indexer does not import vllm.model_executor.layers.dsv4_topk_canon")


def test_applied_after_prefill_selection(indexer_source: str) -> None:
    fn = _indexer_function(indexer_source)
    loops = [n for n in ast.walk(fn) if isinstance(n, ast.For)
             and _calls_named(n, "top_k_per_row_prefill")]
    assert loops, "no prefill chunk loop calling top_k_per_row_prefill"
    loop = loops[0]
    select = max(c.lineno for c in _calls_named(loop, "top_k_per_row_prefill"))
    after = [c for c in _knob_calls(loop) if c.lineno > select]
    assert after, ("the prefill loop does not canonicalise the indices with "
                   f"envs.{KNOB} after top_k_per_row_prefill")


def test_applied_where_decode_selectors_converge(indexer_source: str, layout: str) -> None:
    fn = _indexer_function(indexer_source)
    if layout == "0.33":
        # The selectors live in SparseIndexerTopk.forward (test_wiring_v033.py); here
        # the DCP merge rewrites their output, so it must be canonicalised again.
        merges = [n for n in ast.walk(fn) if isinstance(n, ast.If)
                  and "global_seq_lens" in ast.unparse(n.test)
                  and _calls_named(n, "_merge_dcp_topk_global")]
        assert merges, "no decode DCP merge block (decode_metadata.global_seq_lens)"
        merge = max(c.lineno for c in _calls_named(merges[0], "_merge_dcp_topk_global"))
        after = [c for c in _knob_calls(merges[0]) if c.lineno > merge]
        assert after, ("the decode DCP merge's output is not canonicalised with "
                       f"envs.{KNOB}")
        unpack = _calls_named(fn, "unpack_seq_triton")
        assert unpack and min(c.lineno for c in after) < min(c.lineno for c in unpack)
        return
    chains = [n for n in ast.walk(fn) if isinstance(n, ast.If)
              and _calls_named(n, "top_k_per_row_decode")
              and _calls_named(n, "persistent_topk")]
    assert chains, "no decode selector chain (persistent_topk / top_k_per_row_decode)"
    chain = min(chains, key=lambda n: n.end_lineno or 0)  # the innermost if/elif/else
    end = chain.end_lineno or chain.lineno
    after = [c for c in _knob_calls(fn) if c.lineno > end]
    assert after, ("nothing canonicalises the decode selectors' output with "
                   f"envs.{KNOB} after they converge")
    unpack = _calls_named(fn, "unpack_seq_triton")
    if unpack:
        assert min(c.lineno for c in after) < min(c.lineno for c in unpack), \
            "decode indices must be canonical before they are unpacked"
