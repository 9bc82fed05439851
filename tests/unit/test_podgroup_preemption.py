"""Workload-aware preemption: a gang that does not fit preempts lower-priority units cluster-wide.

The cluster of the integration test (``test_gang_cluster``), in memory: four 1-cpu nodes each with
one low-priority 600m unit (three single pods, one member of a ``disruptionMode: all`` PodGroup
whose other member sits on a 500m node the gang cannot use), and a 1-cpu node whose 500m pod has
the gang's own priority. The gang (four members of 800m, priority 1000) preempts the three pods and
the whole low group (five victims), its members are nominated to the four nodes, and once the
victims are gone it binds there.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.api.podgroup import PodGroup, parse_pod_group
from kopf_scheduler.api.policy import parse_pod_disruption_budget
from kopf_scheduler.config.profile import SchedulerProfileSpec
from kopf_scheduler.engine import Engine, new_engine
from kopf_scheduler.framework.interface import Code, CycleState, Plugin, Status
from kopf_scheduler.framework.podgroup_preemption import (
    Victim,
    domain_victims,
    filter_victims_with_pdb_violation,
    more_important_victim,
)
from kopf_scheduler.framework.profiles import load_profile
from kopf_scheduler.framework.registry import default_registry
from kopf_scheduler.memory_client import MemoryClusterClient
from kopf_scheduler.plugins.default_preemption import DefaultPreemption
from kopf_scheduler_workbench.testing.builders import make_node, make_pod

GANG = "gang-scheduler"
LOW, HIGH = 100, 1000
# What the gang of the cluster below preempts: three pods and the whole disruptionMode=all group.
VICTIMS = ["default/lg-1", "default/lg-2", "default/low-1", "default/low-2", "default/low-3"]


def gang_profile(preemption: bool = True) -> SchedulerProfileSpec:
    enabled = [{"name": "GangScheduling"}]
    plugins: dict[str, Any] = {"multiPoint": {"enabled": enabled}}
    if not preemption:
        plugins["multiPoint"]["disabled"] = [{"name": "DefaultPreemption"}]
    return load_profile({"schedulerName": GANG, "plugins": plugins})


def pod_group(name: str, priority: int, *, min_count: int | None = None, all_: bool = False) -> PodGroup:
    policy: dict[str, Any] = {"gang": {"minCount": min_count}} if min_count else {"basic": {}}
    spec: dict[str, Any] = {"schedulingPolicy": policy, "priority": priority}
    if all_:
        spec["disruptionMode"] = {"all": {}}
    return parse_pod_group(
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default", "uid": f"pg-{name}", "generation": 1},
            "spec": spec,
        }
    )


def placed(name: str, node: str, cpu: str, priority: int, group: str = "", **kw: Any) -> Pod:
    spec: dict[str, Any] = {"schedulingGroup": {"podGroupName": group}} if group else {}
    return make_pod(name, cpu=cpu, node_name=node, priority=priority, scheduler_name=GANG, **spec, **kw)


def member(i: int, **spec: Any) -> Pod:
    return make_pod(
        f"hi-{i}",
        cpu="800m",
        priority=HIGH,
        scheduler_name=GANG,
        schedulingGroup={"podGroupName": "hi"},
        **spec,
    )


def cluster(
    preemption: bool = True, members: int = 4, **member_spec: Any
) -> tuple[Engine, MemoryClusterClient]:
    client = MemoryClusterClient()
    engine = new_engine(client, [gang_profile(preemption)])
    h = engine.handlers
    for i in range(1, 6):
        h.add_node(make_node(f"n{i}", cpu="1"))
    h.add_node(make_node("n6", cpu="500m"))
    h.add_object("PodGroup", pod_group("lg", LOW, all_=True))
    for i in range(1, 4):
        h.add_pod(placed(f"low-{i}", f"n{i}", "600m", LOW))
    h.add_pod(placed("lg-1", "n4", "600m", LOW, "lg"))
    h.add_pod(placed("lg-2", "n6", "200m", LOW, "lg"))
    h.add_pod(placed("peer", "n5", "500m", HIGH))  # the gang's own priority: never a victim
    h.add_object("PodGroup", pod_group("hi", HIGH, min_count=members))
    for i in range(1, members + 1):
        h.add_pod(member(i, **member_spec))
    return engine, client


def four_full_nodes(engine: Engine) -> None:
    """Four 1-cpu nodes, each with a low 600m pod, and a gang of four 800m members."""
    h = engine.handlers
    for i in range(1, 5):
        h.add_node(make_node(f"n{i}", cpu="1"))
        h.add_pod(placed(f"low-{i}", f"n{i}", "600m", LOW))
    h.add_object("PodGroup", pod_group("hi", HIGH, min_count=4))
    for i in range(1, 5):
        h.add_pod(member(i))


async def drain(engine: Engine) -> None:
    while await engine.scheduler.schedule_one():
        pass
    await engine.scheduler.wait_for_bindings()


async def test_gang_preempts_the_lower_priority_units_it_needs_and_binds_where_nominated() -> None:
    engine, client = cluster()
    await drain(engine)
    await engine.scheduler.wait_for_bindings()  # the evictions run in the background
    assert client.bindings == {}
    assert sorted(client.evicted) == VICTIMS
    assert client.preemptions == {"default/hi": client.evicted}  # the PodGroup is the preemptor
    nominated = {k: v for k, v in client.nominations.items() if k.startswith("default/hi-")}
    assert sorted(nominated.values()) == ["n1", "n2", "n3", "n4"]
    failed = {e.pod: e.message for e in client.events if e.reason == "FailedScheduling"}
    group_msg = (
        "minCount (4) cannot be satisfied: 0 scheduled, 3 remaining, "
        "pod group preemption: found a placement for podgroup, preempting 5 victims"
    )
    # The first member found no node (its own words); the others were never tried.
    assert failed["default/hi-1"].startswith("0/6 nodes are available: ")
    for i in (2, 3, 4):
        assert failed[f"default/hi-{i}"] == "minCount (4) cannot be satisfied: 0 scheduled, 3 remaining"
    (cond,) = client.pod_group_conditions["default/hi"]
    assert (cond["status"], cond["reason"], cond["message"]) == ("False", "Unschedulable", group_msg)
    # The snapshot is the cache's again: every victim still counted where it runs.
    engine.cache.update_snapshot(engine.scheduler.snapshot)
    requested = {i.name: i.requested.milli_cpu for i in engine.scheduler.snapshot.node_infos}
    assert requested == {"n1": 600, "n2": 600, "n3": 600, "n4": 600, "n5": 500, "n6": 200}

    victims = [p for p in engine.cache.pods() if p.name in ("low-1", "low-2", "low-3", "lg-1", "lg-2")]
    for pod in victims:  # the kubelet finishes the deletions
        engine.handlers.delete_pod(pod)
    engine.queue.clock = lambda: 1e9  # backoff over
    engine.queue.flush_backoff_completed()
    await drain(engine)
    bound = {k: v for k, v in client.bindings.items() if k.startswith("default/hi-")}
    assert sorted(bound.values()) == ["n1", "n2", "n3", "n4"]
    assert all(bound[k] == nominated[k] for k in bound)


async def test_without_default_preemption_nobody_is_evicted() -> None:
    engine, client = cluster(preemption=False)
    await drain(engine)
    assert client.evicted == []
    (cond,) = client.pod_group_conditions["default/hi"]
    # DynamicResources' PodGroupPostFilter alone: its verdict is appended, as the reference does.
    assert cond["message"] == (
        "minCount (4) cannot be satisfied: 0 scheduled, 3 remaining, "
        "deallocation and deletion of ResourceClaims completed"
    )


async def test_a_group_that_cannot_fit_even_without_victims_preempts_nobody() -> None:
    engine, client = cluster(members=8)  # four usable 1-cpu nodes cannot take eight, victims or not
    await drain(engine)
    assert client.evicted == [] and client.bindings == {}
    (cond,) = client.pod_group_conditions["default/hi"]
    assert "pod group preemption: minCount (8) cannot be satisfied" in cond["message"], cond


async def test_members_with_preemption_policy_never_do_not_preempt() -> None:
    engine, client = cluster(preemptionPolicy="Never")
    await drain(engine)
    assert client.evicted == []
    (cond,) = client.pod_group_conditions["default/hi"]
    assert cond["message"].endswith("pod group preemption: not eligible due to preemptionPolicy=Never.")


def test_victims_group_all_units_across_nodes_and_order_by_importance() -> None:
    engine, _ = cluster()
    fw = engine.profiles.get(GANG)
    assert fw is not None
    engine.cache.update_snapshot(engine.scheduler.snapshot)
    victims = domain_victims([i.pods for i in engine.scheduler.snapshot.list()], fw.pod_groups)
    by_names = {tuple(sorted(p.name for p in v.pods)): v for v in victims}
    assert set(by_names) == {("low-1",), ("low-2",), ("low-3",), ("lg-1", "lg-2"), ("peer",)}
    group = by_names[("lg-1", "lg-2")]
    assert group.is_group and group.priority == LOW
    single = by_names[("low-1",)]
    assert not single.is_group
    assert more_important_victim(by_names[("peer",)], group)  # priority first
    assert more_important_victim(group, single)  # then a group over a pod
    older = Victim(single.pods, LOW, 1, 1.0)
    newer = Victim(single.pods, LOW, 1, 2.0)
    assert more_important_victim(older, newer) and not more_important_victim(newer, older)


def test_a_unit_violates_a_pdb_when_any_of_its_pods_does() -> None:
    a = make_pod("a-1", labels={"app": "a"}, node_name="n1")
    b = make_pod("a-2", labels={"app": "a"}, node_name="n2")
    c = make_pod("c", labels={"app": "c"}, node_name="n3")
    pdbs = [
        parse_pod_disruption_budget(
            {
                "metadata": {"namespace": "default", "name": "a"},
                "spec": {"selector": {"matchLabels": {"app": "a"}}},
                "status": {"disruptionsAllowed": 1},
            }
        )
    ]
    pair = Victim([a, b], LOW, 2, 0.0)
    lone = Victim([c], LOW, 1, 0.0)
    violating, fine = filter_victims_with_pdb_violation([pair, lone], pdbs)
    assert violating == [(pair, 1)] and fine == [lone]


@pytest.mark.parametrize("name", ["hi-1", "hi-3"])
def test_pre_enqueue_holds_every_member_while_the_group_preempts(name: str) -> None:
    engine, _ = cluster()
    fw = engine.profiles.get(GANG)
    assert fw is not None
    plugin = fw.plugins["DefaultPreemption"]
    assert isinstance(plugin, DefaultPreemption)
    pod = make_pod(name, schedulingGroup={"podGroupName": "hi"})
    plugin.pod_group_preemption_started("default/hi")
    status = plugin.pre_enqueue(pod)
    assert (
        status is not None
        and status.message == "waiting for the preemption for this pod group to be finished"
    )
    plugin.pod_group_preemption_finished("default/hi")
    assert plugin.pre_enqueue(pod) is None


async def test_a_unit_the_group_does_not_need_is_given_back() -> None:
    """A single low pod on the 500m node the gang cannot use is taken off with the others for the
    what-if, then reprieved: it stays; the group victim's member on that node does not."""
    engine, client = cluster()
    engine.handlers.add_pod(placed("bystander", "n6", "100m", LOW))
    await drain(engine)
    await engine.scheduler.wait_for_bindings()
    assert "default/bystander" not in client.evicted
    assert sorted(client.evicted) == VICTIMS


@pytest.mark.parametrize("allowed", [0, 1])
async def test_a_pdb_protected_unit_is_given_back_before_the_others(allowed: int) -> None:
    """Two low pods share a 1-cpu node with room for the member only without one of them; a PDB
    covers one. With no disruption allowed, violating units are reprieved first: the protected pod
    stays and its neighbour goes; with one allowed, importance decides."""
    engine, client = cluster()
    h = engine.handlers
    h.delete_pod(next(p for p in engine.cache.pods() if p.name == "low-3"))
    # "open" first: by importance alone (same priority, neither started, so the one seen first
    # counts as older) it would be given back first and "guarded" evicted.
    h.add_pod(placed("open", "n3", "150m", LOW))
    h.add_pod(placed("guarded", "n3", "150m", LOW, labels={"app": "guarded"}))
    h.add_object(
        "PodDisruptionBudget",
        parse_pod_disruption_budget(
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"namespace": "default", "name": "guard"},
                "spec": {"selector": {"matchLabels": {"app": "guarded"}}},
                "status": {"disruptionsAllowed": allowed},
            }
        ),
    )
    await drain(engine)
    await engine.scheduler.wait_for_bindings()
    if allowed == 0:  # evicting "guarded" would violate its budget: it is given back first
        assert "default/guarded" not in client.evicted and "default/open" in client.evicted
    else:  # no violation: importance alone decides
        assert "default/open" not in client.evicted and "default/guarded" in client.evicted


class _NoReserveOnN1(Plugin):
    """Reserve says no on n1: the group what-if must treat n1 as the real cycle would."""

    name = "NoReserveOnN1"

    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        if node_name == "n1" and pod.name.startswith("hi-"):
            return Status(Code.UNSCHEDULABLE, "n1 is reserved")
        return None

    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        return None


async def test_the_what_if_fails_a_member_whose_reserve_fails_as_the_real_cycle_does() -> None:
    """Without n1 the gang has three usable nodes for four members: no preemption helps, so none
    happens, and the group's message says why in the what-if's own words."""
    registry = default_registry()
    registry.register(_NoReserveOnN1.name, _NoReserveOnN1)
    spec = {
        "schedulerName": GANG,
        "plugins": {"multiPoint": {"enabled": [{"name": "GangScheduling"}, {"name": _NoReserveOnN1.name}]}},
    }
    client = MemoryClusterClient()
    engine = new_engine(client, [load_profile(spec, registry)], registry=registry)
    four_full_nodes(engine)
    await drain(engine)
    assert client.evicted == [] and client.bindings == {}
    (cond,) = client.pod_group_conditions["default/hi"]
    assert "pod group preemption: minCount (4) cannot be satisfied" in cond["message"], cond


async def test_members_are_held_while_the_evictions_run_then_let_go() -> None:
    """The evictions hang: the members, requeued meanwhile, are held at PreEnqueue (no second
    preemption); once the evictions are sent they are let go to finish their backoff (over here)."""

    class SlowEvictions(MemoryClusterClient):
        gate: asyncio.Event

        async def evict(self, victim: Pod, preemptor: Pod | PodGroup, message: str) -> None:
            await self.gate.wait()
            await super().evict(victim, preemptor, message)

    client = SlowEvictions()
    client.gate = asyncio.Event()
    engine = new_engine(client, [gang_profile()])
    four_full_nodes(engine)
    assert await engine.scheduler.schedule_one()  # the group cycle: preemption starts, evictions hang
    await asyncio.sleep(0)
    assert client.evicted == []
    # Requeued while their group preempts: held at PreEnqueue, so not even a backoff ends them.
    assert engine.queue.pending_pods() == {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 4}
    engine.queue.clock = lambda: 1e9
    engine.queue.flush_backoff_completed()
    assert not await engine.scheduler.schedule_one()  # nothing to pop: no second preemption
    client.gate.set()
    await engine.scheduler.wait_for_bindings()
    assert len(client.evicted) == 4
    assert engine.queue.pending_pods()["active"] == 4  # let go once the evictions were sent
