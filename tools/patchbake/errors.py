"""One exception hierarchy; one exit code per class.

Every expected failure raises a subclass of :class:`PatchbakeError`. The CLI prints
``patchbake: error: <message>`` on one line and exits with the class's ``exit_code``.
Messages say what failed, why, and what to do next.
"""

from __future__ import annotations

import re
import reprlib
from typing import Any, NoReturn


def _repr_for_messages() -> reprlib.Repr:
    r = reprlib.Repr()
    # few levels and few items: the work is bounded before anything is printed, so a YAML
    # alias bomb (9 lists of 9 lists of ... the same list) costs a handful of steps
    r.maxlevel, r.maxlist, r.maxdict, r.maxset, r.maxfrozenset, r.maxtuple = 3, 4, 4, 4, 4, 4
    r.maxstring, r.maxlong, r.maxother = 120, 40, 40
    return r


_MESSAGE_REPR = _repr_for_messages()


_BREAK = re.compile(r"[ \t]*[\r\n\v\f]+\s*")


def single_line(text: str) -> str:
    """``text`` on one line: each line break (and the blanks around it) becomes one space.
    Runs of spaces inside a line stay: they are often the difference a mismatch message
    quotes (expected 'a  b', found 'a b')."""
    return _BREAK.sub(" ", text).strip()


def shown(value: Any, limit: int = 160) -> str:
    """``value`` as an error message may print it: a repr bounded in the time it takes
    (nesting, items and string lengths are capped while it is built, not cut afterwards;
    ``f"{v!r:.80}"`` would first build the whole repr of a hostile value) and in length."""
    text = _MESSAGE_REPR.repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


class PatchbakeError(Exception):
    """Base class. ``exit_code`` is stable and documented in docs/errors.md."""

    exit_code = 1
    kind = "error"

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(message)

    def one_line(self) -> str:
        text = self.message if not self.hint else f"{self.message} ({self.hint})"
        return single_line(text)


class UsageError(PatchbakeError):
    """Bad command-line arguments."""

    exit_code = 2
    kind = "usage"


class ConfigError(PatchbakeError):
    """pipeline.yaml or another definition file is invalid."""

    exit_code = 3
    kind = "config"


class ToolMissingError(PatchbakeError):
    """An external program (git, docker, pytest) is not installed."""

    exit_code = 4
    kind = "tool-missing"


class ProcessError(PatchbakeError):
    """An external program failed."""

    exit_code = 5
    kind = "process"


class DoctorError(PatchbakeError):
    """`patchbake doctor` found something every command needs missing or broken."""

    exit_code = 6
    kind = "doctor"


class FetchError(PatchbakeError):
    """Upstream sources could not be resolved or downloaded."""

    exit_code = 10
    kind = "fetch"


class IntegrityError(PatchbakeError):
    """Bytes did not hash to the pinned or recorded digest."""

    exit_code = 11
    kind = "integrity"


class UnsafeArchiveError(PatchbakeError):
    """An archive entry would escape its tree or is a device, fifo or bad link."""

    exit_code = 12
    kind = "unsafe-archive"


class AmbiguousLayerError(IntegrityError):
    """A layer's tar stream reads differently in Go's archive/tar or the engines; refused."""

    exit_code = 35
    kind = "ambiguous-layer"


class StoreError(PatchbakeError):
    """The content-addressed store is unusable (permissions, corruption, lock)."""

    exit_code = 13
    kind = "store"


class ArchiveLimitError(PatchbakeError):
    """An archive exceeds a resource cap (total size, members, member size, name length)."""

    exit_code = 14
    kind = "archive-limit"


class InputLimitError(PatchbakeError):
    """A YAML or JSON input exceeds a resource cap (size, nesting depth)."""

    exit_code = 15
    kind = "input-limit"


class DeadlineError(PatchbakeError):
    """A network operation ran past its deadline or its request budget."""

    exit_code = 16
    kind = "deadline"


class OutputPathError(PatchbakeError):
    """An output path cannot be written (under a file, on a read-only or special fs)."""

    exit_code = 17
    kind = "output-path"


class TrustError(PatchbakeError):
    """A server's TLS certificate is not trusted (pip's cert, REQUESTS_CA_BUNDLE)."""

    exit_code = 18
    kind = "tls-trust"


class PatchError(PatchbakeError):
    """The patch file itself is malformed (parse errors, whitespace, final newline)."""

    exit_code = 20
    kind = "patch"


class GuardError(PatchbakeError):
    """The lost-line guard found patch, FILES.txt and the tree in disagreement."""

    exit_code = 21
    kind = "guard"


class ApplyError(PatchbakeError):
    """Strict apply refused the patch; ``reason`` names the check that refused it (offset,
    fuzz, already-applied, reversed, path, hash, ...)."""

    exit_code = 22
    kind = "apply"

    def __init__(self, message: str, *, reason: str = "apply", hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.reason = reason


class ExportError(PatchbakeError):
    """Export refused (workspace dirty, source record would move backwards)."""

    exit_code = 23
    kind = "export"


class SeriesError(PatchbakeError):
    """The split series does not reproduce the canonical patch."""

    exit_code = 24
    kind = "series"


class PortError(PatchbakeError):
    """A port cannot start: bad version or lineage key, pin unresolvable, workspace taken."""

    exit_code = 25
    kind = "port"


class PortUnresolvedError(PortError):
    """A port left hunks to resolve by hand (conflicts, vanished targets)."""

    exit_code = 26
    kind = "port-unresolved"


class SeriesDependencyError(SeriesError):
    """A series patch does not apply alone to the pristine tree (it depends on another)."""

    exit_code = 27
    kind = "series-dependency"


class ImageError(PatchbakeError):
    """An image definition, layout or archive is invalid."""

    exit_code = 30
    kind = "image"


class RegistryError(PatchbakeError):
    """The registry refused, or answered with bytes that do not match."""

    exit_code = 31
    kind = "registry"


class TagMovedError(RegistryError):
    """A push would move an existing tag to another digest."""

    exit_code = 32
    kind = "tag-moved"


class VerifyError(PatchbakeError):
    """An image's files do not match a fresh apply of the patch."""

    exit_code = 33
    kind = "verify"


class EngineError(PatchbakeError):
    """The Docker engine is unreachable or a build failed."""

    exit_code = 34
    kind = "engine"


class LineageError(ImageError):
    """A base image's installed vLLM is not the lineage's pinned upstream."""

    exit_code = 37
    kind = "lineage"


class LockError(PatchbakeError):
    """A lock file is missing, malformed, or no longer what its sources resolve to."""

    exit_code = 38
    kind = "lock"


class CudaCodeError(ImageError):
    """An image holds CUDA objects with no code the target GPU can run."""

    exit_code = 39
    kind = "cuda-code"


class SuiteError(PatchbakeError):
    """A fixture suite failed, collected nothing, or cannot run on this machine."""

    exit_code = 40
    kind = "suite"


class RequirementError(SuiteError):
    """The machine does not meet the suite's requirements (GPU, capability, memory)."""

    exit_code = 41
    kind = "requirement"


# Why evidence does not count, machine-readable in --json output; the exit code stays
# EvidenceError's (50), so scripts need one code for "this evidence does not count".
EVIDENCE_REASONS = ("evidence", "missing", "unreadable", "malformed", "payload-type",
                    "unsigned", "bad-signature", "untrusted-key", "not-allowed",
                    "wrong-subject", "bad-predicate", "exists", "policy", "flagged",
                    "foreign-pristine", "junit-mismatch", "wrong-suite", "files-unbound")


class EvidenceError(PatchbakeError):
    """Evidence is missing, unsigned, untrusted or bound to another digest; ``reason`` says
    which (one of EVIDENCE_REASONS)."""

    exit_code = 50
    kind = "evidence"

    def __init__(self, message: str, *, reason: str = "evidence",
                 hint: str | None = None) -> None:
        if reason not in EVIDENCE_REASONS:
            raise ValueError(f"unknown evidence failure reason {reason!r}")
        super().__init__(message, hint=hint)
        self.reason = reason


def refuse_evidence(reason: str, message: str, *, hint: str | None = None) -> NoReturn:
    """Fail closed: raise the EvidenceError saying why this evidence does not count."""
    raise EvidenceError(message, reason=reason, hint=hint)


class AttestationError(PatchbakeError):
    """An SBOM or provenance document is invalid against its schema or its subject."""

    exit_code = 53
    kind = "attestation"


class GateError(PatchbakeError):
    """A release gate blocked promotion."""

    exit_code = 60
    kind = "gate"


class LedgerError(PatchbakeError):
    """The release ledger's hash chain is broken."""

    exit_code = 61
    kind = "ledger"


class ReleaseError(PatchbakeError):
    """A release record or export bundle is missing, damaged or does not match."""

    exit_code = 62
    kind = "release"


class AttachedError(PatchbakeError):
    """Statements attached to an image in a registry are missing, untrusted or not its release's."""

    exit_code = 63
    kind = "attached"


class ReportBrokenError(PatchbakeError):
    """`patchbake report` wrote its page, and a check it made there is broken."""

    exit_code = 64
    kind = "report-broken"


def all_error_classes() -> list[type[PatchbakeError]]:
    """Every class in the hierarchy, for docs and the distinct-exit-code test."""
    seen: list[type[PatchbakeError]] = []
    stack: list[type[PatchbakeError]] = [PatchbakeError]
    while stack:
        cls = stack.pop()
        seen.append(cls)
        stack.extend(cls.__subclasses__())
    return seen
