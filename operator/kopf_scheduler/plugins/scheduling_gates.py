"""SchedulingGates: a pod with ``spec.schedulingGates`` waits outside activeQ until they are all gone."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.framework.interface import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    Plugin,
    QueueingHint,
    Status,
)

__all__ = ["SchedulingGates"]


class SchedulingGates(Plugin):
    """PreEnqueue, EnqueueExtensions."""

    name = "SchedulingGates"

    def pre_enqueue(self, pod: Pod) -> Status | None:
        if not pod.scheduling_gates:
            return None
        # Go's %v of a []string: "[a b]".
        return Status.unresolvable(f"waiting for scheduling gates: [{' '.join(pod.scheduling_gates)}]")

    def events_to_register(self) -> Iterable[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED),
                self.is_schedulable_after_gates_eliminated,
            )
        ]

    def is_schedulable_after_gates_eliminated(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        # Only the pod's own gates matter to it.
        if isinstance(new, Pod) and new.uid != pod.uid:
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE
