"""fetch(): every source kind against a fake HTTP adapter (no sockets), the index
resolution rules, retries, integrity, idempotence and concurrent use of one store."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import requests
import urllib3
from patchbake.digest import Digest
from patchbake import config, netconfig
from patchbake.errors import FetchError, IntegrityError, UnsafeArchiveError
from patchbake.sources import fetch, http, index, tree_digest
from patchbake.store import Store
from requests.adapters import BaseAdapter
from requests.structures import CaseInsensitiveDict

INDEX = "https://index.test/simple"
JSON_TYPE = "application/vnd.pypi.simple.v1+json"


def sdist(files: dict[str, bytes], top: str = "demo-1.0") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in sorted(files.items()):
            ti = tarfile.TarInfo(f"{top}/{name}")
            ti.size, ti.mode = len(data), 0o644
            tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


ARCHIVE = sdist({"setup.py": b"setup()\n", "demo/__init__.py": b"x = 1\n"})
SHA = hashlib.sha256(ARCHIVE).hexdigest()
ARCHIVE_DIGEST = Digest.from_hex(SHA)
FILE_URL = "https://files.index.test/packages/demo-1.0.tar.gz"


class FakeHTTP(BaseAdapter):
    """Answers from a script: url -> list of (status, headers, body) or an exception."""

    def __init__(self, routes: dict[str, list[Any]]) -> None:
        super().__init__()
        self.routes = routes
        self.calls: list[str] = []

    def send(self, request: requests.PreparedRequest, stream: bool = False,
             timeout: float | tuple[float, float] | tuple[float, None] | None = None,
             verify: bool | str = True,
             cert: bytes | str | tuple[bytes | str, bytes | str] | None = None,
             proxies: Mapping[str, str] | None = None) -> requests.Response:
        url = str(request.url)
        self.calls.append(url)
        script = self.routes.get(url) or [(404, {}, b"not found")]
        step = script.pop(0) if len(script) > 1 else script[0]
        if isinstance(step, Exception):
            raise step
        status, headers, body = step
        r = requests.Response()
        r.status_code, r.url, r.request, r.reason = status, url, request, "fake"
        if isinstance(body, bytes):
            r.headers = CaseInsensitiveDict({"Content-Length": str(len(body)), **headers})
            # what requests' own adapter gives: the body is read from urllib3
            r.raw = urllib3.HTTPResponse(body=io.BytesIO(body), preload_content=False,
                                         status=status)
        else:  # a body object of the test's own (a transfer that breaks)
            r.headers, r.raw = CaseInsensitiveDict(headers), body
        return r

    def close(self) -> None:
        pass


def page(files: list[dict[str, Any]]) -> tuple[int, dict[str, str], bytes]:
    return 200, {"Content-Type": JSON_TYPE}, json.dumps({"meta": {"api-version": "1.1"},
                                                         "name": "demo", "files": files}).encode()


GOOD_PAGE = page([{"filename": "demo-1.0.tar.gz", "url": FILE_URL, "hashes": {"sha256": SHA}},
                  {"filename": "demo-0.9.tar.gz", "url": "../x", "hashes": {}}])


@pytest.fixture
def net(monkeypatch: pytest.MonkeyPatch) -> FakeHTTP:
    fake = FakeHTTP({f"{INDEX}/demo/": [GOOD_PAGE], FILE_URL: [(200, {}, ARCHIVE)]})

    def session() -> requests.Session:
        s = requests.Session()
        s.mount("https://", fake)
        s.mount("http://", fake)
        return s

    monkeypatch.setattr(http, "new_session", session)
    monkeypatch.setattr(http, "_sleep", lambda s: fake.calls.append(f"sleep {s}"))
    monkeypatch.setenv("PIP_INDEX_URL", INDEX)
    return fake


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.open(tmp_path / "store")


def lineage(**up: Any) -> config.Lineage:
    base = {"kind": "index", "package": "demo", "version": "1.0",
            "filename": "demo-1.0.tar.gz", "sha256": SHA}
    base.update(up)
    data = {"version": 1, "name": "t", "lineages": {"l": {
        "name": "n", "patch": "p", "files": "f", "source_record": "s",
        "upstream": {k: v for k, v in base.items() if v is not None}}}}
    return config.parse(data, Path("/nonexistent/pipeline.yaml")).lineage()


def leftovers(store: Store) -> list[str]:
    return sorted(str(p.relative_to(store.root)) for p in
                  [*(store.root / "blobs" / "sha256").iterdir(), *(store.root / "tmp").iterdir(),
                   *(store.root / "trees").iterdir()])


def test_index_fetch_then_cached(net: FakeHTTP, store: Store) -> None:
    f = fetch(lineage(), store)
    assert f.archive_sha256 == ARCHIVE_DIGEST and f.files == 2 and f.kind == "index"
    assert (f.root / "setup.py").read_bytes() == b"setup()\n"
    assert f.tree_digest == tree_digest(f.root) and f.pin == f"demo==1.0 sha256:{SHA}"
    assert net.calls == [f"{INDEX}/demo/", FILE_URL]
    rec = json.loads(f.record.read_text()) if f.record else {}
    assert rec["tree_digest"] == str(f.tree_digest) and rec["files"] == 2 and rec["strip"] == "demo-1.0"
    from patchbake.sources import extract as ex

    def no_extract(*a: object, **k: object) -> None:
        raise AssertionError("the second fetch must not extract")

    mp = pytest.MonkeyPatch()
    mp.setattr(ex, "extract", no_extract)
    try:
        assert fetch(lineage(), store) == f
    finally:
        mp.undo()
    assert len(net.calls) == 2, "the second fetch must not touch the network"
    assert list((store.root / "tmp").iterdir()) == []


def test_hash_mismatch_leaves_nothing(net: FakeHTTP, store: Store) -> None:
    net.routes[FILE_URL] = [(200, {}, ARCHIVE + b"tampered")]
    with pytest.raises(IntegrityError, match=f"expected sha256:{SHA}; nothing was stored") as e:
        fetch(lineage(), store)
    assert e.value.exit_code == 11
    assert leftovers(store) == []


def test_index_states_other_hash(net: FakeHTTP, store: Store) -> None:
    net.routes[f"{INDEX}/demo/"] = [page([{"filename": "demo-1.0.tar.gz", "url": FILE_URL,
                                           "hashes": {"sha256": "0" * 64}}])]
    with pytest.raises(IntegrityError, match="the index states sha256:0{64} for demo-1.0.tar.gz"):
        fetch(lineage(), store)
    assert FILE_URL not in net.calls and leftovers(store) == []


def test_index_lacks_file(net: FakeHTTP, store: Store) -> None:
    with pytest.raises(FetchError, match="lists no file 'demo-2.0.tar.gz'.*demo-1.0.tar.gz") as e:
        fetch(lineage(filename="demo-2.0.tar.gz"), store)
    assert e.value.exit_code == 10


def test_index_unknown_content_type(net: FakeHTTP, store: Store) -> None:
    net.routes[f"{INDEX}/demo/"] = [(200, {"Content-Type": "text/plain"}, b"hello")]
    with pytest.raises(FetchError, match="answered 'text/plain', neither the JSON"):
        fetch(lineage(), store)


def test_index_bad_json(net: FakeHTTP, store: Store) -> None:
    net.routes[f"{INDEX}/demo/"] = [(200, {"Content-Type": JSON_TYPE}, b'{"files": 3}')]
    with pytest.raises(FetchError, match="not a valid simple API page"):
        fetch(lineage(), store)


HTML_PAGE = (f'<html><body><a href="../../packages/demo-1.0.tar.gz#sha256={SHA}">'
             'demo-1.0.tar.gz</a><br><a href="x/demo-0.9.zip">demo-0.9.zip</a></body></html>')


def test_html_only_index(net: FakeHTTP, store: Store) -> None:
    net.routes[f"{INDEX}/demo/"] = [(200, {"Content-Type": "text/html; charset=utf-8"},
                                     HTML_PAGE.encode())]
    net.routes["https://index.test/packages/demo-1.0.tar.gz"] = [(200, {}, ARCHIVE)]
    assert fetch(lineage(), store).archive_sha256 == ARCHIVE_DIGEST
    assert net.calls[-1] == "https://index.test/packages/demo-1.0.tar.gz"


def test_html_index_states_other_hash(net: FakeHTTP, store: Store) -> None:
    net.routes[f"{INDEX}/demo/"] = [(200, {"Content-Type": "text/html"},
                                     HTML_PAGE.replace(SHA, "f" * 64).encode())]
    with pytest.raises(IntegrityError, match="the index states sha256:f{64}"):
        fetch(lineage(), store)


def test_file_index(tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "simple" / "demo").mkdir(parents=True)
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "demo-1.0.tar.gz").write_bytes(ARCHIVE)
    (tmp_path / "simple" / "demo" / "index.html").write_text(
        f'<a href="../../files/demo-1.0.tar.gz#sha256={SHA}">demo-1.0.tar.gz</a>')
    monkeypatch.setenv("PIP_INDEX_URL", (tmp_path / "simple").as_uri())
    assert fetch(lineage(), store).archive_sha256 == ARCHIVE_DIGEST
    monkeypatch.setenv("PIP_INDEX_URL", (tmp_path / "nowhere").as_uri())
    with pytest.raises(FetchError, match="nowhere/demo/index.html does not exist"):
        fetch(lineage(filename="demo-2.0.tar.gz", sha256="3" * 64), store)


def test_404_not_retried(net: FakeHTTP, store: Store) -> None:
    net.routes[FILE_URL] = [(404, {}, b"gone")]
    with pytest.raises(FetchError, match="answered HTTP 404") as e:
        fetch(lineage(), store)
    assert e.value.exit_code == 10 and "a client error is not retried" in e.value.one_line()
    assert net.calls.count(FILE_URL) == 1 and not any(c.startswith("sleep") for c in net.calls)


@pytest.mark.parametrize("status", [401, 403, 410])
def test_client_errors_not_retried(net: FakeHTTP, store: Store, status: int) -> None:
    net.routes[f"{INDEX}/demo/"] = [(status, {}, b"")]
    with pytest.raises(FetchError, match=f"HTTP {status}"):
        fetch(lineage(), store)
    assert net.calls == [f"{INDEX}/demo/"]


def test_503_retried_honouring_retry_after(net: FakeHTTP, store: Store) -> None:
    net.routes[FILE_URL] = [(503, {"Retry-After": "7"}, b""), (429, {}, b""),
                            (200, {}, ARCHIVE)]
    f = fetch(lineage(), store)
    assert f.archive_sha256 == ARCHIVE_DIGEST
    assert net.calls[1:] == [FILE_URL, "sleep 7.0", FILE_URL, "sleep 1.0", FILE_URL]


def test_connection_errors_retried_then_give_up(net: FakeHTTP, store: Store) -> None:
    net.routes[FILE_URL] = [requests.ConnectionError("reset")]
    with pytest.raises(FetchError, match="failed after 5 attempts: ConnectionError: reset"):
        fetch(lineage(), store)
    assert net.calls.count(FILE_URL) == 5
    assert [c for c in net.calls if c.startswith("sleep")] == [
        "sleep 0.5", "sleep 1.0", "sleep 2.0", "sleep 4.0"]
    assert leftovers(store) == []


class CutTransfer:
    """A body whose connection breaks after its first 10 bytes."""

    def __init__(self, data: bytes) -> None:
        self.data, self.sent = data, 0

    def read1(self, size: int = -1, decode_content: bool = False) -> bytes:
        if self.sent >= 10:
            raise urllib3.exceptions.ProtocolError("Connection broken: cut")
        self.sent = 10
        return self.data[:10]

    def close(self) -> None:
        pass


def test_broken_transfer_restarts(net: FakeHTTP, store: Store) -> None:
    net.routes[FILE_URL] = [(200, {"Content-Length": str(len(ARCHIVE))}, CutTransfer(ARCHIVE)),
                            (200, {}, ARCHIVE)]
    assert fetch(lineage(), store).archive_sha256 == ARCHIVE_DIGEST
    assert net.calls.count(FILE_URL) == 2 and list((store.root / "tmp").iterdir()) == []


def test_url_kind_and_progress(net: FakeHTTP, store: Store) -> None:
    seen: list[tuple[str, int | None, int]] = []

    class Bar:
        def __init__(self, d: str, t: int | None) -> None:
            self.desc, self.total, self.done = d, t, 0

        def advance(self, n: int) -> None:
            self.done += n

        def __enter__(self) -> Bar:  # noqa: PYI034 - a final test double
            return self

        def __exit__(self, *a: object) -> None:
            seen.append((self.desc, self.total, self.done))

    f = fetch(lineage(kind="url", url=FILE_URL, filename=None), store,
              progress=lambda d, t, unit_bytes=True: Bar(d, t))
    assert f.archive_sha256 == ARCHIVE_DIGEST and net.calls == [FILE_URL]
    assert ("download demo-1.0.tar.gz", len(ARCHIVE), len(ARCHIVE)) in seen


def test_url_bad_scheme(net: FakeHTTP, store: Store) -> None:
    with pytest.raises(FetchError, match="unsupported URL scheme 'ftp'"):
        fetch(lineage(kind="url", url="ftp://x/y.tar.gz"), store)


def test_file_url_and_missing(tmp_path: Path, store: Store) -> None:
    (tmp_path / "demo.tar.gz").write_bytes(ARCHIVE)
    f = fetch(lineage(kind="url", url=f"file://{tmp_path}/demo.tar.gz"), store)
    assert f.archive_sha256 == ARCHIVE_DIGEST
    with pytest.raises(FetchError, match="missing.tar.gz does not exist"):
        fetch(lineage(kind="url", url=f"file://{tmp_path}/missing.tar.gz", sha256="1" * 64),
              store)


def test_path_tarball_with_and_without_pin(tmp_path: Path, store: Store) -> None:
    (tmp_path / "demo.tar.gz").write_bytes(ARCHIVE)
    a = fetch(lineage(kind="path", path="demo.tar.gz"), store, base=tmp_path)
    b = fetch(lineage(kind="path", path=str(tmp_path / "demo.tar.gz"), sha256=None), store)
    assert a.tree_digest == b.tree_digest and a.archive_sha256 == b.archive_sha256 == ARCHIVE_DIGEST
    with pytest.raises(IntegrityError, match="expected sha256:2{64}"):
        fetch(lineage(kind="path", path=str(tmp_path / "demo.tar.gz"), sha256="2" * 64), store)


def test_path_missing(tmp_path: Path, store: Store) -> None:
    with pytest.raises(FetchError, match="nope.tar.gz does not exist") as e:
        fetch(lineage(kind="path", path=str(tmp_path / "nope.tar.gz")), store)
    assert e.value.exit_code == 10


def test_path_directory(tmp_path: Path, store: Store) -> None:
    src = tmp_path / "tree"
    (src / "demo").mkdir(parents=True)
    (src / "setup.py").write_bytes(b"setup()\n")
    (src / "demo" / "__init__.py").write_bytes(b"x = 1\n")
    f = fetch(lineage(kind="path", path=str(src), sha256=None), store)
    assert f.archive_sha256 is None and f.files == 2 and f.root.is_relative_to(store.root)
    from_archive = fetch(lineage(kind="path", path=str(tmp_path / "a.tgz"), sha256=None), store) \
        if (tmp_path / "a.tgz").write_bytes(ARCHIVE) else None
    assert from_archive is not None and from_archive.tree_digest == f.tree_digest
    pinned = fetch(lineage(kind="path", path=str(src), sha256=f.tree_digest.hex), store)
    assert pinned.root == f.root
    (src / "setup.py").write_bytes(b"changed\n")
    with pytest.raises(IntegrityError, match="tree digest is sha256:.*but the pin is"):
        fetch(lineage(kind="path", path=str(src), sha256=f.tree_digest.hex), store)


def test_unsafe_archive_leaves_nothing_extracted(tmp_path: Path, store: Store) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        ti = tarfile.TarInfo("demo-1.0/ok")
        ti.size = 2
        tf.addfile(ti, io.BytesIO(b"ok"))
        ti = tarfile.TarInfo("demo-1.0/../../evil")
        tf.addfile(ti, io.BytesIO(b""))
    (tmp_path / "bad.tgz").write_bytes(buf.getvalue())
    with pytest.raises(UnsafeArchiveError, match="'demo-1.0/../../evil' has a '..' component"):
        fetch(lineage(kind="path", path=str(tmp_path / "bad.tgz"), sha256=None), store)
    assert list((store.root / "trees").iterdir()) == []
    assert list((store.root / "tmp").iterdir()) == []
    assert list((store.root / "sources").iterdir()) == []


def test_verify_detects_tampered_store(net: FakeHTTP, store: Store) -> None:
    f = fetch(lineage(), store)
    (f.root / "setup.py").write_bytes(b"tampered\n")
    assert fetch(lineage(), store) == f  # cached: no re-hash by default
    with pytest.raises(IntegrityError, match="hashes to sha256:.*recorded"):
        fetch(lineage(), store, verify=True)


def test_verify_detects_tampered_store_for_a_directory(tmp_path: Path, store: Store) -> None:
    src = tmp_path / "tree"
    src.mkdir()
    (src / "setup.py").write_bytes(b"setup()\n")
    f = fetch(lineage(kind="path", path=str(src), sha256=None), store, verify=True)
    (f.root / "setup.py").write_bytes(b"tampered\n")
    with pytest.raises(IntegrityError, match="hashes to sha256:.*recorded") as e:
        fetch(lineage(kind="path", path=str(src), sha256=None), store, verify=True)
    assert e.value.exit_code == 11


def test_concurrent_fetches_share_one_download(net: FakeHTTP, store: Store) -> None:
    results: list[Any] = []
    barrier = threading.Barrier(4)

    def run() -> None:
        barrier.wait()
        results.append(fetch(lineage(), Store.open(store.root)))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 and len({r.tree_digest for r in results}) == 1
    assert net.calls.count(FILE_URL) == 1
    assert len(list((store.root / "trees").iterdir())) == 1


# -- which index ------------------------------------------------------------------------
def test_index_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", "https://a.test/simple https://ignored.test")
    assert index.configured_index() == ("https://a.test/simple", "PIP_INDEX_URL")


def test_index_from_config_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    glob, user, env = tmp_path / "g.conf", tmp_path / "u.conf", tmp_path / "e.conf"
    glob.write_text("[global]\nindex-url = https://global.test/simple\n"
                    "extra-index-url = file:///opt/x\n")
    user.write_text("[install]\nindex-url = https://user.test/simple\n")
    monkeypatch.setattr(netconfig, "file_locations",
                        lambda: ([str(glob)], [str(user)], [str(tmp_path / "none.conf")]))
    monkeypatch.delenv("PIP_CONFIG_FILE", raising=False)
    assert index.configured_index()[0] == "https://user.test/simple"
    env.write_text("[global]\nindex-url = https://env.test/simple\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(env))
    url, origin = index.configured_index()
    assert url == "https://env.test/simple" and origin.startswith(str(env))
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    from pip._internal.models.index import PyPI
    assert index.configured_index() == (PyPI.simple_url, "pip's default")


def test_index_default_is_pips(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    monkeypatch.delenv("PIP_CONFIG_FILE", raising=False)
    monkeypatch.setattr(netconfig, "file_locations", lambda: ([], [], []))
    from pip._internal.models.index import PyPI
    assert index.configured_index() == (PyPI.simple_url, "pip's default")


def test_name_normalisation() -> None:
    assert index.normalise_name("Foo_Bar.baz") == "foo-bar-baz"


def test_redact() -> None:
    assert http.redact("https://u:secret@h.test:8443/simple") == "https://***@h.test:8443/simple"


def test_path_directory_ignores_its_git_dir(tmp_path: Path, store: Store) -> None:
    src = tmp_path / "tree"
    (src / ".git").mkdir(parents=True)
    (src / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (src / "setup.py").write_bytes(b"setup()\n")
    f = fetch(lineage(kind="path", path=str(src), sha256=None), store)
    assert f.files == 1 and not (f.root / ".git").exists()
    (src / ".git" / "HEAD").write_text("moved\n")
    assert fetch(lineage(kind="path", path=str(src), sha256=None), store) == f


def test_retry_after_forms() -> None:
    import email.utils
    import time as _time

    def resp(value: str) -> requests.Response:
        r = requests.Response()
        r.headers = CaseInsensitiveDict({"Retry-After": value} if value else {})
        return r

    assert http.retry_after(resp("3"), 0) == 3.0
    assert http.retry_after(resp("100000"), 0) == http.MAX_WAIT_S
    assert http.retry_after(resp(""), 2) == 2.0
    assert http.retry_after(resp("soon"), 1) == 1.0
    later = email.utils.formatdate(_time.time() + 10, usegmt=True)
    assert 5 < http.retry_after(resp(later), 0) <= 10


def test_408_retried(net: FakeHTTP, store: Store) -> None:
    net.routes[f"{INDEX}/demo/"] = [(408, {}, b""), GOOD_PAGE]
    assert fetch(lineage(), store).archive_sha256 == ARCHIVE_DIGEST
    assert net.calls.count(f"{INDEX}/demo/") == 2


def test_damaged_record_is_rebuilt(net: FakeHTTP, store: Store) -> None:
    f = fetch(lineage(), store)
    assert f.record is not None
    f.record.write_text('{"version": 1, "tree_digest": "nonsense"}')
    assert fetch(lineage(), store).tree_digest == f.tree_digest
    assert json.loads(f.record.read_text())["tree_digest"] == str(f.tree_digest)


def test_relative_path_defaults_to_pipeline_dir(tmp_path: Path, store: Store,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "repo" / "sub").mkdir(parents=True)
    (tmp_path / "repo" / "pipeline.yaml").write_text("version: 1\n")
    (tmp_path / "repo" / "demo.tar.gz").write_bytes(ARCHIVE)
    monkeypatch.delenv("PATCHBAKE_PIPELINE", raising=False)
    monkeypatch.chdir(tmp_path / "repo" / "sub")
    assert fetch(lineage(kind="path", path="demo.tar.gz"), store).archive_sha256 == ARCHIVE_DIGEST


def test_a_blob_under_the_pins_name_is_rehashed_before_it_is_used(net: FakeHTTP,
                                                                   store: Store) -> None:
    """A store blob is a claim by its name: other bytes planted (or damaged) under the pin's
    name are refused with the corruption code, never extracted as the pin's tree; the
    intact blob is used without the network."""
    other = sdist({"setup.py": b"planted()\n"})
    planted = store.blob_path(ARCHIVE_DIGEST)
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_bytes(other)
    with pytest.raises(IntegrityError, match=f"store blob sha256:{SHA} holds bytes that hash "
                                             f"to sha256:{hashlib.sha256(other).hexdigest()}") as e:
        fetch(lineage(), store)
    assert e.value.exit_code == 11 and "store fsck --quarantine" in e.value.one_line()
    assert not (store.root / "sources").exists() or not list((store.root / "sources").iterdir())
    planted.write_bytes(ARCHIVE)
    f = fetch(lineage(), store)
    assert (f.root / "setup.py").read_bytes() == b"setup()\n"
    assert FILE_URL not in net.calls


def test_a_tree_already_under_the_digest_is_hashed_in_place(tmp_path: Path, store: Store) -> None:
    """A damaged tree under the right name (published earlier, touched since) is never
    recorded as the pin's tree: the digest is computed again from the bytes in place."""
    (tmp_path / "demo.tar.gz").write_bytes(ARCHIVE)
    ref = fetch(lineage(kind="path", path="demo.tar.gz"), Store.open(tmp_path / "ref"),
                base=tmp_path)
    planted = store.tree_path(ref.tree_digest)
    (planted / "demo").mkdir(parents=True)
    (planted / "setup.py").write_bytes(b"setup()\n")  # demo/__init__.py is missing
    with pytest.raises(IntegrityError, match="hashes to sha256:.* in place, not to") as e:
        fetch(lineage(kind="path", path="demo.tar.gz"), store, base=tmp_path)
    assert e.value.exit_code == 11
    assert not list((store.root / "sources").iterdir())
