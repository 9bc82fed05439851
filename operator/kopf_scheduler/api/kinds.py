"""The one registry of Kubernetes kinds the scheduler knows (no I/O, no Kopf).

Every table of kinds derives from ``KINDS``: the operator's informers and the live listing (what
to list and watch, and which optional APIs to discover first), the cache's and simulate's object
keys (``ns/name`` or ``name``), the events vocabulary (which change of a kind may make pods
schedulable) and the workbench's REST paths. A kind added here is informed, keyed, listed and
heard everywhere at once. It sits in ``api`` (the lowest layer) so the engine, the edge, the
offline rooms and the workbench may all read it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

from kopf_scheduler.api.apps import ReplicaSet, StatefulSet, parse_replica_set, parse_stateful_set
from kopf_scheduler.api.core import (
    Namespace,
    ReplicationController,
    Service,
    parse_namespace,
    parse_replication_controller,
    parse_service,
)
from kopf_scheduler.api.meta import ObjectMeta
from kopf_scheduler.api.objects import Node, Pod, parse_node, parse_pod
from kopf_scheduler.api.podgroup import PodGroup, parse_pod_group
from kopf_scheduler.api.policy import PodDisruptionBudget, parse_pod_disruption_budget
from kopf_scheduler.api.scheduling import PriorityClass, parse_priority_class

if TYPE_CHECKING:  # the DRA and storage kinds' views: imported by their parsers below, on first use
    from kopf_scheduler.api.resource import (
        DeviceClass,
        DeviceTaintRule,
        ResourceClaim,
        ResourceClaimTemplate,
        ResourceSlice,
    )
    from kopf_scheduler.api.storage import (
        CSIDriver,
        CSINode,
        CSIStorageCapacity,
        PersistentVolume,
        PersistentVolumeClaim,
        StorageClass,
        VolumeAttachment,
    )

__all__ = [
    "KINDS",
    "OBJECT_KINDS",
    "OPTIONAL_KINDS",
    "POD_FIELD_SELECTOR",
    "HasMeta",
    "Kind",
    "ObjectStore",
    "Objects",
    "Raw",
    "Role",
    "by_name",
    "namespaced_kinds",
    "objects_of",
    "store_of",
]

# Terminal pods hold no resources: kube-scheduler's pod informer excludes them the same way.
POD_FIELD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"


class Role(enum.Enum):
    """Who reads a kind."""

    POD = "pod"  # the pod informer: parsed into Pod, queued and cached
    NODE = "node"  # the node informer: parsed into Node, cached in the snapshot
    OBJECT = "object"  # informed into handle.objects for the plugins
    INPUT = "input"  # taken by simulate (admission expands it) but never informed
    WORKBENCH = "workbench"  # created by the workbench's scenarios only; the scheduler ignores it


# A kind not (yet) given a typed view is stored as its raw dict.
Raw = Mapping[str, Any]
T = TypeVar("T")


class HasMeta(Protocol):
    """What every typed view carries (api/meta.py)."""

    @property
    def metadata(self) -> ObjectMeta: ...


# ``handle.objects``: kind -> key -> that kind's typed view (read one kind typed with ``objects_of``).
Objects = Mapping[str, Mapping[str, HasMeta]]
ObjectStore = dict[str, dict[str, HasMeta]]  # the cache's (and simulate's) own, filled at the edge


def _raw(raw: Raw) -> Raw:
    return raw


_RAW: Callable[[Raw], Any] = _raw


@dataclass(frozen=True, slots=True)
class Kind(Generic[T]):
    """One kind: where it is served, how its objects are keyed and parsed, which event it raises.

    ``parse`` turns the API's dict into the kind's typed, immutable view; it runs once, at the edge
    (the informers, simulate's loader), and raises ObjectError for a malformed object. The views are
    what ``handle.objects`` holds and what queueing hints see as old/new.
    """

    kind: str
    group: str  # "" for the core group
    version: str
    plural: str
    namespaced: bool
    role: Role = Role.OBJECT
    # Served only when discovery lists it (the API may be off): informed after discovery, listed
    # where the apiserver answers.
    optional: bool = False
    # The EventResource (framework/events.py) a change raises; None: no plugin listens to it.
    event: str | None = None
    parse: Callable[[Raw], T] = _RAW

    @property
    def typed(self) -> bool:
        """Whether the kind has a view of its own (only the workbench's kinds stay raw)."""
        return self.parse is not _RAW

    @property
    def group_version(self) -> str:
        """``apps/v1``, or ``v1`` for the core group (an object's apiVersion)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def api_path(self) -> str:
        """The group/version's discovery path: ``/api/v1`` or ``/apis/GROUP/VERSION``."""
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    @property
    def path(self) -> str:
        """The collection across all namespaces (what informers list and watch)."""
        return f"{self.api_path}/{self.plural}"

    def collection(self, namespace: str | None = None) -> str:
        """The collection to create in: namespace-scoped for a namespaced kind."""
        if self.namespaced and namespace is not None:
            return f"{self.api_path}/namespaces/{namespace}/{self.plural}"
        return self.path

    def key(self, metadata: Mapping[str, object]) -> str:
        """``ns/name`` for a namespaced kind (default namespace when unset), ``name`` otherwise."""
        name = str(metadata.get("name", ""))
        return f"{metadata.get('namespace') or 'default'}/{name}" if self.namespaced else name

    def key_of(self, obj: object) -> str:
        """The key of a stored object: a typed view (its ``metadata``) or a raw dict."""
        if isinstance(obj, Mapping):
            return self.key(obj.get("metadata") or {})
        meta = cast(HasMeta, obj).metadata
        if self.namespaced:
            return f"{meta.namespace or 'default'}/{meta.name}"
        return meta.name


# The resource.k8s.io and storage views' modules (~10 and ~5 ms of dataclass definitions to import)
# are imported when the first such object is parsed: a cluster without DRA (storage) objects never
# needs them before its first bind.
def _parse_resource_claim(raw: Raw) -> ResourceClaim:
    from kopf_scheduler.api.resource import parse_resource_claim

    return parse_resource_claim(raw)


def _parse_resource_slice(raw: Raw) -> ResourceSlice:
    from kopf_scheduler.api.resource import parse_resource_slice

    return parse_resource_slice(raw)


def _parse_device_class(raw: Raw) -> DeviceClass:
    from kopf_scheduler.api.resource import parse_device_class

    return parse_device_class(raw)


def _parse_device_taint_rule(raw: Raw) -> DeviceTaintRule:
    from kopf_scheduler.api.resource import parse_device_taint_rule

    return parse_device_taint_rule(raw)


def _parse_resource_claim_template(raw: Raw) -> ResourceClaimTemplate:
    from kopf_scheduler.api.resource import parse_resource_claim_template

    return parse_resource_claim_template(raw)


def _parse_persistent_volume_claim(raw: Raw) -> PersistentVolumeClaim:
    from kopf_scheduler.api.storage import parse_persistent_volume_claim

    return parse_persistent_volume_claim(raw)


def _parse_persistent_volume(raw: Raw) -> PersistentVolume:
    from kopf_scheduler.api.storage import parse_persistent_volume

    return parse_persistent_volume(raw)


def _parse_storage_class(raw: Raw) -> StorageClass:
    from kopf_scheduler.api.storage import parse_storage_class

    return parse_storage_class(raw)


def _parse_csi_node(raw: Raw) -> CSINode:
    from kopf_scheduler.api.storage import parse_csi_node

    return parse_csi_node(raw)


def _parse_csi_driver(raw: Raw) -> CSIDriver:
    from kopf_scheduler.api.storage import parse_csi_driver

    return parse_csi_driver(raw)


def _parse_volume_attachment(raw: Raw) -> VolumeAttachment:
    from kopf_scheduler.api.storage import parse_volume_attachment

    return parse_volume_attachment(raw)


def _parse_csi_storage_capacity(raw: Raw) -> CSIStorageCapacity:
    from kopf_scheduler.api.storage import parse_csi_storage_capacity

    return parse_csi_storage_capacity(raw)


_STORAGE = "storage.k8s.io"
_RESOURCE = "resource.k8s.io"
_SCHEDULING = "scheduling.k8s.io"

# One constant a kind, typed by its view: ``objects_of(handle.objects, PERSISTENT_VOLUME_CLAIM)``.
# A kind without ``parse=`` is still stored raw (``Kind[Raw]``).
NODE: Kind[Node] = Kind("Node", "", "v1", "nodes", False, Role.NODE, event="Node", parse=parse_node)
POD: Kind[Pod] = Kind("Pod", "", "v1", "pods", True, Role.POD, event="Pod", parse=parse_pod)
# The kinds the plugins read through handle.objects, informed in this order.
PERSISTENT_VOLUME_CLAIM: Kind[PersistentVolumeClaim] = Kind(
    "PersistentVolumeClaim", "", "v1", "persistentvolumeclaims", True, event="PersistentVolumeClaim",
    parse=_parse_persistent_volume_claim,
)
PERSISTENT_VOLUME: Kind[PersistentVolume] = Kind(
    "PersistentVolume", "", "v1", "persistentvolumes", False, event="PersistentVolume",
    parse=_parse_persistent_volume,
)
STORAGE_CLASS: Kind[StorageClass] = Kind(
    "StorageClass", _STORAGE, "v1", "storageclasses", False, event=f"{_STORAGE}/StorageClass",
    parse=_parse_storage_class,
)
CSI_NODE: Kind[CSINode] = Kind(
    "CSINode", _STORAGE, "v1", "csinodes", False, event=f"{_STORAGE}/CSINode", parse=_parse_csi_node
)
# NodeVolumeLimits (driver opt-in check, attachments counted) and VolumeBinding (capacity).
CSI_DRIVER: Kind[CSIDriver] = Kind(
    "CSIDriver", _STORAGE, "v1", "csidrivers", False, event=f"{_STORAGE}/CSIDriver", parse=_parse_csi_driver
)
VOLUME_ATTACHMENT: Kind[VolumeAttachment] = Kind(
    "VolumeAttachment", _STORAGE, "v1", "volumeattachments", False, event=f"{_STORAGE}/VolumeAttachment",
    parse=_parse_volume_attachment,
)
CSI_STORAGE_CAPACITY: Kind[CSIStorageCapacity] = Kind(
    "CSIStorageCapacity", _STORAGE, "v1", "csistoragecapacities", True,
    event=f"{_STORAGE}/CSIStorageCapacity", parse=_parse_csi_storage_capacity,
)
POD_DISRUPTION_BUDGET: Kind[PodDisruptionBudget] = Kind(
    "PodDisruptionBudget", "policy", "v1", "poddisruptionbudgets", True, event="PodDisruptionBudget",
    parse=parse_pod_disruption_budget,
)
# Namespace and PriorityClass only feed handle.objects: no event.
NAMESPACE: Kind[Namespace] = Kind("Namespace", "", "v1", "namespaces", False, parse=parse_namespace)
PRIORITY_CLASS: Kind[PriorityClass] = Kind(
    "PriorityClass", _SCHEDULING, "v1", "priorityclasses", False, parse=parse_priority_class
)
# PodTopologySpread's system-default constraints select by the pod's Services and its controlling
# ReplicationController/ReplicaSet/StatefulSet, as the reference's informers feed it.
SERVICE: Kind[Service] = Kind("Service", "", "v1", "services", True, parse=parse_service)
REPLICATION_CONTROLLER: Kind[ReplicationController] = Kind(
    "ReplicationController", "", "v1", "replicationcontrollers", True, parse=parse_replication_controller
)
REPLICA_SET: Kind[ReplicaSet] = Kind("ReplicaSet", "apps", "v1", "replicasets", True, parse=parse_replica_set)
STATEFUL_SET: Kind[StatefulSet] = Kind(
    "StatefulSet", "apps", "v1", "statefulsets", True, parse=parse_stateful_set
)
# DynamicResources: claims (allocations in use and to write), the devices drivers publish, classes.
RESOURCE_CLAIM: Kind[ResourceClaim] = Kind(
    "ResourceClaim", _RESOURCE, "v1", "resourceclaims", True, event=f"{_RESOURCE}/ResourceClaim",
    parse=_parse_resource_claim,
)
RESOURCE_SLICE: Kind[ResourceSlice] = Kind(
    "ResourceSlice", _RESOURCE, "v1", "resourceslices", False, event=f"{_RESOURCE}/ResourceSlice",
    parse=_parse_resource_slice,
)
DEVICE_CLASS: Kind[DeviceClass] = Kind(
    "DeviceClass", _RESOURCE, "v1", "deviceclasses", False, event=f"{_RESOURCE}/DeviceClass",
    parse=_parse_device_class,
)
# The reference's slice tracker turns a DeviceTaintRule change into updates of the (patched)
# ResourceSlices it selects; the plugin hears it as that.
DEVICE_TAINT_RULE: Kind[DeviceTaintRule] = Kind(
    "DeviceTaintRule", _RESOURCE, "v1", "devicetaintrules", False, event=f"{_RESOURCE}/ResourceSlice",
    parse=_parse_device_taint_rule,
)
# Served with GenericWorkload on and scheduling.k8s.io/v1beta1 enabled (both off by default in v1.37).
POD_GROUP: Kind[PodGroup] = Kind(
    "PodGroup", _SCHEDULING, "v1beta1", "podgroups", True, optional=True, event=f"{_SCHEDULING}/PodGroup",
    parse=parse_pod_group,
)
# simulate's admission turns a pod's template reference into its claim.
RESOURCE_CLAIM_TEMPLATE: Kind[ResourceClaimTemplate] = Kind(
    "ResourceClaimTemplate", _RESOURCE, "v1", "resourceclaimtemplates", True, Role.INPUT,
    parse=_parse_resource_claim_template,
)
RUNTIME_CLASS: Kind[Raw] = Kind("RuntimeClass", "node.k8s.io", "v1", "runtimeclasses", False, Role.WORKBENCH)
# Written by the scheduler (cluster/client.py), read back only by the workbench (fidelity, the checker).
EVENT: Kind[Raw] = Kind("Event", "events.k8s.io", "v1", "events", True, Role.WORKBENCH)

KINDS: tuple[Kind[Any], ...] = (
    NODE,
    POD,
    PERSISTENT_VOLUME_CLAIM,
    PERSISTENT_VOLUME,
    STORAGE_CLASS,
    CSI_NODE,
    CSI_DRIVER,
    VOLUME_ATTACHMENT,
    CSI_STORAGE_CAPACITY,
    POD_DISRUPTION_BUDGET,
    NAMESPACE,
    PRIORITY_CLASS,
    SERVICE,
    REPLICATION_CONTROLLER,
    REPLICA_SET,
    STATEFUL_SET,
    RESOURCE_CLAIM,
    RESOURCE_SLICE,
    DEVICE_CLASS,
    DEVICE_TAINT_RULE,
    POD_GROUP,
    RESOURCE_CLAIM_TEMPLATE,
    RUNTIME_CLASS,
    EVENT,
)

_BY_NAME: Mapping[str, Kind[Any]] = {k.kind: k for k in KINDS}

# Always informed into handle.objects, then the ones informed where discovery finds them.
OBJECT_KINDS: tuple[Kind[Any], ...] = tuple(k for k in KINDS if k.role is Role.OBJECT and not k.optional)
OPTIONAL_KINDS: tuple[Kind[Any], ...] = tuple(k for k in KINDS if k.role is Role.OBJECT and k.optional)


def by_name(kind: str) -> Kind[Any]:
    """The registered kind; KeyError for one the scheduler does not know."""
    return _BY_NAME[kind]


def namespaced_kinds(*roles: Role) -> frozenset[str]:
    """Names of the namespaced kinds with one of ``roles``."""
    return frozenset(k.kind for k in KINDS if k.namespaced and k.role in roles)


_NONE: Mapping[str, Any] = {}


def objects_of(objects: Mapping[str, Mapping[str, object]], kind: Kind[T]) -> Mapping[str, T]:
    """The stored objects of ``kind`` (``handle.objects[kind]``), typed by its view: key -> view.

    The one place the per-kind type of ``handle.objects`` is asserted; the edge stored what
    ``kind.parse`` returned, so the cast holds by construction.
    """
    return cast("Mapping[str, T]", objects.get(kind.kind, _NONE))


def store_of(objects: ObjectStore, kind: Kind[T]) -> dict[str, T]:
    """The writable map of ``kind`` in a store its owner fills (the memory client plays the
    apiserver's writes on simulate's store), created empty if absent; typed as ``objects_of``."""
    return cast("dict[str, T]", objects.setdefault(kind.kind, {}))
