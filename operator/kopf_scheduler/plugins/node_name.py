"""NodeName: a pod with ``spec.nodeName`` fits only that node."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.framework import signers
from kopf_scheduler.framework.interface import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EventResource,
    Plugin,
    PreFilterResult,
    SignFragments,
    Status,
)
from kopf_scheduler.framework.types import NodeInfo

if TYPE_CHECKING:
    from kopf_scheduler.framework.snapshot import Snapshot

__all__ = ["NodeName", "fits"]

ERR_REASON = "node(s) didn't match the requested node name"


def fits(pod: Pod, node_info: NodeInfo) -> bool:
    return not pod.node_name or pod.node_name == node_info.name


class NodeName(Plugin):
    """PreFilter (narrows to the named node, since 1.37), Filter, EnqueueExtensions."""

    name = "NodeName"

    def sign(self, pod: Pod) -> tuple[SignFragments, Status | None]:
        return [(signers.NODE_NAME, pod.node_name)], None

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        if pod.node_name:
            return PreFilterResult({pod.node_name}), None
        return None, None

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status | None:
        if node_info.node is None:
            return Status.as_error(LookupError("node not found"))
        return None if fits(pod, node_info) else Status.unresolvable(ERR_REASON)

    def filter_vector(
        self, state: CycleState, pod: Pod, snapshot: Snapshot, idx: np.ndarray
    ) -> np.ndarray | None:
        if not pod.node_name:
            return np.ones(len(idx), dtype=bool)
        row = snapshot.index.get(pod.node_name, -1)
        return np.asarray(idx) == row

    def events_to_register(self) -> Iterable[ClusterEventWithHint]:
        # No hint in the reference: any new node requeues.
        return [ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD))]
