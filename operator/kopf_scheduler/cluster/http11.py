"""A lean HTTP/1.1 keep-alive client for the scheduler's small API calls (bindings, events, patches).

Why not aiohttp here: per pod the scheduler makes two small requests (a Binding and an Event), and
aiohttp's request machinery (sessions, multidict headers, tracing, timeouts, ClientRequest and
ClientResponse objects) cost ~108 us of our CPU per request against the local apiserver; this pool
writes one preformatted request and parses the answer as it arrives. The reference multiplexes
everything over one HTTP/2 connection; HTTP/1.1 needs a connection per request in flight, so
connections are kept and reused (idle ones expire before the apiserver's own idle timeout).
Listing pages use a pool of their own with a larger body cap (``ApiClient._list_page``); watches
and anything behind a proxy still go through aiohttp.

The parser is httptools (llhttp, Node.js's parser, which aiohttp's C parser also builds on):
framing, chunked bodies, 1xx and keep-alive come from a parser that is fuzzed and used at scale,
not from code of ours, and it costs no more of our CPU than the hand-written parser it replaced
(``python -m kopf_scheduler_workbench.bench.http --canned``: 39-41 us a request through ApiClient against
41-42). h11 does the same in pure Python at more than twice the CPU (96-97 us there; 147-162
against httptools' 72-86 with the local apiserver), which would give back most of what this pool
saves over aiohttp (109-114 us). docs/benchmarks.md has the runs.

Rules, as Go's net/http transport (what client-go runs on) keeps them:

- an answer is the first final (>= 200) response; 1xx responses before it are interim and skipped;
- a connection is reused only when the answer was read whole, the server keeps it alive and not
  one byte follows the answer: bytes after it, or arriving while the connection is idle, can
  only be an answer to nobody (a server bug, a proxy's error page), and reading it as the next
  request's answer would credit a bind to the wrong pod. Such a connection is closed;
- a request is sent again only on a connection taken from the idle list, and only when nothing of
  it was written (the connection was already closed), or when it is replayable (a GET) and the
  connection closed before any byte of the answer (the server closed it while idle). A written
  POST, PUT, PATCH or DELETE may have been applied: the caller gets the error, never a second copy
  (Go's ``persistConn.shouldRetryRequest``);
- response headers are capped at 1 MiB (Go's ``http.DefaultMaxHeaderBytes``, what its server
  accepts; its client allows 10 MiB; kube-apiserver's answers carry under 1 KiB) and bodies at
  64 MiB (an object is at most 1.5 MiB in etcd; listing pages, the only large answers, go to a
  pool of their own capped at 1 GiB): a misbehaving server or proxy cannot make a connection hold
  unbounded memory. Over either cap the request fails and the connection closes.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections import deque
from typing import ClassVar, NamedTuple, cast
from urllib.parse import urlsplit

import httptools

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_HEADER_BYTES",
    "ConnectionClosed",
    "Http11Pool",
    "ProtocolError",
    "Response",
]

logger = logging.getLogger(__name__)

MAX_HEADER_BYTES = 1 << 20
MAX_BODY_BYTES = 64 << 20
# Go's Request.isReplayable (without the Idempotency-Key header, which we never send): only these
# are sent again after they were written. PUT and DELETE are idempotent in RFC 9110 but not there.
REPLAYABLE = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


class ProtocolError(Exception):
    """The server's answer could not be parsed, or broke a cap."""


class ConnectionClosed(ConnectionError):
    """The connection closed before the whole answer arrived."""

    def __init__(self, message: str, *, received: bool, written: bool = True) -> None:
        super().__init__(message)
        self.received = received  # any byte of the answer arrived
        self.written = written  # the request was handed to the socket


class Response(NamedTuple):
    """A final answer: status, headers as received (name and value bytes, in order), body."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (any case), or None."""
        key = name.lower().encode()
        for k, v in self.headers:
            if k.lower() == key:
                return v.decode("latin-1").strip()
        return None


class _Conn(asyncio.Protocol):
    """One connection: llhttp's callbacks collect the answer to the request in flight."""

    __slots__ = (
        "answered",
        "body",
        "body_size",
        "closed",
        "head_pending",
        "head_size",
        "headers",
        "headers_done",
        "idle_since",
        "keep",
        "max_body",
        "max_header",
        "parser",
        "received",
        "transport",
        "waiter",
    )

    def __init__(self, max_header: int = MAX_HEADER_BYTES, max_body: int = MAX_BODY_BYTES) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[Response] | None = None
        self.closed = False
        self.idle_since = 0.0
        self.max_header = max_header
        self.max_body = max_body
        self.keep = False
        self.received = False
        self._reset()
        self.answered = True  # nothing asked yet: any byte is unsolicited

    def _reset(self) -> None:
        """Per-message state (a 1xx is a message of its own before the final one)."""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.head_size = 0
        self.head_pending = 0
        self.body_size = 0
        self.headers_done = False

    def begin(self, waiter: asyncio.Future[Response]) -> None:
        """Expect the answer to a request about to be written."""
        self.waiter = waiter
        self.answered = False
        self.received = False
        self.keep = False
        self._reset()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's TLS transport is not a subclass

    def data_received(self, data: bytes) -> None:
        if self.answered:
            # Nothing is awaited: bytes after the answer, or on an idle connection.
            self.abort("bytes after the answer")
            return
        self.received = True
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            if self.answered:  # the answer is complete; what followed it was not asked for
                self.abort("bytes after the answer")
            else:
                cause = exc.__context__ if isinstance(exc.__context__, ProtocolError) else exc
                self.fail(ProtocolError(f"bad answer: {cause}"))
            return
        if not self.headers_done and not self.answered:
            self.head_pending += len(data)
            if self.head_pending > self.max_header:
                self.fail(ProtocolError(f"response headers over {self.max_header} bytes"))

    # --- llhttp's callbacks --------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.answered:
            raise ProtocolError("a response after the answer")

    def on_header(self, name: bytes, value: bytes) -> None:
        self.head_size += len(name) + len(value) + 4
        if self.head_size > self.max_header:
            raise ProtocolError(f"response headers over {self.max_header} bytes")
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.headers_done = True

    def on_body(self, chunk: bytes) -> None:
        self.body_size += len(chunk)
        if self.body_size > self.max_body:
            raise ProtocolError(f"response body over {self.max_body} bytes")
        self.body.append(chunk)

    def on_message_complete(self) -> None:
        parser = self.parser
        status = parser.get_status_code()
        if status < 200:
            self._reset()  # 1xx: interim (100 Continue, 103 Early Hints); the answer follows
            return
        self.answered = True
        self.keep = parser.should_keep_alive()
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(Response(status, self.headers, b"".join(self.body)))

    # --- failure -------------------------------------------------------------------------------

    def fail(self, exc: Exception) -> None:
        """The answer is lost: the caller gets ``exc`` and the connection closes."""
        self.answered = True
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self._close()

    def abort(self, why: str) -> None:
        """Close a connection that may not be reused (Go: "Unsolicited response received")."""
        logger.warning("Closing a connection to the apiserver: %s", why)
        self._close()

    def _close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def eof_received(self) -> bool:
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        if exc is None and self.headers_done and not self._framed():
            # No Content-Length, not chunked: the body ends where the connection does (RFC 9112 6.3);
            # a reset instead of a clean close is a truncated body.
            self.answered = True
            status = self.parser.get_status_code()
            waiter.set_result(Response(status, self.headers, b"".join(self.body)))
            return
        waiter.set_exception(ConnectionClosed(f"connection closed: {exc}", received=self.received))

    def _framed(self) -> bool:
        return any(k.lower() in (b"content-length", b"transfer-encoding") for k, _ in self.headers)


class Http11Pool:
    """Keep-alive connections to one server; ``request`` returns a :class:`Response`."""

    connection_class: ClassVar[type[_Conn]] = _Conn

    def __init__(
        self,
        server: str,
        ssl_context: ssl.SSLContext | None,
        *,
        server_hostname: str | None = None,
        keepalive: float = 60.0,
        user_agent: str = "kopf-scheduler",
        max_header: int = MAX_HEADER_BYTES,
        max_body: int = MAX_BODY_BYTES,
    ) -> None:
        url = urlsplit(server)
        if url.scheme not in ("http", "https"):
            raise ValueError(f"unsupported server URL {server!r}")
        self.host = url.hostname or ""
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.prefix = url.path.rstrip("/")
        self.ssl = ssl_context if url.scheme == "https" else None
        self.server_hostname = (server_hostname or self.host) if self.ssl is not None else None
        self.keepalive = keepalive
        self.max_header = max_header
        self.max_body = max_body
        host = url.netloc.rsplit("@", 1)[-1]
        self._fixed = f"Host: {host}\r\nUser-Agent: {user_agent}\r\nAccept: application/json\r\n".encode()
        self._idle: deque[_Conn] = deque()
        self._all: set[_Conn] = set()
        self.connections_opened = 0

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        cls, max_header, max_body = self.connection_class, self.max_header, self.max_body
        _, conn = await loop.create_connection(
            lambda: cls(max_header, max_body),
            self.host,
            self.port,
            ssl=self.ssl,
            server_hostname=self.server_hostname,
        )
        self.connections_opened += 1
        self._all.add(conn)
        return conn

    def _take_idle(self) -> _Conn | None:
        now = time.monotonic()
        idle = self._idle
        while idle:
            conn = idle.pop()  # the most recent: the least likely to have been closed
            if not conn.closed and now - conn.idle_since < self.keepalive:
                return conn
            self._drop(conn)
        return None

    def _drop(self, conn: _Conn) -> None:
        self._all.discard(conn)
        if conn.transport is not None and not conn.closed:
            conn.closed = True
            conn.transport.close()

    async def request(
        self,
        method: str,
        target: str,
        headers: bytes,
        body: bytes | None,
        timeout: float,
    ) -> Response:
        """``target``: path and query; ``headers``: extra header lines, each ending in CRLF."""
        if method == "HEAD":  # llhttp cannot be told: it would wait for the body a HEAD's answer announces
            raise ValueError("HEAD is not supported")
        parts = [f"{method} {self.prefix}{target} HTTP/1.1\r\n".encode(), self._fixed, headers]
        if body is not None:
            parts.append(b"Content-Length: %d\r\n\r\n" % len(body))
            parts.append(body)
        else:
            parts.append(b"\r\n")
        data = b"".join(parts)
        conn = self._take_idle()
        reused = conn is not None
        while True:
            if conn is None:
                conn = await asyncio.wait_for(self._connect(), timeout)
            try:
                answer = await self._exchange(conn, method, target, data, timeout)
            except ConnectionClosed as exc:
                self._drop(conn)
                # Closed while idle (a keep-alive race): once more on a new connection, if that
                # cannot apply the request twice.
                if reused and not exc.received and (not exc.written or method in REPLAYABLE):
                    conn, reused = None, False
                    continue
                raise
            except BaseException:
                self._drop(conn)  # a timeout, a bad answer or a cancellation: the connection is mid-answer
                raise
            if conn.keep and not conn.closed:
                conn.idle_since = time.monotonic()
                self._idle.append(conn)
            else:
                self._drop(conn)
            return answer

    async def _exchange(self, conn: _Conn, method: str, target: str, data: bytes, timeout: float) -> Response:
        transport = conn.transport
        if transport is None or conn.closed or transport.is_closing():
            raise ConnectionClosed("connection closed", received=False, written=False)
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Response] = loop.create_future()
        conn.begin(waiter)
        transport.write(data)
        handle = loop.call_later(timeout, _expire, waiter, timeout)
        try:
            return await waiter
        finally:
            handle.cancel()
            conn.waiter = None
            conn.answered = True  # whatever comes now was not asked for

    def close(self) -> None:
        for conn in list(self._all):
            self._drop(conn)
        self._idle.clear()


def _expire(waiter: asyncio.Future[Response], timeout: float) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError(f"no answer within {timeout:g}s"))
