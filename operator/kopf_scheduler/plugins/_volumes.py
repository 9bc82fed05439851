"""Helpers shared by the volume plugins over the typed storage views (``api/storage.py``).

The reference's small rules about a pod's claims (generic ephemeral volume claim names, the
owner check, which PVC events concern a pod) and the listers' "not found" messages live here so
the four volume plugins agree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kopf_scheduler.api.objects import Pod

if TYPE_CHECKING:  # api/storage.py is imported with the first storage object (api/kinds.py's parsers)
    from kopf_scheduler.api.storage import PersistentVolumeClaim

__all__ = [
    "MIGRATED_PLUGINS_ANNOTATION",
    "NOT_SUPPORTED_PROVISIONER",
    "not_found",
    "pod_uses_claim",
    "pvc_claim_names",
    "volume_is_for_pod",
]

NOT_SUPPORTED_PROVISIONER = "kubernetes.io/no-provisioner"
MIGRATED_PLUGINS_ANNOTATION = "storage.alpha.kubernetes.io/migrated-plugins"

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


def pvc_claim_names(pod: Pod) -> list[str]:
    """The claims a pod names in ``persistentVolumeClaim`` volumes (generic ephemeral ones not)."""
    return [vol.claim_name for vol in pod.volumes if vol.claim_name is not None and not vol.ephemeral]


def pod_uses_claim(pod: Pod, pvc: PersistentVolumeClaim, *, ephemeral: bool) -> bool:
    """Whether a PVC event concerns this pod: the claim is in its namespace and one of its volumes
    names it (``ephemeral``: generic ephemeral volumes' claims count too, as for VolumeBinding
    and NodeVolumeLimits; VolumeRestrictions and VolumeZone look at claim names only)."""
    if pvc.metadata.namespace != pod.namespace:
        return False
    name = pvc.metadata.name
    return any(vol.claim_name == name and (ephemeral or not vol.ephemeral) for vol in pod.volumes)


def volume_is_for_pod(pod: Pod, pvc: PersistentVolumeClaim) -> str | None:
    """``ephemeral.VolumeIsForPod``: an error message unless the pod controls the claim."""
    meta = pvc.metadata
    owned = any(ref.controller and ref.uid == pod.uid for ref in meta.owner_references)
    namespace = meta.namespace
    if namespace != pod.namespace or not owned:
        return (
            f"PVC {namespace}/{meta.name} was not created for pod "
            f"{pod.namespace}/{pod.name} (pod is not owner)"
        )
    return None
