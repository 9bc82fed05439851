"""The metrics/health server on a real socket: silent clients cannot starve ``/healthz``, they are
closed after the idle timeout, and the threads serving requests stay bounded (issue 26)."""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from kopf_scheduler.cluster import metrics
from kopf_scheduler.cluster.httpd import HealthServer
from kopf_scheduler.cluster.metrics import Health

TIMEOUT = 1.0  # the server's idle timeout in these tests (5 s in production)
WORKERS = 2


@pytest.fixture
def server() -> Iterator[HealthServer]:
    srv = metrics.serve(Health(), "127.0.0.1", 0, workers=WORKERS, idle_timeout=TIMEOUT)
    try:
        yield srv
    finally:
        metrics.stop(srv)


def port(srv: HealthServer) -> int:
    return int(srv.server_address[1])


def get(srv: HealthServer, path: str = "/healthz") -> tuple[int, str, float]:
    start = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port(srv), timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode(), time.monotonic() - start
    finally:
        conn.close()


def idle_connections(srv: HealthServer, n: int) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port(srv)), timeout=10)
        socks.append(s)
    return socks


def closed_after(sock: socket.socket, limit: float) -> float | None:
    """Seconds until the server closed ``sock`` (EOF or reset), None if still open after ``limit``."""
    start = time.monotonic()
    sock.settimeout(limit)
    try:
        data = sock.recv(1)
    except TimeoutError:
        return None
    except ConnectionResetError:
        data = b""
    assert data == b"", data
    return time.monotonic() - start


def server_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("kopf-scheduler-http")]


def test_idle_connections_do_not_starve_healthz_and_are_closed_after_the_timeout(
    server: HealthServer,
) -> None:
    opened = time.monotonic()
    socks = idle_connections(server, 200)  # far more than the server has threads
    try:
        assert time.monotonic() - opened < 1.0  # all accepted at once (past the backlog a connect waits)
        for _ in range(3):
            status, body, seconds = get(server)
            assert status == 200 and body.startswith("ok"), body
            assert seconds < 0.5
        assert get(server, "/metrics")[0] == 200
        # Every silent connection is closed once it has been idle for the timeout, not before.
        for s in socks:
            assert closed_after(s, TIMEOUT + 3) is not None
        closed = time.monotonic() - opened
        assert TIMEOUT * 0.9 <= closed <= TIMEOUT + 1.5, closed
        assert get(server)[0] == 200
    finally:
        for s in socks:
            s.close()


def test_a_client_that_stops_halfway_frees_its_thread_after_the_timeout(server: HealthServer) -> None:
    stuck = idle_connections(server, WORKERS)
    try:
        for s in stuck:  # a request line but never the blank line that ends the head
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        time.sleep(0.2)
        status, _, seconds = get(server)  # waits for a worker: at most about the timeout
        assert status == 200
        assert seconds < TIMEOUT + 1.5
        assert all(closed_after(s, TIMEOUT + 2) is not None for s in stuck)
    finally:
        for s in stuck:
            s.close()


def test_the_threads_stay_bounded_under_concurrent_requests(server: HealthServer) -> None:
    seen: set[int] = set()
    lock = threading.Lock()

    def fetch(_: int) -> int:
        status = get(server, "/metrics")[0]
        with lock:
            seen.add(len(server_threads()))
        return status

    socks = idle_connections(server, 20)
    try:
        with ThreadPoolExecutor(16) as pool:
            assert set(pool.map(fetch, range(64))) == {200}
        # The accepting thread, the parker and the workers: nothing per connection.
        assert max(seen) <= WORKERS + 2, (seen, server_threads())
    finally:
        for s in socks:
            s.close()


def test_stop_closes_the_listener_and_the_parked_connections() -> None:
    srv = metrics.serve(Health(), "127.0.0.1", 0, workers=WORKERS, idle_timeout=30)
    socks = idle_connections(srv, 3)
    try:
        time.sleep(0.1)
        metrics.stop(srv)
        assert all(closed_after(s, 5) is not None for s in socks)
        with pytest.raises(OSError), contextlib.closing(socket.socket()) as probe:
            probe.settimeout(2)
            probe.connect(("127.0.0.1", port(srv)))
    finally:
        for s in socks:
            s.close()
