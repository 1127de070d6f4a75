"""Blob transfers for the registry client: HEAD, mount, monolithic upload, verified fetch.

Uploads are one POST (open a session) and one PUT carrying the whole body with
``?digest=``; a body always has a Content-Length, so neither a chunked PATCH nor a chunked
transfer encoding is ever used. A large blob is streamed from the store file; its bytes
are not re-hashed here, since the store names them by their sha256 and the registry checks
the ``?digest=`` before it accepts them. A failed upload opens a fresh session rather than
replaying into one the registry may have half-written.

Fetches stream into the store, hashed as they arrive, never whole in memory; the socket
read overlaps hashing and writing (a reader thread feeds a small bounded queue), because
on large base layers the three otherwise run one after another.

Independent blobs move concurrently (``each_concurrently``: up to
``$PATCHBAKE_REGISTRY_CONCURRENCY`` at once, default 4), as the Docker CLI and skopeo do;
results keep the manifest's order, and the first failure is raised once the transfers
already running have ended (none is left half-way in a background thread).
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit
from typing import TypeVar

from ..digest import differing
from ..errors import IntegrityError, RegistryError
from ..fsutil import sha256_file
from ..store import Store
from .registry_http import TRANSPORT_ERRORS, FileBody, Response, RetryableError, Transport
from .registry_manifest import Descriptor
from .registry_ref import resolve_location

T = TypeVar("T")
R = TypeVar("R")

SMALL_BODY = 1 << 20  # blobs below this are sent from memory
PREFETCH_DEPTH = 8  # chunks (of CHUNK bytes) read ahead of the hash+write side
Progress = Callable[[int], None]
CONCURRENCY_ENV = "PATCHBAKE_REGISTRY_CONCURRENCY"
DEFAULT_CONCURRENCY = 4


def concurrency() -> int:
    value = os.environ.get(CONCURRENCY_ENV, "")
    if value.isdigit() and int(value) > 0:
        return min(int(value), 16)
    return DEFAULT_CONCURRENCY


def each_concurrently(fn: Callable[[T], R], items: Sequence[T],
                      workers: int | None = None) -> list[R]:
    """``[fn(i) for i in items]`` with up to ``workers`` calls at once, results in order.

    On the first failure nothing new starts; the calls already running finish (each
    cleans up after itself), then that failure is raised. Daemon threads rather than a
    ThreadPoolExecutor: on Ctrl-C or SIGTERM the caller unwinds at once, where an
    executor's workers would hold the process until every blob in flight had moved.
    """
    n = min(workers or concurrency(), len(items))
    if n <= 1:
        return [fn(i) for i in items]
    results: list[R | None] = [None] * len(items)
    errors: list[tuple[int, BaseException]] = []
    lock = threading.Lock()
    next_index = [0]

    def worker() -> None:
        while True:
            with lock:
                if errors or next_index[0] >= len(items):
                    return
                i = next_index[0]
                next_index[0] += 1
            try:
                results[i] = fn(items[i])
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                with lock:
                    errors.append((i, exc))
                return

    threads = [threading.Thread(target=worker, name=f"blob-{k}", daemon=True)
               for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise min(errors, key=lambda e: e[0])[1]
    return results  # type: ignore[return-value]


def pull_scope(repo: str) -> str:
    return f"repository:{repo}:pull"


def push_scope(repo: str) -> str:
    return f"repository:{repo}:pull,push"


def _prefetch(  # noqa: C901 - a reader thread and its consumer kept together
        chunks: Iterable[bytes], depth: int = PREFETCH_DEPTH) -> Iterator[bytes]:
    """Iterate ``chunks`` in a reader thread; exceptions there surface here, in order."""
    q: queue.Queue[bytes | BaseException | None] = queue.Queue(depth)
    stop = threading.Event()

    def offer(item: bytes | BaseException | None) -> bool:
        # Give up when the consumer has gone away, so this thread never blocks forever.
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def reader() -> None:
        try:
            for c in chunks:
                if not offer(c):
                    return
            offer(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, re-raised there
            offer(exc)

    t = threading.Thread(target=reader, name="blob-reader", daemon=True)
    t.start()
    try:
        while True:
            item = q.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()


def fetch_blob(http: Transport, store: Store, repo: str, desc: Descriptor,
               progress: Progress | None = None) -> int:
    """Stream one blob into the store, verified by size and sha256; returns bytes read."""

    def body(resp: Response, count: list[int]) -> Iterator[bytes]:
        try:
            for chunk in _prefetch(http.chunks(resp)):
                count[0] += len(chunk)
                if count[0] > desc.size:
                    raise RegistryError(f"blob {desc.digest} is longer than its "
                                        f"descriptor's {desc.size} bytes; nothing was stored")
                if progress:
                    progress(len(chunk))
                yield chunk
        except TRANSPORT_ERRORS as exc:
            raise RetryableError(f"GET blob {desc.digest}: {exc}") from exc
        if count[0] != desc.size:
            # a short body is a truncated transfer even when the server's Content-Length
            # agrees with it (a server that lies consistently): retried like one
            raise RetryableError(f"blob {desc.digest} ended after {count[0]} of "
                                 f"{desc.size} bytes")

    def attempt() -> int:
        resp = http.request("GET", f"/v2/{repo}/blobs/{desc.digest}", stream=True,
                            scopes=[pull_scope(repo)], retry=False)
        count = [0]
        try:
            store.put_stream(body(resp, count), expected=desc.digest)
        except IntegrityError as exc:
            raise RegistryError(
                f"the registry answered blob {desc.digest} with other bytes: {exc.message}",
                hint="the registry or something between us altered it",
            ) from exc
        finally:
            resp.close()
        return count[0]

    return http.with_retries(f"GET blob {desc.digest}", attempt)


def blob_present(http: Transport, repo: str, desc: Descriptor) -> bool:
    resp = http.request("HEAD", f"/v2/{repo}/blobs/{desc.digest}", ok=(200, 404),
                        scopes=[push_scope(repo)])
    resp.close()
    if resp.status_code == 404:
        return False
    length = resp.headers.get("Content-Length")
    if length is not None and length.isdigit() and int(length) != desc.size:
        raise RegistryError(f"the registry holds {desc.digest} in {repo} with "
                            f"{length} bytes, the manifest says {desc.size}")
    return True


def _location(resp: Response) -> str:
    loc = resp.headers.get("Location")
    if not loc:
        raise RegistryError("the registry opened an upload without a Location header")
    return resolve_location(resp.url, loc, "upload location")


def _add_query(url: str, **params: str) -> str:
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True) + list(params.items())
    return urlunsplit(parts._replace(query=urlencode(query)))


def try_mount(http: Transport, repo: str, desc: Descriptor, source: str) -> str | None:
    """Mount ``desc`` from ``source``. None if mounted; else the URL of the upload session
    the registry opened instead (it answers 202 when it cannot mount)."""
    resp = http.request("POST", f"/v2/{repo}/blobs/uploads/",
                        params={"mount": str(desc.digest), "from": source}, ok=(201, 202),
                        scopes=[push_scope(repo), pull_scope(source)])
    resp.close()
    return None if resp.status_code == 201 else _location(resp)


def upload_blob(http: Transport, store: Store, repo: str, desc: Descriptor,
                session_url: str | None, progress: Progress | None) -> None:
    """Monolithic upload of a store blob, in ``session_url`` if one is already open."""
    urls = [session_url] if session_url else []

    def open_body() -> bytes | FileBody:
        if desc.size < SMALL_BODY:
            data = store.read_blob(desc.digest)
            if progress:
                progress(len(data))
            return data
        return FileBody(store.open_blob(desc.digest), desc.size, progress, http.budget.check)

    def attempt() -> None:
        url = urls.pop() if urls else None
        if url is None:
            resp = http.request("POST", f"/v2/{repo}/blobs/uploads/", ok=(202,),
                                scopes=[push_scope(repo)])
            resp.close()
            url = _location(resp)
        resp = http.request("PUT", _add_query(url, digest=str(desc.digest)),
                            body=open_body, ok=(201,),
                            headers={"Content-Type": "application/octet-stream"},
                            scopes=[push_scope(repo)], retry=False)
        resp.close()

    try:
        http.with_retries(f"upload of {desc.digest}", attempt)
    except RegistryError as exc:
        _blame_a_damaged_blob(store, desc, exc)
        raise


def _blame_a_damaged_blob(store: Store, desc: Descriptor, exc: RegistryError) -> None:
    """A registry that refuses an upload (DIGEST_INVALID, a size it did not expect) may be
    right: a store blob whose bytes are not its name (a disk error, an edit) is the cause
    to report, with the way to repair it, rather than the registry's words."""
    path = store.blob_path(desc.digest)
    got = sha256_file(path) if path.is_file() else None
    if got is not None and got != desc.digest.hex:
        name, found = differing(desc.digest.hex, got)
        raise IntegrityError(
            f"the store's blob {desc.digest} is damaged: its bytes hash to sha256:{found}…, "
            f"not sha256:{name}… ({path}); the registry refused it: {exc.message}",
            hint="`patchbake store fsck --quarantine` moves damaged blobs aside; then bake "
                 "or pull the image again") from exc


def mount_sources(explicit: Sequence[str], known: Sequence[str], repo: str) -> list[str]:
    """Where to try a mount from: ``--mount-from`` first, then recorded repositories."""
    return [s for s in dict.fromkeys([*explicit, *known]) if s != repo]
