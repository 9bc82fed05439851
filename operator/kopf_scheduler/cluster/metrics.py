"""Prometheus metrics and the health endpoints, served from threads.

The HTTP server runs outside the event loop on purpose: if the loop is stuck (a handler blocking,
a CPU-bound cycle that never yields), an in-loop endpoint could not answer at all, and a
"liveness timed out" is indistinguishable from a slow network. The threads answer promptly and
report the loop's heartbeat age, so ``/healthz`` fails *because* the loop is stuck.

Nor may clients starve the probes: a connection gets a thread only once it has sent something, a
few threads serve every request, and a connection silent for ``IDLE_TIMEOUT`` is closed (see
:class:`HealthServer`).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    Counter,
    Gauge,
    disable_created_metrics,
    generate_latest,
)

from kopf_scheduler.metrics.prometheus import PrometheusMetrics

__all__ = [
    "BIND_ERRORS",
    "IDLE_TIMEOUT",
    "SCHEDULER",
    "WORKERS",
    "Health",
    "HealthServer",
    "serve",
]

log = logging.getLogger(__name__)

IDLE_TIMEOUT = 5.0  # seconds a connection may stay silent, before and within its request
WORKERS = 4  # threads serving requests: probes and scrapes are small and few
MAX_IDLE = 512  # silent connections kept at most (the oldest is closed first): file descriptors

# kube-scheduler exposes no ``*_created`` series; neither do we.
disable_created_metrics()

# The engine's metrics (kube-scheduler's STABLE and BETA ones), in the process-wide registry.
SCHEDULER = PrometheusMetrics(REGISTRY)
BIND_ERRORS = Counter(
    "scheduler_bind_errors_total", "Failed binds by error (conflict, not_found, api).", ["error"]
)
LEADER = Gauge("kopf_scheduler_leader", "1 while this replica is the elected scheduler.")
SYNC_SECONDS = Gauge("kopf_scheduler_initial_sync_seconds", "Time from start to the first full listing.")
LOOP_LAG = Gauge("kopf_scheduler_event_loop_lag_seconds", "Age of the event loop's last heartbeat.")
TASKS = Gauge(
    "kopf_scheduler_asyncio_tasks", "asyncio tasks alive at the last heartbeat (a leak shows here)."
)


class Health:
    """Loop heartbeat plus named checks; read from the HTTP thread, written from the loop."""

    def __init__(self, stuck_after: float = 30.0) -> None:
        self.stuck_after = stuck_after
        self.beat = time.monotonic()
        self.ready = False
        self.checks: dict[str, Callable[[], str | None]] = {}  # name -> None if fine, else a reason

    async def heartbeat(self, period: float = 1.0) -> None:
        while True:
            self.beat = time.monotonic()
            TASKS.set(len(asyncio.all_tasks()))
            await asyncio.sleep(period)

    def loop_problem(self) -> str | None:
        """None while the event loop beats, else why it is deemed stuck."""
        age = time.monotonic() - self.beat
        LOOP_LAG.set(age)
        return f"event loop stuck for {age:.1f}s" if age > self.stuck_after else None

    def named_checks(self) -> list[tuple[str, Callable[[], str | None]]]:
        """The liveness checks by name (``event-loop`` first), each None if fine, else a reason;
        the secure port lists them as kube-scheduler's /healthz lists its checks."""
        return [("event-loop", self.loop_problem), *list(self.checks.items())]

    def live(self) -> tuple[bool, str]:
        for name, check in self.named_checks():
            try:
                problem = check()
            except Exception as exc:  # a check must not crash the probe
                problem = f"check raised {exc!r}"
            if problem:
                return False, problem if name == "event-loop" else f"{name}: {problem}"
        return True, f"ok (loop heartbeat {time.monotonic() - self.beat:.1f}s ago)"


def _handler(health: Health, idle_timeout: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # The socket's timeout while a request is read and answered: a client that stops halfway
        # frees its worker after this long (BaseHTTPRequestHandler closes on the timeout).
        timeout = idle_timeout

        def do_GET(self) -> None:
            if self.path.startswith("/metrics"):
                self._send(200, generate_latest(), CONTENT_TYPE_LATEST)
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
    operator starts, so a port in use is an error at start-up, as in kube-scheduler)."""

    # The listen backlog: the accepting thread takes one connection per wake-up, so a burst of
    # connects overflows a short queue and the kernel drops SYNs (retried a second later): 128 did
    # for 200 at once (test_metrics_server), socketserver's 5 for far fewer.
    request_queue_size = 512

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


def serve(
    health: Health,
    host: str = "0.0.0.0",
    port: int = 8080,
    *,
    workers: int = WORKERS,
    idle_timeout: float = IDLE_TIMEOUT,
) -> HealthServer:
    """Start the metrics/health server in daemon threads; :func:`stop` stops it."""
    handler = _handler(health, idle_timeout)
    server = HealthServer((host, port), handler, workers=workers, idle_timeout=idle_timeout)
    thread = threading.Thread(target=server.serve_forever, name="kopf-scheduler-http", daemon=True)
    thread.start()
    return server


def stop(server: HTTPServer | None) -> None:
    if server is not None:
        with contextlib.suppress(Exception):
            server.shutdown()
            server.server_close()
