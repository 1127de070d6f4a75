"""Downloads into the store: streamed, verified against the pin, retried only when the
failure is transient (connection errors, timeouts, 408/429/5xx honouring Retry-After).

A 4xx other than 408/429 is an answer, not an accident: it is never retried; nor is a
certificate that pip's trust does not cover (a TrustError saying what to set).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit, urlunsplit

import requests
import urllib3

from ..digest import Digest
from ..errors import FetchError
from ..fsutil import CHUNK
from ..netpolicy import (
    Budget,
    Retryable,
    RetryPolicy,
    http_session,
    is_retry_status,
    retry_after_seconds,
    retrying,
    untrusted_certificate,
)
from ..store import Store

POLICY = RetryPolicy()  # the defaults; each fetch reads the live one (env overrides)
ATTEMPTS = POLICY.attempts
MAX_WAIT_S = POLICY.max_retry_after_s
# the body is read from urllib3 directly (one socket read at a time): its errors too
TRANSPORT_ERRORS = (requests.ConnectionError, requests.Timeout,
                    requests.exceptions.ChunkedEncodingError, urllib3.exceptions.HTTPError,
                    OSError)
_sleep: Callable[[float], None] = time.sleep  # tests replace it


class ProgressBar(Protocol):
    def advance(self, n: int) -> None: ...


class ProgressFactory(Protocol):
    """``ui.progress`` fits: a context manager factory giving an object with advance()."""

    def __call__(self, description: str, total: int | None,
                 unit_bytes: bool = True) -> AbstractContextManager[Any]: ...


class _Silent:
    def advance(self, n: int) -> None:
        pass


def bar(progress: ProgressFactory | None, description: str, total: int | None,
        unit_bytes: bool = True) -> AbstractContextManager[Any]:
    if progress is None:
        return nullcontext(_Silent())
    return progress(description, total, unit_bytes)


def new_session() -> requests.Session:
    """One session per fetch, trusting what pip trusts (netpolicy.http_session); tests
    mount a fake adapter on the one this returns."""
    return http_session()


def budget_of(session: requests.Session) -> Budget:
    """The fetch's deadline and request budget, carried by its session: the index page,
    the download and their retries all draw from it."""
    b = getattr(session, "patchbake_budget", None)
    if not isinstance(b, Budget):
        b = Budget("fetch", RetryPolicy.from_limits(), sleep=lambda s: _sleep(s))
        b.allow_blobs(1)
        session.patchbake_budget = b  # type: ignore[attr-defined]
    return b


def redact(url: str) -> str:
    """The URL without credentials, for messages."""
    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        netloc = f"***@{host}" + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


def retry_after(resp: requests.Response, attempt: int) -> float:
    """Seconds to wait before the next attempt: Retry-After (seconds or HTTP date) if the
    server gave one, capped; else exponential backoff (netpolicy's rule)."""
    return POLICY.wait(attempt, retry_after_seconds(str(resp.headers.get("Retry-After", ""))))


def _fail(what: str, url: str) -> Callable[[str], FetchError]:
    return lambda msg: FetchError(f"{what}: {redact(url)}: {msg}",
                                  hint="the server or network is failing; retry later")


def _get_once(session: requests.Session, url: str, *, what: str, stream: bool,
              headers: dict[str, str] | None) -> requests.Response:
    """One GET: a response below 400, a FetchError for an answer, Retryable otherwise."""
    try:
        resp = session.get(url, stream=stream, headers=headers,
                           timeout=budget_of(session).charge())
    except TRANSPORT_ERRORS as exc:
        untrusted = untrusted_certificate(exc, url, session)
        if untrusted is not None:
            raise untrusted from exc
        raise Retryable(f"{type(exc).__name__}: {exc}") from exc
    if resp.status_code < 400:
        return resp
    resp.close()
    if not is_retry_status(resp.status_code):
        raise FetchError(
            f"{what}: {redact(url)} answered HTTP {resp.status_code} {resp.reason or ''}"
            .rstrip(), hint="a client error is not retried; check the URL and the pin")
    raise Retryable(f"HTTP {resp.status_code}",
                    retry_after=retry_after_seconds(resp.headers.get("Retry-After")))


def request(session: requests.Session, url: str, *, what: str, stream: bool = False,
            headers: dict[str, str] | None = None) -> requests.Response:
    """GET with retries on transient failures; a non-2xx final answer is a FetchError."""
    return retrying(budget_of(session), "GET", lambda: _get_once(
        session, url, what=what, stream=stream, headers=headers), _fail(what, url))


def _file_path(url: str) -> Path:
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise FetchError(f"{url}: file URLs must be local (file:///path)")
    return Path(unquote(parts.path))


def download(url: str, store: Store, expected: Digest | None, *, what: str,
             progress: ProgressFactory | None = None,
             session: requests.Session | None = None) -> Digest:
    """Fetch ``url`` into the store as the blob ``expected``; return its digest.

    The bytes go to a temp file in the store, are hashed as they arrive, and become
    visible only if they match; every failure leaves nothing behind.
    """
    scheme = urlsplit(url).scheme
    if scheme == "file":
        path = _file_path(url)
        if not path.is_file():
            raise FetchError(f"{what}: {path} does not exist or is not a file")
        with bar(progress, f"copy {path.name}", path.stat().st_size) as b, \
                open(path, "rb") as f:
            return store.put_stream(counted(iter(lambda: f.read(CHUNK), b""), b), expected)
    if scheme not in ("http", "https"):
        raise FetchError(f"{what}: unsupported URL scheme '{scheme}' in {redact(url)}",
                         hint="use https://, http:// or file://")
    sess = session or new_session()
    budget = budget_of(sess)
    name = Path(urlsplit(url).path).name or "download"

    def attempt() -> Digest:
        resp = _get_once(sess, url, what=what, stream=True, headers=None)
        length = str(resp.headers.get("Content-Length", ""))
        total = int(length) if length.isdigit() else None
        body = budget.body(lambda: resp.raw.read1(CHUNK, decode_content=False), what)
        try:
            with resp, bar(progress, f"download {name}", total) as b:
                return store.put_stream(counted(body, b), expected)
        except TRANSPORT_ERRORS as exc:
            # the transfer broke mid-way: start over (the partial file is already gone)
            raise Retryable(f"{type(exc).__name__}: {exc}") from exc

    return retrying(budget, "download", attempt, _fail(what, url))


def counted(chunks: Iterator[bytes], b: Any) -> Iterator[bytes]:
    """Progress per chunk."""
    for c in chunks:
        if c:
            b.advance(len(c))
            yield c
