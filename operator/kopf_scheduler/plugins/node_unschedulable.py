"""NodeUnschedulable: keep pods off cordoned nodes unless they tolerate the unschedulable taint."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from kopf_scheduler.api.objects import Node, Pod
from kopf_scheduler.api.types import NO_SCHEDULE, Taint
from kopf_scheduler.framework import signers
from kopf_scheduler.framework.interface import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EventResource,
    Plugin,
    QueueingHint,
    SignFragments,
    Status,
)
from kopf_scheduler.framework.types import NodeInfo

if TYPE_CHECKING:
    from kopf_scheduler.framework.snapshot import Snapshot

__all__ = ["NodeUnschedulable"]

ERR_REASON_UNKNOWN_CONDITION = "node(s) had unknown conditions"
ERR_REASON_UNSCHEDULABLE = "node(s) were unschedulable"
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", NO_SCHEDULE)


def tolerates_unschedulable(pod: Pod) -> bool:
    return any(t.tolerates(UNSCHEDULABLE_TAINT) for t in pod.tolerations)


class NodeUnschedulable(Plugin):
    """Filter, EnqueueExtensions."""

    name = "NodeUnschedulable"

    def sign(self, pod: Pod) -> tuple[SignFragments, Status | None]:
        return [(signers.TOLERATIONS, signers.tolerations(pod))], None

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status | None:
        node = node_info.node
        if node is None:
            return Status.unresolvable(ERR_REASON_UNKNOWN_CONDITION)
        if not node.unschedulable or tolerates_unschedulable(pod):
            return None
        return Status.unresolvable(ERR_REASON_UNSCHEDULABLE)

    def filter_vector(
        self, state: CycleState, pod: Pod, snapshot: Snapshot, idx: np.ndarray
    ) -> np.ndarray | None:
        if tolerates_unschedulable(pod):
            return np.ones(len(idx), dtype=bool)
        return ~snapshot.arrays.unschedulable[idx]

    def events_to_register(self) -> Iterable[ClusterEventWithHint]:
        # A change of spec.unschedulable is classified as a taint update, as in the reference.
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT),
                self.is_schedulable_after_node_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_TOLERATIONS),
                self.is_schedulable_after_pod_toleration_change,
            ),
        ]

    def is_schedulable_after_node_change(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        if not isinstance(new, Node):
            return QueueingHint.QUEUE
        was_schedulable = isinstance(old, Node) and not old.unschedulable
        if not was_schedulable and not new.unschedulable:
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    def is_schedulable_after_pod_toleration_change(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        # Tolerations can only be added, so tolerating now is enough to retry.
        if isinstance(new, Pod) and new.uid == pod.uid and tolerates_unschedulable(new):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP
