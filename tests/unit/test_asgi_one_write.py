"""recon.asgi.OneWrite: an HTTP answer's head leaves with its body in one write of the socket's transport, and
nothing is lost, reordered or held past the loop's turn. Against a transport that records its writes, then
through uvicorn itself on a real socket (the answers' bytes read as HTTP/1.1 says they are framed)."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from recon import asgi
from recon.asgi import OneWrite


class Recorder:
    """A transport that keeps what is written to it, and when it was closed or aborted."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.events: list[str] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self.events.append("write")

    def writelines(self, lines: Any) -> None:
        self.write(b"".join(lines))

    def write_eof(self) -> None:
        self.events.append("eof")

    def close(self) -> None:
        self.closing = True
        self.events.append("close")

    def abort(self) -> None:
        self.closing = True
        self.events.append("abort")

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5)}.get(name, default)


def turn(loop: asyncio.AbstractEventLoop) -> None:
    """Let the loop run what is due now (the held write's flush)."""
    loop.run_until_complete(asyncio.sleep(0))


@pytest.fixture
def loop() -> Any:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\n"


def test_a_head_and_its_body_leave_in_one_write(loop: asyncio.AbstractEventLoop) -> None:
    inner = Recorder()
    t = OneWrite(inner, loop)  # type: ignore[arg-type]
    t.write(HEAD)
    assert inner.writes == []
    t.write(b"abc")
    assert inner.writes == [HEAD + b"abc"]
    turn(loop)
    assert inner.writes == [HEAD + b"abc"]  # the turn's flush finds nothing more


def test_a_head_alone_leaves_at_the_end_of_the_turn(loop: asyncio.AbstractEventLoop) -> None:
    inner = Recorder()
    t = OneWrite(inner, loop)  # type: ignore[arg-type]
    head = b"HTTP/1.1 204 No Content\r\n\r\n"
    t.write(head)
    assert t.get_write_buffer_size() == len(head)
    turn(loop)
    assert inner.writes == [head]
    t.write(b"5\r\nhello\r\n")  # a chunk, not a head: at once
    assert inner.writes == [head, b"5\r\nhello\r\n"]


def test_close_eof_and_writelines_send_what_is_held_first_and_abort_drops_it(loop: asyncio.AbstractEventLoop) -> None:
    inner = Recorder()
    t = OneWrite(inner, loop)  # type: ignore[arg-type]
    t.write(HEAD)
    t.writelines([b"a", b"b"])
    assert inner.writes == [HEAD, b"ab"]
    t.write(HEAD)
    t.write_eof()
    t.write(HEAD)
    t.close()
    assert inner.writes == [HEAD, b"ab", HEAD, HEAD]
    assert inner.events == ["write", "write", "write", "eof", "write", "close"]
    turn(loop)
    assert len(inner.writes) == 4  # nothing written after the close

    other = Recorder()
    t = OneWrite(other, loop)  # type: ignore[arg-type]
    t.write(HEAD)
    t.abort()
    turn(loop)
    assert other.writes == [] and other.events == ["abort"]
    assert t.get_extra_info("peername") == ("127.0.0.1", 5)  # the rest is the transport's


def read_answer(sock: socket.socket, buf: bytearray) -> tuple[bytes, dict[bytes, bytes], bytes]:
    """One HTTP/1.1 answer from ``sock`` (``buf`` keeps what was read past it): status line, headers, body
    (Content-Length or chunked, RFC 9112 section 6)."""
    while b"\r\n\r\n" not in buf:
        buf += sock.recv(65536)
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    buf[:] = rest
    status, *lines = head.split(b"\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines)}
    if b"content-length" in headers:
        n = int(headers[b"content-length"])
        while len(buf) < n:
            buf += sock.recv(65536)
        body = bytes(buf[:n])
        buf[:] = buf[n:]
        return status, headers, body
    assert headers.get(b"transfer-encoding") == b"chunked"
    body = b""
    while True:
        while b"\r\n" not in buf:
            buf += sock.recv(65536)
        size_line, _, _ = bytes(buf).partition(b"\r\n")
        size = int(size_line, 16)
        while len(buf) < len(size_line) + 2 + size + 2:
            buf += sock.recv(65536)
        body += bytes(buf[len(size_line) + 2:len(size_line) + 2 + size])
        buf[:] = buf[len(size_line) + 2 + size + 2:]
        if size == 0:
            return status, headers, body


def test_uvicorn_answers_each_request_in_one_write_on_a_kept_alive_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    writes: list[bytes] = []
    real_init = OneWrite.__init__

    class Spy:
        def __init__(self, transport: Any) -> None:
            self.transport = transport

        def write(self, data: bytes) -> None:
            writes.append(bytes(data))
            self.transport.write(data)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.transport, name)

    def init(self: OneWrite, transport: Any, loop: Any) -> None:
        real_init(self, Spy(transport), loop)  # type: ignore[arg-type]

    monkeypatch.setattr(OneWrite, "__init__", init)

    async def hello(request: Request) -> Response:
        return PlainTextResponse("hello " + request.query_params.get("n", "") + "\n")

    async def posted(request: Request) -> Response:
        return Response(await request.body(), status_code=201, media_type="application/octet-stream")

    async def stream(request: Request) -> Response:
        async def chunks() -> Any:
            for i in range(3):
                await asyncio.sleep(0.01)
                yield f"chunk{i};".encode()
        return StreamingResponse(chunks(), media_type="text/plain")

    app = Starlette(routes=[Route("/", hello), Route("/post", posted, methods=["POST"]), Route("/stream", stream)])
    with asgi.background(app) as url:
        port = int(url.rstrip("/").rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            buf = bytearray()
            for n in range(5):
                sock.sendall(f"GET /?n={n} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                status, headers, body = read_answer(sock, buf)
                assert (status, body) == (b"HTTP/1.1 200 OK", f"hello {n}\n".encode())
            assert len(writes) == 5 and all(w.endswith(b"\n") and w.startswith(b"HTTP/1.1 200") for w in writes)
            payload = bytes(range(256)) * 40
            sock.sendall(b"POST /post HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(payload) + payload)
            status, headers, body = read_answer(sock, buf)
            assert (status, body) == (b"HTTP/1.1 201 Created", payload)
            assert len(writes) == 6 and writes[-1].endswith(payload)
            sock.sendall(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
            status, headers, body = read_answer(sock, buf)
            assert (status, body) == (b"HTTP/1.1 200 OK", b"chunk0;chunk1;chunk2;")
            sock.sendall(b"GET /?n=last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            status, headers, body = read_answer(sock, buf)
            assert (status, body, headers[b"connection"]) == (b"HTTP/1.1 200 OK", b"hello last\n", b"close")
            assert sock.recv(10) == b""  # closed after its answer
            assert buf == b""
