"""Scheduler: scheduling cycle, binding cycle and failure handling with the real cache and queue."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.cache.cache import Cache
from kopf_scheduler.cache.snapshot import Snapshot
from kopf_scheduler.engine import new_engine
from kopf_scheduler.framework.client import ApiError, Conflict
from kopf_scheduler.framework.interface import CycleState, Plugin, Status
from kopf_scheduler.framework.profiles import load_profile
from kopf_scheduler.framework.registry import Registry
from kopf_scheduler.framework.types import NodeInfo
from kopf_scheduler.queue.scheduling_queue import PriorityQueue
from kopf_scheduler.scheduler.schedule_one import Scheduler, num_feasible_nodes_to_find
from kopf_scheduler_workbench.testing.builders import make_node, make_pod
from kopf_scheduler_workbench.testing.fake_client import FakeClusterClient


class Sort(Plugin):
    name = "Sort"

    def less(self, a: Any, b: Any) -> bool:
        return bool(
            a.pod.priority > b.pod.priority
            or (a.pod.priority == b.pod.priority and a.timestamp < b.timestamp)
        )


class Binder(Plugin):
    name = "Binder"

    async def bind(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        try:
            await self.handle.client.bind(pod, node_name)  # type: ignore[union-attr]
        except ApiError as exc:
            return Status.as_error(exc)
        return None


class Cpu(Plugin):
    name = "Cpu"

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status | None:
        if node_info.requested.milli_cpu + pod.requests.milli_cpu > node_info.allocatable.milli_cpu:
            return Status.unschedulable("Insufficient cpu")
        return None

    def filter_vector(self, state: CycleState, pod: Pod, snapshot: Snapshot, idx: np.ndarray) -> Any:
        a = snapshot.arrays
        return a.requested[idx, 0] + pod.requests.milli_cpu <= a.allocatable[idx, 0]

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> tuple[int, Status | None]:
        return 0, None  # all ties: the random tie-break decides


REG = Registry({"Sort": Sort, "Binder": Binder, "Cpu": Cpu})
SPEC = {
    "schedulerName": "kopf-scheduler",
    "plugins": {
        "multiPoint": {
            "enabled": [{"name": "Sort"}, {"name": "Binder"}, {"name": "Cpu"}],
            "disabled": [{"name": "*"}],
        }
    },
}


def setup(
    nodes: int = 3, cpu: str = "2", seed: int = 1
) -> tuple[Scheduler, Cache, PriorityQueue, FakeClusterClient]:
    client = FakeClusterClient()
    engine = new_engine(client, [load_profile(SPEC, REG)], registry=REG, rng=random.Random(seed))
    sched, cache, queue = engine.scheduler, engine.cache, engine.queue

    def bound(pod: Pod, node: str) -> None:
        import dataclasses

        cache.add_pod(dataclasses.replace(pod, node_name=node))

    client.on_bind = bound
    for i in range(nodes):
        cache.add_node(make_node(f"n{i}", cpu=cpu))
    return sched, cache, queue, client


async def drain(sched: Scheduler) -> None:
    while await sched.schedule_one():
        await sched.wait_for_bindings()
    await sched.wait_for_bindings()


def test_num_feasible_nodes_to_find() -> None:
    assert num_feasible_nodes_to_find(None, 50) == 50
    assert num_feasible_nodes_to_find(None, 99) == 99
    assert num_feasible_nodes_to_find(None, 1000) == 420  # 50 - 1000/125 = 42%
    assert num_feasible_nodes_to_find(None, 5000) == 500  # 10%
    assert num_feasible_nodes_to_find(None, 10000) == 500  # floor of 5%
    assert num_feasible_nodes_to_find(None, 150) == 100  # at least 100
    assert num_feasible_nodes_to_find(30, 1000) == 300
    assert num_feasible_nodes_to_find(None, 1000, global_percentage=20) == 200


async def test_schedules_binds_and_records() -> None:
    sched, _cache, queue, client = setup()
    pods = [make_pod(f"p{i}", cpu="1") for i in range(6)]
    for p in pods:
        queue.add(p)
    await drain(sched)
    assert sorted(client.bindings) == sorted(p.key for p in pods)
    per_node: dict[str, int] = {}
    for node in client.bindings.values():
        per_node[node] = per_node.get(node, 0) + 1
    assert per_node == {"n0": 2, "n1": 2, "n2": 2}  # capacity respected through assume
    scheduled = [e for e in client.events if e.reason == "Scheduled"]
    assert len(scheduled) == 6
    assert (
        scheduled[0].message
        == f"Successfully assigned {scheduled[0].pod} to {client.bindings[scheduled[0].pod]}"
    )


async def test_scheduled_events_do_not_hold_binds_and_drop_on_overflow() -> None:
    """Scheduled events are posted in the background: a stuck event sink delays no bind, the queue
    is bounded (the newest events are dropped and counted), and wait_for_bindings drains it."""
    import asyncio

    sched, _cache, queue, client = setup(nodes=3, cpu="10")
    sched._max_queued_events = 2
    sched._event_workers_max = 1
    gate = asyncio.Event()
    posted: list[str] = []
    record = client.record_scheduled

    async def slow_record(pod: Pod, node_name: str) -> None:
        await gate.wait()
        posted.append(pod.key)
        await record(pod, node_name)

    client.record_scheduled = slow_record  # type: ignore[method-assign]
    pods = [make_pod(f"p{i}", cpu="1") for i in range(6)]
    for p in pods:
        queue.add(p)
    while await sched.schedule_one():
        await asyncio.sleep(0)
    for _ in range(20):
        await asyncio.sleep(0)
    assert sorted(client.bindings) == sorted(p.key for p in pods)  # every bind done, no event yet
    assert posted == []
    # One event is with the (blocked) worker, two wait in the queue, the other three were dropped.
    assert sched.events_dropped == 3
    gate.set()
    await sched.wait_for_bindings()
    assert len(posted) == 3 and len([e for e in client.events if e.reason == "Scheduled"]) == 3


async def test_unschedulable_gets_exact_message_and_goes_to_pool() -> None:
    sched, _cache, queue, client = setup(cpu="1")
    pod = make_pod("big", cpu="3")
    queue.add(pod)
    await drain(sched)
    assert client.failed_messages(pod.key) == ["0/3 nodes are available: 3 Insufficient cpu."]
    assert client.conditions[pod.key][0] == "Unschedulable"
    assert queue.pending_pods()["unschedulable"] == 1


async def test_no_nodes() -> None:
    sched, _cache, queue, client = setup(nodes=0)
    pod = make_pod("p", cpu="1")
    queue.add(pod)
    await drain(sched)
    assert client.failed_messages(pod.key) == ["no nodes available to schedule pods"]


async def test_conflict_on_bind_forgets_and_does_not_requeue() -> None:
    sched, cache, queue, client = setup()
    pod = make_pod("p", cpu="1")
    client.fail_bind[pod.key] = Conflict("already bound", 409)
    queue.add(pod)
    await drain(sched)
    assert not cache.is_assumed(pod.uid)
    assert sum(queue.pending_pods().values()) == 0
    assert client.failed_messages(pod.key) == []


async def test_api_error_on_bind_is_a_scheduler_error_and_requeued() -> None:
    sched, cache, queue, client = setup()
    pod = make_pod("p", cpu="1")
    client.fail_bind[pod.key] = ApiError("boom", 500)
    queue.add(pod)
    await drain(sched)
    assert not cache.is_assumed(pod.uid)
    assert client.conditions[pod.key][0] == "SchedulerError"
    assert "boom" in client.conditions[pod.key][1]
    assert sum(queue.pending_pods().values()) == 1


async def test_bind_whose_response_was_lost_keeps_its_room() -> None:
    """The Binding landed but its response was lost: the pod is read back as bound, so it stays
    accounted on its node (no forget) until the watch confirms it, and nothing else takes its room."""
    sched, cache, queue, client = setup(nodes=1, cpu="2")
    client.on_bind = None  # the watch has not shown the bind yet
    real_bind = client.bind

    async def lost(pod: Pod, node: str) -> None:
        await real_bind(pod, node)
        raise ApiError("injected: timeout after the Binding was sent", 0)

    client.bind = lost  # type: ignore[method-assign]
    first = make_pod("first", cpu="2")
    queue.add(first)
    await drain(sched)
    assert client.bindings == {first.key: "n0"} and cache.is_assumed(first.uid)
    assert client.failed_messages(first.key) == []
    assert [e.reason for e in client.events] == ["Scheduled"]
    assert sum(queue.pending_pods().values()) == 0
    client.bind = real_bind  # type: ignore[method-assign]
    second = make_pod("second", cpu="1")
    queue.add(second)
    await drain(sched)
    assert second.key not in client.bindings  # n0 is full: first still holds its 2 CPUs
    assert client.failed_messages(second.key) != []


async def test_bind_error_whose_read_back_fails_too_is_requeued() -> None:
    sched, cache, queue, client = setup()
    pod = make_pod("p", cpu="1")
    client.fail_bind[pod.key] = ApiError("connection reset", 0)

    async def unreadable(pod: Pod) -> str:
        raise ApiError("read back failed too", 503)

    client.bound_node = unreadable  # type: ignore[method-assign]
    queue.add(pod)
    await drain(sched)
    assert not cache.is_assumed(pod.uid)
    assert client.conditions[pod.key][0] == "SchedulerError"
    assert sum(queue.pending_pods().values()) == 1


def test_tie_break_is_random_but_seeded() -> None:
    def pick(seed: int) -> list[int]:
        sched, *_ = setup(seed=seed)
        return [sched.select_host(np.array([5, 9, 9, 1, 9])) for _ in range(30)]

    assert pick(3) == pick(3)
    assert set(pick(3)) == {1, 2, 4}


async def test_next_start_index_rotates() -> None:
    sched, cache, _queue, _client = setup(nodes=3, cpu="8")
    fw = sched.profiles.get("kopf-scheduler")
    assert fw is not None
    cache.update_snapshot(sched.snapshot)
    sched.next_start_node_index = 2
    rows, _, processed = sched.find_nodes_that_fit_pod(fw, CycleState(), make_pod("p", cpu="1"))
    assert rows.tolist()[0] == 2 and processed == 3
    assert sched.next_start_node_index == (2 + 3) % 3


def test_profile_set_default_and_remove() -> None:
    engine = new_engine(FakeClusterClient(), [load_profile(SPEC, REG)], registry=REG, with_default=False)
    profiles = engine.profiles
    assert profiles.names() == ["kopf-scheduler"]
    other = load_profile({**SPEC, "schedulerName": "other"}, REG)
    profiles.set(other)
    assert "other" in profiles
    profiles.remove("other")
    assert "other" not in profiles


@pytest.mark.parametrize("seed", [0, 1])
async def test_deleting_pod_is_skipped(seed: int) -> None:
    sched, _cache, queue, client = setup(seed=seed)
    import dataclasses

    pod = dataclasses.replace(make_pod("p", cpu="1"), deletion_timestamp=1.0)
    queue.add(pod)
    await drain(sched)
    assert client.bindings == {} and client.conditions == {}
    # skipPodSchedule: a Warning event and nothing else (no PodScheduled condition, not requeued).
    assert [(e.type, e.reason, e.message) for e in client.events] == [
        ("Warning", "FailedScheduling", f"skip schedule deleting pod: {pod.key}")
    ]
    assert len(queue) == 0
