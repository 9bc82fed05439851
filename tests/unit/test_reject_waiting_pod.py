"""Deleting a pod that waits at Permit rejects it (the reference's ``RejectWaitingPod``, wired by
``new_engine``): its binding cycle unreserves and forgets it, so its room on the node is free at
once for the next pod, and nothing is bound or reported for a pod that is gone."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Callable

import pytest

from kopf_scheduler.api.objects import Pod, parse_pod
from kopf_scheduler.engine import new_engine
from kopf_scheduler.framework.interface import Code, CycleState, Plugin, Status
from kopf_scheduler.framework.profiles import load_profile
from kopf_scheduler.framework.registry import IN_TREE, Registry
from kopf_scheduler_workbench.testing.builders import make_node, make_pod, pod_dict
from kopf_scheduler_workbench.testing.fake_client import FakeClusterClient


class Waiter(Plugin):
    """Permit makes the pod named "w" wait (far longer than the test); Unreserve is recorded."""

    name = "Waiter"
    unreserved: list[str] = []

    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        return None

    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        Waiter.unreserved.append(pod.name)

    def permit(self, state: CycleState, pod: Pod, node_name: str) -> tuple[Status | None, float]:
        if pod.name == "w":
            return Status(Code.WAIT), 600.0
        return None, 0.0


async def until(what: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("how", ["deleted", "marked for deletion"])
async def test_deleting_a_pod_waiting_at_permit_rejects_unreserves_and_frees_it(how: str) -> None:
    Waiter.unreserved = []
    registry = Registry(IN_TREE)
    registry.register("Waiter", Waiter)
    names = ["PrioritySort", "NodeResourcesFit", "Waiter", "DefaultBinder"]
    spec = load_profile(
        {
            "schedulerName": "kopf-scheduler",
            "plugins": {"multiPoint": {"enabled": [{"name": n} for n in names], "disabled": [{"name": "*"}]}},
        },
        registry,
    )
    client = FakeClusterClient()
    engine = new_engine(client, [spec], registry=registry, rng=random.Random(1))
    handlers, cache = engine.handlers, engine.cache
    client.on_bind = lambda pod, node: handlers.update_pod(
        dataclasses.replace(pod, node_name=""), dataclasses.replace(pod, node_name=node)
    )
    handlers.add_node(make_node("n0", cpu="1"))
    loop = asyncio.create_task(engine.scheduler.run())
    try:
        waiting = make_pod("w", cpu="1")
        handlers.add_pod(waiting)
        fw = engine.profiles.frameworks["kopf-scheduler"]
        await until(lambda: fw.get_waiting_pod(waiting.uid) is not None)
        assert cache.is_assumed(waiting.uid)
        # The next pod finds the node full while "w" holds it.
        other = make_pod("x", cpu="1")
        handlers.add_pod(other)
        await until(lambda: any(e.pod == other.key and e.reason == "FailedScheduling" for e in client.events))

        raw = pod_dict("w", uid=waiting.uid, cpu="1")
        raw["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:10Z"
        deleting = parse_pod(raw)
        if how == "deleted":
            handlers.delete_pod(waiting)
        else:
            handlers.update_pod(waiting, deleting)

        # Rejected, so its binding cycle undoes the reservation itself: Unreserve ran, the cache
        # forgot it and its cpu is free; nothing was bound or reported for it.
        await until(lambda: Waiter.unreserved == ["w"])
        assert fw.get_waiting_pod(waiting.uid) is None
        assert not cache.is_assumed(waiting.uid) and cache.get_pod(waiting.uid) is None
        info = cache.get_node_info("n0")
        assert info is not None and info.requested.milli_cpu in (0, 1000)  # 1000: "x" took the room
        assert waiting.key not in client.bindings
        assert not [e for e in client.events if e.pod == waiting.key]
        # The freed room goes to the pod that waited for it.
        await until(lambda: other.key in client.bindings)
        info = cache.get_node_info("n0")
        assert info is not None and info.requested.milli_cpu == 1000
        if how != "deleted":  # put back as being deleted (never scheduled again), until it is
            assert engine.queue.where(waiting.uid) in (None, "backoff")
            handlers.delete_pod(deleting)
        assert engine.queue.where(waiting.uid) is None
        assert waiting.key not in client.bindings
    finally:
        for wp in engine.profiles.frameworks["kopf-scheduler"].iterate_over_waiting_pods():
            wp.reject("", "the test is over")  # else its binding cycle would wait 600 s
        engine.scheduler.stop()
        await asyncio.wait_for(loop, 5)
        await asyncio.wait_for(engine.scheduler.wait_for_bindings(), 5)
