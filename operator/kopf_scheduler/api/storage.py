"""Typed views of the storage kinds the volume plugins read (core/v1 PV and PVC, storage.k8s.io/v1).

Parsed once at the edge (the informers, simulate's loader) by the parsers registered on their
``api/kinds.py`` constants; VolumeBinding, VolumeZone, VolumeRestrictions and NodeVolumeLimits read
only these fields. The reference's small derived rules that every reader must agree on are applied
here, once: a claim's or volume's class (the beta annotation wins over ``storageClassName``),
quantities parsed exactly, a PV's node affinity and a claim's selector parsed into matchers.

A malformed object raises :class:`~kopf_scheduler.api.types.ObjectError` naming the field; the
informer then logs and skips it, as the apiserver's validation would never have let it in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from kopf_scheduler.api.meta import ObjectMeta, parse_meta, parse_namespaced_meta
from kopf_scheduler.api.quantity import QuantityError, parse_quantity
from kopf_scheduler.api.selectors import parse_label_selector, parse_node_selector
from kopf_scheduler.api.types import LabelSelector, NodeSelector, ObjectError, as_int, as_list, as_mapping
from kopf_scheduler.api.volumes import IN_TREE_VOLUME_ID, InTreeVolumeSource

__all__ = [
    "ANN_BIND_COMPLETED",
    "ANN_BOUND_BY_CONTROLLER",
    "ANN_SELECTED_NODE",
    "BETA_STORAGE_CLASS_ANNOTATION",
    "CSIDriver",
    "CSINode",
    "CSINodeDriver",
    "CSIStorageCapacity",
    "CSIVolumeSource",
    "ClaimRef",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "StorageClass",
    "TopologySelectorTerm",
    "VolumeAttachment",
    "parse_csi_driver",
    "parse_csi_node",
    "parse_csi_storage_capacity",
    "parse_persistent_volume",
    "parse_persistent_volume_claim",
    "parse_storage_class",
    "parse_volume_attachment",
]

ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
BETA_STORAGE_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"

FILESYSTEM = "Filesystem"

def _class_of(meta: ObjectMeta, spec: Mapping[str, Any]) -> str:
    """``GetPersistentVolume(Claim)Class``: the beta annotation wins over spec.storageClassName."""
    if BETA_STORAGE_CLASS_ANNOTATION in meta.annotations:
        return meta.annotations[BETA_STORAGE_CLASS_ANNOTATION]
    return str(spec.get("storageClassName") or "")


def _quantity(raw: Any, path: str) -> Fraction | None:
    if raw is None:
        return None
    try:
        return parse_quantity(raw)
    except QuantityError as exc:
        raise ObjectError(path, str(exc)) from None


def _bool(raw: Any, path: str) -> bool:
    if raw is None:
        return False
    if not isinstance(raw, bool):
        raise ObjectError(path, f"expected a boolean, got {type(raw).__name__}")
    return raw


def _strings(raw: Any, path: str) -> tuple[str, ...]:
    return tuple(str(v) for v in as_list(raw, path))


def _access_modes(spec: Mapping[str, Any]) -> frozenset[str]:
    return frozenset(_strings(spec.get("accessModes"), "spec.accessModes"))


# -- PersistentVolumeClaim --


@dataclass(frozen=True, slots=True)
class PersistentVolumeClaim:
    metadata: ObjectMeta
    class_name: str = ""  # GetPersistentVolumeClaimClass; "" for none
    volume_name: str = ""  # spec.volumeName: the PV it is (pre-)bound to
    access_modes: frozenset[str] = frozenset()
    volume_mode: str = FILESYSTEM
    storage_request: Fraction | None = None  # spec.resources.requests.storage; None when absent
    selector: LabelSelector | None = None  # spec.selector over PV labels
    phase: str = ""  # status.phase

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @property
    def requested_storage(self) -> Fraction:
        """The storage request, 0 without one (an empty Quantity)."""
        return self.storage_request if self.storage_request is not None else Fraction(0)

    @property
    def is_fully_bound(self) -> bool:
        """Bound and the PV controller has completed the binding (``bind-completed``)."""
        return bool(self.volume_name) and ANN_BIND_COMPLETED in self.metadata.annotations


def parse_persistent_volume_claim(raw: Mapping[str, Any]) -> PersistentVolumeClaim:
    meta = parse_namespaced_meta(raw.get("metadata"))
    spec = as_mapping(raw.get("spec"), "spec")
    resources = as_mapping(spec.get("resources"), "spec.resources")
    requests = as_mapping(resources.get("requests"), "spec.resources.requests")
    status = as_mapping(raw.get("status"), "status")
    return PersistentVolumeClaim(
        metadata=meta,
        class_name=_class_of(meta, spec),
        volume_name=str(spec.get("volumeName") or ""),
        access_modes=_access_modes(spec),
        volume_mode=str(spec.get("volumeMode") or FILESYSTEM),
        storage_request=_quantity(requests.get("storage"), "spec.resources.requests.storage"),
        selector=parse_label_selector(spec.get("selector"), "spec.selector"),
        phase=str(status.get("phase") or ""),
    )


# -- PersistentVolume --


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """``spec.claimRef``: the claim a PV is bound (or pre-bound) to."""

    name: str
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""


@dataclass(frozen=True, slots=True)
class CSIVolumeSource:
    driver: str
    volume_handle: str


@dataclass(frozen=True, slots=True)
class PersistentVolume:
    metadata: ObjectMeta
    class_name: str = ""  # GetPersistentVolumeClass
    capacity: Fraction = Fraction(0)  # spec.capacity.storage (0 when absent)
    access_modes: frozenset[str] = frozenset()
    volume_mode: str = FILESYSTEM
    claim_ref: ClaimRef | None = None
    node_affinity: NodeSelector | None = None  # spec.nodeAffinity.required; None fits every node
    phase: str = ""  # status.phase
    csi: CSIVolumeSource | None = None
    in_tree: InTreeVolumeSource | None = None

    def matches_node(self, node_name: str, node_labels: Mapping[str, str]) -> bool:
        """``CheckNodeAffinity``: a PV without required node affinity fits every node."""
        return self.node_affinity is None or self.node_affinity.matches(node_name, node_labels)

    def is_bound_to(self, claim: PersistentVolumeClaim) -> bool:
        """``IsVolumeBoundToClaim``: name and namespace match, and the UID when the ref has one."""
        ref = self.claim_ref
        if ref is None:
            return False
        meta = claim.metadata
        if ref.name != meta.name or (ref.namespace or "default") != meta.namespace:
            return False
        return not ref.uid or ref.uid == meta.uid


def _in_tree(spec: Mapping[str, Any]) -> InTreeVolumeSource | None:
    for source, id_field in IN_TREE_VOLUME_ID.items():
        value = spec.get(source)
        if value is not None:
            value = as_mapping(value, f"spec.{source}")
            return InTreeVolumeSource(source, str(value.get(id_field) or ""))
    return None


def parse_persistent_volume(raw: Mapping[str, Any]) -> PersistentVolume:
    meta = parse_meta(raw.get("metadata"))
    spec = as_mapping(raw.get("spec"), "spec")
    capacity = as_mapping(spec.get("capacity"), "spec.capacity")
    ref_raw = spec.get("claimRef")
    claim_ref = None
    if ref_raw is not None:
        ref = as_mapping(ref_raw, "spec.claimRef")
        claim_ref = ClaimRef(
            name=str(ref.get("name") or ""),
            namespace=str(ref.get("namespace") or ""),
            uid=str(ref.get("uid") or ""),
            resource_version=str(ref.get("resourceVersion") or ""),
        )
    affinity = as_mapping(spec.get("nodeAffinity"), "spec.nodeAffinity")
    required = affinity.get("required")
    csi_raw = spec.get("csi")
    csi = None
    if csi_raw is not None:
        csi_map = as_mapping(csi_raw, "spec.csi")
        csi = CSIVolumeSource(str(csi_map.get("driver") or ""), str(csi_map.get("volumeHandle") or ""))
    return PersistentVolume(
        metadata=meta,
        class_name=_class_of(meta, spec),
        capacity=_quantity(capacity.get("storage"), "spec.capacity.storage") or Fraction(0),
        access_modes=_access_modes(spec),
        volume_mode=str(spec.get("volumeMode") or FILESYSTEM),
        claim_ref=claim_ref,
        node_affinity=(
            parse_node_selector(required, "spec.nodeAffinity.required") if required is not None else None
        ),
        phase=str(as_mapping(raw.get("status"), "status").get("phase") or ""),
        csi=csi,
        in_tree=_in_tree(spec),
    )


# -- StorageClass --


@dataclass(frozen=True, slots=True)
class TopologySelectorTerm:
    """One ``allowedTopologies`` term: ANDed ``key in values`` requirements."""

    requirements: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(key in labels and labels[key] in values for key, values in self.requirements)


@dataclass(frozen=True, slots=True)
class StorageClass:
    metadata: ObjectMeta
    provisioner: str = ""
    volume_binding_mode: str = ""  # the apiserver defaults it to Immediate; "" only when unset
    allowed_topologies: tuple[TopologySelectorTerm, ...] = ()

    def allows_topology(self, node_labels: Mapping[str, str]) -> bool:
        """``MatchTopologySelectorTerms``: no terms allow every node; a term without requirements
        allows none."""
        if not self.allowed_topologies:
            return True
        return any(term.requirements and term.matches(node_labels) for term in self.allowed_topologies)


def parse_storage_class(raw: Mapping[str, Any]) -> StorageClass:
    terms = []
    for i, term in enumerate(as_list(raw.get("allowedTopologies"), "allowedTopologies")):
        path = f"allowedTopologies[{i}]"
        term = as_mapping(term, path)
        reqs = []
        for j, expr in enumerate(as_list(term.get("matchLabelExpressions"), f"{path}.matchLabelExpressions")):
            epath = f"{path}.matchLabelExpressions[{j}]"
            expr = as_mapping(expr, epath)
            reqs.append((str(expr.get("key") or ""), _strings(expr.get("values"), f"{epath}.values")))
        terms.append(TopologySelectorTerm(tuple(reqs)))
    return StorageClass(
        metadata=parse_meta(raw.get("metadata")),
        provisioner=str(raw.get("provisioner") or ""),
        volume_binding_mode=str(raw.get("volumeBindingMode") or ""),
        allowed_topologies=tuple(terms),
    )


# -- CSINode, CSIDriver, VolumeAttachment, CSIStorageCapacity --


@dataclass(frozen=True, slots=True)
class CSINodeDriver:
    name: str
    node_id: str = ""
    allocatable_count: int | None = None  # allocatable.count: the node's attach limit for the driver


@dataclass(frozen=True, slots=True)
class CSINode:
    metadata: ObjectMeta
    drivers: tuple[CSINodeDriver, ...] = ()


def parse_csi_node(raw: Mapping[str, Any]) -> CSINode:
    spec = as_mapping(raw.get("spec"), "spec")
    drivers = []
    for i, item in enumerate(as_list(spec.get("drivers"), "spec.drivers")):
        path = f"spec.drivers[{i}]"
        driver = as_mapping(item, path)
        count = as_mapping(driver.get("allocatable"), f"{path}.allocatable").get("count")
        drivers.append(
            CSINodeDriver(
                name=str(driver.get("name") or ""),
                node_id=str(driver.get("nodeID") or ""),
                allocatable_count=as_int(count, f"{path}.allocatable.count") if count is not None else None,
            )
        )
    return CSINode(metadata=parse_meta(raw.get("metadata")), drivers=tuple(drivers))


@dataclass(frozen=True, slots=True)
class CSIDriver:
    metadata: ObjectMeta
    storage_capacity: bool = False  # spec.storageCapacity: the driver publishes CSIStorageCapacity
    prevent_pod_scheduling_if_missing: bool = False  # spec.preventPodSchedulingIfMissing


def parse_csi_driver(raw: Mapping[str, Any]) -> CSIDriver:
    spec = as_mapping(raw.get("spec"), "spec")
    return CSIDriver(
        metadata=parse_meta(raw.get("metadata")),
        storage_capacity=_bool(spec.get("storageCapacity"), "spec.storageCapacity"),
        prevent_pod_scheduling_if_missing=_bool(
            spec.get("preventPodSchedulingIfMissing"), "spec.preventPodSchedulingIfMissing"
        ),
    )


@dataclass(frozen=True, slots=True)
class VolumeAttachment:
    metadata: ObjectMeta
    attacher: str = ""
    node_name: str = ""
    persistent_volume_name: str | None = None  # spec.source.persistentVolumeName


def parse_volume_attachment(raw: Mapping[str, Any]) -> VolumeAttachment:
    spec = as_mapping(raw.get("spec"), "spec")
    pv_name = as_mapping(spec.get("source"), "spec.source").get("persistentVolumeName")
    return VolumeAttachment(
        metadata=parse_meta(raw.get("metadata")),
        attacher=str(spec.get("attacher") or ""),
        node_name=str(spec.get("nodeName") or ""),
        persistent_volume_name=str(pv_name) if pv_name is not None else None,
    )


@dataclass(frozen=True, slots=True)
class CSIStorageCapacity:
    metadata: ObjectMeta
    storage_class_name: str = ""
    capacity: Fraction | None = None
    maximum_volume_size: Fraction | None = None
    node_topology: LabelSelector | None = None  # None: reachable from no node

    @property
    def volume_limit(self) -> Fraction | None:
        """The largest volume it can hold: maximumVolumeSize, else capacity (None: unknown)."""
        return self.maximum_volume_size if self.maximum_volume_size is not None else self.capacity


def parse_csi_storage_capacity(raw: Mapping[str, Any]) -> CSIStorageCapacity:
    return CSIStorageCapacity(
        metadata=parse_namespaced_meta(raw.get("metadata")),
        storage_class_name=str(raw.get("storageClassName") or ""),
        capacity=_quantity(raw.get("capacity"), "capacity"),
        maximum_volume_size=_quantity(raw.get("maximumVolumeSize"), "maximumVolumeSize"),
        node_topology=parse_label_selector(raw.get("nodeTopology"), "nodeTopology"),
    )
