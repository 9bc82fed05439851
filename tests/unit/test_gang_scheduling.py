"""Gang scheduling: admission at PreEnqueue, the whole-group cycle, rollback, PodGroup condition.

Messages are the reference's, as v1.37.2 wrote them on the local control plane (8 pods of 800m cpu,
a gang of minCount 8, seven 1-cpu nodes): members placed in the failed cycle get
"pod group is unschedulable, minCount (8) cannot be satisfied: 7 scheduled, 0 remaining, pod group
preemption: No preemption victims found for incoming preemptor", the member that found no node its
own FitError ("0/7 nodes are available: 7 Insufficient cpu."), and the PodGroup the condition
PodGroupInitiallyScheduled=False/Unschedulable with the group's message.
"""

from __future__ import annotations

from typing import Any

import pytest

from kopf_scheduler.api.meta import ObjectMeta
from kopf_scheduler.api.podgroup import PodGroup, parse_pod_group
from kopf_scheduler.config.profile import SchedulerProfileSpec
from kopf_scheduler.engine import Engine, new_engine
from kopf_scheduler.framework.interface import Code, PlacementProgress
from kopf_scheduler.framework.profiles import load_profile
from kopf_scheduler.memory_client import MemoryClusterClient
from kopf_scheduler.plugins.gang_scheduling import WAITING_FOR_MEMBERS, GangScheduling
from kopf_scheduler_workbench.testing.builders import make_node, make_pod

GANG = "gang-scheduler"
GROUP_MSG = (
    "minCount (8) cannot be satisfied: 7 scheduled, 0 remaining, "
    "pod group preemption: No preemption victims found for incoming preemptor"
)


def gang_profile() -> SchedulerProfileSpec:
    return load_profile(
        {"schedulerName": GANG, "plugins": {"multiPoint": {"enabled": [{"name": "GangScheduling"}]}}}
    )


def pod_group(name: str, min_count: int | None, namespace: str = "default", **spec: Any) -> PodGroup:
    """The view the informer would hand the event handlers."""
    policy: dict[str, Any] = {"gang": {"minCount": min_count}} if min_count is not None else {"basic": {}}
    return parse_pod_group(
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace, "uid": f"pg-{name}", "generation": 1},
            "spec": {"schedulingPolicy": policy, "priority": 0, **spec},
        }
    )


def engine_with(nodes: int, cpu: str = "1") -> tuple[Engine, MemoryClusterClient]:
    client = MemoryClusterClient()
    engine = new_engine(client, [gang_profile()])
    for i in range(1, nodes + 1):
        engine.handlers.add_node(make_node(f"node-{i}", cpu=cpu))
    return engine, client


def add_members(engine: Engine, group: str, count: int, cpu: str = "800m", start: int = 1) -> None:
    for i in range(start, start + count):
        pod = make_pod(f"{group}-{i}", cpu=cpu, scheduler_name=GANG, schedulingGroup={"podGroupName": group})
        engine.handlers.add_pod(pod)


async def drain(engine: Engine) -> None:
    while await engine.scheduler.schedule_one():
        pass
    await engine.scheduler.wait_for_bindings()


def condition(client: MemoryClusterClient, key: str) -> dict[str, Any]:
    (cond,) = client.pod_group_conditions[key]
    return cond


# -- admission --


async def test_members_wait_for_their_pod_group_and_min_count() -> None:
    engine, client = engine_with(8)
    add_members(engine, "gang", 3)
    pod = engine.queue.get(next(iter(engine.queue._unschedulable)))
    assert pod is not None and pod.gating_plugin == "GangScheduling"
    engine.handlers.add_object("PodGroup", pod_group("gang", 8))
    assert engine.queue.pending_pods()["gated"] == 3  # 3 of 8: still held
    add_members(engine, "gang", 4, start=4)
    assert engine.queue.pending_pods()["gated"] == 7
    await drain(engine)
    assert client.bindings == {} and client.events == []  # a waiting member gets no event, as there
    add_members(engine, "gang", 1, start=8)  # the 8th arrives: all eight are let in together
    assert engine.queue.pending_pods()["gated"] == 0
    await drain(engine)
    assert len(client.bindings) == 8
    assert len(set(client.bindings.values())) == 8  # 800m each on 1-cpu nodes: one per node


def test_pre_enqueue_messages() -> None:
    engine, _ = engine_with(1)
    fw = engine.profiles.get(GANG)
    assert fw is not None
    plugin = fw.plugins["GangScheduling"]
    assert isinstance(plugin, GangScheduling)
    pod = make_pod("a-1", scheduler_name=GANG, schedulingGroup={"podGroupName": "a"})
    status = plugin.pre_enqueue(pod)
    assert status is not None and status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert status.message == 'waiting for pods\'s pod group "a" to appear in scheduling queue'
    engine.handlers.add_object("PodGroup", pod_group("a", 2))
    engine.handlers.add_pod(pod)
    status = plugin.pre_enqueue(pod)
    assert status is not None and status.message == WAITING_FOR_MEMBERS
    engine.handlers.add_object("PodGroup", pod_group("b", None))
    basic = make_pod("b-1", scheduler_name=GANG, schedulingGroup={"podGroupName": "b"})
    assert plugin.pre_enqueue(basic) is None  # not a gang: nothing to wait for


def test_placement_feasible() -> None:
    plugin = GangScheduling()
    group = PodGroup(ObjectMeta("g", "default"), gang_min_count=4)
    done = plugin.placement_feasible(group, PlacementProgress(scheduled=4, remaining=0))
    assert done is None
    wait = plugin.placement_feasible(group, PlacementProgress(scheduled=2, remaining=3))
    assert wait is not None and wait.code == Code.WAIT
    assert wait.message == "minCount (4) is not yet satisfied: 2 scheduled, 3 remaining"
    lost = plugin.placement_feasible(group, PlacementProgress(scheduled=2, remaining=1))
    assert lost is not None and lost.code == Code.UNSCHEDULABLE
    assert lost.message == "minCount (4) cannot be satisfied: 2 scheduled, 1 remaining"
    assert plugin.placement_feasible(PodGroup(ObjectMeta("b", "default")), PlacementProgress(1, 0)) is None


# -- the whole-group cycle --


async def test_gang_of_eight_on_room_for_eight_binds_all_in_one_cycle() -> None:
    engine, client = engine_with(8)
    engine.handlers.add_object("PodGroup", pod_group("gang", 8))
    add_members(engine, "gang", 8)
    cycle = engine.queue.scheduling_cycle
    assert await engine.scheduler.schedule_one()
    assert engine.queue.scheduling_cycle == cycle + 1  # one pop took the whole group
    assert len(engine.queue) == 0
    await engine.scheduler.wait_for_bindings()
    assert len(client.bindings) == 8
    cond = condition(client, "default/gang")
    assert (cond["type"], cond["status"], cond["reason"], cond["message"]) == (
        "PodGroupInitiallyScheduled",
        "True",
        "Scheduled",
        "",
    )
    assert cond["observedGeneration"] == 1


async def test_gang_of_eight_on_room_for_seven_binds_none_and_rolls_back() -> None:
    engine, client = engine_with(7)
    engine.handlers.add_object("PodGroup", pod_group("gang", 8))
    add_members(engine, "gang", 8)
    assert await engine.scheduler.schedule_one()
    await engine.scheduler.wait_for_bindings()
    assert client.bindings == {}
    # Rollback: nothing stays assumed, no node keeps a member's cpu.
    assert not any(engine.cache.is_assumed(f"{p}") for p in engine.cache._assumed)
    engine.cache.update_snapshot(engine.scheduler.snapshot)
    assert all(info.requested.milli_cpu == 0 for info in engine.scheduler.snapshot.node_infos)
    messages = {e.pod: e.message for e in client.events}
    assert len(messages) == 8
    for i in range(1, 8):
        assert messages[f"default/gang-{i}"] == f"pod group is unschedulable, {GROUP_MSG}"
    assert messages["default/gang-8"] == "0/7 nodes are available: 7 Insufficient cpu."
    assert {reason for reason, _ in client.conditions.values()} == {"Unschedulable"}
    cond = condition(client, "default/gang")
    assert (cond["status"], cond["reason"], cond["message"]) == ("False", "Unschedulable", GROUP_MSG)
    # The whole group waits out its backoff (the reference's group entity has no rejector plugins).
    assert engine.queue.pending_pods()["backoff"] == 8


async def test_failed_gang_binds_once_room_appears() -> None:
    engine, client = engine_with(7)
    engine.handlers.add_object("PodGroup", pod_group("gang", 8))
    add_members(engine, "gang", 8)
    await drain(engine)
    assert client.bindings == {}
    engine.handlers.add_node(make_node("node-8", cpu="1"))
    engine.queue.clock = lambda: 1e9  # backoff over
    engine.queue.flush_backoff_completed()
    await drain(engine)
    assert len(client.bindings) == 8
    assert condition(client, "default/gang")["status"] == "True"


async def test_group_fails_early_when_min_count_cannot_be_reached() -> None:
    """minCount 3 with 4 members and room for 1: the cycle stops once 2 failures make 3 unreachable."""
    engine, client = engine_with(1)
    engine.handlers.add_object("PodGroup", pod_group("g", 3))
    add_members(engine, "g", 4)
    await drain(engine)
    assert client.bindings == {}
    messages = {e.pod: e.message for e in client.events}
    group_msg = "minCount (3) cannot be satisfied: 1 scheduled, 1 remaining"
    suffix = ", pod group preemption: No preemption victims found for incoming preemptor"
    assert messages["default/g-1"] == f"pod group is unschedulable, {group_msg}{suffix}"
    assert messages["default/g-2"] == "0/1 nodes are available: 1 Insufficient cpu."
    assert messages["default/g-3"] == "0/1 nodes are available: 1 Insufficient cpu."
    # Not tried: the group's message as it was before the group's PostFilter ran (as the reference
    # wrote it for the same case on the local control plane).
    assert messages["default/g-4"] == group_msg


async def test_late_member_of_a_placed_gang_schedules_on_its_own() -> None:
    engine, client = engine_with(4)
    engine.handlers.add_object("PodGroup", pod_group("g", 2))
    add_members(engine, "g", 2)
    await drain(engine)
    assert len(client.bindings) == 2
    add_members(engine, "g", 1, start=3)  # 2 placed (assumed) + 1 remaining >= minCount 2
    await drain(engine)
    assert len(client.bindings) == 3


async def test_members_with_different_priorities_are_a_scheduler_error() -> None:
    engine, client = engine_with(2)
    engine.handlers.add_object("PodGroup", pod_group("g", 2))
    engine.handlers.add_pod(make_pod("g-1", scheduler_name=GANG, schedulingGroup={"podGroupName": "g"}))
    engine.handlers.add_pod(
        make_pod("g-2", scheduler_name=GANG, priority=5, schedulingGroup={"podGroupName": "g"})
    )
    await drain(engine)
    assert client.bindings == {}
    msg = (
        "all pods in a single pod group should have the same priority as the pod group's priority, "
        "got 5 and 0"
    )
    assert {e.message for e in client.events} == {msg}
    cond = condition(client, "default/g")
    assert (cond["status"], cond["reason"]) == ("False", "SchedulerError")


@pytest.mark.parametrize("min_count", [None, 1])
async def test_basic_or_min_one_group_places_what_fits(min_count: int | None) -> None:
    engine, client = engine_with(2)
    engine.handlers.add_object("PodGroup", pod_group("g", min_count))
    add_members(engine, "g", 3)
    await drain(engine)
    assert len(client.bindings) == 2
    assert condition(client, "default/g")["status"] == "True"
    failed = [e for e in client.events if e.reason == "FailedScheduling"]
    assert len(failed) == 1 and failed[0].message == "0/2 nodes are available: 2 Insufficient cpu."


async def test_a_rolled_back_gang_leaves_no_batch_results_behind() -> None:
    """Members sign alike and are placed through hints; once the group is undone the stored list
    (scored around those placements) must not hint the next pod."""
    no_topology = {"name": "PodTopologySpread", "args": {"defaultingType": "List", "defaultConstraints": []}}
    plugins = {"multiPoint": {"enabled": [{"name": "GangScheduling"}]}}
    profile = load_profile({"schedulerName": GANG, "plugins": plugins, "pluginConfig": [no_topology]})
    client = MemoryClusterClient()
    engine = new_engine(client, [profile])
    for i in range(1, 8):
        engine.handlers.add_node(make_node(f"node-{i}", cpu="1"))
    engine.handlers.add_object("PodGroup", pod_group("gang", 8))
    add_members(engine, "gang", 8)
    fw = engine.profiles.get(GANG)
    assert fw is not None and fw.batch is not None
    await drain(engine)
    assert client.bindings == {}
    assert fw.batch.batched_pods > 0  # the members did go through hints
    assert fw.batch._state is None


async def test_one_gated_member_holds_its_whole_group_silently() -> None:
    """The reference gates a group entity when any member is gated: nothing is tried, nothing said."""
    engine, client = engine_with(3)
    engine.handlers.add_object("PodGroup", pod_group("g", 3))
    add_members(engine, "g", 2)
    gated = make_pod(
        "g-3",
        cpu="800m",
        scheduler_name=GANG,
        schedulingGroup={"podGroupName": "g"},
        schedulingGates=[{"name": "x"}],
    )
    engine.handlers.add_pod(gated)
    await drain(engine)
    assert client.bindings == {} and client.events == []
    assert engine.queue.pending_pods()["gated"] == 1
    engine.handlers.update_pod(
        gated,
        make_pod(
            "g-3", cpu="800m", scheduler_name=GANG, uid=gated.uid, schedulingGroup={"podGroupName": "g"}
        ),
    )
    await drain(engine)
    assert len(client.bindings) == 3


async def test_pod_group_views_through_the_event_handlers() -> None:
    """The handlers store the PodGroup view the edge parsed; a lower minCount (GangScheduling's
    update hint) lets the waiting members in; a deleted group is forgotten."""
    engine, client = engine_with(2)
    h = engine.handlers
    before = pod_group("g", 3)
    h.add_object("PodGroup", before)
    assert engine.cache.pod_groups.get("default", "g") is before
    add_members(engine, "g", 2)
    await drain(engine)
    assert not client.bindings  # two members of a gang of three wait at PreEnqueue
    after = pod_group("g", 2)
    h.update_object("PodGroup", before, after)
    assert engine.cache.pod_groups.get("default", "g") is after
    await drain(engine)
    assert len(client.bindings) == 2
    h.delete_object("PodGroup", after)
    assert engine.cache.pod_groups.get("default", "g") is None
    assert "default/g" not in engine.cache.objects.get("PodGroup", {})


async def test_a_member_being_deleted_is_skipped_with_the_references_event() -> None:
    """skipPodGroupPodSchedule: a member with a deletionTimestamp leaves the group's cycle with a
    Warning ``skip schedule deleting pod`` event (no condition); the others are placed without it."""
    import dataclasses

    engine, client = engine_with(3)
    engine.handlers.add_object("PodGroup", pod_group("gang", 2))
    add_members(engine, "gang", 2)
    leaving = make_pod("gang-3", cpu="800m", scheduler_name=GANG, schedulingGroup={"podGroupName": "gang"})
    engine.handlers.add_pod(leaving)
    deleting = dataclasses.replace(leaving, deletion_timestamp=1.0, resource_version="2")
    engine.handlers.update_pod(leaving, deleting)
    await drain(engine)
    assert sorted(client.bindings) == ["default/gang-1", "default/gang-2"]
    skipped = [(e.type, e.reason, e.pod, e.message) for e in client.events if e.reason == "FailedScheduling"]
    assert skipped == [
        ("Warning", "FailedScheduling", "default/gang-3", "skip schedule deleting pod: default/gang-3")
    ]
    assert "default/gang-3" not in client.conditions


async def test_members_are_tried_in_the_order_they_came_into_the_queue() -> None:
    """The reference's PodGroupMemberPodsOrderingFunc: priority, attempts, then the time a member
    came into the queue; the name only breaks a tie. Created in the same second, in the order 3, 1,
    2, on room for one: the first to arrive is the one placed (by name, g-1 would be)."""
    engine, client = engine_with(1)
    engine.handlers.add_object("PodGroup", pod_group("g", 1))
    for i in (3, 1, 2):
        add_members(engine, "g", 1, start=i)
    await drain(engine)
    assert list(client.bindings) == ["default/g-3"]
    failed = sorted(e.pod for e in client.events if e.reason == "FailedScheduling")
    assert failed == ["default/g-1", "default/g-2"]
