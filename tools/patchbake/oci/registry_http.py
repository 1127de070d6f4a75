"""HTTP for the registry client, on requests: auth challenges, the retry policy,
redirects, bounded body reads, errors.

Retry policy (the registries we copy from taught it): only 408, 429 and 5xx answers and
transport errors are retried, with exponential backoff or the server's ``Retry-After``;
401, 403 and 404 are answers, never retried. A request that carries an upload is retried
by the caller with a fresh upload session (see ``with_retries``), never replayed into the
same session.

requests carries the bytes: one Session per client, whose pool keeps keep-alive
connections per host (blobs moving on several threads each take their own). TLS trust
and proxies are pip's (``netpolicy.http_session`` from ``netconfig``), the same as the
source fetch's; a certificate they do not cover is a TrustError, not retried. What
requests is not left to do:

- redirects: followed here, hop by hop, each hop checked against the transport policy
  (``check_url_allowed``), credentials never following one to another host;
- reading bodies: requests' timeout bounds each socket read, not a body, so bodies are read
  here one socket read at a time (:meth:`Transport.chunks`) and the operation's deadline
  and a minimum rate are checked between reads;
- plain http (loopback only) never goes through a proxy, ``~/.netrc`` is never read (a
  registry's credentials come from ``registry_auth``), and bodies are never decoded (a
  blob's bytes are what is hashed).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import IO, Any, TypeVar
from urllib.parse import urlencode, urlsplit

import requests
import urllib3
from requests.adapters import BaseAdapter, HTTPAdapter

from ..errors import RegistryError
from ..fsutil import CHUNK
from ..netpolicy import (
    Budget,
    RetryPolicy,
    Session,
    http_session,
    is_retry_status,
    retry_after_seconds,
    retrying,
    untrusted_certificate,
)
from ..netpolicy import Retryable as RetryableError
from .registry_auth import Credentials, parse_challenge
from .registry_ref import check_url_allowed, resolve_location
from .unreachable import nothing_listens

__all__ = ["TRANSPORT_ERRORS", "Budget", "FileBody", "Response", "RetryPolicy",
           "RetryableError", "Transport", "registry_session"]

T = TypeVar("T")
Response = requests.Response
# What a failed exchange raises: requests' errors (all OSErrors: refused, reset, timed out,
# TLS) and urllib3's while a body is read (a read timeout, a body cut short of its length).
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (OSError, urllib3.exceptions.HTTPError)
_PEEK_ERRORS: tuple[type[BaseException], ...] = (*TRANSPORT_ERRORS, RetryableError)
MAX_CONNECTIONS = 16  # per host: one per blob moving at once (registry_blobs caps them at 16)
DRAIN_LIMIT = 64 << 10  # an answer's unread body up to this is read so its connection is reused
BODY_LIMIT = 4 << 20  # an answer read whole (not streamed): an index of referrers, a token
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


class FileBody:
    """A request body read from a file of known length (sent with its Content-Length,
    never chunked), reporting progress as it goes out and stopping at the deadline."""

    def __init__(self, f: IO[bytes], size: int, progress: Callable[[int], None] | None,
                 check: Callable[[], None]) -> None:
        self._f, self._size, self._progress, self._check = f, size, progress, check

    def __len__(self) -> int:
        return self._size

    def read(self, n: int = -1) -> bytes:
        self._check()
        data = self._f.read(n)
        if self._progress and data:
            self._progress(len(data))
        return data

    def close(self) -> None:
        self._f.close()


Body = bytes | FileBody | None


def _as_given(r: requests.PreparedRequest) -> requests.PreparedRequest:
    return r


class _Session(Session):
    """A Session that never follows a redirect, not even to offer it as ``Response.next``:
    for that requests would read the redirect's body whole (with no bound on the time it
    takes) and parse its Location before the transport policy has seen it."""

    def get_redirect_target(self, resp: requests.Response) -> None:
        return None


class _BlobAdapter(HTTPAdapter):
    """requests' adapter with uploads sent in CHUNK-sized writes: urllib3's connections
    send a file body 16 KiB at a time by default (``blocksize``), a write per 16 KiB of a
    multi-GB layer."""

    def init_poolmanager(self, connections: int, maxsize: int, block: bool = False,
                         **pool_kwargs: Any) -> None:
        super().init_poolmanager(connections, maxsize, block, blocksize=CHUNK, **pool_kwargs)


def registry_session(adapter: BaseAdapter | None = None) -> requests.Session:
    """The project's Session (``netpolicy.http_session``) as the registry needs it;
    ``adapter`` (an in-memory registry in tests) in place of requests' own."""
    s = http_session(_Session)
    s.headers["Accept-Encoding"] = "identity"  # a blob's bytes, as stored, are what is hashed
    # A session-wide auth hook keeps requests from replacing the Authorization header this
    # transport sets with ~/.netrc's entry for the host (Docker never reads ~/.netrc).
    s.auth = _as_given
    a = adapter or _BlobAdapter(pool_maxsize=MAX_CONNECTIONS)
    s.mount("https://", a)
    s.mount("http://", a)
    return s


def with_query(url: str, params: Mapping[str, str] | list[tuple[str, str]] | None) -> str:
    """``url`` with ``params`` appended to its query (after any it already has)."""
    if not params:
        return url
    query = urlencode(list(params.items()) if isinstance(params, Mapping) else params)
    return f"{url}{'&' if urlsplit(url).query else '?'}{query}"


def registry_errors(body: bytes, reason: str) -> tuple[str, frozenset[str]]:
    """The registry's own ``errors[].code: message`` in an error answer's ``body`` (else
    its first bytes, else the status's ``reason``), and the set of its error codes."""
    try:
        doc = json.loads(body)
        errs = doc.get("errors") if isinstance(doc, dict) else None
        if isinstance(errs, list) and errs:
            errs = [e for e in errs if isinstance(e, dict)]
            return ("; ".join(f"{e.get('code', '?')}: {e.get('message', '')}".strip()
                              for e in errs), frozenset(str(e.get("code")) for e in errs))
    except ValueError:
        pass
    text = body.decode("utf-8", "replace").strip().replace("\n", " ")
    return text[:200] or reason, frozenset()


class Transport:
    """One registry endpoint: base URL, session, cached tokens, retry policy."""

    def __init__(self, base: str, *, adapter: BaseAdapter | None = None,
                 credentials: Credentials | Callable[[], Credentials | None] | None = None,
                 retry: RetryPolicy | None = None,
                 sleep: Callable[[float], None] = time.sleep,
                 insecure_loopback_http: bool = True) -> None:
        self.base = base.rstrip("/")
        self.session = registry_session(adapter)
        # A callable is asked only when a registry first challenges: anonymous registries
        # never make us read (or trip over) Docker's config file.
        self._credentials = credentials
        self.retry = retry or RetryPolicy.from_limits()
        self.sleep = sleep
        self.insecure_loopback_http = insecure_loopback_http
        self.budget = Budget("registry request", self.retry, sleep=sleep)
        self._auth: dict[str, str] = {}  # scope -> Authorization header value
        self._auth_lock = threading.Lock()

    @property
    def credentials(self) -> Credentials | None:
        if callable(self._credentials):
            self._credentials = self._credentials()
        return self._credentials

    # -- retries -----------------------------------------------------------------------
    def begin(self, what: str, *, blobs: int = 0) -> Budget:
        """Start one operation (a push, a pull): a fresh deadline and request budget that
        every request and retry loop below it shares."""
        self.budget = Budget(what, self.retry, sleep=self.sleep)
        self.budget.allow_blobs(blobs)
        return self.budget

    @property
    def requests_sent(self) -> int:
        return self.budget.requests

    def with_retries(self, what: str, attempt: Callable[[], T]) -> T:
        """Run ``attempt`` under the shared policy (netpolicy.retrying)."""
        return retrying(self.budget, what, attempt, lambda msg: RegistryError(
            msg, hint="the registry is unavailable or overloaded; retry later"))

    # -- bodies ------------------------------------------------------------------------
    def chunks(self, resp: Response) -> Iterator[bytes]:
        """``resp``'s body as it arrives, one socket read at a time, under the operation's
        deadline and minimum rate (netpolicy's Budget.body). Transport errors are raised
        as they are."""
        return self.budget.body(lambda: resp.raw.read1(CHUNK, decode_content=False),
                                urlsplit(resp.url).path)

    def read(self, resp: Response, limit: int, what: str) -> bytes:
        """The whole body, refusing more than ``limit`` bytes (a manifest, a config)."""
        buf = bytearray()
        try:
            for chunk in self.chunks(resp):
                buf += chunk
                if len(buf) > limit:
                    raise RegistryError(f"{what} is larger than {limit} bytes; refusing it")
        except TRANSPORT_ERRORS as exc:
            raise RetryableError(f"{what}: {_why(exc)}") from exc
        finally:
            resp.close()
        return bytes(buf)

    def _peek(self, resp: Response, limit: int = DRAIN_LIMIT) -> bytes:
        """Up to ``limit`` bytes of an answer whose body is not wanted whole (an error
        document; what a PUT answers); read to its end, its connection is reused."""
        buf = bytearray()
        try:
            for chunk in self.chunks(resp):
                buf += chunk
                if len(buf) >= limit:
                    break
        except _PEEK_ERRORS:
            pass  # the status said what matters; the connection is not reused
        finally:
            resp.close()
        return bytes(buf[:limit])

    # -- requests ----------------------------------------------------------------------
    def url(self, path: str) -> str:
        return path if "://" in path else f"{self.base}{path}"

    def request(self, method: str, path: str, *, scopes: Iterable[str] = (),
                headers: Mapping[str, str] | None = None,
                body: Callable[[], Body] | None = None, params: Mapping[str, str] | None = None,
                stream: bool = False, ok: Iterable[int] = (200,),
                retry: bool = True, transient: Iterable[str] = ()) -> Response:
        """Send one logical request; return the response if its status is in ``ok``.

        ``body`` is a factory so a retry or an auth round-trip resends from the start.
        With ``stream`` the body is the caller's to read (``chunks``, ``read``); without,
        it has been read already (bounded like every body), for ``.content``/``.json()``. With ``retry=False`` a retryable failure
        raises RetryableError for the caller's own loop (uploads restart with a fresh
        session instead of replaying). ``transient``: registry error codes that, for this
        request, are retried like a 5xx.
        """
        scope_list = tuple(scopes)
        oks = frozenset(ok)
        retry_codes = frozenset(transient)

        def once() -> Response:
            resp = self._authorized(method, self.url(path), scope_list, headers, body, params)
            if resp.status_code not in oks:
                raise self._refusal(method, self.url(path), resp, retry_codes)
            if not stream:
                # requests' own cache of the body, which .content and .json() read
                resp._content = self.read(resp, BODY_LIMIT, f"the answer to {method} {path}")
            return resp

        if retry:
            return self.with_retries(f"{method} {path}", once)
        return once()

    def _authorized(self, method: str, url: str, scopes: tuple[str, ...],
                    headers: Mapping[str, str] | None, body: Callable[[], Body] | None,
                    params: Mapping[str, str] | None) -> Response:
        key = " ".join(sorted(scopes))
        used = self._auth.get(key)
        resp = self._send(method, url, headers, body, params, used)
        if resp.status_code == 401:
            header = resp.headers.get("WWW-Authenticate", "")
            self._peek(resp)
            with self._auth_lock:  # requests sent at once answer one challenge, once
                if self._auth.get(key) == used:
                    self._auth[key] = self._answer_challenge(header, scopes)
            resp = self._send(method, url, headers, body, params, self._auth[key])
            if resp.status_code == 401:
                detail = registry_errors(self._peek(resp), resp.reason or "")[0]
                raise RegistryError(
                    f"{method} {urlsplit(url).path}: unauthorized after authenticating ({detail})",
                    hint="check PATCHBAKE_REGISTRY_USER/PASSWORD or docker login for this host",
                )
        return resp

    def _refusal(self, method: str, url: str, resp: Response,
                 transient: frozenset[str]) -> Exception:
        """The error for an answer outside ``ok``: RetryableError for 408, 429, 5xx and
        the ``transient`` error codes, else RegistryError."""
        detail, codes = registry_errors(self._peek(resp), resp.reason or "")
        where = f"{method} {urlsplit(url).path}"
        if is_retry_status(resp.status_code) or codes & transient:
            return RetryableError(f"{where}: HTTP {resp.status_code} {detail}",
                                  retry_after=retry_after_seconds(resp.headers.get("Retry-After")))
        if resp.status_code == 403:
            return RegistryError(f"{where}: access denied (HTTP 403: {detail})",
                                 hint="the account lacks pull/push rights on this repository")
        return RegistryError(f"{where}: HTTP {resp.status_code} {detail}")

    def _send(self, method: str, url: str, headers: Mapping[str, str] | None,
              body: Callable[[], Body] | None, params: Mapping[str, str] | None,
              authorization: str | None) -> Response:
        hdrs = dict(headers or {})
        if authorization:
            hdrs["Authorization"] = authorization
        url = with_query(url, params)
        for _hop in range(6):
            check_url_allowed(url, insecure_loopback_http=self.insecure_loopback_http)
            resp = self._exchange(method, url, hdrs, body() if body else None)
            if resp.status_code not in _REDIRECTS or method not in ("GET", "HEAD"):
                return resp
            # Followed by hand so each hop passes the transport policy, and credentials
            # never follow a redirect to another host (blob storage backends).
            target = resolve_location(url, resp.headers.get("Location", ""), "redirect")
            self._peek(resp)
            if urlsplit(target).netloc != urlsplit(url).netloc:
                hdrs.pop("Authorization", None)
            url = target
        raise RegistryError(f"{method} {urlsplit(url).path}: too many redirects")

    def _exchange(self, method: str, url: str, headers: Mapping[str, str],
                  data: Body) -> Response:
        """One request and its answer's head (its body is left to read); transport
        errors become RetryableError, except a refused loopback connection."""
        # Plain http is loopback's only: never through a proxy (a fresh dict each time:
        # requests adds the environment's proxies to it).
        proxies: dict[str, str | None] | None = (
            {"http": None, "all": None} if urlsplit(url).scheme.lower() == "http" else None)
        try:
            return self.session.request(method, url, headers=headers, data=data, stream=True,
                                        allow_redirects=False, proxies=proxies,  # type: ignore[arg-type]  # None: no proxy
                                        timeout=self.budget.charge())
        except TRANSPORT_ERRORS as exc:
            refused = nothing_listens(url, exc)
            if refused is not None:  # loopback, connection refused: not transient
                raise refused from exc
            untrusted = untrusted_certificate(exc, url, self.session)
            if untrusted is not None:  # retrying cannot make a certificate trusted
                raise untrusted from exc
            raise RetryableError(f"{method} {urlsplit(url).path}: {_why(exc)}") from exc
        finally:
            if isinstance(data, FileBody):
                data.close()

    # -- auth --------------------------------------------------------------------------
    def _answer_challenge(self, header: str, scopes: tuple[str, ...]) -> str:
        ch = parse_challenge(header)
        if ch is None:
            raise RegistryError("the registry answered 401 without a WWW-Authenticate challenge")
        if ch.scheme == "basic":
            if not self.credentials:
                raise RegistryError(
                    "the registry asks for a user name and password",
                    hint="set PATCHBAKE_REGISTRY_USER and PATCHBAKE_REGISTRY_PASSWORD",
                )
            return self.credentials.basic_header()
        if ch.scheme != "bearer":
            raise RegistryError(f"unsupported auth scheme '{ch.scheme}' in WWW-Authenticate")
        return "Bearer " + self._fetch_token(ch.params, scopes)

    def _fetch_token(self, params: Mapping[str, str], scopes: tuple[str, ...]) -> str:
        realm = params.get("realm")
        if not realm:
            raise RegistryError("the registry's Bearer challenge names no realm")
        check_url_allowed(realm, insecure_loopback_http=self.insecure_loopback_http)
        wanted = list(dict.fromkeys([*scopes, *params.get("scope", "").split()]))
        query: list[tuple[str, str]] = [("scope", s) for s in wanted if s]
        if params.get("service"):
            query.insert(0, ("service", params["service"]))
        hdrs = {"Authorization": self.credentials.basic_header()} if self.credentials else {}
        where = urlsplit(realm).netloc

        def once() -> Any:
            resp = self._exchange("GET", with_query(realm, query), hdrs, None)
            if is_retry_status(resp.status_code):
                self._peek(resp)
                raise RetryableError(f"token request: HTTP {resp.status_code}",
                                     retry_after=retry_after_seconds(
                                         resp.headers.get("Retry-After")))
            if resp.status_code != 200:
                detail = registry_errors(self._peek(resp), resp.reason or "")[0]
                raise RegistryError(
                    f"the token service at {where} refused (HTTP {resp.status_code}: {detail})",
                    hint="check the credentials for this registry",
                )
            data = self.read(resp, BODY_LIMIT, f"token request to {where}")
            try:
                return json.loads(data)
            except ValueError as exc:
                raise RegistryError("the token service answered something other than JSON") from exc

        doc = self.with_retries("token request", once)
        token = doc.get("token") or doc.get("access_token") if isinstance(doc, dict) else None
        if not isinstance(token, str) or not token:
            raise RegistryError("the token service's answer carries no token")
        return token


def _why(exc: BaseException) -> str:
    """A transport error as words (a bare timeout or reset says too little by its str)."""
    text = str(exc)
    name = type(exc).__name__
    return f"{name}: {text}" if text else name
