"""Whether an object's CUDA code can run on a target GPU, and the report over an image.

The rule (CUDA's binary compatibility): SASS for ``sm_XY`` runs on a device of compute
capability X.Z when Z >= Y; an arch-specific ``sm_XYa`` only on X.Y itself; a family
``sm_XYf`` on the family (same major, Z >= Y). PTX for ``compute_XY`` is JIT-compiled by
the driver for any device of capability >= X.Y; arch-specific or family PTX only for its
own architecture. An object passes when one of its entries runs on the target. Objects
with no CUDA code are not CUDA objects: listed, never failures.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import CudaCodeError, UsageError
from .fatbin import Code

PASS, FAIL, UNREADABLE, EXEMPT, NOT_CUDA = "pass", "fail", "unreadable", "exempt", "not-cuda"
_TARGET = re.compile(r"^(\d+)\.(\d)$")


@dataclass(frozen=True, slots=True)
class Target:
    major: int
    minor: int

    @classmethod
    def parse(cls, text: str) -> Target:
        m = _TARGET.match(text)
        if m is None:
            raise UsageError(f"target {text[:40]!r} is not a compute capability such as 8.9")
        return cls(int(m.group(1)), int(m.group(2)))

    @property
    def arch(self) -> int:
        return self.major * 10 + self.minor

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


def runs_on(code: Code, target: Target) -> bool:
    """Whether ``code`` can run (SASS) or be JIT-compiled (PTX) on ``target``."""
    major, minor = divmod(code.arch, 10)
    if code.variant == "a":
        return code.arch == target.arch
    if code.kind == "ptx":
        return code.arch == target.arch if code.variant else code.arch <= target.arch
    return major == target.major and minor <= target.minor


@dataclass(frozen=True, slots=True)
class ObjectCode:
    """One ELF object of the image and its verdict for the target."""

    path: str
    size: int
    codes: tuple[Code, ...]
    verdict: str
    why: str

    @property
    def sass(self) -> list[str]:
        return sorted({c.label for c in self.codes if c.kind == "sass"}, key=_order)

    @property
    def ptx(self) -> list[str]:
        return sorted({c.label for c in self.codes if c.kind == "ptx"}, key=_order)

    def dump(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "sass": self.sass, "ptx": self.ptx,
                "ptx_isa": sorted({c.ptx_isa for c in self.codes if c.ptx_isa}),
                "entries": len(self.codes), "verdict": self.verdict, "why": self.why}


def _order(label: str) -> tuple[int, str]:
    digits = re.search(r"\d+", label)
    return (int(digits.group()) if digits else 0, label)


def judge(path: str, size: int, codes: tuple[Code, ...], target: Target,
          exempt: str | None = None) -> ObjectCode:
    """The verdict for one object; ``exempt`` is the reason its definition gives for an
    object that never runs on the target (it is listed, with that reason)."""
    if not codes:
        return ObjectCode(path, size, codes, NOT_CUDA, "no CUDA code")
    good = sorted({c.label for c in codes if runs_on(c, target)}, key=_order)
    if good:
        return ObjectCode(path, size, codes, PASS, f"runs on {target}: {', '.join(good)}")
    if exempt is not None:
        return ObjectCode(path, size, codes, EXEMPT, f"no code for {target}; exempt: {exempt}")
    return ObjectCode(path, size, codes, FAIL, f"no SASS runnable on {target} and no PTX "
                      f"<= compute_{target.arch}")


def unreadable(path: str, size: int, why: str) -> ObjectCode:
    return ObjectCode(path, size, (), UNREADABLE, why)


@dataclass(frozen=True, slots=True)
class CudaReport:
    """Every ELF object of one image, judged for one target."""

    image: str
    digest: str
    target: Target
    objects: tuple[ObjectCode, ...]
    elf_objects: int  # ELF files seen (CUDA or not)
    bytes_read: int  # of the image, while finding its files

    @property
    def cuda_objects(self) -> list[ObjectCode]:
        return [o for o in self.objects if o.verdict != NOT_CUDA]

    @property
    def failures(self) -> list[ObjectCode]:
        return [o for o in self.objects if o.verdict in (FAIL, UNREADABLE)]

    def summary(self) -> str:
        cuda, bad = self.cuda_objects, self.failures
        exempt = sum(o.verdict == EXEMPT for o in cuda)
        return (f"{len(cuda) - len(bad) - exempt}/{len(cuda)} CUDA objects have code for "
                f"{self.target}" + (f" ({exempt} exempt)" if exempt else "")
                + f"; {self.elf_objects - len(cuda)} ELF objects without CUDA code")

    def raise_on_failure(self) -> None:
        bad = self.failures
        if bad:
            first = bad[0]
            raise CudaCodeError(
                f"{len(bad)} CUDA object(s) of {self.image} have no code for compute "
                f"capability {self.target}; first: {first.path} ({first.why}; has "
                f"{', '.join(first.sass + first.ptx) or 'nothing readable'})",
                hint="rebuild the extension with the target in TORCH_CUDA_ARCH_LIST, or "
                     "declare it under cuda_code.exempt in the image definition with why")

    def to_json(self) -> dict[str, Any]:
        return {"image": self.image, "digest": self.digest, "target": str(self.target),
                "elf_objects": self.elf_objects, "cuda_objects": len(self.cuda_objects),
                "failures": len(self.failures), "bytes_read": self.bytes_read,
                "objects": [o.dump() for o in self.objects]}
