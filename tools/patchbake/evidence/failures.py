"""Fail-closed helper: every verification failure is an EvidenceError with a reason.

The reason (``missing``, ``unreadable``, ``malformed``, ``payload-type``, ``unsigned``,
``bad-signature``, ``untrusted-key``, ``not-allowed``, ``wrong-subject``, ``bad-predicate``,
``exists``, ``junit-mismatch``, ``wrong-suite``) is machine-readable in ``--json`` output; the exit code stays EvidenceError's
(50) so scripts need one code for "this evidence does not count".
"""

from __future__ import annotations

from typing import NoReturn

from ..errors import EvidenceError

REASONS = ("missing", "unreadable", "malformed", "payload-type", "unsigned", "bad-signature",
           "untrusted-key", "not-allowed", "wrong-subject", "bad-predicate", "exists",
           "policy", "flagged", "foreign-pristine", "junit-mismatch", "wrong-suite")


def fail(reason: str, message: str, *, hint: str | None = None) -> NoReturn:
    assert reason in REASONS, reason
    err = EvidenceError(message, hint=hint)
    err.reason = reason  # type: ignore[attr-defined]
    raise err


def reason_of(exc: EvidenceError) -> str:
    return str(getattr(exc, "reason", "evidence"))
