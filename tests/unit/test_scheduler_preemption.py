"""Scheduler: nominations from PostFilter, acting on preemption, and failure reporting edge cases."""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.cache.cache import Cache
from kopf_scheduler.engine import new_engine
from kopf_scheduler.framework.client import ApiError
from kopf_scheduler.framework.interface import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    Code,
    CycleState,
    EventResource,
    Plugin,
    PostFilterResult,
    Status,
)
from kopf_scheduler.framework.profiles import load_profile
from kopf_scheduler.framework.registry import Registry
from kopf_scheduler.framework.runtime import WaitingPod
from kopf_scheduler.framework.types import NodeInfo
from kopf_scheduler.queue.scheduling_queue import PriorityQueue
from kopf_scheduler.scheduler.schedule_one import Scheduler
from kopf_scheduler_workbench.testing.builders import make_node, make_pod
from kopf_scheduler_workbench.testing.fake_client import FakeClusterClient

NODE_ADD = ClusterEvent(EventResource.NODE, ActionType.ADD)


class Sort(Plugin):
    name = "Sort"

    def less(self, a: Any, b: Any) -> bool:
        return bool(a.pod.priority > b.pod.priority)


class Binder(Plugin):
    name = "Binder"

    async def bind(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        try:
            await self.handle.client.bind(pod, node_name)  # type: ignore[union-attr]
        except ApiError as exc:
            return Status.as_error(exc)
        return None


class Full(Plugin):
    """Every node is full; listens to node additions only."""

    name = "Full"
    reason = "Insufficient cpu"

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status | None:
        return Status.unschedulable(type(self).reason)

    def events_to_register(self) -> Iterable[ClusterEventWithHint]:
        return [ClusterEventWithHint(NODE_ADD)]


class Preempt(Plugin):
    """A PostFilter answering ``Preempt.answer`` and tracking the scheduler's start/finish calls."""

    name = "Preempt"
    answer: PostFilterResult | None = None
    seen_running: list[bool] = []

    def __init__(self, args: Any = None, handle: Any = None) -> None:
        super().__init__(args, handle)
        self.preempting: set[str] = set()

    def post_filter(self, state: CycleState, pod: Pod, statuses: Mapping[str, Status]) -> Any:
        return type(self).answer, Status(Code.UNSCHEDULABLE, "preemption: nope")

    def pre_enqueue(self, pod: Pod) -> Status | None:
        if pod.uid in self.preempting:
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, "waiting for the preemption")
        return None

    def events_to_register(self) -> Iterable[ClusterEventWithHint]:
        return []

    def preemption_started(self, uid: str) -> None:
        self.preempting.add(uid)

    def preemption_finished(self, uid: str) -> None:
        self.preempting.discard(uid)


REG = Registry({c.name: c for c in (Sort, Binder, Full, Preempt)})


def setup(
    *plugins: str,
) -> tuple[Scheduler, Cache, PriorityQueue, FakeClusterClient]:
    enabled = [{"name": n} for n in ("Sort", "Binder", "Full", *plugins)]
    spec = {
        "schedulerName": "kopf-scheduler",
        "plugins": {"multiPoint": {"enabled": enabled, "disabled": [{"name": "*"}]}},
    }
    client = FakeClusterClient()
    engine = new_engine(client, [load_profile(spec, REG)], registry=REG, rng=random.Random(0))
    sched, cache, queue = engine.scheduler, engine.cache, engine.queue
    for i in range(2):
        cache.add_node(make_node(f"n{i}", cpu="2"))
    return sched, cache, queue, client


@pytest.fixture(autouse=True)
def _reset() -> None:
    Preempt.answer = None
    Full.reason = "Insufficient cpu"


def nominated(name: str, node: str, priority: int = 0) -> Pod:
    return dataclasses.replace(make_pod(name, priority=priority), nominated_node_name=node)


async def test_empty_post_filter_result_clears_the_nomination() -> None:
    sched, _cache, queue, client = setup("Preempt")
    Preempt.answer = PostFilterResult("")
    pod = nominated("p", "n0")
    client.nominations[pod.key] = "n0"
    queue.nominator.add_nominated_pod(pod, "n0")
    queue.add(pod)
    assert await sched.schedule_one()
    await sched.wait_for_bindings()
    assert queue.nominator.nominated_pods_for_node("n0") == []
    assert pod.key not in client.nominations


async def test_no_post_filter_plugins_clears_the_nomination() -> None:
    """v1.37.2's schedulingAlgorithm returns clearNominatedNode when no PostFilter plugin is
    registered (older releases left the nomination alone; this test pinned that before)."""
    sched, _cache, queue, client = setup()
    pod = nominated("p", "n0")
    client.nominations[pod.key] = "n0"
    queue.nominator.add_nominated_pod(pod, "n0")
    queue.add(pod)
    assert await sched.schedule_one()
    await sched.wait_for_bindings()
    assert queue.nominator.nominated_pods_for_node("n0") == []
    assert client.nominations.get(pod.key, "") == ""
    assert client.failed_messages(pod.key) == ["0/2 nodes are available: 2 Insufficient cpu."]


async def test_preemption_skips_deleting_victims_and_clears_lower_nominations() -> None:
    sched, cache, queue, client = setup("Preempt")
    running = make_pod("running", node_name="n1", priority=1)
    leaving = dataclasses.replace(make_pod("leaving", node_name="n1", priority=1), deletion_timestamp=1.0)
    cache.add_pod(running)
    cache.add_pod(leaving)
    low = nominated("low", "n1", priority=5)
    high = nominated("high", "n1", priority=500)
    client.nominations.update({low.key: "n1", high.key: "n1"})
    queue.nominator.add_nominated_pod(low, "n1")
    queue.nominator.add_nominated_pod(high, "n1")
    Preempt.answer = PostFilterResult("n1", [running, leaving])

    pod = make_pod("preemptor", priority=100)
    queue.add(pod)
    assert await sched.schedule_one()
    plugin = sched.profiles.frameworks["kopf-scheduler"].plugins["Preempt"]
    # Gated before the pod went back to the queue, not only once the background task runs.
    assert pod.uid in plugin.preempting
    assert queue.where(pod.uid) == "unschedulable"
    await sched.wait_for_bindings()

    assert client.evicted == [running.key]
    assert client.nominations[pod.key] == "n1"
    assert low.key not in client.nominations and client.nominations[high.key] == "n1"
    assert {p.name for p in queue.nominator.nominated_pods_for_node("n1")} == {"high", "preemptor"}
    assert pod.uid not in plugin.preempting
    # v1.37.2's async preemption does not requeue a preemptor whose evictions were sent: its
    # victims' deletion events do (this test pinned an immediate retry before).
    assert queue.where(pod.uid) == "unschedulable"


class FailingEvictions(FakeClusterClient):
    async def evict(self, victim: Pod, preemptor: Pod, message: str) -> None:
        raise ApiError("the server is unavailable", 503)


@pytest.mark.parametrize("case", ["victim-seen-gone", "eviction-error", "victim-waiting-on-permit"])
async def test_the_preemptor_is_retried_when_no_deletion_event_will_move_it(case: str) -> None:
    """As ``prepareCandidateAsync``: activated on an error or a last victim preempted in memory;
    and here also when a victim's deletion came while PreEnqueue held the pod back."""
    sched, cache, queue, client = setup("Preempt")
    if case == "eviction-error":
        sched.client = FailingEvictions()
    victim = make_pod("victim", node_name="n1", priority=1)
    cache.add_pod(victim)
    if case == "victim-seen-gone":
        client.on_evict = cache.remove_pod  # the watch delivers the deletion before we finish
    if case == "victim-waiting-on-permit":
        fw = sched.profiles.frameworks["kopf-scheduler"]
        fw.waiting_pods[victim.uid] = WaitingPod(victim, {"Gate": 30.0}, time.monotonic)
    Preempt.answer = PostFilterResult("n1", [victim])
    pod = make_pod("preemptor", priority=100)
    queue.add(pod)
    assert await sched.schedule_one()
    await sched.wait_for_bindings()
    assert queue.where(pod.uid) == "active"
    if case == "victim-waiting-on-permit":
        assert client.evicted == []  # rejected in memory, not deleted


async def test_preemption_with_every_victim_already_leaving_starts_nothing() -> None:
    sched, cache, queue, client = setup("Preempt")
    leaving = dataclasses.replace(make_pod("leaving", node_name="n1", priority=1), deletion_timestamp=1.0)
    cache.add_pod(leaving)
    Preempt.answer = PostFilterResult("n1", [leaving])
    pod = make_pod("preemptor", priority=100)
    queue.add(pod)
    assert await sched.schedule_one()
    plugin = sched.profiles.frameworks["kopf-scheduler"].plugins["Preempt"]
    assert pod.uid not in plugin.preempting
    await sched.wait_for_bindings()
    assert client.evicted == []
    assert client.nominations[pod.key] == "n1"


@pytest.mark.parametrize("how", ["deleted", "marked"])
async def test_no_failed_scheduling_for_a_pod_deleted_during_its_cycle(how: str) -> None:
    sched, _cache, queue, client = setup()
    pod = make_pod("p")
    queue.add(pod)
    qpi = queue.pop_nowait()
    assert qpi is not None
    if how == "deleted":
        queue.delete(pod)
    else:
        queue.update(pod, dataclasses.replace(pod, deletion_timestamp=1.0))
    await sched.schedule_one(qpi)
    await sched.wait_for_bindings()
    assert client.failed_messages(pod.key) == []
    assert client.conditions == {}


async def test_failure_message_reaches_the_client_untruncated() -> None:
    sched, _cache, queue, client = setup()
    Full.reason = "x" * 2000
    pod = make_pod("p")
    queue.add(pod)
    await sched.schedule_one()
    await sched.wait_for_bindings()
    (message,) = client.failed_messages(pod.key)
    assert message == f"0/2 nodes are available: 2 {'x' * 2000}."
    assert client.conditions[pod.key] == ("Unschedulable", message)


def test_queue_gets_every_profiles_hints_and_skips_unregistered_events() -> None:
    sched, _cache, queue, _client = setup()
    # Full registered Node/Add only; a PersistentVolume event can move no pod.
    assert not queue.is_event_of_interest(ClusterEvent(EventResource.PV, ActionType.ADD))
    assert queue.is_event_of_interest(ClusterEvent(EventResource.NODE, ActionType.ADD))
    assert sched.queue is queue
