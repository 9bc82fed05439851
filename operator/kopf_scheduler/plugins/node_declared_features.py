"""NodeDeclaredFeatures: a pod that needs a node-level feature only fits nodes that declare it.

Nodes list what they support in ``status.declaredFeatures`` (kept sorted by the kubelet); the
scheduler infers from the pod's spec which of the known features it needs. Only features a pod
spec can require at scheduling time matter here; the others in the reference's registry are
inferred on pod updates only, so they never filter. GA (and in the default profile) since 1.37.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kopf_scheduler.api.objects import Node, Pod
from kopf_scheduler.framework import signers
from kopf_scheduler.framework.interface import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    Code,
    CycleState,
    EventResource,
    Plugin,
    PreFilterResult,
    QueueingHint,
    SignFragments,
    Status,
)
from kopf_scheduler.framework.types import NodeInfo

__all__ = [
    "KNOWN_FEATURES",
    "NodeDeclaredFeatures",
    "infer_pod_features",
    "node_features",
]

NAME = "NodeDeclaredFeatures"
PRE_FILTER_STATE_KEY = "PreFilter" + NAME
ERR_REASON_UNSATISFIED = "node(s) didn't match Pod's required features"

RESTART_ALL_CONTAINERS = "RestartAllContainersOnContainerExits"
USER_NAMESPACES_HOST_NETWORK = "UserNamespacesHostNetworkSupport"
VOLUME_BIND_MOUNT_OPTIONS = "VolumeBindMountOptions"

# The reference's feature registry (component-helpers nodedeclaredfeatures), sorted by name.
KNOWN_FEATURES: tuple[str, ...] = tuple(
    sorted(
        (
            "DRANodeAllocatableResources",
            "DRAOptionalNodeOperations",
            "ExtendWebSocketsToKubelet",
            "InPlacePodLevelResourcesVerticalScaling",
            "InPlacePodVerticalScalingInitContainers",
            "InPlacePodVerticalScalingMemoryBackedVolumes",
            RESTART_ALL_CONTAINERS,
            USER_NAMESPACES_HOST_NETWORK,
            VOLUME_BIND_MOUNT_OPTIONS,
        )
    )
)


def infer_pod_features(pod: Pod) -> frozenset[str]:
    """Features the pod's spec requires of its node (``InferForPodScheduling``)."""
    out: set[str] = set()
    if any(c.restart_all_containers for group in (pod.containers, pod.init_containers) for c in group):
        out.add(RESTART_ALL_CONTAINERS)
    if pod.host_network and pod.host_users is False:
        out.add(USER_NAMESPACES_HOST_NETWORK)
    groups = (pod.containers, pod.init_containers, pod.ephemeral_containers)
    if any(c.bind_mount_options for group in groups for c in group):
        out.add(VOLUME_BIND_MOUNT_OPTIONS)
    return frozenset(out)


def node_features(declared: Sequence[str]) -> frozenset[str]:
    """The known features among a node's declared ones (``TryMap``).

    Like the reference, this walks both lists in sorted order: the kubelet writes the list sorted,
    and an unsorted list loses the entries the walk steps over, as it does in the reference.
    """
    out: set[str] = set()
    i = j = 0
    while i < len(declared) and j < len(KNOWN_FEATURES):
        if declared[i] == KNOWN_FEATURES[j]:
            out.add(declared[i])
            i += 1
            j += 1
        elif declared[i] < KNOWN_FEATURES[j]:
            i += 1
        else:
            j += 1
    return frozenset(out)


@dataclass(slots=True)
class _PreFilterState:
    required: frozenset[str]

    def clone(self) -> _PreFilterState:
        return self


class NodeDeclaredFeatures(Plugin):
    """PreFilter (Skip when the pod needs no feature), Filter, EnqueueExtensions."""

    name = NAME

    def sign(self, pod: Pod) -> tuple[SignFragments, Status | None]:
        return [(signers.FEATURES, tuple(sorted(infer_pod_features(pod))))], None

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        required = infer_pod_features(pod)
        if not required:
            return None, Status(Code.SKIP)
        state.write(PRE_FILTER_STATE_KEY, _PreFilterState(required))
        return None, None

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status | None:
        s = state.get(PRE_FILTER_STATE_KEY)
        if not isinstance(s, _PreFilterState):
            return Status.as_error(
                KeyError(f'error reading "{PRE_FILTER_STATE_KEY}" from cycle-state: not found')
            )
        node = node_info.node
        declared = node.declared_features if node is not None else ()
        if s.required <= node_features(declared):
            return None
        return Status.unresolvable(ERR_REASON_UNSATISFIED)

    def events_to_register(self) -> Iterable[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_DECLARED_FEATURE),
                self.is_schedulable_after_node_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD, ActionType.UPDATE),
                self.is_schedulable_after_pod_update,
            ),
        ]

    def is_schedulable_after_node_change(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        if not isinstance(new, Node):
            return QueueingHint.QUEUE
        if isinstance(old, Node) and old.declared_features == new.declared_features:
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE

    def is_schedulable_after_pod_update(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        # Registered for the target pod only: other pods' updates never concern this plugin.
        if not isinstance(new, Pod) or not isinstance(old, Pod):
            return QueueingHint.QUEUE
        if new.uid != pod.uid:
            return QueueingHint.QUEUE_SKIP
        if infer_pod_features(old) == infer_pod_features(new):
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE
