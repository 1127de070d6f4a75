"""Telling "nothing listens there" from a transient failure.

A refused connection to a loopback address is an answer, not a hiccup: no registry runs on
that port of this machine, and waiting will not start one. It is reported at once, with
how to start one, instead of being retried for seconds and then called "overloaded".
(Off loopback a refusal may be a load balancer restarting, so it stays retryable.)
"""

from __future__ import annotations

from urllib.parse import urlsplit

from ..errors import RegistryError
from .registry_ref import is_loopback_host


def _refused(exc: BaseException) -> bool:
    seen: set[int] = set()
    stack: list[object] = [exc]
    while stack:
        e = stack.pop()
        if not isinstance(e, BaseException) or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, ConnectionRefusedError):
            return True
        stack += [e.__cause__, e.__context__, getattr(e, "reason", None), *e.args]
    return False


def nothing_listens(url: str, exc: BaseException) -> RegistryError | None:
    """The error to raise instead of retrying, or None when ``exc`` may be transient."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if not (is_loopback_host(host) and _refused(exc)):
        return None
    where = parts.netloc or host
    return RegistryError(
        f"nothing listens at {where} (connection refused): no registry is running there",
        hint="start one (as root: `make services` runs a registry on 127.0.0.1:5000), "
             "or check the host and port")
