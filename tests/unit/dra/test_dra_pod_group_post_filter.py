"""DynamicResources' PodGroupPostFilter (the reference's ``TestPodGroupPostFilter``, written anew).

The plugin's rows use real members' PreFilter and Filter in a group's cycle state; the engine's
show when that state is absent (no member reached DynamicResources' PreFilter): the reference's
error, wrapped by the framework, for every member and on the PodGroup. The reference's rows not
here need what this scheduler does not build: "disabled" (DynamicResourceAllocation is locked on),
the PodGroup-level claim rows (DRAWorkloadResourceClaims, refused on) and the topology-aware one
(TopologyAwareWorkloadScheduling, refused on).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

from test_dra_plugin import NodeInfo, gpu_claim, pod, world

from kopf_scheduler.api.objects import Pod, parse_pod
from kopf_scheduler.api.podgroup import PodGroup, parse_pod_group
from kopf_scheduler.api.resource import ResourceClaim
from kopf_scheduler.engine import new_engine
from kopf_scheduler.framework.interface import Code, CycleState, ProposedAssignment, Status
from kopf_scheduler.framework.profiles import load_profile
from kopf_scheduler.memory_client import MemoryClusterClient
from kopf_scheduler.plugins.dynamic_resources import DynamicResources
from kopf_scheduler.plugins.dynamic_resources.dynamic_resources import GROUP_CLAIMS_RELEASED
from kopf_scheduler_workbench.testing.builders import make_node, make_pod

NOT_FOUND = 'error in "DynamicResources" PodGroupPostFilter plugins: not found'
GANG = "gang-scheduler"

# Allocated on a node that is gone: unavailable wherever a member is tried.
ON_GONE_NODE = {
    "allocation": {
        "devices": {
            "results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "p", "device": "gpu-0"}]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gone"]}]}
            ]
        },
    }
}


def pod_group(name: str, min_count: int) -> PodGroup:
    return parse_pod_group(
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default", "uid": f"pg-{name}", "generation": 1},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}, "priority": 0},
        }
    )


class NoSimulation:
    """DynamicResources never touches the snapshot: any use fails the test."""

    def remove_pod(self, pod: Pod) -> None:
        raise AssertionError("remove_pod")

    def add_pod(self, pod: Pod) -> None:
        raise AssertionError("add_pod")

    def schedule(self) -> tuple[list[ProposedAssignment], Status | None]:
        raise AssertionError("schedule")

    def assume(self, assignment: ProposedAssignment) -> Status | None:
        raise AssertionError("assume")

    def forget(self, assignment: ProposedAssignment) -> None:
        raise AssertionError("forget")


def tried(
    plugin: DynamicResources, group_state: CycleState, member: Pod, node: str = "node-1"
) -> Status | None:
    """A member's PreFilter and Filter on one node within the group's cycle."""
    state = CycleState()
    state.pod_group_state = group_state
    plugin.pre_filter(state, member, [])
    return plugin.filter(state, member, NodeInfo(node))  # type: ignore[arg-type]


def post_filter(plugin: DynamicResources, group_state: CycleState, members: list[Pod]) -> Status | None:
    async def go() -> Status | None:
        _, status = plugin.pod_group_post_filter(group_state, pod_group("g", 2), members, NoSimulation())
        await asyncio.gather(*plugin._tasks)  # its API writes run in the background
        return status

    return asyncio.run(go())


def stored(objects: dict[str, Any], name: str) -> ResourceClaim:
    claim: ResourceClaim = objects["ResourceClaim"][f"default/{name}"]
    return claim


def test_without_the_group_state_it_is_the_references_error() -> None:
    plugin, _ = world(gpu_claim("a"))
    status = post_filter(plugin, CycleState(), [pod("p1", claim="a")])
    assert status is not None and status.code == Code.ERROR
    assert status.message == "not found"


def test_members_prefilter_writes_the_group_state_even_without_claims() -> None:
    """Row "empty": a member reached PreFilter (no claim to act on): nothing written, and the
    plugin's verdict, which the framework appends to the group's reasons."""
    plugin, objects = world(gpu_claim("a"))
    group_state = CycleState()
    plain = make_pod("plain")
    tried(plugin, group_state, plain)
    assert tried(plugin, group_state, pod("p1", claim="a")) is None  # pending: allocatable here
    status = post_filter(plugin, group_state, [plain, pod("p1", claim="a")])
    assert status is not None
    assert (status.code, status.message) == (Code.UNSCHEDULABLE, GROUP_CLAIMS_RELEASED)
    assert stored(objects, "a").status.allocation is None
    assert plugin.tracker.get_pending("uid-claim-a") is None


def test_a_members_claim_unavailable_where_it_was_tried_is_deallocated() -> None:
    """Row "deallocate-pod-level-claim"."""
    plugin, objects = world(gpu_claim("a", **ON_GONE_NODE))
    group_state = CycleState()
    status = tried(plugin, group_state, pod("p1", claim="a"))
    assert status is not None and status.message == "resourceclaim not available on the node"
    status = post_filter(plugin, group_state, [pod("p1", claim="a")])
    assert status is not None
    assert (status.code, status.message) == (Code.UNSCHEDULABLE, GROUP_CLAIMS_RELEASED)
    claim = stored(objects, "a")
    assert claim.status.allocation is None and claim.status.reserved_for == ()


def test_a_members_extended_resource_claim_left_from_before_is_deleted() -> None:
    """Row "delete-pod-level-extended-claim": the claim an earlier cycle made for the member's
    extended resource (DRAExtendedResource) cannot be scheduled again; it is deleted."""
    extended = gpu_claim("p1-extended-resources")
    extended["metadata"]["annotations"] = {"resource.kubernetes.io/extended-resource-claim": "true"}
    extended["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "p1", "uid": "uid-p1", "controller": True}
    ]
    plugin, objects = world(extended)
    requests = {"deviceclass.resource.kubernetes.io/gpu": "1"}
    member = parse_pod(
        {
            "metadata": {"name": "p1", "namespace": "default", "uid": "uid-p1"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": requests, "limits": requests}}]},
        }
    )
    group_state = CycleState()
    status = tried(plugin, group_state, member)
    assert status is not None and status.message == "cannot schedule extended resource claim"
    assert "default/p1-extended-resources" in objects["ResourceClaim"]
    status = post_filter(plugin, group_state, [member])
    assert status is not None and status.message == GROUP_CLAIMS_RELEASED
    assert "default/p1-extended-resources" not in objects["ResourceClaim"]


def test_a_claim_reserved_for_another_pod_is_kept() -> None:
    reserved = {**ON_GONE_NODE, "reservedFor": [{"resource": "pods", "name": "other", "uid": "uid-other"}]}
    plugin, objects = world(gpu_claim("a", **reserved))
    group_state = CycleState()
    tried(plugin, group_state, pod("p1", claim="a"))
    status = post_filter(plugin, group_state, [pod("p1", claim="a")])
    assert status is not None and status.message == GROUP_CLAIMS_RELEASED
    assert stored(objects, "a").status.allocation is not None


def test_a_member_that_did_not_reach_prefilter_is_left_alone() -> None:
    """Only the members the group's cycle got to PreFilter are looked at (the others, never tried,
    have no state in it)."""
    plugin, objects = world(gpu_claim("a", **ON_GONE_NODE), gpu_claim("b", **ON_GONE_NODE))
    group_state = CycleState()
    tried(plugin, group_state, pod("p1", claim="a"))
    post_filter(plugin, group_state, [pod("p1", claim="a"), pod("p2", claim="b")])
    assert stored(objects, "a").status.allocation is None
    assert stored(objects, "b").status.allocation is not None


def test_the_framework_wraps_the_error_and_asks_no_later_plugin() -> None:
    engine = new_engine(MemoryClusterClient(), [gang_profile()])
    fw = engine.profiles.get(GANG)
    assert fw is not None
    assert [p.name for p in fw.pod_group_post_filter_plugins] == ["DynamicResources", "DefaultPreemption"]
    member = make_pod("g-1", scheduler_name=GANG, schedulingGroup={"podGroupName": "g"})
    result, status = fw.run_pod_group_post_filter_plugins(
        CycleState(), pod_group("g", 2), [member], NoSimulation()
    )
    assert result is None
    assert (status.code, status.message, status.plugin) == (Code.ERROR, NOT_FOUND, "DynamicResources")


# -- in the engine's group cycle --


def gang_profile() -> Any:
    return load_profile(
        {"schedulerName": GANG, "plugins": {"multiPoint": {"enabled": [{"name": "GangScheduling"}]}}}
    )


def member(name: str, **spec: Any) -> Pod:
    return make_pod(name, cpu="800m", scheduler_name=GANG, schedulingGroup={"podGroupName": "g"}, **spec)


async def drain_once(engine: Any) -> None:
    while await engine.scheduler.schedule_one():
        pass
    await engine.scheduler.wait_for_bindings()


async def test_members_turned_away_before_its_prefilter_get_the_references_error() -> None:
    """Both members name a missing PVC: VolumeBinding's PreFilter rejects the first before
    DynamicResources' runs, PlacementFeasible then rules the group out, and the group's
    PodGroupPostFilter finds no state: every member and the PodGroup carry the error."""
    client = MemoryClusterClient()
    engine = new_engine(client, [gang_profile()])
    engine.handlers.add_node(make_node("node-1", cpu="4"))
    engine.handlers.add_object("PodGroup", pod_group("g", 2))
    volumes = [{"name": "data", "persistentVolumeClaim": {"claimName": "missing"}}]
    for i in (1, 2):
        engine.handlers.add_pod(member(f"g-{i}", volumes=volumes))
    await drain_once(engine)
    messages = {e.pod: e.message for e in client.events if e.reason == "FailedScheduling"}
    assert messages == {"default/g-1": NOT_FOUND, "default/g-2": NOT_FOUND}
    (cond,) = client.pod_group_conditions["default/g"]
    assert (cond["status"], cond["reason"], cond["message"]) == ("False", "SchedulerError", NOT_FOUND)


async def test_a_gang_left_short_by_a_deleting_member_gets_the_references_error() -> None:
    """A member being deleted is taken out of the cycle (``skipPodGroupPodSchedule``): one member
    left of minCount 2, PlacementFeasible rules the group out before any member is tried, so no
    member reached DynamicResources' PreFilter."""
    client = MemoryClusterClient()
    engine = new_engine(client, [gang_profile()])
    engine.handlers.add_node(make_node("node-1", cpu="4"))
    engine.handlers.add_object("PodGroup", pod_group("g", 2))
    first, second = member("g-1"), member("g-2")
    engine.handlers.add_pod(first)
    engine.handlers.add_pod(second)
    engine.handlers.update_pod(second, dataclasses.replace(second, deletion_timestamp=time.time()))
    await drain_once(engine)
    assert client.bindings == {}
    messages = {e.pod: e.message for e in client.events if e.reason == "FailedScheduling"}
    # The deleting member's own note is skipPodSchedule's event.
    assert messages == {"default/g-1": NOT_FOUND, "default/g-2": "skip schedule deleting pod: default/g-2"}
    (cond,) = client.pod_group_conditions["default/g"]
    assert (cond["reason"], cond["message"]) == ("SchedulerError", NOT_FOUND)


async def group_message(**spec: Any) -> str:
    """The PodGroup's message after one cycle of two members with room for one."""
    client = MemoryClusterClient()
    engine = new_engine(client, [gang_profile()])
    engine.handlers.add_node(make_node("node-1", cpu="1"))
    engine.handlers.add_object("PodGroup", pod_group("g", 2))
    for i in (1, 2):
        engine.handlers.add_pod(member(f"g-{i}", **spec))
    await drain_once(engine)
    (cond,) = client.pod_group_conditions["default/g"]
    assert cond["reason"] == "Unschedulable"
    return str(cond["message"])


async def test_once_a_member_reached_prefilter_the_plugins_verdict_joins_the_groups_reasons() -> None:
    """DynamicResources runs first and says it is done; DefaultPreemption's Unschedulable is added
    after it, while its UnschedulableAndUnresolvable (no victims) stands alone, as the framework
    has it."""
    group = "minCount (2) cannot be satisfied: 1 scheduled, 0 remaining, "
    never = "pod group preemption: not eligible due to preemptionPolicy=Never."
    assert await group_message(preemptionPolicy="Never") == f"{group}{GROUP_CLAIMS_RELEASED}, {never}"
    no_victims = "pod group preemption: No preemption victims found for incoming preemptor"
    assert await group_message() == group + no_victims
