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
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "KINDS",
    "OBJECT_KINDS",
    "OPTIONAL_KINDS",
    "POD_FIELD_SELECTOR",
    "Kind",
    "Role",
    "by_name",
    "namespaced_kinds",
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


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind: where it is served, how its objects are keyed and which event its changes raise."""

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


_STORAGE = "storage.k8s.io"
_RESOURCE = "resource.k8s.io"
_SCHEDULING = "scheduling.k8s.io"

KINDS: tuple[Kind, ...] = (
    Kind("Node", "", "v1", "nodes", False, Role.NODE, event="Node"),
    Kind("Pod", "", "v1", "pods", True, Role.POD, event="Pod"),
    # The kinds the plugins read through handle.objects, informed in this order.
    Kind("PersistentVolumeClaim", "", "v1", "persistentvolumeclaims", True, event="PersistentVolumeClaim"),
    Kind("PersistentVolume", "", "v1", "persistentvolumes", False, event="PersistentVolume"),
    Kind("StorageClass", _STORAGE, "v1", "storageclasses", False, event=f"{_STORAGE}/StorageClass"),
    Kind("CSINode", _STORAGE, "v1", "csinodes", False, event=f"{_STORAGE}/CSINode"),
    # NodeVolumeLimits (driver opt-in check, attachments counted) and VolumeBinding (capacity).
    Kind("CSIDriver", _STORAGE, "v1", "csidrivers", False, event=f"{_STORAGE}/CSIDriver"),
    Kind(
        "VolumeAttachment", _STORAGE, "v1", "volumeattachments", False,
        event=f"{_STORAGE}/VolumeAttachment",
    ),
    Kind(
        "CSIStorageCapacity", _STORAGE, "v1", "csistoragecapacities", True,
        event=f"{_STORAGE}/CSIStorageCapacity",
    ),
    Kind("PodDisruptionBudget", "policy", "v1", "poddisruptionbudgets", True, event="PodDisruptionBudget"),
    # Namespace and PriorityClass only feed handle.objects: no event.
    Kind("Namespace", "", "v1", "namespaces", False),
    Kind("PriorityClass", _SCHEDULING, "v1", "priorityclasses", False),
    # PodTopologySpread's system-default constraints select by the pod's Services and its controlling
    # ReplicationController/ReplicaSet/StatefulSet, as the reference's informers feed it.
    Kind("Service", "", "v1", "services", True),
    Kind("ReplicationController", "", "v1", "replicationcontrollers", True),
    Kind("ReplicaSet", "apps", "v1", "replicasets", True),
    Kind("StatefulSet", "apps", "v1", "statefulsets", True),
    # DynamicResources: claims (allocations in use and to write), the devices drivers publish, classes.
    Kind("ResourceClaim", _RESOURCE, "v1", "resourceclaims", True, event=f"{_RESOURCE}/ResourceClaim"),
    Kind("ResourceSlice", _RESOURCE, "v1", "resourceslices", False, event=f"{_RESOURCE}/ResourceSlice"),
    Kind("DeviceClass", _RESOURCE, "v1", "deviceclasses", False, event=f"{_RESOURCE}/DeviceClass"),
    # The reference's slice tracker turns a DeviceTaintRule change into updates of the (patched)
    # ResourceSlices it selects; the plugin hears it as that.
    Kind("DeviceTaintRule", _RESOURCE, "v1", "devicetaintrules", False, event=f"{_RESOURCE}/ResourceSlice"),
    # Served with GenericWorkload on and scheduling.k8s.io/v1beta1 enabled (both off by default in v1.37).
    Kind(
        "PodGroup", _SCHEDULING, "v1beta1", "podgroups", True,
        optional=True, event=f"{_SCHEDULING}/PodGroup",
    ),
    # simulate's admission turns a pod's template reference into its claim.
    Kind("ResourceClaimTemplate", _RESOURCE, "v1", "resourceclaimtemplates", True, Role.INPUT),
    Kind("RuntimeClass", "node.k8s.io", "v1", "runtimeclasses", False, Role.WORKBENCH),
)

_BY_NAME: Mapping[str, Kind] = {k.kind: k for k in KINDS}

# Always informed into handle.objects, then the ones informed where discovery finds them.
OBJECT_KINDS: tuple[Kind, ...] = tuple(k for k in KINDS if k.role is Role.OBJECT and not k.optional)
OPTIONAL_KINDS: tuple[Kind, ...] = tuple(k for k in KINDS if k.role is Role.OBJECT and k.optional)


def by_name(kind: str) -> Kind:
    """The registered kind; KeyError for one the scheduler does not know."""
    return _BY_NAME[kind]


def namespaced_kinds(*roles: Role) -> frozenset[str]:
    """Names of the namespaced kinds with one of ``roles``."""
    return frozenset(k.kind for k in KINDS if k.namespaced and k.role in roles)
