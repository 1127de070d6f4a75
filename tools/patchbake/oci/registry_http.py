"""HTTP for the registry client: auth challenges, the retry policy, redirects, errors.

Retry policy (the registries we copy from taught it): only 408, 429 and 5xx answers and
transport errors are retried, with exponential backoff or the server's ``Retry-After``;
401, 403 and 404 are answers, never retried. A request that carries an upload is retried
by the caller with a fresh upload session (see ``with_retries``), never replayed into the
same session.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from urllib.parse import urlencode, urlsplit

from ..errors import RegistryError
from ..netpolicy import Budget, RetryPolicy, is_retry_status, retry_after_seconds, retrying
from ..netpolicy import Retryable as RetryableError
from .registry_conn import TRANSPORT_ERRORS, ConnectionPool, FileBody, Response
from .registry_ref import check_url_allowed, resolve_location
from .unreachable import nothing_listens

TYPE_CHECKING = False
if TYPE_CHECKING:  # imported when a registry first challenges: anonymous pulls never do
    from typing import Any, TypeVar

    from .registry_conn import Sender

    T = TypeVar("T")
    from .registry_auth import Credentials

__all__ = ["TRANSPORT_ERRORS", "Budget", "FileBody", "Response", "RetryPolicy",
           "RetryableError", "Sender", "Transport", "is_retry_status", "retry_after_seconds"]

Body = bytes | FileBody | None
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def with_query(url: str, params: Mapping[str, str] | list[tuple[str, str]] | None) -> str:
    """``url`` with ``params`` appended to its query (after any it already has)."""
    if not params:
        return url
    query = urlencode(list(params.items()) if isinstance(params, Mapping) else params)
    return f"{url}{'&' if urlsplit(url).query else '?'}{query}"


def registry_errors(resp: Response) -> tuple[str, frozenset[str]]:
    """The registry's own ``errors[].code: message`` (else the first bytes of the body),
    and the set of its error codes."""
    try:
        resp.preload()
    except TRANSPORT_ERRORS:  # the error document itself did not arrive: the status says it
        return resp.reason or "", frozenset()
    try:
        doc = resp.json()
        errs = doc.get("errors") if isinstance(doc, dict) else None
        if isinstance(errs, list) and errs:
            errs = [e for e in errs if isinstance(e, dict)]
            return ("; ".join(f"{e.get('code', '?')}: {e.get('message', '')}".strip()
                              for e in errs), frozenset(str(e.get("code")) for e in errs))
    except ValueError:
        pass
    text = (resp.text or "").strip().replace("\n", " ")
    return text[:200] or (resp.reason or ""), frozenset()


def registry_error_text(resp: Response) -> str:
    """The registry's own ``errors[].code: message``, else the first bytes of the body."""
    return registry_errors(resp)[0]


class Transport:
    """One registry endpoint: base URL, connections, cached tokens, retry policy."""

    def __init__(self, base: str, *, sender: Sender | None = None,
                 credentials: Credentials | Callable[[], Credentials | None] | None = None,
                 retry: RetryPolicy | None = None,
                 sleep: Callable[[float], None] = time.sleep,
                 insecure_loopback_http: bool = True) -> None:
        self.base = base.rstrip("/")
        self.sender: Sender = sender or ConnectionPool()
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
        With ``retry=False`` a retryable failure raises RetryableError for the caller's
        own loop (uploads restart with a fresh session instead of replaying).
        ``transient``: registry error codes that, for this request, are retried like a 5xx.
        """
        scope_list = tuple(scopes)
        oks = frozenset(ok)
        retry_codes = frozenset(transient)

        def once() -> Response:
            resp = self._authorized(method, self.url(path), scope_list, headers, body,
                                    params, stream)
            if resp.status_code in oks:
                return resp
            raise self._refusal(method, self.url(path), resp, retry_codes)

        if retry:
            return self.with_retries(f"{method} {path}", once)
        return once()

    def _authorized(self, method: str, url: str, scopes: tuple[str, ...],
                    headers: Mapping[str, str] | None, body: Callable[[], Body] | None,
                    params: Mapping[str, str] | None, stream: bool) -> Response:
        key = " ".join(sorted(scopes))
        used = self._auth.get(key)
        resp = self._send(method, url, headers, body, params, stream, used)
        if resp.status_code == 401:
            header = resp.headers.get("WWW-Authenticate", "")
            resp.close()
            with self._auth_lock:  # requests sent at once answer one challenge, once
                if self._auth.get(key) == used:
                    self._auth[key] = self._answer_challenge(header, scopes)
            resp = self._send(method, url, headers, body, params, stream, self._auth[key])
            if resp.status_code == 401:
                detail = registry_error_text(resp)
                resp.close()
                raise RegistryError(
                    f"{method} {urlsplit(url).path}: unauthorized after authenticating ({detail})",
                    hint="check PATCHBAKE_REGISTRY_USER/PASSWORD or docker login for this host",
                )
        return resp

    @staticmethod
    def _refusal(method: str, url: str, resp: Response,
                 transient: frozenset[str]) -> Exception:
        """The error for an answer outside ``ok``: RetryableError for 408, 429, 5xx and
        the ``transient`` error codes, else RegistryError."""
        detail, codes = registry_errors(resp)
        resp.close()
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
              stream: bool, authorization: str | None) -> Response:
        hdrs = dict(headers or {})
        if authorization:
            hdrs["Authorization"] = authorization
        url = with_query(url, params)
        for _hop in range(6):
            check_url_allowed(url, insecure_loopback_http=self.insecure_loopback_http)
            data = body() if body else None
            if data is not None or method in _BODY_METHODS:
                hdrs["Content-Length"] = str(len(data) if data is not None else 0)
            try:
                timeout = self.budget.charge()
                resp = self.sender.send(method, url, hdrs, data, timeout)
                if not stream:
                    resp.preload()
            except TRANSPORT_ERRORS as exc:
                refused = nothing_listens(url, exc)
                if refused is not None:  # loopback, connection refused: not transient
                    raise refused from exc
                raise RetryableError(f"{method} {urlsplit(url).path}: {_why(exc)}") from exc
            finally:
                close = getattr(data, "close", None)
                if close:
                    close()
            # Redirects are followed by hand so each hop passes the transport policy, and
            # credentials never follow a redirect to another host (blob storage backends).
            if resp.status_code in (301, 302, 303, 307, 308) and method in ("GET", "HEAD"):
                target = resolve_location(url, resp.headers.get("Location", ""), "redirect")
                resp.close()
                if urlsplit(target).netloc != urlsplit(url).netloc:
                    hdrs.pop("Authorization", None)
                url = target
                continue
            return resp
        raise RegistryError(f"{method} {urlsplit(url).path}: too many redirects")

    # -- auth --------------------------------------------------------------------------
    def _answer_challenge(self, header: str, scopes: tuple[str, ...]) -> str:
        from .registry_auth import parse_challenge

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

        def once() -> Any:
            try:
                timeout = self.budget.charge()
                resp = self.sender.send("GET", with_query(realm, query), hdrs, None, timeout)
                resp.preload()
                resp.close()
            except TRANSPORT_ERRORS as exc:
                raise RetryableError(f"token request to {urlsplit(realm).netloc}: "
                                     f"{_why(exc)}") from exc
            if is_retry_status(resp.status_code):
                raise RetryableError(f"token request: HTTP {resp.status_code}",
                                     retry_after=retry_after_seconds(
                                         resp.headers.get("Retry-After")))
            if resp.status_code != 200:
                raise RegistryError(
                    f"the token service at {urlsplit(realm).netloc} refused "
                    f"(HTTP {resp.status_code}: {registry_error_text(resp)})",
                    hint="check the credentials for this registry",
                )
            try:
                return resp.json()
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
