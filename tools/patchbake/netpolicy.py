"""One retry, deadline and request-budget policy for every network operation.

Both HTTP users (the pinned-source download in ``sources/http.py`` and the registry client
in ``oci/registry_http.py``) start from one requests Session (:func:`http_session`) and
retry through :func:`retrying` against one :class:`Budget` per operation (a fetch, a push,
a pull):

- only transient failures are retried (transport errors, 408, 429, 5xx), with exponential
  backoff (``backoff_s`` doubling, capped at ``max_backoff_s``) or the server's
  ``Retry-After`` (capped at ``max_retry_after_s``);
- every request is charged to the operation's budget; the budget refuses a request past
  ``max_requests`` or past the deadline, and a wait that would end past the deadline;
- a retry loop inside another retry loop does not retry on its own: it hands the failure
  to the outer loop, so attempts never multiply (the outer loop restarts the whole step,
  e.g. a fresh upload session);
- each request gets a connect timeout and a read timeout, the read timeout clipped to the
  time left before the deadline;
- a body is read one socket read at a time (:meth:`Budget.body`), whatever the chunking:
  the deadline is checked between reads, no read waits past the read timeout, and a body
  averaging under ``min_rate_bps`` over a read timeout's span is a transient failure.
  A peer that drips bytes or goes silent therefore ends one attempt within about a read
  timeout, and the whole operation within the deadline
  (:meth:`RetryPolicy.silent_peer_s`: how long a peer that never answers is waited for).

Trust and proxies come from pip's configuration (:mod:`patchbake.netconfig`), the same
for both users; a certificate the trust does not cover is a :class:`TrustError` at once,
never retried (retrying cannot make a certificate trusted).

The figures come from :mod:`patchbake.limits` (``PATCHBAKE_ATTEMPTS``,
``PATCHBAKE_DEADLINE_S``, ... override them).
"""

from __future__ import annotations

import email.utils
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import requests
import requests.adapters
import urllib3
import urllib3.connection

from . import __version__, limits, netconfig
from .errors import DeadlineError, PatchbakeError, TrustError
from .netconfig import NetworkSettings

T = TypeVar("T")

USER_AGENT = f"patchbake/{__version__}"
RETRY_STATUS = frozenset({408, 429}) | frozenset(range(500, 600))


def is_retry_status(status: int) -> bool:
    return status in RETRY_STATUS


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often, how long and how patiently one operation's requests are retried."""

    attempts: int = 5  # total tries, the first included
    backoff_s: float = 0.5  # first wait; doubles each retry
    max_backoff_s: float = 8.0
    max_retry_after_s: float = 30.0  # a longer Retry-After is capped, not obeyed blindly
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 15.0
    deadline_s: float = 900.0  # one whole operation
    requests_base: int = 40  # requests one operation may send ...
    requests_per_blob: int = 12  # ... plus this many per blob it moves
    min_rate_bps: int = 1024  # a body slower than this over a read timeout's span fails

    @classmethod
    def from_limits(cls, lim: limits.Limits | None = None) -> RetryPolicy:
        lm = lim or limits.current()
        return cls(attempts=lm.attempts, backoff_s=lm.backoff_s, max_backoff_s=lm.max_backoff_s,
                   max_retry_after_s=lm.max_retry_after_s,
                   connect_timeout_s=lm.connect_timeout_s, read_timeout_s=lm.read_timeout_s,
                   deadline_s=lm.deadline_s, requests_base=lm.requests_base,
                   requests_per_blob=lm.requests_per_blob, min_rate_bps=lm.min_rate_bps)

    def silent_peer_s(self) -> float:
        """How long one operation waits on a peer that accepts and never answers: every
        attempt's read timeout and the backoffs between them, within the deadline."""
        waits = sum(self.backoff(n) for n in range(self.attempts - 1))
        return min(self.deadline_s, self.attempts * self.read_timeout_s + waits)

    def backoff(self, n: int) -> float:
        return min(self.backoff_s * float(2 ** n), self.max_backoff_s)

    def wait(self, n: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return max(0.0, min(retry_after, self.max_retry_after_s))
        return self.backoff(n)


def patience_help() -> str:
    """The sentence ``--help`` of every network command carries (default figures)."""
    pol = RetryPolicy()
    return (f"Network: the whole operation ends within {pol.deadline_s:g} s "
            f"(PATCHBAKE_DEADLINE_S); a server that never answers is given up after about "
            f"{pol.silent_peer_s():.0f} s ({pol.attempts} tries of {pol.read_timeout_s:g} s, "
            f"PATCHBAKE_READ_TIMEOUT_S), and a transfer slower than "
            f"{pol.min_rate_bps} bytes/s over a read timeout is retried "
            "(PATCHBAKE_MIN_RATE_BPS).")


def retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` as seconds: an integer, or an HTTP date relative to now."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)

    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - time.time())


class Retryable(Exception):
    """One attempt failed in a way worth retrying. An internal signal, never shown to a
    user: :func:`retrying` catches it and raises the caller's error when it gives up."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


class Budget:
    """One operation's deadline and request count, shared by all its retry loops."""

    def __init__(self, what: str, policy: RetryPolicy | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, max_requests: int = 0) -> None:
        self.what = what
        self.policy = policy if policy is not None else RetryPolicy()
        self.clock = clock
        self.sleep = sleep
        self.requests = 0
        self.started = clock()
        self.max_requests = max_requests or self.policy.requests_base
        # Blobs move on several threads at once: the request count is shared (under a
        # lock), the nesting of retrying() loops is each thread's own (one thread's outer
        # loop must not stop another thread's loop from retrying).
        self._lock = threading.Lock()
        self._local = threading.local()

    def __repr__(self) -> str:
        return (f"Budget({self.what!r}, requests={self.requests}/{self.max_requests}, "
                f"left_s={self.left_s():.1f})")

    @property
    def depth(self) -> int:
        return int(getattr(self._local, "depth", 0))

    @depth.setter
    def depth(self, value: int) -> None:
        self._local.depth = value

    def allow_blobs(self, n: int) -> None:
        """Widen the request budget for an operation that moves ``n`` more blobs."""
        self.max_requests += max(0, n) * self.policy.requests_per_blob

    def left_s(self) -> float:
        return self.policy.deadline_s - (self.clock() - self.started)

    def _over(self, why: str) -> DeadlineError:
        return DeadlineError(
            f"{self.what}: {why}; nothing partial was kept",
            hint="the server is too slow or failing; retry later, or raise "
                 "PATCHBAKE_DEADLINE_S / PATCHBAKE_REQUESTS_BASE if the transfer is large")

    def check(self) -> None:
        """Raise DeadlineError when the operation has run out of time."""
        if self.left_s() <= 0:
            raise self._over(f"ran past its {self.policy.deadline_s:g} s deadline")

    def charge(self) -> tuple[float, float]:
        """Account for one request about to be sent; its (connect, read) timeouts."""
        self.check()
        with self._lock:
            if self.requests >= self.max_requests:
                raise self._over(f"used its budget of {self.max_requests} requests "
                                 f"(retries included)")
            self.requests += 1
        left = max(0.1, self.left_s())
        return (min(self.policy.connect_timeout_s, left), min(self.policy.read_timeout_s, left))

    def body(self, read_once: Callable[[], bytes], what: str) -> Iterator[bytes]:
        """A response body, one socket read (``read_once``) at a time until it returns
        b"": the deadline is checked between reads, and a body averaging under the
        policy's minimum rate over a read timeout's span raises Retryable. (Each read itself waits at
        most the request's read timeout, which :meth:`charge` clipped to the deadline.)"""
        pol = self.policy
        since, got = self.clock(), 0
        while True:
            self.check()
            data = read_once()
            if not data:
                return
            got += len(data)
            now = self.clock()
            if now - since >= pol.read_timeout_s:
                if got < pol.min_rate_bps * (now - since):
                    raise Retryable(f"{what}: the answer arrives at under {pol.min_rate_bps} "
                                    "bytes/s (PATCHBAKE_MIN_RATE_BPS)")
                since, got = now, 0
            yield data

    def pause(self, seconds: float) -> None:
        if seconds >= self.left_s():
            raise self._over(f"would wait {seconds:g} s to retry, past its "
                             f"{self.policy.deadline_s:g} s deadline")
        if seconds > 0:
            self.sleep(seconds)


def _cut(sock: socket.socket, fired: threading.Event) -> None:
    fired.set()
    try:
        sock.shutdown(socket.SHUT_RDWR)  # wakes the read waiting on it, unlike close()
    except OSError:
        pass


class _HeadersInTime:
    """An answer's status line and headers must arrive within one read timeout, all of
    them: a server dripping header bytes (each socket read answered in time) is cut
    off like a silent one, and the attempt fails as Retryable. The body is bounded by
    :meth:`Budget.body`."""

    sock: socket.socket | None
    timeout: Any

    def getresponse(self) -> Any:
        limit = self.timeout if isinstance(self.timeout, (int, float)) else None
        if self.sock is None or not limit:
            return super().getresponse()  # type: ignore[misc]
        fired = threading.Event()
        timer = threading.Timer(float(limit), _cut, (self.sock, fired))
        timer.daemon = True
        timer.start()
        try:
            answer = super().getresponse()  # type: ignore[misc]
        except OSError:
            if not fired.is_set():
                raise
            answer = None
        finally:
            timer.cancel()
        if fired.is_set():  # what was read after the cut is no answer (headers cut short)
            raise TimeoutError(f"the answer's headers did not arrive within {limit:g} s")
        return answer


class _Connection(_HeadersInTime, urllib3.connection.HTTPConnection):
    pass


class _TLSConnection(_HeadersInTime, urllib3.connection.HTTPSConnection):
    pass


class _Pool(urllib3.HTTPConnectionPool):
    ConnectionCls = _Connection


class _TLSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _TLSConnection


class _Adapter(requests.adapters.HTTPAdapter):
    """requests' adapter whose connections bound the wait for an answer's headers."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _Pool, "https": _TLSPool}

    def proxy_manager_for(self, *args: Any, **kwargs: Any) -> Any:
        manager = super().proxy_manager_for(*args, **kwargs)
        manager.pool_classes_by_scheme = {"http": _Pool, "https": _TLSPool}
        return manager


class Session(requests.Session):
    """requests' Session carrying pip's network settings; for pip's trusted hosts (and
    only those) TLS is not verified."""

    network = NetworkSettings()

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        if self.network.is_trusted_host(request.url or ""):
            kwargs["verify"] = False
        return super().send(request, **kwargs)


S = TypeVar("S", bound=Session)


def http_session(kind: type[S] = Session,  # type: ignore[assignment]  # the default is an S
                 settings: NetworkSettings | None = None) -> S:
    """A Session (of class ``kind``) as every network user here starts from: the
    project's User-Agent and pip's network settings (``settings``, else read now):
    ``verify`` as netconfig resolves it, ``client-cert``, ``trusted-host``; pip's
    ``proxy`` for http and https, else the environment's (``HTTPS_PROXY``, ``NO_PROXY``)."""
    net = settings if settings is not None else netconfig.read()
    net.check_files()
    s = kind()
    for prefix in ("http://", "https://"):
        s.mount(prefix, _Adapter())
    s.headers["User-Agent"] = USER_AGENT
    s.network = net
    s.verify = net.verify
    s.cert = net.client_cert
    if net.proxy:
        s.proxies = {"http": net.proxy, "https": net.proxy}
        s.trust_env = False  # else requests lets the environment's proxies win over it
    return s


def _verify_failure(exc: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate verification error inside requests' and urllib3's wrappers."""
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, ssl.SSLCertVerificationError):
            return e
        stack += [a for a in e.args if isinstance(a, BaseException)]
        stack += [v for v in (getattr(e, "reason", None), e.__cause__, e.__context__)
                  if isinstance(v, BaseException)]
    return None


def untrusted_certificate(exc: BaseException, url: str,
                          session: requests.Session) -> TrustError | None:
    """The TrustError for a failed request whose cause is a certificate the session's
    trust does not cover; None for any other failure."""
    if not isinstance(exc, requests.exceptions.SSLError):
        return None
    failure = _verify_failure(exc)
    if failure is None:
        return None
    net = session.network if isinstance(session, Session) else NetworkSettings()
    reason = failure.verify_message or failure.strerror or str(failure)
    return TrustError(
        f"TLS: the certificate of {urlsplit(url).netloc} is not trusted "
        f"(CERTIFICATE_VERIFY_FAILED: {reason}); trust comes from {net.trust()}",
        hint="set `cert` in pip's configuration (pip config set global.cert FILE) or "
             "REQUESTS_CA_BUNDLE to a CA bundle holding its issuer; not retried")


def retrying(budget: Budget, what: str, attempt: Callable[[], T],
             fail: Callable[[str], PatchbakeError]) -> T:
    """Run ``attempt`` until it stops raising Retryable or the policy gives up; then
    ``fail(message)`` is raised. Nested inside another retrying(), it runs once and
    lets the outer loop decide."""
    if budget.depth:
        return attempt()
    pol = budget.policy
    last: Retryable | None = None
    budget.depth += 1
    try:
        for n in range(pol.attempts):
            try:
                return attempt()
            except Retryable as exc:
                last = exc
                if n + 1 >= pol.attempts:
                    break
                budget.pause(pol.wait(n, exc.retry_after))
    finally:
        budget.depth -= 1
    raise fail(f"{what} failed after {pol.attempts} attempts: "
               f"{last.message if last else '?'}")
