"""Pushing an image (or index) from the store to a registry: ``RegistryClient.push``.

In order: reads only (the API check; the tag, which stops the push before anything is sent
if it names another digest; which blobs and manifests the repository holds), all at once;
then the blobs it lacks, concurrently, each mounted from another repository when one is
known to hold it, else uploaded; then the manifests by digest (an index's children first),
each read back and compared byte for byte; only then the tag: re-checked just before
(another pusher may have taken it meanwhile), then read back. The mount record is written
while the manifests go up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from ..digest import Digest
from ..errors import ImageError, IntegrityError, RegistryError, StoreError, TagMovedError
from ..store import Store
from . import registry_blobs as blobs
from . import registry_record
from .registry_blobs import Progress
from .registry_http import Transport
from .registry_manifest import Descriptor, Manifest, parse_manifest
from .registry_ref import RegistryRef


class Client(Protocol):
    """What a push needs of its ``registry.RegistryClient``: a protocol, so that this
    module (which registry.py imports) does not import registry.py back."""

    host: str
    http: Transport

    def ping(self) -> None: ...

    def fetch_manifest(self, r: RegistryRef, reference: str, *, push_scope: bool = False,
                       missing_ok: bool = False) -> tuple[bytes, str] | None: ...

    def note_blobs(self, store: Store, repo: str, digests: Iterable[Digest]
                   ) -> tuple[str, ...]: ...


@dataclass(frozen=True, slots=True)
class PushResult:
    """What a push did, and what the registry now holds."""

    ref: str  # the destination as given (tag and/or digest)
    digest: Digest  # manifest (or index) digest now in the registry
    media_type: str
    uploaded: tuple[Digest, ...]  # blob digests sent
    mounted: tuple[Digest, ...]  # blob digests mounted from another repository
    skipped: tuple[Digest, ...]  # blob digests the repository already held
    manifests: tuple[Digest, ...]  # manifest digests put (index children first)
    tag_existed: bool = False  # the tag already pointed at this digest
    bytes_uploaded: int = 0
    warnings: tuple[str, ...] = ()  # optional local writes that were skipped
    requests: int = 0  # HTTP requests sent (retries included)


class _Tally:
    """Blobs one push (or one of its threads) uploaded, mounted or found there."""

    def __init__(self) -> None:
        self.uploaded: list[Digest] = []
        self.mounted: list[Digest] = []
        self.skipped: list[Digest] = []
        self.nbytes = 0

    def merge(self, other: _Tally) -> None:
        self.uploaded += other.uploaded
        self.mounted += other.mounted
        self.skipped += other.skipped
        self.nbytes += other.nbytes


def _call(job: Callable[[], object]) -> object:
    return job()


def local_manifest(store: Store, digest: Digest) -> tuple[bytes, Manifest]:
    """A manifest's bytes from the store, re-hashed, and what it references."""
    try:
        data = store.read_blob(digest)
    except StoreError as exc:
        raise ImageError(f"manifest {digest} is not in the local store at {store.root}",
                         hint="bake or pull the image first") from exc
    if Digest.of(data) != digest:
        raise IntegrityError(f"the store's copy of {digest} hashes to {Digest.of(data)}",
                             hint="the store is damaged; run a store fsck")
    return data, parse_manifest(data)


class Push:
    """One push of ``manifest_digest`` from ``store`` to ``r`` through ``client``."""

    def __init__(self, client: Client, store: Store, manifest_digest: Digest,
                 r: RegistryRef, mount_from: list[str], progress: Progress | None) -> None:
        self.client, self.http, self.store = client, client.http, store
        self.r, self.mount_from, self.progress = r, mount_from, progress
        top, top_m = local_manifest(store, manifest_digest)
        self.plan = [(c.digest, *local_manifest(store, c.digest)) for c in top_m.manifests]
        self.plan.append((manifest_digest, top, top_m))
        self.wanted = {b.digest: b for _, _, m in self.plan for b in m.blobs if not b.urls}
        # what the request budget allows for: every blob, every manifest
        self.blobs_moved = len({b.digest for _, _, m in self.plan for b in m.blobs}) + len(self.plan)

    def run(self) -> PushResult:
        r, descs = self.r, list(self.wanted.values())
        top_digest, _, top_m = self.plan[-1]
        # Reads first, all at once (each waits on the registry, not on the others).
        reads: list[Callable[[], object]] = [
            self.client.ping, lambda: bool(r.tag) and self.check_tag(top_digest),
            *(partial(blobs.blob_present, self.http, r.repo, d) for d in descs),
            *(partial(self.held_manifest, d) for d, _, _ in self.plan)]
        got = blobs.each_concurrently(_call, reads)
        tag_existed = got[1] is True
        held = dict(zip(self.wanted, got[2:2 + len(descs)], strict=True))
        existing = dict(zip([d for d, _, _ in self.plan], got[2 + len(descs):], strict=True))

        def one(desc: Descriptor) -> _Tally:  # blobs are independent: sent concurrently
            part = _Tally()
            if held[desc.digest]:
                part.skipped.append(desc.digest)
            else:
                self.push_blob(desc, part)
            return part

        tally = _Tally()
        for part in blobs.each_concurrently(one, descs):
            tally.merge(part)
        done = blobs.each_concurrently(_call, [
            lambda: self.put_manifests(existing, tag_existed),
            lambda: self.client.note_blobs(self.store, r.repo, self.wanted)])
        put: list[Digest] = done[0]  # type: ignore[assignment]
        warnings: tuple[str, ...] = done[1]  # type: ignore[assignment]
        return PushResult(str(r), top_digest, top_m.media_type, tuple(tally.uploaded),
                          tuple(tally.mounted), tuple(tally.skipped), tuple(put), tag_existed,
                          tally.nbytes, warnings, self.http.requests_sent)

    def push_blob(self, desc: Descriptor, tally: _Tally) -> None:
        """Mount or upload a blob the repository does not hold (its HEAD said so)."""
        host, repo = self.client.host, self.r.repo
        if not self.store.has(desc.digest):
            raise ImageError(
                f"blob {desc.digest} is neither in {host}/{repo} nor in the local store",
                hint="pull the image (or its base) into the store first, or pass --mount-from "
                     "a repository on this registry that holds it",
            )
        known = registry_record.repos_holding(self.store, host, desc.digest)
        sources = blobs.mount_sources(self.mount_from, known, repo)
        session = blobs.try_mount(self.http, repo, desc, sources[0]) if sources else ""
        if session is None:
            tally.mounted.append(desc.digest)
            return
        blobs.upload_blob(self.http, self.store, repo, desc, session, self.progress)
        tally.uploaded.append(desc.digest)
        tally.nbytes += desc.size

    def check_tag(self, digest: Digest) -> bool:
        """True if the tag already names ``digest``; TagMovedError if it names another."""
        r = self.r
        assert r.tag
        got = self.client.fetch_manifest(r, r.tag, push_scope=True, missing_ok=True)
        if got is None:
            return False
        current = Digest.of(got[0])
        if current != digest:
            raise TagMovedError(
                f"{r.host}/{r.repo}:{r.tag} already points to {current}; refusing to move it "
                f"to {digest}; nothing was pushed",
                hint="tags never move: push under a new tag, or by digest",
            )
        return True

    def held_manifest(self, digest: Digest) -> bytes | None:
        """The repository's bytes for manifest ``digest``, None if it has none."""
        got = self.client.fetch_manifest(self.r.with_digest(digest), str(digest),
                                         push_scope=True,
                                         missing_ok=True)
        return got[0] if got is not None else None

    def put_manifest(self, ref: str, data: bytes, media_type: str) -> None:
        # Every blob it names was just found or put there: a registry that says one is
        # unknown is another pusher's commit of the same blob rewriting its link file as
        # the registry reads it (the distribution registry does not write it atomically),
        # which a moment later reads whole again.
        resp = self.http.request("PUT", f"/v2/{self.r.repo}/manifests/{ref}", body=lambda: data,
                                 headers={"Content-Type": media_type}, ok=(201,),
                                 scopes=[blobs.push_scope(self.r.repo)],
                                 transient=("MANIFEST_BLOB_UNKNOWN",))
        resp.close()

    def read_back(self, digest: Digest, data: bytes) -> None:
        if self.held_manifest(digest) != data:
            raise RegistryError(
                f"reading {self.r.repo}@{digest} back gave different bytes than were pushed",
                hint="the registry rewrote the manifest; do not tag or release it",
            )

    def put_manifests(self, existing: dict[Digest, object], tag_existed: bool
                      ) -> list[Digest]:
        """Manifests by digest (an index's children first, each read back before the
        next), then the tag: re-checked just before (another pusher may have taken it
        meanwhile; checked as the top manifest is read back) and read back after."""
        r, put = self.r, []
        top_digest, top, top_m = self.plan[-1]
        for digest, data, m in self.plan:
            if existing[digest] == data:
                continue
            self.put_manifest(str(digest), data, m.media_type)
            put.append(digest)
            if digest != top_digest:
                self.read_back(digest, data)
        tagging = bool(r.tag) and not tag_existed
        checks: list[Callable[[], object]] = []
        if top_digest in put:
            checks.append(partial(self.read_back, top_digest, top))
        if tagging:
            checks.append(lambda: self.check_tag(top_digest))
        got = blobs.each_concurrently(_call, checks)
        if tagging:
            assert r.tag
            if got[-1] is not True:
                self.put_manifest(r.tag, top, top_m.media_type)
            if not self.check_tag(top_digest):
                raise RegistryError(f"{r.host}/{r.repo}:{r.tag} does not resolve after tagging")
        return put
