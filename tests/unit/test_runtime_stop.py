"""SchedulerRuntime.stop runs once, to its end, however many callers and whoever is cancelled.

Under ``kopf-scheduler run`` both Kopf's cleanup handler and ``run.operate`` stop the runtime, and
Kopf may cancel its cleanup part-way: the lead must still be given up, once.
"""

from __future__ import annotations

import asyncio

from kopf_scheduler.cluster.connection import ConnectionInfo, Credentials
from kopf_scheduler.cluster.runtime import Options, SchedulerRuntime


def _runtime() -> tuple[SchedulerRuntime, list[str]]:
    creds = Credentials(ConnectionInfo(server="http://127.0.0.1:9", token="t"))
    runtime = SchedulerRuntime(Options(standalone=True, metrics_port=None), creds)
    calls: list[str] = []
    release = runtime.leader.release

    async def slow_release() -> None:
        calls.append("release")
        await asyncio.sleep(0.05)
        await release()
        calls.append("released")

    runtime.leader.release = slow_release  # type: ignore[method-assign]
    return runtime, calls


async def test_a_second_stop_waits_for_the_first_and_releases_once() -> None:
    runtime, calls = _runtime()
    await asyncio.gather(runtime.stop(), runtime.stop())
    await runtime.stop()
    assert calls == ["release", "released"]


async def test_a_cancelled_caller_leaves_the_stop_running_and_the_next_one_waits_for_it() -> None:
    runtime, calls = _runtime()
    first = asyncio.ensure_future(runtime.stop())
    await asyncio.sleep(0.01)  # under way: releasing
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    assert calls == ["release"]
    await runtime.stop()  # what run.operate's finally does after Kopf's cancelled cleanup
    assert calls == ["release", "released"]


async def test_kopf_waits_until_the_first_cycles_are_done() -> None:
    """``under_way`` (when ``run`` starts Kopf): not while a pod is active in the queue; ``quiet``
    after a bind once the queue is empty, ``grace`` when nothing was bound."""
    from kopf_scheduler.api.objects import parse_pod

    runtime, _ = _runtime()
    loop = asyncio.get_running_loop()
    runtime.synced.set()
    started = loop.time()
    await runtime.under_way(quiet=0.01, grace=0.2, limit=5, poll=0.01)
    assert 0.2 <= loop.time() - started < 1.0  # nothing pending, nothing bound: the grace

    pod = parse_pod(
        {
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"schedulerName": "kopf-scheduler"},
        }
    )
    runtime.handlers.add_pod(pod)
    assert runtime.queue.pending_pods()["active"] == 1
    waiting = asyncio.ensure_future(runtime.under_way(quiet=0.01, grace=2.0, limit=5, poll=0.01))
    await asyncio.sleep(0.3)
    assert not waiting.done()  # a pod still to schedule: Kopf would stall its cycle
    runtime.client.bound.set()
    runtime.queue.delete(pod)
    emptied = loop.time()
    await asyncio.wait_for(waiting, 1)
    assert loop.time() - emptied < 1.0  # quiet after a bind, not the grace (2 s)
    await runtime.api.close()


async def test_the_watches_open_once_the_first_cycle_is_through() -> None:
    """``_open_watches``: at once when nothing is to be scheduled; with a pod to schedule, at the
    first bind (the first watch imports aiohttp, which must not come before it, nor hold its answer),
    not when the queue empties, or after ``limit``."""
    from kopf_scheduler.api.objects import parse_pod

    runtime, _ = _runtime()
    assert runtime.leader.is_leading()  # standalone: a standby would watch at once
    runtime.synced.set()
    await asyncio.wait_for(runtime._open_watches(limit=5), 0.5)  # nothing pending
    assert runtime.watching.is_set()

    pod = parse_pod(
        {
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"schedulerName": "kopf-scheduler"},
        }
    )
    runtime.handlers.add_pod(pod)
    runtime.watching.clear()
    opening = asyncio.ensure_future(runtime._open_watches(limit=5))
    await asyncio.sleep(0.1)
    runtime.queue.delete(pod)  # as when its cycle takes it: the queue is empty, the bind to come
    await asyncio.sleep(0.1)
    assert not opening.done() and not runtime.watching.is_set()  # the first cycle is under way
    runtime.client.bound.set()
    await asyncio.wait_for(opening, 0.5)
    assert runtime.watching.is_set()

    runtime.client.bound.clear()
    runtime.watching.clear()
    runtime.handlers.add_pod(pod)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await runtime._open_watches(limit=0.3)  # no bind: at the latest after the limit
    assert runtime.watching.is_set() and 0.3 <= loop.time() - started < 1.0
    await runtime.api.close()
