"""The registry client's HTTP/1.1 reading: status and header parsing, body framing
(Content-Length, chunked, to the end, none), answers cut short, and what a response
hands back for reuse. No sockets: the answers are bytes."""

from __future__ import annotations

import io

import pytest
from patchbake.errors import RegistryError
from patchbake.oci.registry_conn import Connection, FileBody
from patchbake.oci.registry_wire import Body, Headers, ProtocolError, Response, read_head


def answer(raw: bytes, method: str = "GET") -> tuple[int, Headers, Body]:
    rfile = io.BufferedReader(io.BytesIO(raw))
    _, status, _, fields = read_head(rfile)
    headers = Headers(fields)
    return status, headers, Body(rfile, method, status, headers)


def test_content_length_body_and_headers() -> None:
    status, h, body = answer(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\ncontent-type: a/b\r\n"
                             b"X-Long: one\r\n two\r\nWWW-Authenticate: a\r\n"
                             b"WWW-Authenticate: b\r\n\r\nhelloEXTRA")
    assert status == 200 and h["Content-Type"] == "a/b" and h.get("x-long") == "one two"
    assert h.get("www-authenticate") == "a, b" and h.get("missing") is None
    assert body.remaining == 5 and body.read(3) == b"hel" and body.read() == b"lo"
    assert body.done and body.read(10) == b""


def test_interim_answers_are_skipped() -> None:
    status, _, body = answer(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early\r\nLink: x\r\n"
                             b"\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n")
    assert status == 201 and body.done


def test_chunked_body_with_extensions_and_trailers() -> None:
    raw = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"4;ext=1\r\nWiki\r\n5\r\npedia\r\n0\r\nTrailer: x\r\n\r\nNEXT")
    _, _, body = answer(raw)
    assert body.remaining is None and not body.done
    got = b"".join(iter(lambda: body.read(3), b""))
    assert got == b"Wikipedia" and body.done


@pytest.mark.parametrize("method,status", [("HEAD", 200), ("GET", 204), ("GET", 304)])
def test_no_body_whatever_the_length_says(method: str, status: int) -> None:
    _, _, body = answer(f"HTTP/1.1 {status} X\r\nContent-Length: 99\r\n\r\n".encode(),
                        method)
    assert body.done and body.read() == b""


def test_body_to_the_end_of_the_connection() -> None:
    _, _, body = answer(b"HTTP/1.0 200 OK\r\n\r\nall of it")
    assert body.to_close and body.read() == b"all of it"


@pytest.mark.parametrize("raw,match", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "5 bytes short"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\nabc", "inside a chunk"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\nx", "invalid Content-Length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\nx", "invalid Content-Length"),
    (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP/1.x status line"),
    (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed header"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n", "inside the header"),
])
def test_broken_answers_are_protocol_errors(raw: bytes, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        _, _, body = answer(raw)
        body.read()


def test_no_answer_at_all_is_a_reset() -> None:
    with pytest.raises(ConnectionResetError):
        answer(b"")


def test_response_gives_the_connection_back_only_when_read_to_its_end() -> None:
    released: list[bool] = []
    _, h, body = answer(b"HTTP/1.1 404 Nope\r\nContent-Length: 9\r\n\r\n{\"e\": 1}\n")
    r = Response(404, "Nope", h, "http://x/", body, released.append)
    assert r.json() == {"e": 1}
    r.close()
    r.close()
    assert released == [True]
    # a small unread rest of known length is read on close; a large one is not
    _, h, body = answer(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")
    Response(201, "", h, "", body, released.append).close()
    big = b"x" * (1 << 17)
    _, h, body = answer(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(big) + big)
    Response(200, "", h, "", body, released.append).close()
    assert released == [True, True, False]


class _Sock:
    def __init__(self) -> None:
        self.sent = b""

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(io.BytesIO(b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n"
                                            b"Connection: close\r\n\r\n"))

    def sendall(self, data: bytes) -> None:
        self.sent += data

    def sendfile(self, f: io.BytesIO, offset: int, count: int) -> int:
        f.seek(offset)
        data = f.read(count)
        self.sent += data
        return len(data)


def test_request_bytes_file_body_and_no_keep_alive_after_close() -> None:
    sock = _Sock()
    conn = Connection(sock, "127.0.0.1:5000")  # type: ignore[arg-type]
    seen: list[int] = []
    body = FileBody(io.BytesIO(b"0123456789"), 10, seen.append)
    status, _, _, framing, keep = conn.exchange("PUT", "/v2/a/blobs/uploads/1?digest=d",
                                                {"Content-Length": "10"}, body)
    assert status == 201 and framing.done and not keep
    head, _, sent_body = sock.sent.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[:2] == [b"PUT /v2/a/blobs/uploads/1?digest=d HTTP/1.1",
                                       b"Host: 127.0.0.1:5000"]
    assert b"Content-Length: 10" in head and b"chunked" not in head.lower()
    assert sent_body == b"0123456789" and seen == [10]


def test_header_injection_is_refused_before_sending() -> None:
    sock = _Sock()
    conn = Connection(sock, "h")  # type: ignore[arg-type]
    with pytest.raises(RegistryError, match="line break"):
        conn.exchange("PUT", "/v2/x", {"Content-Type": "a\r\nX-Evil: 1"}, b"")
    assert sock.sent == b""
