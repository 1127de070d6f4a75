"""Registry client against an in-memory registry (no sockets): uploads, mounts, auth,
retries, verification of every pulled byte, and tags that never move."""

from __future__ import annotations

from pathlib import Path

import pytest
from patchbake.digest import Digest
from patchbake.errors import ImageError, RegistryError, TagMovedError
from patchbake.oci.registry import RegistryClient
from patchbake.oci.registry_auth import Credentials
from patchbake.oci.registry_blobs import SMALL_BODY
from patchbake.oci.registry_http import RetryPolicy
from patchbake.store import Store
from registry_fake import HOST, FakeRegistry, Seen, make_image, make_index, store_image


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.open(tmp_path / "store")


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    # one blob at a time: these tests script failures by request order (concurrent blob
    # transfer has its own tests in test_registry_concurrency.py)
    monkeypatch.setenv("PATCHBAKE_REGISTRY_CONCURRENCY", "1")
    return []


def client(fake: FakeRegistry, sleeps: list[float], **kw: object) -> RegistryClient:
    return RegistryClient(HOST, adapter=fake, sleep=sleeps.append,
                          retry=RetryPolicy(attempts=4), auth=kw.pop("auth", None), **kw)  # type: ignore[arg-type]


def test_push_is_monolithic_then_reread(store: Store, sleeps: list[float]) -> None:
    fake = FakeRegistry()
    img = make_image(layer_size=SMALL_BODY + 4096)  # big enough to go as a file body
    digest = store_image(store, img)
    res = client(fake, sleeps).push(store, digest, f"{HOST}/team/app:v1")
    assert res.digest == digest
    assert sorted(res.uploaded) == sorted(img.blobs)
    assert res.mounted == () and res.skipped == ()
    assert fake.blobs["team/app"] == {str(d): b for d, b in img.blobs.items()}
    assert fake.manifests["team/app"]["v1"][0] == img.manifest
    puts = [s for s in fake.calls("PUT") if "/blobs/uploads/" in s.path]
    assert len(puts) == 2 and all(Digest.parse(s.query["digest"][0]) in img.blobs for s in puts)
    # Every upload PUT declared its length (a monolithic body, not chunked).
    assert all(int(s.headers["Content-Length"]) == s.body_len for s in puts)
    assert not fake.calls("PATCH")
    # Manifest by digest first, then by tag, and it was read back by digest in between.
    order = [(s.method, s.path.rsplit("/", 1)[-1]) for s in fake.log if "/manifests/" in s.path]
    assert order.index(("PUT", str(digest))) < order.index(("PUT", "v1"))
    assert ("GET", str(digest)) in order[order.index(("PUT", str(digest))):
                                         order.index(("PUT", "v1"))]


def test_repush_skips_blobs_after_head(store: Store, sleeps: list[float]) -> None:
    fake = FakeRegistry()
    digest = store_image(store, make_image())
    c = client(fake, sleeps)
    c.push(store, digest, f"{HOST}/app:v1")
    fake.log.clear()
    res = c.push(store, digest, f"{HOST}/app:v1")
    assert res.uploaded == () and len(res.skipped) == 2 and res.tag_existed
    assert res.manifests == ()
    assert not fake.calls("PUT") and not fake.calls("POST")
    assert len(fake.calls("HEAD")) == 2


def test_cross_repo_mount_from_record(store: Store, sleeps: list[float]) -> None:
    fake = FakeRegistry()
    img = make_image()
    digest = store_image(store, img)
    c = client(fake, sleeps)
    c.push(store, digest, f"{HOST}/first:v1")
    fake.log.clear()
    res = c.push(store, digest, f"{HOST}/second:v1")
    assert sorted(res.mounted) == sorted(img.blobs) and res.uploaded == ()
    posts = fake.calls("POST")
    assert {p.query["from"][0] for p in posts} == {"first"}
    assert not [s for s in fake.calls("PUT") if "/blobs/" in s.path]


def test_refused_mount_falls_back_to_the_opened_session(store: Store,
                                                        sleeps: list[float]) -> None:
    fake = FakeRegistry(refuse_mounts=True)
    img = make_image()
    digest = store_image(store, img)
    res = client(fake, sleeps, record_mounts=False).push(
        store, digest, f"{HOST}/b:v1", mount_from=["elsewhere"])
    assert sorted(res.uploaded) == sorted(img.blobs) and res.mounted == ()
    # One POST per blob: the session opened by the refused mount carried the upload.
    assert len(fake.calls("POST")) == 2


def test_bearer_challenge_fetches_token_once_per_scope(store: Store,
                                                       sleeps: list[float]) -> None:
    fake = FakeRegistry(auth="bearer")
    img = make_image()
    fake.seed_image("lib/app", img, tag="v1")
    dig = client(fake, sleeps).pull(store, f"{HOST}/lib/app:v1")
    assert dig == img.digest and all(store.has(d) for d in img.blobs)
    scopes = [q.get("scope", []) for q in fake.token_requests]
    assert ["repository:lib/app:pull"] in scopes
    assert all(q["service"] == [HOST] for q in fake.token_requests)
    # /v2/ ping and one scope: two token fetches in all, not one per request.
    assert len(fake.token_requests) == 2
    assert sum(1 for s in fake.log if s.headers.get("Authorization") == "Bearer tok-123") >= 4


def test_basic_auth_uses_credentials(store: Store, sleeps: list[float]) -> None:
    fake = FakeRegistry(auth="basic")
    img = make_image()
    fake.seed_image("app", img, tag="v1")
    c = client(fake, sleeps, auth=Credentials("alice", "s3cret"))
    assert c.pull(store, f"{HOST}/app:v1") == img.digest


def test_basic_auth_without_credentials_is_a_clear_error(store: Store, sleeps: list[float],
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "none"))
    fake = FakeRegistry(auth="basic")
    with pytest.raises(RegistryError, match="asks for a user name and password") as ei:
        client(fake, sleeps).pull(store, f"{HOST}/app:v1")
    assert ei.value.exit_code == 31


def test_wrong_credentials_fail_without_retrying(store: Store, sleeps: list[float]) -> None:
    fake = FakeRegistry(auth="basic")
    c = client(fake, sleeps, auth=Credentials("alice", "wrong"))
    with pytest.raises(RegistryError, match="unauthorized after authenticating"):
        c.pull(store, f"{HOST}/app:v1")
    assert len(fake.log) == 2 and sleeps == []


def _fail_first(n: int, status: int, headers: dict[str, str] | None = None,
                when: str = "/manifests/") -> object:
    left = [n]

    def fail(seen: Seen) -> tuple[int, dict[str, str], bytes] | None:
        if when in seen.path and left[0] > 0:
            left[0] -= 1
            return status, headers or {}, b'{"errors":[{"code":"UNAVAILABLE","message":"busy"}]}'
        return None
    return fail


def test_503_is_retried_honouring_retry_after(store: Store, sleeps: list[float]) -> None:
    fake = FakeRegistry()
    img = make_image()
    fake.seed_image("app", img, tag="v1")
    fake.fail = _fail_first(2, 503, {"Retry-After": "7"})  # type: ignore[assignment]
    assert client(fake, sleeps).pull(store, f"{HOST}/app:v1") == img.digest
    assert sleeps == [7.0, 7.0]


def test_429_and_transport_errors_back_off(store: Store, sleeps: list[float]) -> None:
    fake = FakeRegistry()
    img = make_image()
    fake.seed_image("app", img, tag="v1")
    calls = [0]

    def fail(seen: Seen) -> tuple[int, dict[str, str], bytes] | None:
        if "/blobs/" in seen.path:
            calls[0] += 1
            if calls[0] == 1:
                return 429, {}, b""
            if calls[0] == 2:
                raise ConnectionResetError(104, "Connection reset by peer")
        return None

    fake.fail = fail  # type: ignore[assignment]
    assert client(fake, sleeps).pull(store, f"{HOST}/app:v1") == img.digest
    assert sleeps == [0.5, 1.0]  # exponential backoff without Retry-After


@pytest.mark.parametrize("status", [401, 403, 404])
def test_client_errors_are_never_retried(store: Store, sleeps: list[float], status: int) -> None:
    fake = FakeRegistry()
    fake.seed_image("app", make_image(), tag="v1")
    fake.fail = _fail_first(99, status)  # type: ignore[assignment]
    with pytest.raises(RegistryError) as ei:
        client(fake, sleeps).pull(store, f"{HOST}/app:v1")
    assert sleeps == []
    assert len([s for s in fake.log if "/manifests/" in s.path]) <= 2  # 401: one auth retry
    assert ei.value.exit_code == 31


def test_persistent_5xx_gives_up_after_the_policy(store: Store, sleeps: list[float]) -> None:
    fake = FakeRegistry()
    fake.seed_image("app", make_image(), tag="v1")
    fake.fail = _fail_first(99, 502)  # type: ignore[assignment]
    with pytest.raises(RegistryError, match="failed after 4 attempts.*HTTP 502"):
        client(fake, sleeps).pull(store, f"{HOST}/app:v1")
    assert sleeps == [0.5, 1.0, 2.0]


def test_failed_upload_restarts_with_a_fresh_session(store: Store, sleeps: list[float]) -> None:
    fake = FakeRegistry()
    img = make_image()
    digest = store_image(store, img)
    fake.fail = _fail_first(1, 500, when="/blobs/uploads/0")  # type: ignore[assignment]
    res = client(fake, sleeps).push(store, digest, f"{HOST}/app:v1")
    assert sorted(res.uploaded) == sorted(img.blobs)
    uploads = [s.path for s in fake.calls("PUT") if "/blobs/uploads/" in s.path]
    assert len(uploads) == 3 and len(set(uploads)) == 3  # never replayed into one session


def test_tampered_manifest_is_refused_and_nothing_stored(store: Store,
                                                          sleeps: list[float]) -> None:
    fake = FakeRegistry(tamper_manifests=True)
    img = make_image()
    fake.seed_image("app", img)
    with pytest.raises(RegistryError, match="hashing to sha256:") as ei:
        client(fake, sleeps).pull(store, f"{HOST}/app@{img.digest}")
    assert ei.value.exit_code == 31
    assert not any(store.has(d) for d in [img.digest, *img.blobs])


def test_tampered_blob_is_refused_and_nothing_stored(store: Store, sleeps: list[float]) -> None:
    fake = FakeRegistry(tamper_blobs=True)
    img = make_image()
    fake.seed_image("app", img, tag="v1")
    with pytest.raises(RegistryError, match="other bytes.*nothing was stored") as ei:
        client(fake, sleeps).pull(store, f"{HOST}/app:v1")
    assert ei.value.exit_code == 31
    assert not any(store.has(d) for d in [img.digest, *img.blobs])
    assert list((store.root / "tmp").iterdir()) == []


def test_lying_digest_header_is_ignored(store: Store, sleeps: list[float]) -> None:
    fake = FakeRegistry(lying_digest_header=True)
    img = make_image()
    fake.seed_image("app", img, tag="v1")
    assert client(fake, sleeps).pull(store, f"{HOST}/app:v1") == img.digest


def test_tag_that_points_elsewhere_is_never_moved(store: Store, sleeps: list[float]) -> None:
    fake = FakeRegistry()
    old, new = make_image(b"old\n"), make_image(b"new\n")
    fake.seed_image("app", old, tag="v1")
    digest = store_image(store, new)
    with pytest.raises(TagMovedError, match=f"already points to {old.digest}") as ei:
        client(fake, sleeps).push(store, digest, f"{HOST}/app:v1")
    assert ei.value.exit_code == 32
    assert not fake.calls("PUT") and not fake.calls("POST")  # nothing changed
    assert fake.manifests["app"]["v1"][0] == old.manifest


def test_manifest_rewritten_by_registry_is_caught(store: Store, sleeps: list[float]) -> None:
    fake = FakeRegistry(rewrite_on_put=True)
    digest = store_image(store, make_image())
    with pytest.raises(RegistryError, match="back gave different bytes"):
        client(fake, sleeps).push(store, digest, f"{HOST}/app:v1")
    assert "v1" not in fake.manifests["app"]  # never tagged


def test_pull_selects_platform_from_index(store: Store, sleeps: list[float]) -> None:
    fake = FakeRegistry()
    amd, arm = make_image(b"amd\n"), make_image(b"arm\n", arch="arm64")
    idx, idx_digest = make_index((arm, "arm64"), (amd, "amd64"))
    fake.seed_image("app", amd)
    fake.seed_image("app", arm)
    fake.manifests["app"]["multi"] = (idx, "application/vnd.oci.image.index.v1+json")
    c = client(fake, sleeps)
    res = c.pull_image(store, f"{HOST}/app:multi")
    assert res.digest == amd.digest and res.index_digest == idx_digest
    assert store.has(idx_digest) and not store.has(arm.config_digest)
    res = c.pull_image(store, f"{HOST}/app:multi", platform="linux/arm64")
    assert res.digest == arm.digest and res.config_digest == arm.config_digest
    with pytest.raises(RegistryError, match="offers no linux/s390x.*linux/arm64, linux/amd64"):
        c.pull_image(store, f"{HOST}/app:multi", platform="linux/s390x")


def test_push_index_pushes_children_first(store: Store, sleeps: list[float]) -> None:
    fake = FakeRegistry()
    amd, arm = make_image(b"amd\n"), make_image(b"arm\n", arch="arm64")
    idx, idx_digest = make_index((amd, "amd64"), (arm, "arm64"))
    store_image(store, amd)
    store_image(store, arm)
    store.put_bytes(idx)
    res = client(fake, sleeps).push(store, idx_digest, f"{HOST}/app:multi")
    assert res.manifests == (amd.digest, arm.digest, idx_digest)
    assert fake.manifests["app"]["multi"][0] == idx


def test_pull_without_layers_fetches_config_only(store: Store, sleeps: list[float]) -> None:
    fake = FakeRegistry()
    img = make_image()
    fake.seed_image("app", img, tag="v1")
    res = client(fake, sleeps).pull_image(store, f"{HOST}/app:v1", layers=False)
    assert res.fetched == (img.config_digest,)


def test_push_of_blob_missing_everywhere_says_what_to_do(store: Store,
                                                         sleeps: list[float]) -> None:
    fake = FakeRegistry()
    img = make_image()
    store.put_bytes(img.manifest)
    with pytest.raises(ImageError, match="neither in registry.test/app nor in the local store"
                       ) as ei:
        client(fake, sleeps).push(store, img.digest, f"{HOST}/app:v1")
    assert ei.value.exit_code == 30
    assert not fake.calls("PUT")  # no manifest went up for an image missing its blobs


def test_get_blob_verifies(store: Store, sleeps: list[float]) -> None:
    fake = FakeRegistry()
    img = make_image()
    fake.seed_image("app", img)
    c = client(fake, sleeps)
    assert c.get_blob(f"{HOST}/app:x", img.config_digest) == img.blobs[img.config_digest]
    fake.tamper_blobs = True
    with pytest.raises(RegistryError, match="bytes hashing to"):
        c.get_blob(f"{HOST}/app:x", img.config_digest)


def test_redirect_to_plain_http_elsewhere_is_refused(store: Store, sleeps: list[float]) -> None:
    fake = FakeRegistry()
    img = make_image()
    fake.seed_image("app", img, tag="v1")

    def redirect(seen: Seen) -> tuple[int, dict[str, str], bytes] | None:
        if "/blobs/" in seen.path and seen.method == "GET":
            return 307, {"Location": "http://10.0.0.9/blob"}, b""
        return None

    fake.fail = redirect  # type: ignore[assignment]
    with pytest.raises(RegistryError, match="refusing plain http to 10.0.0.9"):
        client(fake, sleeps).pull(store, f"{HOST}/app:v1")
    assert not store.has(img.digest)


@pytest.mark.parametrize("location", ["http://[::1]@registry.test/x",
                                      "https://user:pw@registry.test/x"])
def test_redirect_to_a_url_with_user_info_is_refused(store: Store, sleeps: list[float],
                                                      location: str) -> None:
    fake = FakeRegistry()
    img = make_image()
    fake.seed_image("app", img, tag="v1")

    def redirect(seen: Seen) -> tuple[int, dict[str, str], bytes] | None:
        if "/blobs/" in seen.path and seen.method == "GET":
            return 307, {"Location": location}, b""
        return None

    fake.fail = redirect  # type: ignore[assignment]
    with pytest.raises(RegistryError, match="refusing") as ei:
        client(fake, sleeps).pull(store, f"{HOST}/app:v1")
    assert ei.value.exit_code == 31 and sleeps == []
    assert not store.has(img.digest)


def test_stream_dying_mid_blob_is_retried_cleanly(store: Store, sleeps: list[float]) -> None:
    fake = FakeRegistry(break_streams=1)
    img = make_image(layer_size=3 << 20)
    fake.seed_image("app", img, tag="v1")
    res = client(fake, sleeps).pull_image(store, f"{HOST}/app:v1")
    assert res.digest == img.digest and sleeps == [0.5]
    assert all(store.blob_path(d).read_bytes() == b for d, b in img.blobs.items())
    assert list((store.root / "tmp").iterdir()) == []


def test_blob_longer_than_its_descriptor_is_refused(store: Store, sleeps: list[float]) -> None:
    fake = FakeRegistry(extra_blob_bytes=b"x" * 10)
    img = make_image()
    fake.seed_image("app", img, tag="v1")
    with pytest.raises(RegistryError, match="longer than its descriptor's"):
        client(fake, sleeps).pull(store, f"{HOST}/app:v1")
    assert not any(store.has(d) for d in [img.digest, *img.blobs])
    assert sleeps == []


def test_docker_config_read_only_when_challenged(store: Store, sleeps: list[float],
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    img = make_image()
    open_reg = FakeRegistry()
    open_reg.seed_image("app", img, tag="v1")
    assert client(open_reg, sleeps).pull(store, f"{HOST}/app:v1") == img.digest
    with pytest.raises(RegistryError, match="cannot read Docker credentials"):
        client(FakeRegistry(auth="basic"), sleeps).pull(store, f"{HOST}/app:v1")


def test_plain_http_token_realm_off_loopback_is_refused(store: Store, sleeps: list[float],
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    import registry_fake

    monkeypatch.setattr(registry_fake, "REALM", "http://auth.test/token")
    fake = FakeRegistry(auth="bearer")
    img = make_image()
    fake.seed_image("app", img, tag="v1")
    with pytest.raises(RegistryError, match="refusing plain http to auth.test") as ei:
        client(fake, sleeps).pull(store, f"{HOST}/app:v1")
    assert ei.value.exit_code == 31
    assert fake.token_requests == []  # no credentials or request ever went there
    assert not store.has(img.digest)


def test_upload_start_failing_does_not_multiply_retries(store: Store, sleeps: list[float]) -> None:
    """The upload-start POST inside each blob attempt used to retry on its own: 5 x 5."""
    fake = FakeRegistry(fail=lambda s: (500, {}, b"") if s.method == "POST" else None)
    digest = store_image(store, make_image())
    with pytest.raises(RegistryError, match="failed after 4 attempts"):
        client(fake, sleeps).push(store, digest, f"{HOST}/app:v1")
    assert len(fake.calls("POST")) == 4  # one loop of 4 attempts, not 4 x 4


def test_short_body_under_a_consistent_content_length_is_retried(
        store: Store, sleeps: list[float]) -> None:
    img = make_image(text=b"x" * 5000)
    fake = FakeRegistry()
    fake.seed_image("app", img, "v1")
    layer = next(d for d in img.blobs if img.blobs[d] == max(img.blobs.values(), key=len))
    cut = {"n": 0}

    def short(s: Seen) -> tuple[int, dict[str, str], bytes] | None:
        if s.method == "GET" and s.path.endswith(str(layer)) and cut["n"] < 2:
            cut["n"] += 1
            return 200, {}, img.blobs[layer][:100]  # Content-Length agrees: 100
        return None

    fake.fail = short
    res = client(fake, sleeps).pull_image(store, f"{HOST}/app:v1")
    assert layer in res.fetched and store.read_blob(layer) == img.blobs[layer]
    assert cut["n"] == 2 and list((store.root / "tmp").iterdir()) == []


def test_concurrent_first_requests_answer_one_challenge_per_scope(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A push sends its first reads at once; a bearer challenge is still answered once
    per scope (one token for the ping, one for the repository), not once per request."""
    monkeypatch.setenv("PATCHBAKE_REGISTRY_CONCURRENCY", "8")
    fake = FakeRegistry(auth="bearer")
    img = make_image()
    digest = store_image(store, img)
    res = RegistryClient(HOST, adapter=fake, sleep=lambda s: None).push(
        store, digest, f"{HOST}/team/app:v1")
    assert res.digest == digest and fake.manifests["team/app"]["v1"][0] == img.manifest
    assert len(fake.token_requests) == 2


def test_manifest_put_answered_blob_unknown_is_retried(store: Store, sleeps: list[float]) -> None:
    """Another pusher committing the same blob rewrites its link file as the registry
    checks the manifest: the registry says a blob it just confirmed is unknown. Retried."""
    fake = FakeRegistry()
    img = make_image()
    digest = store_image(store, img)
    fail = {"n": 1}

    def racing(seen: Seen) -> tuple[int, dict[str, str], bytes] | None:
        if seen.method == "PUT" and "/manifests/" in seen.path and fail["n"]:
            fail["n"] -= 1
            return 400, {}, (b'{"errors":[{"code":"DIGEST_INVALID","message":"provided digest '
                             b'did not match uploaded content"},{"code":"MANIFEST_BLOB_UNKNOWN",'
                             b'"message":"blob unknown to registry"}]}')
        return None

    fake.fail = racing  # type: ignore[assignment]
    res = client(fake, sleeps).push(store, digest, f"{HOST}/app:v1")
    assert res.digest == digest and sleeps == [0.5]
    assert fake.manifests["app"]["v1"][0] == img.manifest


def test_other_manifest_refusals_are_not_retried(store: Store, sleeps: list[float]) -> None:
    fake = FakeRegistry()
    digest = store_image(store, make_image())
    fake.fail = lambda s: ((400, {}, b'{"errors":[{"code":"MANIFEST_INVALID","message":"x"}]}')  # type: ignore[assignment]
                           if s.method == "PUT" and "/manifests/" in s.path else None)
    with pytest.raises(RegistryError, match="HTTP 400 MANIFEST_INVALID") as ei:
        client(fake, sleeps).push(store, digest, f"{HOST}/app:v1")
    assert ei.value.exit_code == 31 and sleeps == []
