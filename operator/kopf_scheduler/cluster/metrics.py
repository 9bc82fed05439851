"""Prometheus metrics and the health endpoints, served from a thread.

The HTTP server runs in its own thread on purpose: if the event loop is stuck (a handler blocking,
a CPU-bound cycle that never yields), an in-loop endpoint could not answer at all, and a
"liveness timed out" is indistinguishable from a slow network. The thread answers promptly and
reports the loop's heartbeat age, so ``/healthz`` fails *because* the loop is stuck.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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
    "SCHEDULER",
    "Health",
    "serve",
]

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
TASKS = Gauge("kopf_scheduler_asyncio_tasks", "asyncio tasks alive at the last heartbeat (a leak shows here).")


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

    def live(self) -> tuple[bool, str]:
        age = time.monotonic() - self.beat
        LOOP_LAG.set(age)
        if age > self.stuck_after:
            return False, f"event loop stuck for {age:.1f}s"
        for name, check in list(self.checks.items()):
            try:
                problem = check()
            except Exception as exc:  # a check must not crash the probe
                problem = f"check raised {exc!r}"
            if problem:
                return False, f"{name}: {problem}"
        return True, f"ok (loop heartbeat {age:.1f}s ago)"


def _handler(health: Health) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
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


def serve(health: Health, host: str = "0.0.0.0", port: int = 8080) -> ThreadingHTTPServer:
    """Start the metrics/health server in a daemon thread; ``server.shutdown()`` stops it."""
    server = ThreadingHTTPServer((host, port), _handler(health))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="kopf-scheduler-http", daemon=True)
    thread.start()
    return server


def stop(server: ThreadingHTTPServer | None) -> None:
    if server is not None:
        with contextlib.suppress(Exception):
            server.shutdown()
            server.server_close()
