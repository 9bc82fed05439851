"""The cluster-event vocabulary (the reference's ``framework/events.go`` and its event types).

One module names every event the engine speaks of: what the event handlers emit, what plugins
register with their queueing hints, what the queue matches and reports in
``queue_incoming_pods_total``. Pure data and comparisons of parsed objects; no queue, no cache.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kopf_scheduler.api import kinds

if TYPE_CHECKING:
    from kopf_scheduler.api.objects import Node, Pod

__all__ = [
    "EVENT_ASSIGNED_POD_ADD",
    "EVENT_ASSIGNED_POD_DELETE",
    "EVENT_FORCE_ACTIVATE",
    "EVENT_NODE_ADD",
    "EVENT_NODE_DELETE",
    "EVENT_UNSCHEDULABLE_TIMEOUT",
    "EVENT_UNSCHEDULED_POD_ADD",
    "EVENT_UNSCHEDULED_POD_DELETE",
    "EVENT_UNSCHEDULED_POD_UPDATE",
    "OBJECT_EVENT_RESOURCES",
    "POD_SCALE_DOWN",
    "UPDATE_POD_OTHER",
    "WILDCARD_EVENT",
    "ActionType",
    "ClusterEvent",
    "ClusterEventWithHint",
    "EventResource",
    "QueueingHint",
    "QueueingHintFn",
    "is_wildcard",
    "match_cluster_event",
    "node_scheduling_properties_change",
    "object_event",
    "pod_scheduling_properties_change",
]

class EventResource(enum.StrEnum):
    POD = "Pod"
    ASSIGNED_POD = "AssignedPod"
    UNSCHEDULED_POD = "UnscheduledPod"
    NODE = "Node"
    PVC = "PersistentVolumeClaim"
    PV = "PersistentVolume"
    # Group-qualified as the reference spells them: event labels read "storage.k8s.io/CSINodeAdd".
    STORAGE_CLASS = "storage.k8s.io/StorageClass"
    CSI_NODE = "storage.k8s.io/CSINode"
    VOLUME_ATTACHMENT = "storage.k8s.io/VolumeAttachment"
    CSI_DRIVER = "storage.k8s.io/CSIDriver"
    CSI_STORAGE_CAPACITY = "storage.k8s.io/CSIStorageCapacity"
    PDB = "PodDisruptionBudget"
    RESOURCE_CLAIM = "resource.k8s.io/ResourceClaim"
    RESOURCE_SLICE = "resource.k8s.io/ResourceSlice"
    DEVICE_CLASS = "resource.k8s.io/DeviceClass"
    POD_GROUP = "scheduling.k8s.io/PodGroup"
    WILDCARD = "*"


class ActionType(enum.IntFlag):
    ADD = 1
    DELETE = 2
    UPDATE_NODE_ALLOCATABLE = 4
    UPDATE_NODE_LABEL = 8
    UPDATE_NODE_TAINT = 16
    UPDATE_NODE_CONDITION = 32
    UPDATE_NODE_ANNOTATION = 64
    UPDATE_POD_LABEL = 128
    UPDATE_POD_SCALE_DOWN = 256
    UPDATE_POD_TOLERATIONS = 512
    UPDATE_POD_SCHEDULING_GATES_ELIMINATED = 1024
    UPDATE_POD_GENERATED_RESOURCE_CLAIM = 2048
    UPDATE_NODE_DECLARED_FEATURE = 8192  # 4096 is the queue's UPDATE_POD_OTHER
    UPDATE_NODE_PREEMPTION_POLICY = 16384
    UPDATE = (
        UPDATE_NODE_ALLOCATABLE
        | UPDATE_NODE_LABEL
        | UPDATE_NODE_TAINT
        | UPDATE_NODE_CONDITION
        | UPDATE_NODE_ANNOTATION
        | UPDATE_POD_LABEL
        | UPDATE_POD_SCALE_DOWN
        | UPDATE_POD_TOLERATIONS
        | UPDATE_POD_SCHEDULING_GATES_ELIMINATED
        | UPDATE_POD_GENERATED_RESOURCE_CLAIM
        | 4096
        | UPDATE_NODE_DECLARED_FEATURE
        | UPDATE_NODE_PREEMPTION_POLICY
    )
    ALL = ADD | DELETE | UPDATE


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    resource: EventResource
    action: ActionType
    label: str = ""

    def matches(self, incoming: ClusterEvent) -> bool:
        """Does an incoming event fall under this registered one (the reference's ``Match``)."""
        if self.resource != EventResource.WILDCARD and incoming.resource != self.resource:
            # A registered "Pod" covers both assigned and unscheduled pods.
            pod_kinds = (EventResource.ASSIGNED_POD, EventResource.UNSCHEDULED_POD)
            if not (self.resource == EventResource.POD and incoming.resource in pod_kinds):
                return False
        return bool(self.action & incoming.action)


class QueueingHint(enum.IntEnum):
    QUEUE_SKIP = 0
    QUEUE = 1


# (pod waiting in the unschedulable pool, old object, new object) -> hint
QueueingHintFn = Callable[["Pod", Any, Any], QueueingHint]


@dataclass(frozen=True, slots=True)
class ClusterEventWithHint:
    event: ClusterEvent
    hint: QueueingHintFn | None = None


# --- the events the engine emits ---------------------------------------------------------------

# The bit of ActionType.UPDATE not covered by a named update (the reference's updatePodOther):
# only plugins that registered a general Pod/Update hear it.
UPDATE_POD_OTHER = ActionType(4096)

EVENT_UNSCHEDULED_POD_ADD = ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.ADD, "UnscheduledPodAdd")
EVENT_UNSCHEDULED_POD_UPDATE = ClusterEvent(
    EventResource.UNSCHEDULED_POD, ActionType.UPDATE, "UnscheduledPodUpdate"
)
EVENT_UNSCHEDULED_POD_DELETE = ClusterEvent(
    EventResource.UNSCHEDULED_POD, ActionType.DELETE, "UnscheduledPodDelete"
)
EVENT_ASSIGNED_POD_ADD = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.ADD, "AssignedPodAdd")
EVENT_ASSIGNED_POD_DELETE = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE, "AssignedPodDelete")
EVENT_NODE_ADD = ClusterEvent(EventResource.NODE, ActionType.ADD, "NodeAdd")
EVENT_NODE_DELETE = ClusterEvent(EventResource.NODE, ActionType.DELETE, "NodeDelete")
EVENT_UNSCHEDULABLE_TIMEOUT = ClusterEvent(EventResource.WILDCARD, ActionType.ALL, "UnschedulableTimeout")
EVENT_FORCE_ACTIVATE = ClusterEvent(EventResource.WILDCARD, ActionType.ALL, "ForceActivate")
WILDCARD_EVENT = ClusterEvent(EventResource.WILDCARD, ActionType.ALL)
# Any pod releasing resources (matched against, never emitted).
POD_SCALE_DOWN = ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_SCALE_DOWN)

# Kinds whose changes may make pods schedulable (api/kinds.py); other stored kinds (Namespace, PriorityClass)
# only feed handle.objects.
OBJECT_EVENT_RESOURCES: Mapping[str, EventResource] = {
    k.kind: EventResource(k.event)
    for k in kinds.KINDS
    if k.role is kinds.Role.OBJECT and k.event is not None
}


def object_event(kind: str, action: ActionType) -> ClusterEvent | None:
    """The event for an add/update/delete of another kind, None for kinds no plugin watches."""
    resource = OBJECT_EVENT_RESOURCES.get(kind)
    if resource is None:
        return None
    verb = {ActionType.ADD: "Add", ActionType.UPDATE: "Update", ActionType.DELETE: "Delete"}[action]
    return ClusterEvent(resource, action, f"{resource}{verb}")


def is_wildcard(event: ClusterEvent) -> bool:
    return event.resource == EventResource.WILDCARD and event.action == ActionType.ALL


def match_cluster_event(registered: ClusterEvent, incoming: ClusterEvent) -> bool:
    """The reference's ``MatchClusterEvents``: a wildcard incoming event matches every registration."""
    if is_wildcard(incoming):
        return True
    return registered.matches(incoming)


def pod_scheduling_properties_change(old: Pod, new: Pod) -> list[ClusterEvent]:
    """The events a pod update stands for (``framework.PodSchedulingPropertiesChange``)."""
    resource = EventResource.ASSIGNED_POD if new.node_name else EventResource.UNSCHEDULED_POD
    prefix = str(resource)
    events: list[ClusterEvent] = []
    if old.labels != new.labels:
        events.append(ClusterEvent(resource, ActionType.UPDATE_POD_LABEL, f"{prefix}UpdatePodLabel"))
    if _scaled_down(old, new):
        events.append(ClusterEvent(resource, ActionType.UPDATE_POD_SCALE_DOWN, f"{prefix}UpdatePodScaleDown"))
    if old.scheduling_gates and not new.scheduling_gates:
        events.append(
            ClusterEvent(
                resource,
                ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED,
                f"{prefix}UpdatePodSchedulingGatesEliminated",
            )
        )
    if old.tolerations != new.tolerations:
        events.append(
            ClusterEvent(resource, ActionType.UPDATE_POD_TOLERATIONS, f"{prefix}UpdatePodToleration")
        )
    if old.resource_claim_statuses != new.resource_claim_statuses:
        events.append(
            ClusterEvent(
                resource,
                ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM,
                f"{prefix}UpdatePodGeneratedResourceClaim",
            )
        )
    if not events:
        events.append(ClusterEvent(resource, UPDATE_POD_OTHER, f"{prefix}Update"))
    return events


def _scaled_down(old: Pod, new: Pod) -> bool:
    o, n = old.requests, new.requests
    pairs = [
        (o.milli_cpu, n.milli_cpu),
        (o.memory, n.memory),
        (o.ephemeral_storage, n.ephemeral_storage),
    ]
    pairs.extend((amount, n.scalar.get(name, 0)) for name, amount in o.scalar.items())
    return any(before > after for before, after in pairs if before)


def node_scheduling_properties_change(old: Node, new: Node) -> list[ClusterEvent]:
    """The node update events, in the reference's order (``NodeSchedulingPropertiesChange``).

    Labels are the reference's (resource + action, what queue_incoming_pods_total's ``event`` shows);
    a node turning schedulable is reported as a taint update, as there."""
    actions: list[tuple[ActionType, str]] = []
    if old.unschedulable != new.unschedulable and not new.unschedulable:
        # Becoming schedulable is like a taint going away.
        actions.append((ActionType.UPDATE_NODE_TAINT, "NodeUpdateNodeTaint"))
    if old.allocatable != new.allocatable:
        actions.append((ActionType.UPDATE_NODE_ALLOCATABLE, "NodeUpdateNodeAllocatable"))
    if old.labels != new.labels:
        actions.append((ActionType.UPDATE_NODE_LABEL, "NodeUpdateNodeLabel"))
    if old.taints != new.taints:
        actions.append((ActionType.UPDATE_NODE_TAINT, "NodeUpdateNodeTaint"))
    if old.conditions != new.conditions:
        actions.append((ActionType.UPDATE_NODE_CONDITION, "NodeUpdateNodeCondition"))
    if old.annotations != new.annotations:
        actions.append((ActionType.UPDATE_NODE_ANNOTATION, "NodeUpdateNodeAnnotation"))
    if old.declared_features != new.declared_features:  # NodeDeclaredFeatures is GA in 1.37
        actions.append((ActionType.UPDATE_NODE_DECLARED_FEATURE, "NodeUpdateNodeDeclaredFeature"))
    if old.preemption_policy != new.preemption_policy:
        actions.append((ActionType.UPDATE_NODE_PREEMPTION_POLICY, "NodeUpdateNodePreemptionPolicy"))
    return [ClusterEvent(EventResource.NODE, action, label) for action, label in actions]
