"""OCI distribution client: push an image from the store by digest, pull one into it.

Works purely on store blobs and manifest digests, so it does not care how an image was
made. What it guarantees:

- push: a tag that already points elsewhere is refused before anything is sent; blobs are
  HEAD-checked, mounted from another repository of the same registry when one is known to
  hold them, otherwise uploaded monolithically (POST, then one PUT with ``?digest=``; never
  a chunked PATCH); manifests go up by digest first, are read back and compared byte for
  byte, and only then is the tag set (and read back).
- pull: every byte is hashed by us against the digest we asked for (the registry's
  ``Docker-Content-Digest`` header is never trusted) and goes through
  ``Store.put_stream(expected=...)``, so nothing half-written or unverified is ever stored.
  A manifest is stored last, so after a full pull its blobs are there too (with
  ``layers=False`` only its config is).
"""

from __future__ import annotations

import difflib
import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from requests.adapters import BaseAdapter

from ..digest import Digest
from ..errors import RegistryError, StoreError
from ..store import Store
from . import registry_blobs as blobs
from . import registry_record
from .registry_auth import Credentials, credentials_for
from .registry_blobs import Progress
from .registry_http import RetryPolicy, Transport
from .registry_manifest import MANIFEST_ACCEPT, MAX_MANIFEST_BYTES, parse_manifest, select_platform
from .registry_push import Push, PushResult
from .registry_ref import DEFAULT_REGISTRY_ENV, RegistryRef, base_url, parse_ref

__all__ = ["DEFAULT_PLATFORM", "PullResult", "PushResult", "RegistryClient", "parse_pull_ref",
           "pull", "push"]

DEFAULT_PLATFORM = "linux/amd64"


@dataclass(frozen=True, slots=True)
class PullResult:
    """What a pull fetched and stored."""

    ref: str
    digest: Digest  # the image manifest stored (the platform's, for an index)
    media_type: str
    index_digest: Digest | None  # set when ref named a multi-arch index
    platform: str | None
    config_digest: Digest
    fetched: tuple[Digest, ...]  # blob digests downloaded and verified
    present: tuple[Digest, ...]  # blob digests the store already had
    bytes_fetched: int = 0
    warnings: tuple[str, ...] = ()
    requests: int = 0


class RegistryClient:
    """A client for one registry host (``127.0.0.1:5000`` or ``https://host``)."""

    def __init__(self, base_url_or_host: str, *, insecure_loopback_http: bool = True,
                 auth: Credentials | None = None, adapter: BaseAdapter | None = None,
                 retry: RetryPolicy | None = None, sleep: Callable[[float], None] = time.sleep,
                 record_mounts: bool = True) -> None:
        self.base = base_url(base_url_or_host, insecure_loopback_http=insecure_loopback_http)
        self.host = urlsplit(self.base).netloc.lower()
        host = self.host
        creds = auth if auth is not None else (lambda: credentials_for(host))
        self.http = Transport(self.base, adapter=adapter, credentials=creds, retry=retry,
                              sleep=sleep, insecure_loopback_http=insecure_loopback_http)
        self.record_mounts = record_mounts
        self._pinged = False
        self._in_op = False

    def _begin(self, what: str, blobs: int = 0) -> None:
        """A new deadline and request budget, unless inside a push or pull already."""
        if not self._in_op:
            self.http.begin(what, blobs=blobs)

    def note_blobs(self, store: Store, repo: str, digests: Iterable[Digest]) -> tuple[str, ...]:
        """Record which repository holds which blobs (a cache for later mounts): a failure
        to write it is a warning, never a failed push or pull."""
        if not self.record_mounts:
            return ()
        try:
            registry_record.note_blobs(store, self.host, repo, digests)
        except (OSError, StoreError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else exc.message
            note = (f"the blob-location cache in {store.root} was not updated ({why}); "
                    "later pushes may upload instead of mounting")
            return (note,)
        return ()

    @classmethod
    def for_ref(cls, ref: str | RegistryRef, **kw: object) -> RegistryClient:
        r = parse_ref(ref) if isinstance(ref, str) else ref
        return cls(r.host, **kw)  # type: ignore[arg-type]

    # -- basics ------------------------------------------------------------------------
    def _ref(self, ref: str | RegistryRef) -> RegistryRef:
        r = parse_ref(ref) if isinstance(ref, str) else ref
        if r.host != self.host:
            raise RegistryError(f"reference {r} is for {r.host}, this client talks to {self.host}")
        return r

    def ping(self) -> None:
        """``GET /v2/``: the endpoint speaks the distribution API (and auth works)."""
        if self._pinged:
            return
        resp = self.http.request("GET", "/v2/", ok=(200, 404))
        resp.close()
        if resp.status_code == 404:
            raise RegistryError(f"{self.base} does not serve the OCI distribution API (/v2/ is 404)")
        self._pinged = True

    # -- manifests ---------------------------------------------------------------------
    def fetch_manifest(self, r: RegistryRef, reference: str, *, push_scope: bool = False,
                        missing_ok: bool = False) -> tuple[bytes, str] | None:
        scope = blobs.push_scope(r.repo) if push_scope else blobs.pull_scope(r.repo)

        def attempt() -> tuple[bytes, str] | None:
            resp = self.http.request("GET", f"/v2/{r.repo}/manifests/{reference}",
                                     scopes=[scope], headers={"Accept": MANIFEST_ACCEPT},
                                     stream=True, ok=(200, 404) if missing_ok else (200,),
                                     retry=False)
            if resp.status_code == 404:
                resp.close()
                return None
            ctype = resp.headers.get("Content-Type", "")
            return self.http.read(resp, MAX_MANIFEST_BYTES, f"manifest {reference}"), ctype

        return self.http.with_retries(f"GET manifest {r.repo}:{reference}", attempt)

    def get_manifest(self, ref: str | RegistryRef) -> tuple[bytes, str, Digest]:
        """(bytes, media type, digest) of ``ref``; by-digest answers are verified."""
        r = self._ref(ref)
        self._begin(f"GET manifest {r}")
        self.ping()
        try:
            got = self.fetch_manifest(r, r.reference)
        except RegistryError as exc:
            # the transport words a refusal "METHOD PATH: HTTP <status> <registry's words>"
            if ": HTTP 404 " in exc.message:
                raise self._missing(r, exc.message) from exc
            raise
        assert got is not None
        data, ctype = got
        digest = Digest.of(data)
        if r.digest and digest != r.digest:
            raise RegistryError(
                f"the registry answered {r.repo}@{r.digest} with a manifest hashing to {digest}",
                hint="the registry or something between us altered it; nothing was stored",
            )
        return data, parse_manifest(data, ctype).media_type, digest

    def _missing(self, r: RegistryRef, answer: str) -> RegistryError:
        """The registry has no manifest for ``r``: say so, and which tags it does have."""
        what = f"digest {r.digest}" if r.digest else f"tag '{r.reference}'"
        tags = self.tags(r)
        if tags is None:
            known = ""
        elif not tags:
            known = f"; {r.repo} has no tags there (is the repository name right?)"
        else:
            near = difflib.get_close_matches(r.reference, tags, n=1)
            known = (f"; did you mean '{near[0]}'?" if near else "") + \
                f" ({r.repo}'s tags: {', '.join(sorted(tags)[:8])}" + \
                (f" and {len(tags) - 8} more)" if len(tags) > 8 else ")")
        return RegistryError(f"{r.host}/{r.repo} has no {what}{known}; the registry "
                             f"answered {answer}",
                             hint="check the reference, or push the image first with "
                                  "`patchbake push IMAGE REF`")

    def tags(self, r: RegistryRef) -> list[str] | None:
        """The repository's tags, or None if the registry will not say (no such
        repository, no rights, no answer): for hints, which must never fail."""
        try:
            return self.list_tags(r)
        except RegistryError:
            return None

    def list_tags(self, r: RegistryRef) -> list[str]:
        """The repository's tags (the distribution API's tag list; one page of up to
        10,000, which is what a release repository holds)."""
        self._begin(f"GET tags of {r.repo}")
        resp = self.http.request("GET", f"/v2/{r.repo}/tags/list", ok=(200,),
                                 params={"n": "10000"}, scopes=[blobs.pull_scope(r.repo)],
                                 stream=True, retry=False)
        try:
            doc = json.loads(self.http.read(resp, 4 << 20, f"{r.repo} tag list"))
        except ValueError as exc:
            raise RegistryError(f"{r.host}/{r.repo}: the tag list is not JSON ({exc})") from None
        found = doc.get("tags") if isinstance(doc, dict) else None
        return sorted(t for t in found if isinstance(t, str)) if isinstance(found, list) else []

    # -- blobs -------------------------------------------------------------------------
    def get_blob(self, ref: str | RegistryRef, digest: Digest, *, max_bytes: int = 64 << 20) -> bytes:
        """A small blob (a config) in memory, verified against ``digest``."""
        r = self._ref(ref)
        self._begin(f"GET blob {digest}")
        self.ping()

        def attempt() -> bytes:
            resp = self.http.request("GET", f"/v2/{r.repo}/blobs/{digest}", stream=True,
                                     scopes=[blobs.pull_scope(r.repo)], retry=False)
            return self.http.read(resp, max_bytes, f"blob {digest}")

        data = self.http.with_retries(f"GET blob {digest}", attempt)
        if Digest.of(data) != digest:
            raise RegistryError(f"the registry answered blob {digest} with bytes hashing to "
                                f"{Digest.of(data)}; nothing was stored")
        return data

    # -- push --------------------------------------------------------------------------
    def push(self, store: Store, manifest_digest: Digest, ref: str | RegistryRef, *,
             mount_from: Iterable[str] = (), progress: Progress | None = None) -> PushResult:
        """Push the image (or index) ``manifest_digest`` from ``store`` to ``ref``
        (``registry_push`` says how)."""
        r = self._ref(ref)
        if r.digest and r.digest != manifest_digest:
            raise RegistryError(f"destination {r} names {r.digest}, the image is {manifest_digest}")
        job = Push(self, store, manifest_digest, r, list(mount_from), progress)
        self.http.begin(f"push of {manifest_digest} to {r}", blobs=job.blobs_moved)
        self._in_op = True
        try:
            return job.run()
        finally:
            self._in_op = False

    # -- pull --------------------------------------------------------------------------
    def pull_image(self, store: Store, ref: str | RegistryRef, *,
                   platform: str = DEFAULT_PLATFORM, layers: bool = True,
                   progress: Progress | None = None) -> PullResult:
        """Pull ``ref`` into ``store``; for an index, the ``platform`` image (and the index).
        With ``layers=False`` only manifest and config are fetched."""
        r = self._ref(ref)
        self.http.begin(f"pull of {r}", blobs=2)
        self._in_op = True
        try:
            return self._pull(store, r, platform, layers, progress)
        finally:
            self._in_op = False

    def _pull(self, store: Store, r: RegistryRef, platform: str, layers: bool,
              progress: Progress | None) -> PullResult:
        data, mt, digest = self.get_manifest(r)
        m = parse_manifest(data, mt)
        index_digest, chosen = None, None
        index_data = b""
        if m.is_index:
            index_digest, index_data = digest, data
            child = select_platform(m, platform)
            chosen = platform
            data, mt, digest = self.get_manifest(r.with_digest(child.digest))
            m = parse_manifest(data, mt)
            if m.is_index:
                raise RegistryError(f"{child.digest} in index {index_digest} is another index")
        self.http.budget.allow_blobs(len(m.blobs))
        present: list[Digest] = []
        wanted = []
        for desc in (m.blobs if layers else m.blobs[:1]):
            if desc.urls:
                continue  # foreign layers are fetched from their own URLs by engines
            if store.has(desc.digest):
                present.append(desc.digest)
                continue
            wanted.append(desc)
        nbytes = sum(blobs.each_concurrently(
            lambda d: blobs.fetch_blob(self.http, store, r.repo, d, progress), wanted))
        fetched = [d.digest for d in wanted]
        store.hold_bytes(data, digest)
        if index_digest:
            store.hold_bytes(index_data, index_digest)
        warnings = self.note_blobs(store, r.repo, [*fetched, *present])
        return PullResult(str(r), digest, mt, index_digest, chosen, m.blobs[0].digest,
                          tuple(fetched), tuple(present), nbytes, warnings,
                          self.http.requests_sent)

    def pull(self, store: Store, ref: str | RegistryRef, *, platform: str = DEFAULT_PLATFORM,
             layers: bool = True) -> Digest:
        """Pull ``ref`` into ``store``; returns the (platform's) image manifest digest."""
        return self.pull_image(store, ref, platform=platform, layers=layers).digest


def push(store: Store, manifest_digest: Digest, ref: str, **kw: object) -> PushResult:
    """Push with a client made for ``ref``'s host (see RegistryClient.push)."""
    return RegistryClient.for_ref(ref).push(store, manifest_digest, ref, **kw)  # type: ignore[arg-type]


def pull(store: Store, ref: str | RegistryRef, **kw: object) -> PullResult:
    """Pull with a client made for ``ref``'s host (see RegistryClient.pull_image). A short
    name (no host) means ``$PATCHBAKE_DEFAULT_REGISTRY``, and is an error without it."""
    r = parse_pull_ref(ref) if isinstance(ref, str) else ref
    return RegistryClient(r.host).pull_image(store, r, **kw)  # type: ignore[arg-type]


def parse_pull_ref(text: str) -> RegistryRef:
    return parse_ref(text, default_host=os.environ.get(DEFAULT_REGISTRY_ENV) or None)
