"""NVIDIA parts and their compute capabilities, as the capability gate reads a GPU name."""

from __future__ import annotations

import pytest

from patchbake.release import gpus


@pytest.mark.parametrize("name, part", [
    ("NVIDIA L40S", "L40S"), ("NVIDIA L40", "L40"), ("NVIDIA L4", "L4"),
    ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090"), ("NVIDIA H200 NVL", "H200"),
    ("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA GH200 480GB", "GH200"),
    ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada Generation"),
    ("NVIDIA A10G", "A10G"), ("Tesla T4", "T4"), ("NVIDIA Quantum 9000", None),
])
def test_a_device_name_is_its_longest_matching_part(name: str, part: str | None) -> None:
    assert gpus.part_of(name) == part


def test_claims_agree_or_are_named() -> None:
    assert gpus.claim_problem({"gpu_name": "NVIDIA L40S", "compute_capability": "8.9"}) is None
    assert "claims 8.9" in (gpus.claim_problem(
        {"gpu_name": "NVIDIA H200", "compute_capability": "8.9"}) or "")
    assert "names no GPU" in (gpus.claim_problem({"compute_capability": "8.9"}) or "")


def test_a_malformed_capability_is_refused_in_a_bounded_line() -> None:
    problem = gpus.claim_problem({"gpu_name": "NVIDIA L40S", "compute_capability": "8.9" * 10**5})
    assert problem is not None and "is not of the form 8.9" in problem and len(problem) < 300
    problem = gpus.claim_problem({"gpu_name": "NVIDIA X" * 10**5, "compute_capability": "8.9"})
    assert problem is not None and len(problem) < 300
