"""The HTTP servers' machinery on the standard library's ``http`` modules: the metrics/health
server (:class:`HealthServer`), the secure port's server (:class:`SecureServer`) and the secure
port's connection to the apiserver for its reviews (:class:`ReviewConnection`).

A module apart so that nothing on the way to the first bind imports it (issue 30's cold start):
``http.server``, ``http.client`` and prometheus-client's exposition (``email``, ``urllib.request``,
``wsgiref`` ...) are ~20 ms of imports. ``metrics.serve`` and ``SecureServing.start`` import it when
the runtime starts its servers, once the first cycles are through (``SchedulerRuntime._serve``).
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import queue
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http.client import HTTPSConnection
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from kopf_scheduler.cluster.metrics import BACKLOG, IDLE_TIMEOUT, MAX_IDLE, WORKERS, Health

__all__ = ["HealthServer", "ReviewConnection", "SecureServer", "health_handler"]

log = logging.getLogger(__name__)


def health_handler(health: Health, idle_timeout: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # The socket's timeout while a request is read and answered: a client that stops halfway
        # frees its worker after this long (BaseHTTPRequestHandler closes on the timeout).
        timeout = idle_timeout

        def do_GET(self) -> None:
            if self.path.startswith("/metrics"):
                self._send(200, generate_latest(REGISTRY), CONTENT_TYPE_LATEST)
            elif self.path.startswith("/healthz") or self.path.startswith("/livez"):
                ok, text = health.live()
                self._send(200 if ok else 500, text.encode(), "text/plain")
            elif self.path.startswith("/readyz"):
                ok = health.ready
                self._send(200 if ok else 503, b"ready" if ok else b"not synced", "text/plain")
            else:
                self._send(404, b"not found", "text/plain")

        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # probes every few seconds would flood the log

    return Handler


class HealthServer(HTTPServer):
    """An HTTP/1.0 server (one request per connection) whose threads are bounded and cannot be
    pinned by idle clients, unlike ``ThreadingHTTPServer`` (a thread per connection, no timeout:
    enough silent connections and ``/healthz`` never answers, and the kubelet restarts us).

    The accepting thread parks each new connection in a selector, where a thread (the parker)
    waits for it to send something; only then is it handed to one of ``workers`` threads. A
    connection silent for ``idle_timeout`` is closed there, and the handler's socket timeout
    bounds the request itself. Past ``max_idle`` silent connections the oldest is closed.
    :meth:`advance` is the parker's step for a connection that became ready: here it is served at
    once; the secure server (``cluster/serving.py``) runs its TLS handshake there first, so a
    client stalling mid-handshake holds no thread either.

    ``sock``: a socket already bound and listening (``run`` binds the secure port before the
    operator starts, and the runtime the metrics port when it starts, so a port in use is an error
    at start-up, as in kube-scheduler)."""

    request_queue_size = BACKLOG  # see metrics.BACKLOG

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        *,
        workers: int = WORKERS,
        idle_timeout: float = IDLE_TIMEOUT,
        max_idle: int = MAX_IDLE,
        sock: socket.socket | None = None,
    ) -> None:
        if sock is None:
            super().__init__(address, handler)
        else:
            super().__init__(address, handler, bind_and_activate=False)
            self.socket.close()
            self.socket = sock
            self.server_address = sock.getsockname()[:2]
            self.server_name, self.server_port = str(self.server_address[0]), int(self.server_address[1])
        self.idle_timeout = idle_timeout
        self.max_idle = max_idle
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="kopf-scheduler-http")
        self._arrivals: queue.SimpleQueue[tuple[socket.socket, Any]] = queue.SimpleQueue()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._closing = False
        self._parker = threading.Thread(target=self._park, name="kopf-scheduler-http-idle", daemon=True)
        self._parker.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        """Called by the accepting thread: park the connection, no thread spent on it yet."""
        self._arrivals.put((request, client_address))
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

    def advance(self, conn: Any) -> tuple[Any, int]:
        """A parked connection became ready: ``(conn, 0)`` to serve it now, ``(conn, events)`` to
        park it again until those selector events (its deadline unchanged), or raise OSError to drop
        it (an override that wrapped ``conn`` closes the wrapper first: ``conn`` is then detached)."""
        return conn, 0

    def _park(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self._wake_r, selectors.EVENT_READ, None)
        deadlines: dict[Any, float] = {}  # parked connection -> when it is closed
        heap: list[tuple[float, int, Any]] = []  # (deadline, arrival, conn): stale entries skipped
        order = itertools.count()

        def drop(conn: Any) -> None:
            selector.unregister(conn)
            del deadlines[conn]
            self.shutdown_request(conn)

        try:
            while not self._closing:
                while heap and deadlines.get(heap[0][2]) != heap[0][0]:
                    heapq.heappop(heap)  # served or dropped meanwhile
                timeout = max(0.0, heap[0][0] - time.monotonic()) if heap else None
                for key, _ in selector.select(timeout):
                    if key.data is None:
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(4096)
                        continue
                    conn: Any = key.fileobj
                    selector.unregister(conn)
                    deadline = deadlines.pop(conn)
                    try:
                        conn, events = self.advance(conn)
                    except OSError as exc:  # includes ssl.SSLError: a failed handshake
                        log.debug("connection from %s dropped: %r", key.data, exc)
                        self.shutdown_request(conn)
                        continue
                    if not events:
                        self._pool.submit(self._serve, conn, key.data)
                        continue
                    selector.register(conn, events, key.data)
                    deadlines[conn] = deadline
                    heapq.heappush(heap, (deadline, next(order), conn))
                while True:
                    try:
                        conn, address = self._arrivals.get_nowait()
                    except queue.Empty:
                        break
                    conn.setblocking(False)
                    selector.register(conn, selectors.EVENT_READ, address)
                    deadlines[conn] = deadline = time.monotonic() + self.idle_timeout
                    heapq.heappush(heap, (deadline, next(order), conn))
                    while len(deadlines) > self.max_idle:  # the oldest first
                        _, _, oldest = heapq.heappop(heap)
                        if oldest in deadlines:
                            drop(oldest)
                now = time.monotonic()
                while heap and heap[0][0] <= now:
                    _, _, conn = heapq.heappop(heap)
                    if deadlines.get(conn) is not None and deadlines[conn] <= now:
                        drop(conn)
        except Exception:
            log.exception("the metrics server's idle-connection thread failed")
        finally:
            for conn in list(deadlines):
                self.shutdown_request(conn)
            selector.close()

    def _serve(self, conn: Any, address: Any) -> None:
        try:
            conn.setblocking(True)
            self.finish_request(conn, address)
        except Exception as exc:  # a client gone or too slow midway: its own business
            log.debug("metrics request from %s failed: %r", address, exc)
        finally:
            self.shutdown_request(conn)

    def server_close(self) -> None:
        super().server_close()
        self._closing = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")
        self._parker.join(5)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._wake_r.close()
        self._wake_w.close()


class SecureServer(HealthServer):
    """:class:`HealthServer` with TLS: the handshake is stepped in the parker (see ``advance``)."""

    def __init__(self, *args: Any, tls: Callable[[], ssl.SSLContext], **kwargs: Any) -> None:
        self.tls = tls
        super().__init__(*args, **kwargs)

    def advance(self, conn: Any) -> tuple[Any, int]:
        if not isinstance(conn, ssl.SSLSocket):
            conn = self.tls().wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
        if conn.version() is not None:  # handshaken: the request has arrived
            return conn, 0
        try:
            conn.do_handshake()
        except ssl.SSLWantReadError:
            return conn, selectors.EVENT_READ
        except ssl.SSLWantWriteError:
            return conn, selectors.EVENT_WRITE
        except OSError:
            conn.close()
            raise
        return conn, 0 if conn.pending() else selectors.EVENT_READ


class ReviewConnection(HTTPSConnection):
    """HTTPS with the kubeconfig's ``tls-server-name`` as SNI and hostname, when it has one."""

    def __init__(
        self, host: str, port: int, timeout: float, context: ssl.SSLContext, server_name: str | None
    ) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._server_name = server_name

    def connect(self) -> None:
        if not self._server_name:
            super().connect()
            return
        sock = socket.create_connection((self.host, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self._server_name)  # type: ignore[attr-defined]
