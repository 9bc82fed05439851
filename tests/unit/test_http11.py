"""The lean HTTP/1.1 pool: answers parsed from a real socket (a hand-written server on loopback),
connections kept and reused, a connection the server closed while idle retried once, timeouts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from kopf_scheduler.cluster.http11 import ConnectionClosed, Http11Pool, ProtocolError, _parse

Handler = Callable[[bytes], list[bytes] | None]  # request -> pieces to send (None: close at once)
Server = tuple[str, list[bytes], list[Handler], list[int]]


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    """(url, requests seen, handlers to use in turn, connections accepted)."""
    seen: list[bytes] = []
    handlers: list[Handler] = []
    accepted = [0]

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted[0] += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length)
                seen.append(head + body)
                pieces = handlers.pop(0)(head + body) if handlers else None
                if pieces is None:
                    break
                for piece in pieces:
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0.001)  # arrive in separate reads
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    srv = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", seen, handlers, accepted
    finally:
        srv.close()


def ok(body: bytes = b'{"ok":true}', status: str = "201 Created") -> list[bytes]:
    return [b"HTTP/1.1 " + status.encode() + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body]


def test_parse_content_length_chunked_and_partial() -> None:
    buf = bytearray(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel")
    assert _parse(buf) is None  # the body is not all there yet
    buf += b"lo" + b"HTTP/1.1 204 No Content\r\n\r\n"
    assert _parse(buf) == (200, b"hello", True)
    assert _parse(buf) == (204, b"", True)  # the next answer, left in the buffer
    chunked = bytearray(
        b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n"
    )
    assert _parse(chunked) is None
    chunked += b"\r\n"
    assert _parse(chunked) == (201, b"abcde", True) and not chunked
    closing = bytearray(b"HTTP/1.1 409 Conflict\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}")
    assert _parse(closing) == (409, b"{}", False)
    with pytest.raises(ProtocolError):
        _parse(bytearray(b"SMTP nonsense\r\n\r\n"))


async def test_requests_reuse_one_connection_and_send_what_was_asked(server: Server) -> None:
    url, seen, handlers, accepted = server
    pool = Http11Pool(url, None)
    handlers += [lambda _: ok(b'{"a":1}'), lambda _: ok(b'{"b":2}', "200 OK")]
    try:
        assert await pool.request("POST", "/x?y=1", b"Authorization: Bearer t\r\n", b"{}", 5) == (
            201,
            b'{"a":1}',
        )
        assert await pool.request("GET", "/z", b"", None, 5) == (200, b'{"b":2}')
    finally:
        pool.close()
    assert accepted[0] == 1 and pool.connections_opened == 1
    first = seen[0].decode()
    assert first.startswith("POST /x?y=1 HTTP/1.1\r\n")
    assert (
        "Authorization: Bearer t\r\n" in first and "Content-Length: 2\r\n" in first and first.endswith("{}")
    )
    assert seen[1].startswith(b"GET /z HTTP/1.1\r\n")


async def test_an_answer_in_pieces_and_chunked(server: Server) -> None:
    url, _, handlers, _ = server
    pool = Http11Pool(url, None)
    handlers.append(
        lambda _: [
            b"HTTP/1.1 200 OK\r\nTransfer-",
            b'Encoding: chunked\r\n\r\n4\r\n{"a"',
            b"\r\n2\r\n:1\r\n1\r\n}\r\n0\r\n\r\n",
        ]
    )
    try:
        assert await pool.request("GET", "/", b"", None, 5) == (200, b'{"a":1}')
    finally:
        pool.close()


async def test_a_connection_closed_while_idle_is_retried_once_on_a_new_one(server: Server) -> None:
    url, seen, handlers, accepted = server
    pool = Http11Pool(url, None)
    handlers += [lambda _: ok(), lambda _: None, lambda _: ok(b'{"again":1}')]
    try:
        await pool.request("POST", "/a", b"", b"{}", 5)
        # The server closes the kept connection when the next request arrives, before answering.
        assert await pool.request("POST", "/b", b"", b"{}", 5) == (201, b'{"again":1}')
    finally:
        pool.close()
    assert accepted[0] == 2 and [s.split(b" ")[1] for s in seen] == [b"/a", b"/b", b"/b"]


async def test_a_fresh_connection_that_closes_is_an_error_not_a_retry(server: Server) -> None:
    url, seen, handlers, _ = server
    pool = Http11Pool(url, None)
    handlers.append(lambda _: None)
    try:
        with pytest.raises(ConnectionClosed):
            await pool.request("POST", "/once", b"", b"{}", 5)
    finally:
        pool.close()
    assert len(seen) == 1  # not sent twice


async def test_no_answer_in_time_is_a_timeout_and_the_connection_is_dropped(server: Server) -> None:
    url, _, handlers, accepted = server
    pool = Http11Pool(url, None)
    handlers += [lambda _: [], lambda _: ok()]  # the first request gets no answer at all
    try:
        with pytest.raises(TimeoutError):
            await pool.request("GET", "/slow", b"", None, 0.2)
        assert await pool.request("GET", "/next", b"", None, 5) == (201, b'{"ok":true}')
    finally:
        pool.close()
    assert accepted[0] == 2  # the late answer can never be read as the next request's


async def test_api_client_keeps_proxied_traffic_on_aiohttp(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lean pool has no proxy support: a proxy URL, or proxy variables with trust_env, keep
    every request on aiohttp."""
    import kopf

    from kopf_scheduler.cluster.client import ApiClient
    from kopf_scheduler.cluster.connection import Credentials

    plain = ApiClient(Credentials(kopf.ConnectionInfo(server="http://127.0.0.1:1", token="t")))
    proxied = ApiClient(
        Credentials(kopf.ConnectionInfo(server="http://127.0.0.1:1", token="t", proxy_url="http://p:3128"))
    )
    monkeypatch.setenv("HTTPS_PROXY", "http://p:3128")
    from_env = ApiClient(
        Credentials(kopf.ConnectionInfo(server="https://127.0.0.1:1", token="t", trust_env=True))
    )
    try:
        assert isinstance(plain._pool(), Http11Pool)
        assert proxied._pool() is None and from_env._pool() is None
        assert ApiClient(plain.credentials, lean_requests=False)._pool() is None
    finally:
        for api in (plain, proxied, from_env):
            await api.close()
