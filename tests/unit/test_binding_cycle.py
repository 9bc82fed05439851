"""The v1.37.2 binding cycle: nominatedNodeName before a bind that may wait
(NominatedNodeNameForExpectation), and DefaultBinder's retries of transient bind errors."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from typing import Any

import pytest

from kopf_scheduler.api import kinds
from kopf_scheduler.api.objects import Pod
from kopf_scheduler.cache.cache import Cache
from kopf_scheduler.engine import new_engine
from kopf_scheduler.framework.client import TransientError
from kopf_scheduler.framework.interface import Code, CycleState, Plugin, Status
from kopf_scheduler.framework.profiles import load_profile
from kopf_scheduler.framework.registry import Registry
from kopf_scheduler.framework.types import NodeInfo
from kopf_scheduler.plugins.default_binder import DefaultBinder
from kopf_scheduler.queue.scheduling_queue import PriorityQueue
from kopf_scheduler.scheduler.schedule_one import Scheduler
from kopf_scheduler_workbench.testing.builders import make_node, make_pod
from kopf_scheduler_workbench.testing.fake_client import FakeClusterClient


class Sort(Plugin):
    name = "Sort"

    def less(self, a: Any, b: Any) -> bool:
        return bool(a.timestamp < b.timestamp)


class Cpu(Plugin):
    name = "Cpu"

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status | None:
        if node_info.requested.milli_cpu + pod.requests.milli_cpu > node_info.allocatable.milli_cpu:
            return Status.unschedulable("Insufficient cpu")
        return None


class Gate(Plugin):
    """Permit: makes every pod wait until the test allows or rejects it."""

    name = "Gate"

    def permit(self, state: CycleState, pod: Pod, node_name: str) -> tuple[Status | None, float]:
        return Status(Code.WAIT), 30.0


class Volumes(Plugin):
    """A PreBind plugin with a pre-flight answering what the test says."""

    name = "Volumes"
    answer: Status | None = Status(Code.SKIP)
    pre_bound: list[str] = []

    def pre_bind_pre_flight(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        return type(self).answer

    async def pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        type(self).pre_bound.append(pod.key)
        return None


class OldPreBind(Plugin):
    """A PreBind plugin without a pre-flight: it never counts as acting."""

    name = "OldPreBind"

    async def pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        return None


REG = Registry(
    {"Sort": Sort, "Cpu": Cpu, "Gate": Gate, "Volumes": Volumes, "OldPreBind": OldPreBind,
     "DefaultBinder": DefaultBinder}
)  # fmt: skip


class OrderedClient(FakeClusterClient):
    """Records the order of nominations and binds."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str, str]] = []

    async def set_nominated_node(self, pod: Pod, node_name: str) -> None:
        self.calls.append(("nominate", pod.key, node_name))
        await super().set_nominated_node(pod, node_name)

    async def bind(self, pod: Pod, node_name: str) -> None:
        self.calls.append(("bind", pod.key, node_name))
        await super().bind(pod, node_name)


def setup(*plugins: str) -> tuple[Scheduler, Cache, PriorityQueue, OrderedClient]:
    spec = {
        "schedulerName": "kopf-scheduler",
        "plugins": {
            "multiPoint": {
                "enabled": [{"name": n} for n in ("Sort", "Cpu", *plugins, "DefaultBinder")],
                "disabled": [{"name": "*"}],
            }
        },
    }
    client = OrderedClient()
    engine = new_engine(client, [load_profile(spec, REG)], registry=REG, rng=random.Random(1))
    sched, cache, queue = engine.scheduler, engine.cache, engine.queue
    client.on_bind = lambda pod, node: cache.add_pod(dataclasses.replace(pod, node_name=node))
    cache.add_node(make_node("n0", cpu="2"))
    return sched, cache, queue, client


@pytest.fixture(autouse=True)
def no_backoff_sleep(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(DefaultBinder, "sleep", staticmethod(sleep))
    Volumes.answer = Status(Code.SKIP)
    Volumes.pre_bound = []
    return slept


async def bind_when_waiting(sched: Scheduler, pod: Pod, verdict: str) -> None:
    """Schedule one pod, then allow or reject it once it waits on Permit."""
    assert await sched.schedule_one()
    fw = sched.profiles.frameworks["kopf-scheduler"]
    for _ in range(100):
        waiting = fw.get_waiting_pod(pod.uid)
        if waiting is not None and sched.client.calls:  # type: ignore[attr-defined]
            break
        await asyncio.sleep(0)
    assert waiting is not None
    if verdict == "allow":
        waiting.allow("Gate")
    else:
        waiting.reject("Gate", "not today")
    await sched.wait_for_bindings()


# --- NominatedNodeNameForExpectation ---------------------------------------------------------------


async def test_a_pod_waiting_on_permit_is_nominated_before_it_waits() -> None:
    sched, _cache, queue, client = setup("Gate")
    pod = make_pod("p", cpu="1")
    queue.add(pod)
    await bind_when_waiting(sched, pod, "allow")
    assert client.calls == [("nominate", pod.key, "n0"), ("bind", pod.key, "n0")]
    assert client.bindings == {pod.key: "n0"}


async def test_a_rejected_waiting_pod_has_its_nomination_cleared() -> None:
    sched, _cache, queue, client = setup("Gate")
    pod = make_pod("p", cpu="1")
    queue.add(pod)
    await bind_when_waiting(sched, pod, "reject")
    assert client.calls == [("nominate", pod.key, "n0"), ("nominate", pod.key, "")]
    assert pod.key not in client.nominations and pod.key not in client.bindings
    assert client.conditions[pod.key] == ("Unschedulable", "0/1 nodes are available: 1 not today.")


@pytest.mark.parametrize(
    ("plugins", "answer", "nominated"),
    [
        (("Volumes",), None, True),  # PreBind will act: the bind may take a while
        (("Volumes",), Status(Code.SUCCESS), True),
        (("Volumes",), Status(Code.SKIP), False),  # nothing to do: bound soon anyway, no write
        (("OldPreBind",), None, False),  # no pre-flight: never counted as acting
        ((), None, False),
    ],
)
async def test_pre_bind_pre_flight_decides_the_nomination(
    plugins: tuple[str, ...], answer: Status | None, nominated: bool
) -> None:
    sched, _cache, queue, client = setup(*plugins)
    Volumes.answer = answer
    pod = make_pod("p", cpu="1")
    queue.add(pod)
    assert await sched.schedule_one()
    await sched.wait_for_bindings()
    expected = [("nominate", pod.key, "n0")] if nominated else []
    assert client.calls == [*expected, ("bind", pod.key, "n0")]
    assert client.failed_messages(pod.key) == []


async def test_already_nominated_to_the_chosen_node_writes_nothing() -> None:
    sched, _cache, queue, client = setup("Volumes")
    Volumes.answer = None
    pod = dataclasses.replace(make_pod("p", cpu="1"), nominated_node_name="n0")
    client.nominations[pod.key] = "n0"
    queue.add(pod)
    assert await sched.schedule_one()
    await sched.wait_for_bindings()
    assert [c for c in client.calls if c[0] == "bind"] == [("bind", pod.key, "n0")]


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (
            Status(Code.ERROR, "no volumes for node"),
            'running PreBindPreFlight "Volumes": no volumes for node',
        ),
        (
            Status(Code.UNSCHEDULABLE, "nope"),
            'PreBindPreFlight Volumes returned "Unschedulable", which is unsupported. '
            "It is supposed to return Success, Skip, or Error status",
        ),
    ],
)
async def test_a_failing_pre_flight_fails_the_binding_cycle(answer: Status, message: str) -> None:
    sched, cache, queue, client = setup("Volumes")
    Volumes.answer = answer
    pod = make_pod("p", cpu="1")
    queue.add(pod)
    assert await sched.schedule_one()
    await sched.wait_for_bindings()
    assert client.calls == [] and Volumes.pre_bound == []
    assert client.conditions[pod.key] == ("SchedulerError", message)
    assert not cache.is_assumed(pod.uid) and sum(queue.pending_pods().values()) == 1


def _default_profile_with_a_wait_for_first_consumer_claim() -> tuple[Scheduler, PriorityQueue, OrderedClient]:
    """The default profile (real VolumeBinding) and one unbound claim of a WaitForFirstConsumer class
    left to dynamic provisioning; the fake client plays the provisioner and the PV controller."""
    objects: dict[str, dict[str, Any]] = {
        "StorageClass": {
            "wffc": kinds.STORAGE_CLASS.parse(
                {
                    "apiVersion": "storage.k8s.io/v1",
                    "kind": "StorageClass",
                    "metadata": {"name": "wffc"},
                    "provisioner": "csi.example.com",
                    "volumeBindingMode": "WaitForFirstConsumer",
                }
            )
        },
        "PersistentVolumeClaim": {
            "default/data": kinds.PERSISTENT_VOLUME_CLAIM.parse(
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "metadata": {
                        "name": "data",
                        "namespace": "default",
                        "uid": "data-uid",
                        "resourceVersion": "1",
                    },
                    "spec": {"storageClassName": "wffc", "accessModes": ["ReadWriteOnce"]},
                }
            )
        },
        "PersistentVolume": {},
    }
    client = OrderedClient()
    client.objects = objects
    engine = new_engine(
        client, [load_profile({"schedulerName": "kopf-scheduler"})], objects=objects, rng=random.Random(1)
    )
    sched, cache, queue = engine.scheduler, engine.cache, engine.queue
    cache.add_node(make_node("n0", cpu="2"))
    return sched, queue, client


@pytest.mark.parametrize(("claim", "nominated"), [(True, True), (False, False)])
async def test_volume_binding_pre_flight_nominates_a_pod_whose_claim_waits_for_binding(
    claim: bool, nominated: bool
) -> None:
    sched, queue, client = _default_profile_with_a_wait_for_first_consumer_claim()
    volumes = [{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}] if claim else []
    pod = make_pod("p", cpu="1", volumes=volumes)
    queue.add(pod)
    assert await sched.schedule_one()
    await sched.wait_for_bindings()
    expected = [("nominate", pod.key, "n0")] if nominated else []
    assert client.calls == [*expected, ("bind", pod.key, "n0")]
    assert client.bound_volumes == ([(pod.key, (("default/data", ""),))] if claim else [])
    assert client.failed_messages(pod.key) == []


# --- DefaultBinder's retries ------------------------------------------------------------------------


async def test_transient_bind_errors_are_retried_and_the_pod_bound_once(
    no_backoff_sleep: list[float],
) -> None:
    sched, _cache, queue, client = setup()
    pod = make_pod("p", cpu="1")
    failures = [TransientError("the server is shutting down", 503, "ServiceUnavailable")] * 2
    real_bind = client.bind

    async def flaky(p: Pod, node: str) -> None:
        if failures:
            client.calls.append(("bind", p.key, node))
            raise failures.pop()
        await real_bind(p, node)

    client.bind = flaky  # type: ignore[method-assign]
    queue.add(pod)
    assert await sched.schedule_one()
    await sched.wait_for_bindings()
    assert client.calls == [("bind", pod.key, "n0")] * 3 and len(no_backoff_sleep) == 2
    assert client.bindings == {pod.key: "n0"}
    assert [e.reason for e in client.events] == ["Scheduled"]
    assert sum(queue.pending_pods().values()) == 0


async def test_a_500_that_bound_the_pod_is_a_success_not_a_second_bind() -> None:
    """The first attempt was applied but answered 500; the retry meets 409 (already assigned).
    The pod is read back bound to the chosen node: a success, and never bound twice."""
    sched, cache, queue, client = setup()
    pod = make_pod("p", cpu="1")
    real_bind = client.bind
    answered = []

    async def applied_then_500(p: Pod, node: str) -> None:
        await real_bind(p, node)  # the second call raises Conflict from the fake apiserver
        if not answered:
            answered.append(True)
            raise TransientError("Internal error occurred: etcd timeout", 500, "InternalError")

    client.bind = applied_then_500  # type: ignore[method-assign]
    queue.add(pod)
    assert await sched.schedule_one()
    await sched.wait_for_bindings()
    assert client.bindings == {pod.key: "n0"}
    assert client.failed_messages(pod.key) == [] and [e.reason for e in client.events] == ["Scheduled"]
    assert cache.get_pod(pod.uid) is not None  # its room on n0 stays taken


async def test_persistent_transient_errors_requeue_the_pod_with_the_reference_message() -> None:
    sched, cache, queue, client = setup()
    pod = make_pod("p", cpu="1")
    client.fail_bind[pod.key] = TransientError("Internal error occurred: etcd down", 500, "InternalError")
    queue.add(pod)
    assert await sched.schedule_one()
    await sched.wait_for_bindings()
    assert client.conditions[pod.key] == (
        "SchedulerError",
        'running Bind plugin "DefaultBinder": Internal error occurred: etcd down',
    )
    assert not cache.is_assumed(pod.uid) and pod.key not in client.bindings
    assert queue.pending_pods()["backoff"] + queue.pending_pods()["active"] == 1


async def test_a_failing_pre_flight_leaves_no_waiting_pod_behind() -> None:
    sched, _cache, queue, client = setup("Gate", "Volumes")
    Volumes.answer = Status(Code.ERROR, "boom")
    pod = make_pod("p", cpu="1")
    queue.add(pod)
    assert await sched.schedule_one()
    await sched.wait_for_bindings()
    assert sched.profiles.frameworks["kopf-scheduler"].waiting_pods == {}
    assert client.conditions[pod.key] == ("SchedulerError", 'running PreBindPreFlight "Volumes": boom')
