"""The process's metrics and the health endpoints, served from threads.

The HTTP server runs outside the event loop on purpose: if the loop is stuck (a handler blocking,
a CPU-bound cycle that never yields), an in-loop endpoint could not answer at all, and a
"liveness timed out" is indistinguishable from a slow network. The threads answer promptly and
report the loop's heartbeat age, so ``/healthz`` fails *because* the loop is stuck.

Nor may clients starve the probes: a connection gets a thread only once it has sent something, a
few threads serve every request, and a connection silent for ``IDLE_TIMEOUT`` is closed (see
``httpd.HealthServer``).

Nothing here imports prometheus-client or ``http.server`` (issue 30's cold start: ~20 ms before the
first bind): the metrics are the recorder's lean ones, recorded from the start, and :func:`serve`
exposes them in prometheus-client's process-wide registry and imports the server (``httpd.py``)
when the runtime starts it, once the first cycles are through (at the latest 1 s after its
start). The port is bound at the start (:func:`listen`): a probe meanwhile waits in its backlog.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kopf_scheduler.metrics.prometheus import Counter, Gauge, LeanMetric, PrometheusMetrics

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from kopf_scheduler.cluster.httpd import HealthServer

__all__ = [
    "BIND_ERRORS",
    "IDLE_TIMEOUT",
    "SCHEDULER",
    "WORKERS",
    "Health",
    "expose",
    "listen",
    "serve",
    "stop",
]

IDLE_TIMEOUT = 5.0  # seconds a connection may stay silent, before and within its request
WORKERS = 4  # threads serving requests: probes and scrapes are small and few
MAX_IDLE = 512  # silent connections kept at most (the oldest is closed first): file descriptors
# The listen backlog: the accepting thread takes one connection per wake-up, so a burst of
# connects overflows a short queue and the kernel drops SYNs (retried a second later): 128 did
# for 200 at once (test_metrics_server), socketserver's 5 for far fewer.
BACKLOG = 512

# The engine's metrics (kube-scheduler's STABLE and BETA ones) and the edge's own: exposed in the
# process-wide registry by :func:`expose`, in this order.
SCHEDULER = PrometheusMetrics()
BIND_ERRORS = Counter(
    "scheduler_bind_errors_total", "Failed binds by error (conflict, not_found, api).", ["error"]
)
LEADER = Gauge("kopf_scheduler_leader", "1 while this replica is the elected scheduler.")
SYNC_SECONDS = Gauge("kopf_scheduler_initial_sync_seconds", "Time from start to the first full listing.")
LOOP_LAG = Gauge("kopf_scheduler_event_loop_lag_seconds", "Age of the event loop's last heartbeat.")
TASKS = Gauge(
    "kopf_scheduler_asyncio_tasks", "asyncio tasks alive at the last heartbeat (a leak shows here)."
)
_EDGE: tuple[LeanMetric, ...] = (BIND_ERRORS, LEADER, SYNC_SECONDS, LOOP_LAG, TASKS)
_exposing = threading.Lock()


def expose() -> CollectorRegistry:
    """The process-wide registry (prometheus-client's), with our metrics registered in it the
    first time: what the metrics server and the secure port scrape. Imports prometheus-client."""
    from prometheus_client import REGISTRY, disable_created_metrics

    from kopf_scheduler.metrics.exposition import register

    with _exposing:
        if SCHEDULER.registry is None:
            # kube-scheduler exposes no ``*_created`` series; neither do we (nor anything
            # else that would register a prometheus-client Counter here).
            disable_created_metrics()
            SCHEDULER.expose(REGISTRY)
            register(REGISTRY, _EDGE)
    return REGISTRY


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


def listen(host: str, port: int) -> socket.socket:
    """The metrics port bound and listening, before its server starts: a port in use fails the
    start, and a probe that comes before the server waits in the backlog instead of being refused."""
    sock = socket.create_server((host, port), backlog=BACKLOG)
    return sock


def serve(
    health: Health,
    host: str = "0.0.0.0",
    port: int = 8080,
    *,
    workers: int = WORKERS,
    idle_timeout: float = IDLE_TIMEOUT,
    sock: socket.socket | None = None,
) -> HealthServer:
    """Expose the metrics and start the metrics/health server in daemon threads on ``sock`` (from
    :func:`listen`), else on ``host:port``; :func:`stop` stops it."""
    expose()
    from kopf_scheduler.cluster.httpd import HealthServer, health_handler

    handler = health_handler(health, idle_timeout)
    server = HealthServer((host, port), handler, workers=workers, idle_timeout=idle_timeout, sock=sock)
    thread = threading.Thread(target=server.serve_forever, name="kopf-scheduler-http", daemon=True)
    thread.start()
    return server


def stop(server: Any) -> None:
    """Stop a server :func:`serve` started (None: none was)."""
    if server is not None:
        with contextlib.suppress(Exception):
            server.shutdown()
            server.server_close()
