"""DynamicResources for pods without claims, and what it does to FailedScheduling notes when it
runs right before DefaultPreemption as in v1.37.2's default profile (observed on the reference:
a PreFilter rejection that is UnschedulableAndUnresolvable ends the note with ``not found``)."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from kopf_scheduler.config.profile import DEFAULT_MULTI_POINT
from kopf_scheduler.engine import new_engine
from kopf_scheduler.framework.interface import Code, CycleState, Status
from kopf_scheduler.framework.profiles import load_profile
from kopf_scheduler.plugins.dynamic_resources import DynamicResources
from kopf_scheduler_workbench.testing.builders import make_node, make_pod, pod_dict
from kopf_scheduler_workbench.testing.fake_client import FakeClusterClient


def test_pre_filter_records_state_and_skips() -> None:
    plugin, state, pod = DynamicResources(), CycleState(), make_pod("p")
    assert plugin.pre_filter(state, pod, []) == (None, Status(Code.SKIP))
    result, status = plugin.post_filter(state, pod, {})
    assert result is None and status == Status(Code.UNSCHEDULABLE) and status.message == ""
    assert plugin.pre_bind_pre_flight(state, pod, "n0") == Status(Code.SKIP)
    assert plugin.post_filter(state.clone(), pod, {})[1] == Status(Code.UNSCHEDULABLE)


def test_post_filter_without_its_pre_filter_state_is_an_error() -> None:
    result, status = DynamicResources().post_filter(CycleState(), make_pod("p"), {})
    assert result is None and status == Status(Code.ERROR, "not found") and status.code == Code.ERROR


def reference_default_spec() -> dict[str, Any]:
    """Our default profile, which is v1.37.2's with DRA on: DynamicResources right before
    DefaultPreemption."""
    names = [name for name, _ in DEFAULT_MULTI_POINT]
    assert names.index("DynamicResources") == names.index("DefaultPreemption") - 1
    return {"schedulerName": "kopf-scheduler"}


def run_one(pod: Any, nominated: str = "") -> FakeClusterClient:
    import asyncio

    objects: dict[str, dict[str, Any]] = {"PersistentVolumeClaim": {}}
    client = FakeClusterClient(objects=objects)
    if nominated:
        client.nominations[pod.key] = nominated
    engine = new_engine(
        client, [load_profile(reference_default_spec())], objects=objects, rng=random.Random(0)
    )
    sched, cache, queue = engine.scheduler, engine.cache, engine.queue
    for n in ("n0", "n1"):
        cache.add_node(make_node(n, cpu="1"))
    queue.add(pod)

    async def go() -> None:
        assert await sched.schedule_one()
        await sched.wait_for_bindings()

    asyncio.run(go())
    return client


def test_unresolvable_pre_filter_rejection_ends_with_not_found_and_keeps_the_nomination() -> None:
    raw = pod_dict("p", cpu="100m")
    raw["spec"]["volumes"] = [{"name": "v", "persistentVolumeClaim": {"claimName": "nope"}}]
    raw["status"] = {"nominatedNodeName": "n1"}
    from kopf_scheduler.api.objects import parse_pod

    pod = parse_pod(raw)
    client = run_one(pod, nominated="n1")
    assert client.conditions[pod.key] == (
        "Unschedulable",
        '0/2 nodes are available: persistentvolumeclaim "nope" not found. not found',
    )
    assert client.nominations[pod.key] == "n1"  # PostFilter ended in an error: nomination untouched


@pytest.mark.parametrize(
    ("cpu", "message"),
    [
        (
            "2",
            "0/2 nodes are available: 2 Insufficient cpu. "
            "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.",
        ),
    ],
)
def test_filter_rejections_still_reach_default_preemption(cpu: str, message: str) -> None:
    pod = make_pod("p", cpu=cpu)
    client = run_one(dataclasses.replace(pod))
    assert client.conditions[pod.key] == ("Unschedulable", message)
