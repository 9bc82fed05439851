"""The runtime's metrics/health server starts once the first cycles are through (issue 30's cold
start: its imports must not stand before the first bind), at the latest a second after the start;
its port is bound from the start, so a probe meanwhile waits for its answer instead of being refused.
"""

from __future__ import annotations

import asyncio
import socket
import time
import urllib.error
import urllib.request

from kopf_scheduler.cluster.connection import ConnectionInfo, Credentials
from kopf_scheduler.cluster.runtime import Options, SchedulerRuntime


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _runtime(port: int) -> SchedulerRuntime:
    # An apiserver that is not there: the listing never completes, the first cycle never comes.
    creds = Credentials(ConnectionInfo(server="http://127.0.0.1:9", token="t"))
    return SchedulerRuntime(Options(standalone=True, metrics_host="127.0.0.1", metrics_port=port), creds)


def _readyz(port: int) -> tuple[int, float]:
    """The status of ``/readyz`` (503: the listing is not in) and when it came (``time.monotonic``)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10) as resp:
            return int(resp.status), time.monotonic()
    except urllib.error.HTTPError as exc:
        return exc.code, time.monotonic()


async def test_a_probe_is_answered_once_the_first_cycle_is_through() -> None:
    port = _free_port()
    runtime = _runtime(port)
    await runtime.start()
    try:
        probe = asyncio.ensure_future(asyncio.to_thread(_readyz, port))
        await asyncio.sleep(0.3)
        assert not probe.done() and runtime._server is None  # connected, waiting in the backlog
        runtime.watching.set()  # what _open_watches does at the first bind
        opened = time.monotonic()
        status, answered = await asyncio.wait_for(probe, 10)
        assert status == 503 and answered - opened < 0.5
        assert "serve-gate" not in runtime._tasks  # done, not dead
    finally:
        await runtime.stop(drain_timeout=0.1)


async def test_without_a_first_cycle_the_server_starts_a_second_after_the_start() -> None:
    port = _free_port()
    runtime = _runtime(port)
    started = time.monotonic()
    await runtime.start()
    try:
        status, answered = await asyncio.wait_for(asyncio.to_thread(_readyz, port), 10)
        assert status == 503 and 0.9 <= answered - started < 5.0
        assert not runtime.watching.is_set()
    finally:
        await runtime.stop(drain_timeout=0.1)


async def test_a_metrics_port_in_use_fails_the_start() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        runtime = _runtime(int(taken.getsockname()[1]))
        try:
            await runtime.start()
        except OSError:
            pass
        else:
            raise AssertionError("the start did not fail")
        finally:
            await runtime.stop(drain_timeout=0.1)
