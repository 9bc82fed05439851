"""Helpers shared by the volume plugins: reading raw PVC/PV/StorageClass/CSINode dicts.

The volume plugins read cluster objects as the raw API dicts in ``handle.objects``; these helpers
keep the reference's small rules (beta storage-class annotation first, PV node affinity, generic
ephemeral volume claim names, lister "not found" messages) in one place so the four plugins agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.api.quantity import QuantityError, parse_quantity
from kopf_scheduler.api.selectors import parse_label_selector, parse_node_selector
from kopf_scheduler.api.types import LabelSelector, NodeSelector, ObjectError

__all__ = [
    "ANN_BIND_COMPLETED",
    "ANN_BOUND_BY_CONTROLLER",
    "ANN_SELECTED_NODE",
    "BETA_STORAGE_CLASS_ANNOTATION",
    "MIGRATED_PLUGINS_ANNOTATION",
    "NOT_SUPPORTED_PROVISIONER",
    "annotations_of",
    "claim_of_volume",
    "claim_selector",
    "labels",
    "meta",
    "not_found",
    "pod_uses_claim",
    "pv_class",
    "pv_matches_node",
    "pvc_claim_names",
    "pvc_class",
    "quantity",
    "resource_version",
    "spec",
    "storage_capacity",
    "storage_request",
    "volume_is_for_pod",
]

ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
BETA_STORAGE_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"
NOT_SUPPORTED_PROVISIONER = "kubernetes.io/no-provisioner"
MIGRATED_PLUGINS_ANNOTATION = "storage.alpha.kubernetes.io/migrated-plugins"

_EMPTY: Mapping[str, Any] = {}

# The lister's NotFound error names the resource as the informer registers it.
_RESOURCE = {
    "PersistentVolumeClaim": "persistentvolumeclaim",
    "PersistentVolume": "persistentvolume",
    "StorageClass": "storageclass.storage.k8s.io",
    "CSINode": "csinode.storage.k8s.io",
}


def not_found(kind: str, name: str) -> str:
    """The lister's NotFound message, e.g. ``persistentvolumeclaim "data" not found``."""
    return f'{_RESOURCE.get(kind, kind.lower())} "{name}" not found'


def meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if not obj:
        return _EMPTY
    value = obj.get("metadata")
    return value if isinstance(value, Mapping) else _EMPTY


def spec(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if not obj:
        return _EMPTY
    value = obj.get("spec")
    return value if isinstance(value, Mapping) else _EMPTY


def annotations_of(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    value = meta(obj).get("annotations")
    return value if isinstance(value, Mapping) else _EMPTY


def labels(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    value = meta(obj).get("labels")
    return value if isinstance(value, Mapping) else _EMPTY


def resource_version(obj: Mapping[str, Any] | None) -> str:
    return str(meta(obj).get("resourceVersion") or "")


def pvc_class(pvc: Mapping[str, Any]) -> str:
    """``GetPersistentVolumeClaimClass``: the beta annotation wins over spec.storageClassName."""
    ann = annotations_of(pvc)
    if BETA_STORAGE_CLASS_ANNOTATION in ann:
        return str(ann[BETA_STORAGE_CLASS_ANNOTATION])
    return str(spec(pvc).get("storageClassName") or "")


def pv_class(pv: Mapping[str, Any]) -> str:
    """``GetPersistentVolumeClass``."""
    ann = annotations_of(pv)
    if BETA_STORAGE_CLASS_ANNOTATION in ann:
        return str(ann[BETA_STORAGE_CLASS_ANNOTATION])
    return str(spec(pv).get("storageClassName") or "")


def quantity(raw: Any) -> Fraction:
    """A quantity as an exact number (0 when absent or malformed, as an empty Quantity)."""
    if raw is None:
        return Fraction(0)
    try:
        return parse_quantity(raw)
    except QuantityError:
        return Fraction(0)


def storage_request(pvc: Mapping[str, Any]) -> Fraction:
    resources = spec(pvc).get("resources") or {}
    return quantity((resources.get("requests") or {}).get("storage"))


def storage_capacity(pv: Mapping[str, Any]) -> Fraction:
    return quantity((spec(pv).get("capacity") or {}).get("storage"))


def claim_of_volume(pod: Pod, volume: Mapping[str, Any]) -> tuple[str, bool] | None:
    """(claim name, is generic ephemeral) of a pod volume, or None for a volume without a claim."""
    pvc = volume.get("persistentVolumeClaim")
    if isinstance(pvc, Mapping):
        return str(pvc.get("claimName") or ""), False
    if volume.get("ephemeral") is not None:
        # ephemeral.VolumeClaimName: the controller names the claim <pod>-<volume>.
        return f"{pod.name}-{volume.get('name', '')}", True
    return None


def pvc_claim_names(pod: Pod) -> list[str]:
    """The claims a pod names in ``persistentVolumeClaim`` volumes (generic ephemeral ones not)."""
    names = []
    for vol in pod.volumes:
        claim = claim_of_volume(pod, vol)
        if claim is not None and not claim[1]:
            names.append(claim[0])
    return names


def pod_uses_claim(pod: Pod, pvc: Any, *, ephemeral: bool) -> bool:
    """Whether a PVC event concerns this pod: the claim is in its namespace and one of its volumes
    names it (``ephemeral``: generic ephemeral volumes' claims count too, as for VolumeBinding
    and NodeVolumeLimits; VolumeRestrictions and VolumeZone look at claim names only)."""
    m = meta(pvc)
    if (m.get("namespace") or "default") != pod.namespace:
        return False
    name = m.get("name")
    for vol in pod.volumes:
        claim = claim_of_volume(pod, vol)
        if claim is not None and claim[0] == name and (ephemeral or not claim[1]):
            return True
    return False


def volume_is_for_pod(pod: Pod, pvc: Mapping[str, Any]) -> str | None:
    """``ephemeral.VolumeIsForPod``: an error message unless the pod controls the claim."""
    pvc_meta = meta(pvc)
    owned = False
    for ref in pvc_meta.get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller") and str(ref.get("uid", "")) == pod.uid:
            owned = True
            break
    namespace = str(pvc_meta.get("namespace") or "default")
    if namespace != pod.namespace or not owned:
        return (
            f"PVC {namespace}/{pvc_meta.get('name', '')} was not created for pod "
            f"{pod.namespace}/{pod.name} (pod is not owner)"
        )
    return None


# Parsed PV node affinities, keyed by the PV dict's identity and resourceVersion: PV objects are
# immutable snapshots in handle.objects, and Filter asks the same question once per node.
_affinity_cache: dict[tuple[int, str], tuple[Mapping[str, Any], NodeSelector | None]] = {}


def _pv_node_selector(pv: Mapping[str, Any]) -> NodeSelector | None:
    key = (id(pv), resource_version(pv))
    hit = _affinity_cache.get(key)
    if hit is not None and hit[0] is pv:
        return hit[1]
    affinity = spec(pv).get("nodeAffinity")
    selector: NodeSelector | None = None
    if isinstance(affinity, Mapping) and affinity.get("required") is not None:
        try:
            selector = parse_node_selector(affinity["required"], "spec.nodeAffinity.required")
        except ObjectError:
            selector = NodeSelector(())  # an invalid selector matches no node
    if len(_affinity_cache) > 65536:
        _affinity_cache.clear()
    _affinity_cache[key] = (pv, selector)
    return selector


def pv_matches_node(pv: Mapping[str, Any], node_name: str, node_labels: Mapping[str, str]) -> bool:
    """``CheckNodeAffinity``: a PV without required node affinity fits every node."""
    selector = _pv_node_selector(pv)
    return selector is None or selector.matches(node_name, node_labels)


def claim_selector(pvc: Mapping[str, Any]) -> LabelSelector | None:
    """The claim's PV label selector, None without one; raises ObjectError when malformed."""
    return parse_label_selector(spec(pvc).get("selector"), "spec.selector")
