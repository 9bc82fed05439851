"""The lean HTTP/1.1 pool and ApiClient's retries, against a hand-written server on a real loopback
socket that writes raw bytes: answers in pieces, 1xx, bytes after the answer, closes and resets
after a request was written, oversized headers and bodies, 429/503 with Retry-After."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest

from kopf_scheduler.cluster.apiclient import ApiClient
from kopf_scheduler.cluster.connection import ConnectionInfo, Credentials
from kopf_scheduler.cluster.http11 import ConnectionClosed, Http11Pool, ProtocolError, Response
from kopf_scheduler.framework.client import ApiError, TransientError

CLOSE = b"<close>"  # a piece that closes the connection (FIN)
RESET = b"<reset>"  # a piece that resets it (RST: SO_LINGER 0)

Handler = Callable[[bytes], list[bytes]]  # a request -> the pieces to write, in separate writes


@dataclass
class Server:
    url: str
    handlers: list[Handler] = field(default_factory=list)  # used in turn; none left: close
    seen: list[tuple[float, int, bytes]] = field(default_factory=list)  # (monotonic, connection, request)
    accepted: int = 0
    ended: list[int] = field(default_factory=list)  # connections that ended (the server closes none unasked)

    def paths(self) -> list[bytes]:
        return [request.split(b" ")[1] for _, _, request in self.seen]


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    srv = Server("")

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        srv.accepted += 1
        number = srv.accepted
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                request = head + await reader.readexactly(length)
                srv.seen.append((time.monotonic(), number, request))
                for piece in srv.handlers.pop(0)(request) if srv.handlers else [CLOSE]:
                    if piece == CLOSE:
                        return
                    if piece == RESET:
                        sock = writer.get_extra_info("socket")
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                        writer.transport.abort()
                        return
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0.002)  # arrive in separate reads
        except ConnectionError:
            pass
        finally:
            srv.ended.append(number)
            writer.close()

    listener = await asyncio.start_server(serve, "127.0.0.1", 0)
    srv.url = f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}"
    try:
        yield srv
    finally:
        listener.close()


def answer(body: bytes = b'{"ok":true}', status: str = "201 Created", extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 %s\r\n%sContent-Length: %d\r\n\r\n%s" % (status.encode(), extra, len(body), body)


def ok(body: bytes = b'{"ok":true}', status: str = "201 Created", extra: bytes = b"") -> Handler:
    return lambda _: [answer(body, status, extra)]


async def test_requests_reuse_one_connection_and_send_what_was_asked(server: Server) -> None:
    server.handlers += [ok(b'{"a":1}', extra=b"Audit-Id: 42\r\n"), ok(b'{"b":2}', "200 OK")]
    pool = Http11Pool(server.url, None)
    try:
        first = await pool.request("POST", "/x?y=1", b"Authorization: Bearer t\r\n", b"{}", 5)
        assert (first.status, first.body) == (201, b'{"a":1}')
        assert first.header("audit-id") == "42" and (b"Audit-Id", b"42") in first.headers  # headers returned
        assert await pool.request("GET", "/z", b"", None, 5) == Response(
            200, [(b"Content-Length", b"7")], b'{"b":2}'
        )
    finally:
        pool.close()
    assert server.accepted == 1 and pool.connections_opened == 1
    first_sent = server.seen[0][2].decode()
    assert first_sent.startswith("POST /x?y=1 HTTP/1.1\r\n")
    assert "Authorization: Bearer t\r\n" in first_sent and "Content-Length: 2\r\n" in first_sent
    assert first_sent.endswith("{}")
    assert server.seen[1][2].startswith(b"GET /z HTTP/1.1\r\n")


async def test_answers_in_pieces_chunked_bodiless_and_closing(server: Server) -> None:
    server.handlers += [
        lambda _: [b"HTTP/1.1 200 OK\r\nContent-Len", b"gth: 5\r\n\r\nhel", b"lo"],
        lambda _: [
            b"HTTP/1.1 200 OK\r\nTransfer-",
            b'Encoding: chunked\r\n\r\n4\r\n{"a"',
            b"\r\n2\r\n:1\r\n1\r\n}\r\n0\r\n\r\n",
        ],
        lambda _: [b"HTTP/1.1 204 No Content\r\n\r\n"],
        ok(b"{}", "409 Conflict", b"Connection: close\r\n"),  # not reused afterwards
        ok(b"{}", "200 OK"),
    ]
    pool = Http11Pool(server.url, None)
    try:
        assert (await pool.request("GET", "/1", b"", None, 5)).body == b"hello"
        assert (await pool.request("GET", "/2", b"", None, 5)).body == b'{"a":1}'
        assert (await pool.request("DELETE", "/3", b"", None, 5))[::2] == (204, b"")
        assert (await pool.request("PATCH", "/4", b"", b"{}", 5)).status == 409
        assert (await pool.request("GET", "/5", b"", None, 5)).status == 200
    finally:
        pool.close()
    assert [number for _, number, _ in server.seen] == [1, 1, 1, 1, 2]


async def test_a_body_delimited_by_the_close_is_read_to_the_end(server: Server) -> None:
    server.handlers.append(lambda _: [b'HTTP/1.1 200 OK\r\n\r\n{"a"', b":1}", CLOSE])
    pool = Http11Pool(server.url, None)
    try:
        assert (await pool.request("GET", "/", b"", None, 5)).body == b'{"a":1}'
    finally:
        pool.close()


async def test_a_malformed_answer_is_a_protocol_error(server: Server) -> None:
    server.handlers.append(lambda _: [b"SMTP nonsense\r\n\r\n"])
    pool = Http11Pool(server.url, None)
    try:
        with pytest.raises(ProtocolError):
            await pool.request("GET", "/", b"", None, 5)
    finally:
        pool.close()


@pytest.mark.parametrize("together", [True, False], ids=["same-write", "while-idle"])
async def test_bytes_after_the_answer_are_never_read_as_the_next_answer(
    server: Server, together: bool
) -> None:
    """A server that sends one response too many: the next request gets its own answer, on a new
    connection, never the stray one (which for a bind would credit a 201 to the wrong pod)."""
    stray = answer(b'{"stray":1}')
    first = answer(b'{"first":1}')
    server.handlers += [
        (lambda _: [first + stray]) if together else (lambda _: [first, stray]),
        ok(b'{"second":1}'),
    ]
    pool = Http11Pool(server.url, None)
    try:
        assert (await pool.request("POST", "/a", b"", b"{}", 5)).body == b'{"first":1}'
        await asyncio.sleep(0.05)  # the stray bytes arrive (while idle, or already had with the answer)
        assert (await pool.request("POST", "/b", b"", b"{}", 5)).body == b'{"second":1}'
    finally:
        pool.close()
    assert [(number, path) for (_, number, _), path in zip(server.seen, server.paths(), strict=True)] == [
        (1, b"/a"),
        (2, b"/b"),
    ]
    assert server.ended == [1] and pool.connections_opened == 2  # the client closed the first


async def test_a_stray_response_in_the_same_read_as_the_answer_closes_the_connection(server: Server) -> None:
    """The pool's own guard, without the sleep: the stray bytes parsed with the answer mark the
    connection, so an immediate next request opens a new one."""
    server.handlers += [lambda _: [answer(b'{"first":1}') + b"HTTP/1.1 201 Created\r\n"], ok(b'{"second":1}')]
    pool = Http11Pool(server.url, None)
    try:
        assert (await pool.request("POST", "/a", b"", b"{}", 5)).body == b'{"first":1}'
        assert (await pool.request("POST", "/b", b"", b"{}", 5)).body == b'{"second":1}'
    finally:
        pool.close()
    assert pool.connections_opened == 2


@pytest.mark.parametrize("together", [True, False], ids=["same-write", "separate-writes"])
async def test_100_continue_is_interim(server: Server, together: bool) -> None:
    cont = b"HTTP/1.1 100 Continue\r\n\r\n"
    final = answer(b'{"created":1}')
    server.handlers += [
        (lambda _: [cont + final]) if together else (lambda _: [cont, final]),
        ok(b"{}", "200 OK"),
    ]
    pool = Http11Pool(server.url, None)
    try:
        created = await pool.request("POST", "/a", b"", b"{}", 5)
        assert (created.status, created.body) == (201, b'{"created":1}')
        assert (await pool.request("GET", "/b", b"", None, 5)).status == 200
    finally:
        pool.close()
    assert pool.connections_opened == 1  # the 100 left nothing behind: the connection was reused


@pytest.mark.parametrize("how", [CLOSE, RESET], ids=["close", "reset"])
async def test_a_written_post_on_a_reused_connection_is_not_sent_again(server: Server, how: bytes) -> None:
    """The connection goes down after the POST was written and before any byte of the answer:
    the POST may have been applied, so the caller gets the error and the server sees one POST."""
    server.handlers += [ok(), lambda _: [how], ok()]
    pool = Http11Pool(server.url, None)
    try:
        await pool.request("POST", "/a", b"", b"{}", 5)
        with pytest.raises(ConnectionError) as info:
            await pool.request("POST", "/bind", b"", b"{}", 5)
        if isinstance(info.value, ConnectionClosed):
            assert info.value.written and not info.value.received
        await asyncio.sleep(0.05)
    finally:
        pool.close()
    assert server.paths() == [b"/a", b"/bind"] and server.accepted == 1


async def test_a_get_on_a_connection_closed_while_idle_is_retried_once(server: Server) -> None:
    """The server closes the kept connection as the next GET arrives, before answering (its idle
    timeout racing the request): the GET goes once more on a new connection, as Go's does."""
    server.handlers += [ok(), lambda _: [CLOSE], ok(b'{"again":1}')]
    pool = Http11Pool(server.url, None)
    try:
        await pool.request("POST", "/a", b"", b"{}", 5)
        assert (await pool.request("GET", "/b", b"", None, 5)).body == b'{"again":1}'
    finally:
        pool.close()
    assert server.accepted == 2 and server.paths() == [b"/a", b"/b", b"/b"]


async def test_a_connection_the_server_closed_while_idle_is_not_used(server: Server) -> None:
    """Closed (FIN) after the answer, seen while idle: any method goes on a new connection; nothing
    was written to the dead one."""
    server.handlers += [lambda _: [answer(), CLOSE], ok(b'{"again":1}')]
    pool = Http11Pool(server.url, None)
    try:
        await pool.request("POST", "/a", b"", b"{}", 5)
        await asyncio.sleep(0.05)
        assert (await pool.request("POST", "/b", b"", b"{}", 5)).body == b'{"again":1}'
    finally:
        pool.close()
    assert server.accepted == 2 and server.paths() == [b"/a", b"/b"]


async def test_a_fresh_connection_that_closes_is_an_error_not_a_retry(server: Server) -> None:
    server.handlers.append(lambda _: [CLOSE])
    pool = Http11Pool(server.url, None)
    try:
        with pytest.raises(ConnectionClosed):
            await pool.request("GET", "/once", b"", None, 5)
    finally:
        pool.close()
    assert len(server.seen) == 1  # not sent twice


async def test_oversized_headers_fail_and_close_the_connection(server: Server) -> None:
    big = b"X-Big: " + b"a" * (1 << 20) + b"\r\n"  # over the 1 MiB default, in many reads
    server.handlers += [lambda _: [b"HTTP/1.1 200 OK\r\n" + big + b"Content-Length: 2\r\n\r\n{}"], ok()]
    pool = Http11Pool(server.url, None)
    try:
        with pytest.raises(ProtocolError, match="headers over"):
            await pool.request("GET", "/big", b"", None, 5)
        assert (await pool.request("GET", "/next", b"", None, 5)).status == 201
        await asyncio.sleep(0.05)
    finally:
        pool.close()
    assert pool.connections_opened == 2 and server.ended == [1]  # the client closed the first


async def test_many_headers_in_one_read_are_capped_too(server: Server) -> None:
    headers = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 100) for i in range(200))  # ~22 KB
    server.handlers.append(lambda _: [b"HTTP/1.1 200 OK\r\n" + headers + b"Content-Length: 0\r\n\r\n"])
    pool = Http11Pool(server.url, None, max_header=16 << 10)
    try:
        with pytest.raises(ProtocolError, match="headers over"):
            await pool.request("GET", "/", b"", None, 5)
    finally:
        pool.close()


@pytest.mark.parametrize("chunked", [False, True])
async def test_an_oversized_body_fails_and_closes_the_connection(server: Server, chunked: bool) -> None:
    body = b"x" * 5000
    if chunked:
        pieces = [
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"1388\r\n" + body + b"\r\n0\r\n\r\n",
        ]
    else:
        pieces = [answer(body, "200 OK")]
    server.handlers += [lambda _: pieces, ok()]
    pool = Http11Pool(server.url, None, max_body=4096)
    try:
        with pytest.raises(ProtocolError, match="body over"):
            await pool.request("GET", "/", b"", None, 5)
        assert (await pool.request("GET", "/next", b"", None, 5)).status == 201
        await asyncio.sleep(0.05)
    finally:
        pool.close()
    assert pool.connections_opened == 2 and server.ended == [1]


async def test_no_answer_in_time_is_a_timeout_and_the_connection_is_dropped(server: Server) -> None:
    server.handlers += [lambda _: [], ok()]  # the first request gets no answer at all
    pool = Http11Pool(server.url, None)
    try:
        with pytest.raises(TimeoutError):
            await pool.request("GET", "/slow", b"", None, 0.2)
        assert (await pool.request("GET", "/next", b"", None, 5)).body == b'{"ok":true}'
    finally:
        pool.close()
    assert server.accepted == 2  # the late answer can never be read as the next request's


# --- ApiClient: Retry-After and client-go's retries, on the lean pool and on aiohttp ------------


def _client(server: Server, lean: bool, **kwargs: float) -> ApiClient:
    creds = Credentials(ConnectionInfo(server=server.url, token="t"))
    return ApiClient(creds, lean_requests=lean, **kwargs)  # type: ignore[arg-type]


STATUS_429 = b'{"kind":"Status","code":429,"reason":"TooManyRequests","message":"slow down"}'


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "aiohttp"])
async def test_429_with_retry_after_is_waited_out_and_retried_once(server: Server, lean: bool) -> None:
    server.handlers += [
        ok(STATUS_429, "429 Too Many Requests", b"Retry-After: 1\r\n"),
        ok(b'{"kind":"Binding"}'),
    ]
    api = _client(server, lean)
    try:
        assert await api.request("POST", "/api/v1/namespaces/ns/pods/p/binding", body={}) == {
            "kind": "Binding"
        }
    finally:
        await api.close()
    assert len(server.seen) == 2 and server.paths()[0] == server.paths()[1]
    assert server.seen[1][0] - server.seen[0][0] >= 1.0


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "aiohttp"])
async def test_which_answers_are_retried(server: Server, lean: bool) -> None:
    """client-go's checkWait: a 5xx with an integer Retry-After is retried for any method; a 429
    without one, a 4xx with one, an HTTP date, or a wait over the cap is not."""
    server.handlers += [
        ok(b"{}", "503 Service Unavailable", b"Retry-After: 0\r\n"),
        ok(b"{}", "500 Internal Server Error", b"Retry-After: 0\r\n"),
        ok(b'{"done":1}'),
        ok(STATUS_429, "429 Too Many Requests"),
        ok(b"{}", "409 Conflict", b"Retry-After: 0\r\n"),
        ok(b"{}", "503 Service Unavailable", b"Retry-After: Wed, 21 Oct 2015 07:28:00 GMT\r\n"),
        ok(b"{}", "503 Service Unavailable", b"Retry-After: 60\r\n"),
    ]
    api = _client(server, lean, max_retry_wait=30.0)
    try:
        assert await api.request("DELETE", "/d", body={}) == {"done": 1}
        with pytest.raises(ApiError) as info:
            await api.request("POST", "/e", body={})
        assert (info.value.status, info.value.reason) == (429, "TooManyRequests")
        for code in (409, 503, 503):
            with pytest.raises(ApiError) as info:
                await api.request("PATCH", "/f", body={})
            assert info.value.status == code
            assert isinstance(info.value, TransientError) is (code == 503)
    finally:
        await api.close()
    assert server.paths() == [b"/d"] * 3 + [b"/e"] + [b"/f"] * 3


async def test_retries_end_after_max_retries(server: Server) -> None:
    server.handlers += [ok(b"{}", "503 Service Unavailable", b"Retry-After: 0\r\n")] * 4
    api = _client(server, True, max_retries=3)
    try:
        with pytest.raises(TransientError):
            await api.request("POST", "/p", body={})
    finally:
        await api.close()
    assert len(server.seen) == 4  # the first attempt and three retries


async def test_a_write_is_not_sent_again_once_the_fence_closes(server: Server) -> None:
    """A replica that lost the lead while waiting out a Retry-After sends nothing more."""
    server.handlers += [ok(STATUS_429, "429 Too Many Requests", b"Retry-After: 0\r\n"), ok()]
    leading = [True]
    api = _client(server, True)
    api.write_fence = lambda: leading[0]
    try:
        leading[0] = False
        with pytest.raises(ApiError) as info:
            await api.request("POST", "/api/v1/namespaces/ns/pods/p/binding", body={})
        assert info.value.status == 429
    finally:
        await api.close()
    assert len(server.seen) == 1


async def test_a_get_is_retried_after_a_lost_connection(server: Server) -> None:
    """client-go sends a GET again 1 s after a reset or an early close (a fresh connection, so not
    the transport's own retry)."""
    server.handlers += [lambda _: [RESET], ok(b'{"kind":"Pod"}', "200 OK")]
    api = _client(server, True)
    try:
        assert await api.request("GET", "/api/v1/namespaces/ns/pods/p") == {"kind": "Pod"}
    finally:
        await api.close()
    assert server.paths() == [b"/api/v1/namespaces/ns/pods/p"] * 2 and server.accepted == 2
    assert server.seen[1][0] - server.seen[0][0] >= 1.0


@pytest.mark.parametrize("how", [CLOSE, RESET], ids=["close", "reset"])
@pytest.mark.parametrize("lean", [True, False], ids=["lean", "aiohttp"])
async def test_a_post_whose_connection_is_lost_is_never_sent_again(
    server: Server, lean: bool, how: bytes
) -> None:
    """A written POST may have been applied: one POST at the server, the caller gets an error
    that is not transient (DefaultBinder does not retry it; the bind is read back)."""
    server.handlers += [ok(), lambda _: [how], ok()]
    api = _client(server, lean)
    try:
        await api.request("POST", "/api/v1/namespaces/ns/events", body={})
        with pytest.raises(ApiError) as info:
            await api.request("POST", "/api/v1/namespaces/ns/pods/p/binding", body={})
        assert not isinstance(info.value, TransientError)
        await asyncio.sleep(1.2)  # no retry comes later either
    finally:
        await api.close()
    assert server.paths() == [b"/api/v1/namespaces/ns/events", b"/api/v1/namespaces/ns/pods/p/binding"]


async def test_api_client_keeps_proxied_traffic_on_aiohttp(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lean pool has no proxy support: a proxy URL, or proxy variables with trust_env, keep
    every request on aiohttp."""
    plain = ApiClient(Credentials(ConnectionInfo(server="http://127.0.0.1:1", token="t")))
    proxied = ApiClient(
        Credentials(ConnectionInfo(server="http://127.0.0.1:1", token="t", proxy_url="http://p:3128"))
    )
    monkeypatch.setenv("HTTPS_PROXY", "http://p:3128")
    from_env = ApiClient(Credentials(ConnectionInfo(server="https://127.0.0.1:1", token="t", trust_env=True)))
    try:
        assert isinstance(plain._pool(), Http11Pool)
        assert proxied._pool() is None and from_env._pool() is None
        assert ApiClient(plain.credentials, lean_requests=False)._pool() is None
    finally:
        for api in (plain, proxied, from_env):
            await api.close()
