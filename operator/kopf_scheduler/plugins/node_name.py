"""NodeName: a pod with ``spec.nodeName`` fits only that node."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from kopf_scheduler.api.objects import NodeSpec, PodSpec
from kopf_scheduler.framework.interface import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EventResource,
    Plugin,
    QueueingHint,
    Status,
)
from kopf_scheduler.framework.types import NodeInfo

if TYPE_CHECKING:
    from kopf_scheduler.cache.snapshot import Snapshot

__all__ = ["NodeName", "fits"]

ERR_REASON = "node(s) didn't match the requested node name"


def fits(pod: PodSpec, node_info: NodeInfo) -> bool:
    return not pod.node_name or pod.node_name == node_info.name


class NodeName(Plugin):
    """Filter, EnqueueExtensions."""

    name = "NodeName"

    def filter(self, state: CycleState, pod: PodSpec, node_info: NodeInfo) -> Status | None:
        if node_info.node is None:
            return Status.as_error(LookupError("node not found"))
        return None if fits(pod, node_info) else Status.unresolvable(ERR_REASON)

    def filter_vector(
        self, state: CycleState, pod: PodSpec, snapshot: Snapshot, idx: np.ndarray
    ) -> np.ndarray | None:
        if not pod.node_name:
            return np.ones(len(idx), dtype=bool)
        row = snapshot.index.get(pod.node_name, -1)
        return np.asarray(idx) == row

    def events_to_register(self) -> Iterable[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD), self.is_schedulable_after_node_add
            )
        ]

    def is_schedulable_after_node_add(self, pod: PodSpec, old: Any, new: Any) -> QueueingHint:
        if not isinstance(new, NodeSpec) or not pod.node_name or pod.node_name == new.name:
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP
