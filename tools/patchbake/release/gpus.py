"""What a GPU is, checked against what its evidence claims.

Evidence says which GPU ran a suite (``gpu_name``) and its compute capability; both are the
signer's word. The capability gate believes a claim only when the two agree with each other
and with NVIDIA's published capability of that part (this table), and with the raw device
properties the suite recorded when it recorded them (``device_properties``: torch's
``get_device_properties`` major/minor and name). An unknown part is not believed: add it
here, with its capability from NVIDIA's CUDA GPUs list.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..errors import shown

# Part name (as torch and nvidia-smi print it, after "NVIDIA ") -> compute capability.
PARTS: dict[str, str] = {
    # Blackwell (consumer and workstation: 12.0; data centre: 10.0)
    "GeForce RTX 5090": "12.0", "GeForce RTX 5080": "12.0", "GeForce RTX 5070 Ti": "12.0",
    "RTX PRO 6000 Blackwell": "12.0", "B200": "10.0", "GB200": "10.0", "B100": "10.0",
    # Hopper
    "H200": "9.0", "H100": "9.0", "H800": "9.0", "H20": "9.0", "GH200": "9.0",
    # Ada Lovelace
    "L40S": "8.9", "L40": "8.9", "L20": "8.9", "L4": "8.9", "GeForce RTX 4090": "8.9",
    "GeForce RTX 4080": "8.9", "GeForce RTX 4070 Ti": "8.9", "RTX 6000 Ada Generation": "8.9",
    "RTX 5000 Ada Generation": "8.9", "RTX 4000 Ada Generation": "8.9",
    # Ampere
    "A100": "8.0", "A800": "8.0", "A30": "8.0", "A10": "8.6", "A10G": "8.6", "A40": "8.6",
    "GeForce RTX 3090": "8.6", "RTX A6000": "8.6",
    # Turing, Volta
    "T4": "7.5", "V100": "7.0",
}


def _tokens(name: str) -> list[str]:
    return name.replace("NVIDIA", " ").replace("-", " ").split()


def part_of(gpu_name: str) -> str | None:
    """The table's part a device name is: the longest part whose words appear, in order and
    whole, in the name ("NVIDIA H200 NVL" is an H200, "NVIDIA L40S" is not an L40)."""
    words = _tokens(gpu_name)
    best = None
    for part in PARTS:
        want = _tokens(part)
        if any(words[i:i + len(want)] == want for i in range(len(words) - len(want) + 1)) \
                and (best is None or len(want) > len(_tokens(best))):
            best = part
    return best


CAPABILITY = re.compile(r"[0-9]{1,2}\.[0-9]{1,2}")


def claim_problem(env: Mapping[str, Any]) -> str | None:
    """Why the GPU and capability an evidence environment claims are not to be believed,
    or None when they agree with the table and the recorded device properties."""
    name, cap = env.get("gpu_name"), env.get("compute_capability")
    if not isinstance(name, str) or not isinstance(cap, str):
        return "the evidence names no GPU or no compute capability"
    if not CAPABILITY.fullmatch(cap):
        return f"the compute capability {shown(cap)} is not of the form 8.9"
    part = part_of(name)
    if part is None:
        return (f"GPU {shown(name)} is not a part patchbake knows the capability of "
                "(release/gpus.py lists NVIDIA's parts)")
    if PARTS[part] != cap:
        return (f"GPU {shown(name)} is an {part}, compute capability {PARTS[part]}, but the "
                f"evidence claims {cap}")
    props = env.get("device_properties")
    if props is not None:
        if not isinstance(props, dict):
            return "the recorded device properties are not an object"
        raw = f"{props.get('major')}.{props.get('minor')}"
        if raw != cap or props.get("name") != name:
            return (f"the recorded device properties ({shown(props.get('name'))}, {raw}) disagree "
                    f"with the claim ({shown(name)}, {cap})")
    return None
