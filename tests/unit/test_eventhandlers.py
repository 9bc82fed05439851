"""EventHandlers: routing watch events to cache and queue, and the events they raise."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from kopf_scheduler.api.core import parse_namespace
from kopf_scheduler.api.objects import Node, Pod, parse_node, parse_pod
from kopf_scheduler.api.types import ObjectError
from kopf_scheduler.cache import Cache
from kopf_scheduler.eventhandlers import EventHandlers
from kopf_scheduler.framework.events import node_scheduling_properties_change
from kopf_scheduler.framework.interface import ActionType, ClusterEvent, ClusterEventWithHint, EventResource
from kopf_scheduler.queue import PriorityQueue, QueuedPodInfo
from kopf_scheduler_workbench.testing.builders import make_node, make_pod, node_dict, pod_dict
from kopf_scheduler_workbench.testing.clock import FakeClock

OURS = "kopf-scheduler"


def reg(resource: EventResource, action: ActionType) -> ClusterEventWithHint:
    return ClusterEventWithHint(ClusterEvent(resource, action))


HINTS = {
    "NodeResourcesFit": [
        reg(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE),
        reg(EventResource.POD, ActionType.DELETE),
    ],
    "TaintToleration": [reg(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT)],
    "NodeAffinity": [reg(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)],
    "InterPodAffinity": [
        reg(EventResource.POD, ActionType.ADD | ActionType.UPDATE_POD_LABEL | ActionType.DELETE)
    ],
    "VolumeBinding": [reg(EventResource.PVC, ActionType.ADD | ActionType.UPDATE)],
    "DefaultPreemption": [],
}


class Env:
    def __init__(self, reject_waiting_pod: Callable[[Pod], bool] | None = None, **queue_kwargs: Any) -> None:
        self.clock = FakeClock()
        self.cache = Cache()
        queue_kwargs.setdefault("hints", HINTS)
        self.queue = PriorityQueue(clock=self.clock, **queue_kwargs)
        self.handlers = EventHandlers(
            self.cache,
            self.queue,
            lambda pod: pod.scheduler_name == OURS,
            reject_waiting_pod=reject_waiting_pod,
        )

    def reject(self, pod: Pod, *plugins: str) -> QueuedPodInfo:
        """Add ``pod``, pop it and put it back rejected by ``plugins``; then let backoff pass."""
        self.handlers.add_pod(pod)
        qpi = self.queue.pop_nowait()
        assert qpi is not None and qpi.pod.uid == pod.uid
        qpi.unschedulable_plugins.update(plugins)
        self.queue.add_unschedulable_if_not_present(qpi, self.queue.scheduling_cycle)
        self.clock.advance(20)
        return qpi

    def where(self, pod: Pod) -> str | None:
        return self.queue.where(pod.uid)


def with_uid(pod: Pod, **kwargs: Any) -> Pod:
    kwargs.setdefault("scheduler_name", pod.scheduler_name)
    return parse_pod(pod_dict(pod.name, pod.namespace, uid=pod.uid, **kwargs))


# --- pods ---------------------------------------------------------------------------------------


def test_unassigned_pods_of_ours_are_queued_others_ignored() -> None:
    env = Env()
    ours, theirs = make_pod("a"), make_pod("b", scheduler_name="other")
    env.handlers.add_pod(ours)
    env.handlers.add_pod(theirs)
    assert env.where(ours) == "active" and env.where(theirs) is None
    assert env.cache.pod_count() == 0


@pytest.mark.parametrize("scheduler", [OURS, "other"])
def test_assigned_pods_of_any_scheduler_go_to_the_cache(scheduler: str) -> None:
    env = Env()
    env.handlers.add_node(make_node("n1"))
    pod = make_pod("a", cpu="1", node_name="n1", scheduler_name=scheduler)
    env.handlers.add_pod(pod)
    info = env.cache.get_node_info("n1")
    assert info is not None and info.requested.milli_cpu == 1000
    assert env.where(pod) is None


def test_terminal_pods_are_treated_as_deleted() -> None:
    env = Env()
    env.handlers.add_node(make_node("n1"))
    pod = make_pod("a", cpu="1", node_name="n1")
    env.handlers.add_pod(pod)
    done = pod_dict("a", uid=pod.uid, cpu="1", node_name="n1")
    done["status"]["phase"] = "Succeeded"
    env.handlers.update_pod(pod, parse_pod(done))
    assert env.cache.pod_count() == 0
    pending = make_pod("b")
    env.handlers.add_pod(pending)
    failed = pod_dict("b", uid=pending.uid)
    failed["status"]["phase"] = "Failed"
    env.handlers.update_pod(pending, parse_pod(failed))
    assert env.where(pending) is None
    env.handlers.add_pod(parse_pod(failed))
    assert env.where(pending) is None


def test_binding_by_someone_else_removes_pod_from_queue() -> None:
    env = Env()
    env.handlers.add_node(make_node("n1"))
    pod = make_pod("a")
    env.handlers.add_pod(pod)
    env.handlers.update_pod(pod, with_uid(pod, node_name="n1"))
    assert env.where(pod) is None
    assert env.cache.get_pod(pod.uid) is not None


def test_bound_pod_in_relist_while_queued_is_dequeued() -> None:
    env = Env()
    env.handlers.add_node(make_node("n1"))
    pod = make_pod("a")
    env.handlers.add_pod(pod)
    env.handlers.add_pod(with_uid(pod, node_name="n1"))
    assert env.where(pod) is None and env.cache.pod_count() == 1


def test_assigned_pod_delete_moves_pods_rejected_by_fit() -> None:
    env = Env()
    env.handlers.add_node(make_node("n1"))
    victim = make_pod("v", cpu="1", node_name="n1")
    env.handlers.add_pod(victim)
    fit, aff, selector = make_pod("fit"), make_pod("aff"), make_pod("sel")
    env.reject(fit, "NodeResourcesFit")
    env.reject(aff, "InterPodAffinity")
    env.reject(selector, "NodeAffinity")
    env.handlers.delete_pod(victim)
    assert env.cache.pod_count() == 0
    assert (env.where(fit), env.where(aff), env.where(selector)) == ("active", "active", "unschedulable")


def test_assigned_pod_add_moves_only_interested_pods() -> None:
    env = Env()
    env.handlers.add_node(make_node("n1"))
    aff, fit = make_pod("aff"), make_pod("fit")
    env.reject(aff, "InterPodAffinity")
    env.reject(fit, "NodeResourcesFit")
    env.handlers.add_pod(make_pod("x", node_name="n1"))
    assert (env.where(aff), env.where(fit)) == ("active", "unschedulable")


def test_assigned_pod_label_update_raises_label_event() -> None:
    env = Env()
    env.handlers.add_node(make_node("n1"))
    running = make_pod("r", node_name="n1")
    env.handlers.add_pod(running)
    aff, fit = make_pod("aff"), make_pod("fit")
    env.reject(aff, "InterPodAffinity")
    env.reject(fit, "NodeResourcesFit")
    env.handlers.update_pod(running, with_uid(running, node_name="n1", labels={"app": "x"}))
    assert (env.where(aff), env.where(fit)) == ("active", "unschedulable")


def test_update_of_unassigned_pod_same_resource_version_ignored() -> None:
    env = Env()
    raw = pod_dict("a")
    raw["metadata"]["resourceVersion"] = "5"
    pod = parse_pod(raw)
    env.reject(pod, "InterPodAffinity")
    relabelled = dict(raw, metadata={**raw["metadata"], "labels": {"x": "y"}})
    env.handlers.update_pod(pod, parse_pod(relabelled))
    assert env.where(pod) == "unschedulable"
    relabelled["metadata"]["resourceVersion"] = "6"
    env.handlers.update_pod(pod, parse_pod(relabelled))
    got = env.queue.get(pod.uid)
    assert got is not None and got.pod.labels == {"x": "y"}


def test_deleting_assumed_pod_forgets_it_and_moves_pods() -> None:
    env = Env()
    env.handlers.add_node(make_node("n1"))
    pod = make_pod("a", cpu="1")
    env.cache.assume_pod(with_uid(pod, cpu="1", node_name="n1"))
    waiting = make_pod("w")
    env.reject(waiting, "NodeResourcesFit")
    env.handlers.delete_pod(pod)
    assert not env.cache.is_assumed(pod.uid) and env.cache.pod_count() == 0
    assert env.where(waiting) == "active"


def test_deletion_timestamp_on_assumed_pod_rejects_waiting_pod_if_possible() -> None:
    rejected: list[str] = []

    def reject_waiting(pod: Pod) -> bool:
        rejected.append(pod.uid)
        return True

    env = Env(reject_waiting)
    env.handlers.add_node(make_node("n1"))
    pod = make_pod("a")
    env.cache.assume_pod(with_uid(pod, node_name="n1"))
    deleting = pod_dict("a", uid=pod.uid)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:10Z"
    env.handlers.update_pod(pod, parse_pod(deleting))
    assert rejected == [pod.uid]
    assert env.cache.is_assumed(pod.uid)  # the Permit rejection cleans it up in the binding cycle


def test_relist_of_assumed_pod_does_not_requeue_it() -> None:
    env = Env()
    env.handlers.add_node(make_node("n1"))
    pod = make_pod("a")
    env.cache.assume_pod(with_uid(pod, node_name="n1"))
    env.handlers.add_pod(pod)
    assert env.where(pod) is None


def test_nominated_pod_deleted_moves_lower_or_equal_priority_pods() -> None:
    env = Env()
    low, equal, high = (
        make_pod("low", priority=10),
        make_pod("eq", priority=100),
        make_pod("high", priority=1000),
    )
    for pod in (low, equal, high):
        env.reject(pod, "Custom")  # not in the hints map: hears every event
    raw = pod_dict("nominated", priority=100)
    raw["status"]["nominatedNodeName"] = "n1"
    nominated = parse_pod(raw)
    env.handlers.add_pod(nominated)
    assert env.queue.nominated_pods_for_node("n1") == [nominated]
    env.handlers.delete_pod(nominated)
    assert env.queue.nominated_pods_for_node("n1") == []
    assert (env.where(low), env.where(equal), env.where(high)) == ("active", "active", "unschedulable")


def test_nomination_change_moves_lower_or_equal_priority_pods() -> None:
    env = Env()
    low, high = make_pod("low", priority=10), make_pod("high", priority=1000)
    for pod in (low, high):
        env.reject(pod, "Custom")
    raw = pod_dict("nominated", priority=100)
    raw["status"]["nominatedNodeName"] = "n1"
    raw["metadata"]["resourceVersion"] = "1"
    nominated = parse_pod(raw)
    env.reject(nominated, "DefaultPreemption")
    cleared = pod_dict("nominated", uid=nominated.uid, priority=100)
    cleared["metadata"]["resourceVersion"] = "2"
    env.handlers.update_pod(nominated, parse_pod(cleared))
    assert (env.where(low), env.where(high)) == ("active", "unschedulable")


# --- nodes --------------------------------------------------------------------------------------


def node_with(name: str, **kwargs: Any) -> Node:
    conditions = kwargs.pop("conditions", None)
    annotations = kwargs.pop("annotations", None)
    preemption = kwargs.pop("preemption", None)
    raw = node_dict(name, **kwargs)
    if conditions is not None:
        raw["status"]["conditions"] = conditions
    if annotations is not None:
        raw["metadata"]["annotations"] = annotations
    if preemption is not None:
        raw["spec"]["podPreemptionPolicy"] = preemption
    return parse_node(raw)


NO_SCHEDULE = [{"key": "k", "value": "v", "effect": "NoSchedule"}]
READY_AT_1 = {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-01-01T00:00:00Z", "reason": "A"}
READY_AT_2 = {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-01-01T00:00:40Z", "reason": "B"}
NOT_READY = {"type": "Ready", "status": "False", "lastHeartbeatTime": "2026-01-01T00:00:40Z"}


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ({}, {"cpu": "8"}, [ActionType.UPDATE_NODE_ALLOCATABLE]),
        ({}, {"labels": {"a": "b"}}, [ActionType.UPDATE_NODE_LABEL]),
        ({"taints": NO_SCHEDULE}, {}, [ActionType.UPDATE_NODE_TAINT]),
        ({"unschedulable": True}, {}, [ActionType.UPDATE_NODE_TAINT]),
        ({}, {"unschedulable": True}, []),  # becoming unschedulable helps nobody
        ({}, {"conditions": [{"type": "Ready", "status": "True"}]}, [ActionType.UPDATE_NODE_CONDITION]),
        ({}, {"annotations": {"a": "b"}}, [ActionType.UPDATE_NODE_ANNOTATION]),
        ({"conditions": [READY_AT_1]}, {"conditions": [READY_AT_2]}, []),  # a heartbeat is no change
        ({"conditions": [READY_AT_1]}, {"conditions": [NOT_READY]}, [ActionType.UPDATE_NODE_CONDITION]),
        # extractNodePreemptionPolicyChange: spec.podPreemptionPolicy compared whole, absent != {}.
        ({}, {"preemption": {}}, [ActionType.UPDATE_NODE_PREEMPTION_POLICY]),
        ({"preemption": {"x": "a"}}, {"preemption": {"x": "b"}}, [ActionType.UPDATE_NODE_PREEMPTION_POLICY]),
        ({"preemption": {"x": "a"}}, {"preemption": {"x": "a"}}, []),
        ({}, {}, []),
        (
            {"taints": NO_SCHEDULE},
            {"cpu": "8", "labels": {"a": "b"}},
            [ActionType.UPDATE_NODE_ALLOCATABLE, ActionType.UPDATE_NODE_LABEL, ActionType.UPDATE_NODE_TAINT],
        ),
    ],
)
def test_node_update_events(old: dict[str, Any], new: dict[str, Any], expected: list[ActionType]) -> None:
    before, after = node_with("n", **old), node_with("n", **new)
    events = node_scheduling_properties_change(before, after)
    assert [e.action for e in events] == expected
    assert all(e.resource == EventResource.NODE for e in events)
    # The parsed fields decide, not the raw object (the engine never reads node.raw).
    unraw = node_scheduling_properties_change(
        dataclasses.replace(before, raw={}), dataclasses.replace(after, raw={})
    )
    assert unraw == events


def test_node_conditions_and_annotations_parse_once() -> None:
    node = node_with(
        "n", conditions=[READY_AT_1, {"type": "DiskPressure", "status": "False"}], annotations={"a": "b"}
    )
    assert node.conditions == {"Ready": "True", "DiskPressure": "False"}
    assert node.annotations == {"a": "b"}
    with pytest.raises(ObjectError) as err:
        node_with("n", conditions=["Ready"])
    assert err.value.path == "status.conditions[0]"
    with pytest.raises(ObjectError) as err:
        node_with("n", annotations={"a": 1})
    assert err.value.path == "metadata.annotations.a"


@pytest.mark.parametrize(
    ("plugin", "change", "moves"),
    [
        ("NodeResourcesFit", {"cpu": "8"}, True),
        ("NodeResourcesFit", {"labels": {"a": "b"}}, False),
        ("NodeAffinity", {"labels": {"a": "b"}}, True),
        ("TaintToleration", {"labels": {"a": "b"}}, False),
    ],
)
def test_node_update_moves_pods_by_changed_field(plugin: str, change: dict[str, Any], moves: bool) -> None:
    env = Env()
    old = node_with("n1")
    env.handlers.add_node(old)
    pod = make_pod("p")
    env.reject(pod, plugin)
    new = node_with("n1", **change)
    env.handlers.update_node(old, new)
    assert env.where(pod) == ("active" if moves else "unschedulable")
    info = env.cache.get_node_info("n1")
    assert info is not None and info.node is new


def test_node_add_moves_and_delete_removes() -> None:
    env = Env()
    pod = make_pod("p")
    env.reject(pod, "NodeResourcesFit")
    node = make_node("n1")
    env.handlers.add_node(node)
    assert env.where(pod) == "active"
    env.handlers.delete_node(node)
    assert env.cache.node_count() == 0
    env.handlers.delete_node(node)  # unknown: logged, no exception


# --- other objects ------------------------------------------------------------------------------


def test_objects_are_stored_and_raise_events() -> None:
    env = Env()
    pod = make_pod("p")
    env.reject(pod, "VolumeBinding")
    pvc = {"metadata": {"name": "data", "namespace": "default"}, "spec": {}}
    env.handlers.add_object("PersistentVolumeClaim", pvc)
    assert env.cache.objects["PersistentVolumeClaim"]["default/data"] is pvc
    assert env.where(pod) == "active"
    newer = {**pvc, "status": {"phase": "Bound"}}
    env.handlers.update_object("PersistentVolumeClaim", pvc, newer)
    assert env.cache.objects["PersistentVolumeClaim"]["default/data"] is newer
    env.handlers.delete_object("PersistentVolumeClaim", newer)
    assert "default/data" not in env.cache.objects["PersistentVolumeClaim"]
    ns = parse_namespace({"metadata": {"name": "team", "labels": {"a": "b"}}})
    env.handlers.add_object("Namespace", ns)
    assert env.cache.objects["Namespace"]["team"] is ns


# --- re-list ------------------------------------------------------------------------------------
