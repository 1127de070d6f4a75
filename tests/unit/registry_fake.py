"""An in-memory distribution registry, mounted as the requests adapter of the registry
client's session (in place of requests' own): no sockets, so the client's unit tests stay
hermetic. Its answers are urllib3 responses, read by the client as real ones are.

It implements just the endpoints the client uses, records every request, and lets a test
inject failures (``fail``), auth (``auth``), tampering and a lying Docker-Content-Digest.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import requests

from patchbake.digest import Digest
from patchbake.fsutil import canonical_json
from patchbake.store import Store
from requests.adapters import BaseAdapter, HTTPAdapter
from urllib3 import HTTPResponse

HOST = "registry.test"
REALM = "https://auth.test/token"


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body_len: int


@dataclass
class Request:
    """What the client sent (the fields the fake answers from)."""

    method: str
    url: str


@dataclass(eq=False)
class FakeRegistry(BaseAdapter):
    auth: str | None = None  # None, "bearer" or "basic"
    user: str = "alice"
    password: str = "s3cret"
    log: list[Seen] = field(default_factory=list)
    blobs: dict[str, dict[str, bytes]] = field(default_factory=dict)
    manifests: dict[str, dict[str, tuple[bytes, str]]] = field(default_factory=dict)
    uploads: dict[str, str] = field(default_factory=dict)
    # Called first for every request; return (status, headers, body) to answer instead.
    fail: Callable[[Seen], tuple[int, dict[str, str], bytes] | None] | None = None
    tamper_blobs: bool = False
    tamper_manifests: bool = False
    rewrite_on_put: bool = False
    lying_digest_header: bool = False
    refuse_mounts: bool = False
    token_requests: list[dict[str, list[str]]] = field(default_factory=list)
    sessions_opened: int = -1
    break_streams: int = 0  # this many blob GETs die mid-body (connection reset)
    extra_blob_bytes: bytes = b""  # appended to every blob GET answer

    def __post_init__(self) -> None:
        super().__init__()

    # -- the session's adapter ---------------------------------------------------------
    def send(self, request: requests.PreparedRequest, stream: bool = False,
             timeout: float | tuple[float, float] | tuple[float, None] | None = None,
             verify: bool | str = True,
             cert: bytes | str | tuple[bytes | str, bytes | str] | None = None,
             proxies: Mapping[str, str] | None = None) -> requests.Response:
        assert stream and timeout, "every request streams and has a timeout"
        answer = self._answer(Request(str(request.method), str(request.url)), request)
        return _ADAPTER.build_response(request, answer)

    def close(self) -> None:
        pass

    def _answer(self, request: Request, prepared: requests.PreparedRequest) -> HTTPResponse:
        parts = urlsplit(request.url)
        body: Any = prepared.body
        data = body.read() if hasattr(body, "read") else (body or b"")
        hdrs = dict(prepared.headers)
        seen = Seen(request.method, parts.path, parse_qs(parts.query), hdrs, len(data))
        self.log.append(seen)
        # The client must never use chunked uploads of any kind.
        assert request.method != "PATCH", "chunked PATCH upload used"
        assert "chunked" not in hdrs.get("Transfer-Encoding", ""), "chunked body sent"
        if self.fail:
            try:
                forced = self.fail(seen)
            except OSError as exc:  # as requests' own adapter reports a reset connection
                raise requests.ConnectionError(exc) from exc
            if forced is not None:
                return self._resp(request, *forced)
        if parts.netloc == "auth.test":
            return self._token(request, seen)
        if self.auth and not self._authorized(hdrs.get("Authorization", "")):
            scope = self._scope_for(parts.path)
            chal = (f'Bearer realm="{REALM}",service="{HOST}"' + (f',scope="{scope}"' if scope
                                                                   else "")
                    if self.auth == "bearer" else f'Basic realm="{HOST}"')
            return self._resp(request, 401, {"WWW-Authenticate": chal},
                              b'{"errors":[{"code":"UNAUTHORIZED","message":"auth required"}]}')
        return self._route(request, seen, data)

    @staticmethod
    def _resp(request: Request, status: int, headers: dict[str, str], body: bytes,
              raw: Any = None) -> HTTPResponse:
        hdrs = {"Content-Length": str(len(body)), **headers}
        return HTTPResponse(body=raw or io.BytesIO(b"" if request.method == "HEAD" else body),
                            headers=hdrs, status=status, reason="fake",
                            request_method=request.method, request_url=request.url,
                            preload_content=False, decode_content=False)

    # -- auth --------------------------------------------------------------------------
    def _authorized(self, header: str) -> bool:
        if self.auth == "bearer":
            return header == "Bearer tok-123"
        import base64
        return header == "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode()).decode()

    @staticmethod
    def _scope_for(path: str) -> str:
        m = re.match(r"^/v2/(.+)/(blobs|manifests)/", path)
        return f"repository:{m.group(1)}:pull" if m else ""

    def _token(self, request: Request, seen: Seen) -> HTTPResponse:
        self.token_requests.append(seen.query)
        return self._resp(request, 200, {"Content-Type": "application/json"},
                          b'{"token":"tok-123"}')

    # -- registry ----------------------------------------------------------------------
    def _route(self, request: Request, seen: Seen,
               data: bytes) -> HTTPResponse:
        path, method, q = seen.path, seen.method, seen.query
        if path == "/v2/":
            return self._resp(request, 200, {}, b"{}")
        m = re.match(r"^/v2/(.+)/blobs/uploads/([^/]*)$", path)
        if m:
            return self._upload(request, m.group(1), m.group(2), method, q, data)
        m = re.match(r"^/v2/(.+)/blobs/(sha256:[0-9a-f]{64})$", path)
        if m:
            blob = self.blobs.get(m.group(1), {}).get(m.group(2))
            if blob is None:
                return self._resp(request, 404, {}, b'{"errors":[{"code":"BLOB_UNKNOWN"}]}')
            if self.tamper_blobs and method == "GET":
                blob = blob[:-1] + bytes([blob[-1] ^ 1])
            blob += self.extra_blob_bytes if method == "GET" else b""
            if self.break_streams and method == "GET":
                self.break_streams -= 1
                return self._resp(request, 200, {}, blob, _BrokenRaw(blob[: len(blob) // 2]))
            return self._resp(request, 200, {"Docker-Content-Digest": m.group(2)}, blob)
        m = re.match(r"^/v2/(.+)/manifests/(.+)$", path)
        if m:
            return self._manifest(request, m.group(1), m.group(2), method, data, seen)
        return self._resp(request, 404, {}, b"")

    def _upload(self, request: Request, repo: str, uid: str, method: str,
                q: dict[str, list[str]], data: bytes) -> HTTPResponse:
        if method == "POST":
            if "mount" in q and not self.refuse_mounts:
                src = self.blobs.get(q["from"][0], {}).get(q["mount"][0])
                if src is not None:
                    self.blobs.setdefault(repo, {})[q["mount"][0]] = src
                    return self._resp(request, 201, {}, b"")
            self.sessions_opened += 1
            new = f"{self.sessions_opened:04d}-u"
            self.uploads[new] = repo
            # A relative Location with its own query, as the real registry sends.
            return self._resp(request, 202, {"Location": f"/v2/{repo}/blobs/uploads/{new}?_state=x"},
                              b"")
        if method == "PUT" and uid in self.uploads:
            digest = q["digest"][0]
            assert q.get("_state") == ["x"], "upload session state lost"
            if sha(data) != digest:
                return self._resp(request, 400, {}, b'{"errors":[{"code":"DIGEST_INVALID"}]}')
            self.blobs.setdefault(repo, {})[digest] = data
            del self.uploads[uid]
            return self._resp(request, 201, {}, b"")
        return self._resp(request, 404, {}, b'{"errors":[{"code":"BLOB_UPLOAD_UNKNOWN"}]}')

    def _manifest(self, request: Request, repo: str, ref: str, method: str,
                  data: bytes, seen: Seen) -> HTTPResponse:
        store = self.manifests.setdefault(repo, {})
        if method == "PUT":
            stored = data + b" " if self.rewrite_on_put else data
            ctype = seen.headers.get("Content-Type", "")
            store[sha(stored)] = (stored, ctype)
            store[ref] = (stored, ctype)
            return self._resp(request, 201, {"Docker-Content-Digest": sha(stored)}, b"")
        if ref not in store:
            return self._resp(request, 404, {}, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}')
        body, ctype = store[ref]
        header = sha(b"lie") if self.lying_digest_header else sha(body)
        if self.tamper_manifests:
            body = body.replace(b'"size":', b'"size": ')
        return self._resp(request, 200, {"Content-Type": ctype, "Docker-Content-Digest": header},
                          body)

    # -- helpers for tests -------------------------------------------------------------
    def calls(self, method: str | None = None) -> list[Seen]:
        return [s for s in self.log if method is None or s.method == method]

    def seed_image(self, repo: str, image: Image, tag: str | None = None) -> None:
        for d, b in image.blobs.items():
            self.blobs.setdefault(repo, {})[str(d)] = b
        entry = (image.manifest, "application/vnd.oci.image.manifest.v1+json")
        self.manifests.setdefault(repo, {})[str(image.digest)] = entry
        if tag:
            self.manifests[repo][tag] = entry


_ADAPTER = HTTPAdapter()  # for its build_response: urllib3's answer as requests' Response


class _BrokenRaw:
    """A response body that dies half-way, as a reset connection does."""

    closed = False

    def __init__(self, head: bytes) -> None:
        self.head = head

    def read(self, n: int = -1) -> bytes:
        if self.head:
            out, self.head = self.head, b""
            return out
        raise ConnectionResetError(104, "Connection reset by peer")

    read1 = read

    def close(self) -> None:
        self.closed = True


@dataclass
class Image:
    manifest: bytes
    digest: Digest
    config_digest: Digest
    blobs: dict[Digest, bytes]


def make_image(text: bytes = b"hello\n", *, layer_size: int = 0, arch: str = "amd64") -> Image:
    """A deterministic image: a config and one 'layer' blob (any bytes do for the registry)."""
    layer = text + bytes(range(256)) * (layer_size // 256)
    cfg = canonical_json({"architecture": arch, "os": "linux",
                          "rootfs": {"type": "layers", "diff_ids": [sha(layer)]}})
    man = canonical_json({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": sha(cfg), "size": len(cfg)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": sha(layer), "size": len(layer)}]})
    return Image(man, Digest.of(man), Digest.of(cfg), {Digest.of(cfg): cfg,
                                                       Digest.of(layer): layer})


def make_index(*images: tuple[Image, str]) -> tuple[bytes, Digest]:
    idx = canonical_json({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "digest": str(im.digest), "size": len(im.manifest),
                       "platform": {"os": "linux", "architecture": arch}}
                      for im, arch in images]})
    return idx, Digest.of(idx)


def store_image(store: Store, image: Image) -> Digest:
    for b in image.blobs.values():
        store.put_bytes(b)
    store.put_bytes(image.manifest)
    return image.digest


def json_dump(obj: Any) -> bytes:
    return json.dumps(obj).encode()
