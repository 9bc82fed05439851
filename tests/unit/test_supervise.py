"""The supervisor restarts a failing loop and reports it down only while it waits."""

from __future__ import annotations

import asyncio

from kopf_scheduler.cluster.supervise import supervise


async def test_a_failing_loop_is_restarted_and_reported_down_meanwhile() -> None:
    runs = 0
    healthy = asyncio.Event()

    async def loop() -> None:
        nonlocal runs
        runs += 1
        if runs <= 2:
            raise RuntimeError(f"crash {runs}")
        healthy.set()
        await asyncio.Event().wait()

    down: dict[str, str] = {}
    task = asyncio.ensure_future(supervise("keep-alive", loop, down, first_delay=0.05, max_delay=0.1))
    await asyncio.sleep(0.01)
    assert down == {"keep-alive": "failed: RuntimeError('crash 1')"}
    await asyncio.wait_for(healthy.wait(), 2)
    assert runs == 3 and down == {}
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert down == {}


async def test_a_loop_that_returns_is_restarted_too() -> None:
    runs = 0

    async def loop() -> None:
        nonlocal runs
        runs += 1

    down: dict[str, str] = {}
    task = asyncio.ensure_future(supervise("x", loop, down, first_delay=0.01, max_delay=0.01))
    await asyncio.sleep(0.1)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert runs >= 3
