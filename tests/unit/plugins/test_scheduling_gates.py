"""SchedulingGates: PreEnqueue message and the gates-eliminated hint."""

from __future__ import annotations

from kopf_scheduler.framework.interface import ActionType, Code, EventResource, QueueingHint
from kopf_scheduler.plugins.scheduling_gates import SchedulingGates
from kopf_scheduler_workbench.testing.builders import make_pod


def test_pre_enqueue() -> None:
    pl = SchedulingGates()
    assert pl.pre_enqueue(make_pod("p")) is None
    status = pl.pre_enqueue(make_pod("p", schedulingGates=[{"name": "foo"}, {"name": "bar"}]))
    assert status is not None
    assert status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert status.reasons == ["waiting for scheduling gates: [foo bar]"]


def test_events() -> None:
    pl = SchedulingGates()
    (event,) = pl.events_to_register()
    assert event.event.resource == EventResource.POD
    assert event.event.action == ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED
    pod = make_pod("p", schedulingGates=[{"name": "foo"}])
    ungated = make_pod("p", uid=pod.uid)
    assert pl.is_schedulable_after_gates_eliminated(pod, pod, ungated) == QueueingHint.QUEUE
    other = make_pod("q")
    assert pl.is_schedulable_after_gates_eliminated(pod, other, other) == QueueingHint.QUEUE_SKIP
