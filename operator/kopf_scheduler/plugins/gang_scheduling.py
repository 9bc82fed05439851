"""GangScheduling: all-or-nothing placement of a PodGroup with a ``gang`` policy.

PreEnqueue holds each member out of activeQ until the group's PodGroup exists and ``minCount``
members exist; PlacementFeasible ends a whole-group cycle as soon as ``minCount`` can no longer be
reached; Permit lets a member bind only once ``minCount`` members are placed. A profile that names
this plugin schedules pod groups in whole-group cycles (the reference's GenericWorkload gate).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.api.podgroup import PodGroup
from kopf_scheduler.framework.interface import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    Code,
    CycleState,
    EventResource,
    PlacementProgress,
    Plugin,
    PodGroupManager,
    QueueingHint,
    Status,
)

__all__ = ["PERMIT_TIMEOUT", "GangScheduling"]

# How long a member waits at Permit for the rest of its gang (the reference's permitTimeoutDuration).
PERMIT_TIMEOUT = 300.0
WAITING_FOR_MEMBERS = "waiting for minCount pods from a gang to appear in scheduling queue"


def _as_pod_group(obj: object) -> PodGroup | None:
    """A PodGroup event's old/new: the view the edge parsed (None on the absent side)."""
    return obj if isinstance(obj, PodGroup) else None


class GangScheduling(Plugin):
    """PreEnqueue (its answer shared by a group's members), Permit, PlacementFeasible, EnqueueExtensions."""

    name = "GangScheduling"

    @property
    def _groups(self) -> PodGroupManager | None:
        return self.handle.pod_groups if self.handle is not None else None

    # -- PreEnqueue --

    def pre_enqueue(self, pod: Pod) -> Status | None:
        if not pod.pod_group:
            return None
        groups = self._groups
        group = groups.get(pod.namespace, pod.pod_group) if groups is not None else None
        if groups is None or group is None:
            # The reference's text, typo included.
            return Status.unresolvable(
                f'waiting for pods\'s pod group "{pod.pod_group}" to appear in scheduling queue'
            )
        if group.gang_min_count is None:
            return None
        if groups.all_pods_count(pod.namespace, pod.pod_group) < group.gang_min_count:
            return Status.unresolvable(WAITING_FOR_MEMBERS)
        return None

    def pre_enqueue_shared_by(self, pod: Pod) -> Hashable | None:
        """pre_enqueue reads only the pod's group: its members are answered alike."""
        return (pod.namespace, pod.pod_group) if pod.pod_group else None

    # -- PlacementFeasible --

    def placement_feasible(self, group: PodGroup, progress: PlacementProgress) -> Status | None:
        need = group.min_count
        scheduled, remaining = progress.scheduled, progress.remaining
        if scheduled + remaining < need:
            return Status.unschedulable(
                f"minCount ({need}) cannot be satisfied: {scheduled} scheduled, {remaining} remaining"
            )
        if scheduled < need:
            return Status(
                Code.WAIT,
                f"minCount ({need}) is not yet satisfied: {scheduled} scheduled, {remaining} remaining",
            )
        return None

    # -- Permit --

    def permit(self, state: CycleState, pod: Pod, node_name: str) -> tuple[Status | None, float]:
        groups = self._groups
        if not pod.pod_group or groups is None:
            return None, 0.0
        group = groups.get(pod.namespace, pod.pod_group)
        if group is None:
            return Status(Code.ERROR, f"failed to get podGroup {pod.namespace}/{pod.pod_group}"), 0.0
        if group.gang_min_count is None:
            return None, 0.0
        if groups.scheduled_count(pod.namespace, pod.pod_group) < group.gang_min_count:
            return Status(Code.WAIT, "waiting for minCount pods from a gang to be scheduled"), PERMIT_TIMEOUT
        return None, 0.0

    # -- EnqueueExtensions --

    def events_to_register(self) -> Iterable[ClusterEventWithHint]:
        # spec.schedulingGroup is immutable: pod updates never change membership.
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.ADD), self._after_pod_added
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.ASSIGNED_POD, ActionType.ADD), self._after_pod_added
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD_GROUP, ActionType.ADD), self._after_group_added
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD_GROUP, ActionType.UPDATE), self._after_group_updated
            ),
        ]

    def _after_pod_added(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        if not pod.pod_group or not isinstance(new, Pod) or not new.pod_group:
            return QueueingHint.QUEUE_SKIP
        same = new.namespace == pod.namespace and new.pod_group == pod.pod_group
        return QueueingHint.QUEUE if same else QueueingHint.QUEUE_SKIP

    def _after_group_added(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        group = _as_pod_group(new)
        if not pod.pod_group or group is None:
            return QueueingHint.QUEUE_SKIP
        same = group.namespace == pod.namespace and group.name == pod.pod_group
        return QueueingHint.QUEUE if same else QueueingHint.QUEUE_SKIP

    def _after_group_updated(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        """Only a lower minCount of the pod's own gang can let it in."""
        before, after = _as_pod_group(old), _as_pod_group(new)
        if not pod.pod_group or before is None or after is None:
            return QueueingHint.QUEUE_SKIP
        if after.namespace != pod.namespace or after.name != pod.pod_group:
            return QueueingHint.QUEUE_SKIP
        if before.gang_min_count is None or after.gang_min_count is None:
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE if after.gang_min_count < before.gang_min_count else QueueingHint.QUEUE_SKIP
