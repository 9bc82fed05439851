"""``Scheduler.run`` runs the queue's periodic flushes: a pod that failed with an error is retried.

Without the backoffQ flush, a pod whose binding cycle failed with an error (a PreBind or Bind API
error) waited in backoffQ for ever: pop() never takes errored pods from backoffQ, and cluster
events only move pods of the unschedulable pool.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from typing import Any

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.engine import new_engine
from kopf_scheduler.framework.client import ApiError
from kopf_scheduler.framework.interface import CycleState, Plugin, Status
from kopf_scheduler.framework.profiles import load_profile
from kopf_scheduler.framework.registry import Registry
from kopf_scheduler_workbench.testing.builders import make_node, make_pod
from kopf_scheduler_workbench.testing.fake_client import FakeClusterClient


class Sort(Plugin):
    name = "Sort"

    def less(self, a: Any, b: Any) -> bool:
        return bool(a.timestamp < b.timestamp)


class Binder(Plugin):
    name = "Binder"

    async def bind(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        try:
            await self.handle.client.bind(pod, node_name)  # type: ignore[union-attr]
        except ApiError as exc:
            return Status.as_error(exc)
        return None


REG = Registry({"Sort": Sort, "Binder": Binder})
SPEC = {
    "schedulerName": "kopf-scheduler",
    "plugins": {
        "multiPoint": {"enabled": [{"name": "Sort"}, {"name": "Binder"}], "disabled": [{"name": "*"}]}
    },
}


async def test_pod_failing_bind_with_an_error_is_retried_by_the_backoff_flush() -> None:
    client = FakeClusterClient()
    engine = new_engine(
        client,
        [load_profile(SPEC, REG)],
        registry=REG,
        rng=random.Random(1),
        pod_initial_backoff=0.05,
        pod_max_backoff=0.1,
    )
    sched, cache, queue = engine.scheduler, engine.cache, engine.queue
    client.on_bind = lambda pod, node: cache.add_pod(dataclasses.replace(pod, node_name=node))
    cache.add_node(make_node("n0", cpu="2"))
    pod = make_pod("p", cpu="1")
    client.fail_bind[pod.key] = ApiError("etcdserver: request timed out", 500)
    queue.add(pod)

    run = asyncio.ensure_future(sched.run())
    try:
        for _ in range(100):
            await asyncio.sleep(0.01)
            if client.failed_messages(pod.key):
                break
        assert client.conditions[pod.key][0] == "SchedulerError"
        assert queue.where(pod.uid) == "backoff"
        del client.fail_bind[pod.key]  # the apiserver recovers
        for _ in range(300):  # the flush runs every second
            await asyncio.sleep(0.01)
            if pod.key in client.bindings:
                break
        assert client.bindings.get(pod.key) == "n0"
    finally:
        sched.stop()
        await asyncio.wait_for(run, 5)
        await sched.wait_for_bindings()
    queue.close()
