"""Downloads into the store: streamed, verified against the pin, retried only when the
failure is transient (connection errors, timeouts, 408/429/5xx honouring Retry-After).

A 4xx other than 408/429 is an answer, not an accident: it is never retried.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit, urlunsplit

import requests

from ..errors import FetchError
from ..fsutil import CHUNK
from ..store import Store

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504}) | frozenset(range(505, 600))
ATTEMPTS = 5
BACKOFF_S = 0.5
MAX_WAIT_S = 60.0
TIMEOUT = (15.0, 120.0)  # connect, read (between bytes)
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
    """One session per fetch; tests mount a fake adapter on the one this returns."""
    s = requests.Session()
    s.headers["User-Agent"] = "patchbake (pinned source fetch)"
    return s


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
    server gave one, capped at MAX_WAIT_S; else exponential backoff."""
    value = str(resp.headers.get("Retry-After", "")).strip()
    if value.isdigit():
        return min(float(value), MAX_WAIT_S)
    if value:
        try:
            when = email.utils.parsedate_to_datetime(value).timestamp()
        except (TypeError, ValueError):
            return backoff(attempt)
        return max(0.0, min(when - time.time(), MAX_WAIT_S))
    return backoff(attempt)


def backoff(attempt: int) -> float:
    return min(BACKOFF_S * float(2 ** attempt), MAX_WAIT_S)


def request(session: requests.Session, url: str, *, what: str, stream: bool = False,
            headers: dict[str, str] | None = None) -> requests.Response:
    """GET with retries on transient failures; a non-2xx final answer is a FetchError."""
    last = ""
    for attempt in range(ATTEMPTS):
        try:
            resp = session.get(url, stream=stream, headers=headers, timeout=TIMEOUT)
        except (requests.ConnectionError, requests.Timeout) as exc:
            last = f"{type(exc).__name__}: {exc}"
            if attempt + 1 < ATTEMPTS:
                _sleep(backoff(attempt))
            continue
        if resp.status_code < 400:
            return resp
        resp.close()
        if resp.status_code not in RETRY_STATUS:
            raise FetchError(
                f"{what}: {redact(url)} answered HTTP {resp.status_code} {resp.reason or ''}"
                .rstrip(), hint="a client error is not retried; check the URL and the pin")
        last = f"HTTP {resp.status_code}"
        if attempt + 1 < ATTEMPTS:
            _sleep(retry_after(resp, attempt))
    raise FetchError(f"{what}: {redact(url)} failed {ATTEMPTS} times; last: {last}",
                     hint="the server or network is failing; retry later")


def _file_path(url: str) -> Path:
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise FetchError(f"{url}: file URLs must be local (file:///path)")
    return Path(unquote(parts.path))


def download(url: str, store: Store, expected: str, *, what: str,
             progress: ProgressFactory | None = None,
             session: requests.Session | None = None) -> str:
    """Fetch ``url`` into the store as the blob ``expected`` (hex); return its digest.

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
    last = ""
    for attempt in range(ATTEMPTS):
        resp = request(sess, url, what=what, stream=True)
        total = int(resp.headers.get("Content-Length", 0)) or None
        name = Path(urlsplit(url).path).name or "download"
        try:
            with resp, bar(progress, f"download {name}", total) as b:
                return store.put_stream(counted(resp.iter_content(CHUNK), b), expected)
        except (requests.ConnectionError, requests.Timeout,
                requests.exceptions.ChunkedEncodingError) as exc:
            # the transfer broke mid-way: start over (the partial file is already gone)
            last = f"{type(exc).__name__}: {exc}"
            if attempt + 1 < ATTEMPTS:
                _sleep(backoff(attempt))
    raise FetchError(f"{what}: download of {redact(url)} broke off {ATTEMPTS} times; "
                     f"last: {last}", hint="the network is failing; retry later")


def counted(chunks: Iterator[bytes], b: Any) -> Iterator[bytes]:
    for c in chunks:
        if c:
            b.advance(len(c))
            yield c
