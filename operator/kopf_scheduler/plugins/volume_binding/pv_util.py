"""Reading and binding PV/PVC objects: names, binding state, access modes, topology terms."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from kopf_scheduler.plugins._volumes import (
    ANN_BIND_COMPLETED,
    ANN_BOUND_BY_CONTROLLER,
    annotations_of,
    meta,
    spec,
)

PVC = "PersistentVolumeClaim"


PV = "PersistentVolume"


STORAGE_CLASS = "StorageClass"


def claim_key(pvc: Mapping[str, Any]) -> str:
    m = meta(pvc)
    return f"{m.get('namespace') or 'default'}/{m.get('name', '')}"


def object_name(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("name", ""))


def pvc_volume_name(pvc: Mapping[str, Any]) -> str:
    return str(spec(pvc).get("volumeName") or "")


def is_fully_bound(pvc: Mapping[str, Any]) -> bool:
    return bool(pvc_volume_name(pvc)) and ANN_BIND_COMPLETED in annotations_of(pvc)


def claim_ref(pv: Mapping[str, Any]) -> Mapping[str, Any] | None:
    ref = spec(pv).get("claimRef")
    return ref if isinstance(ref, Mapping) else None


def is_volume_bound_to_claim(pv: Mapping[str, Any], pvc: Mapping[str, Any]) -> bool:
    """``IsVolumeBoundToClaim``: name and namespace match, and the UID when the ref has one."""
    ref = claim_ref(pv)
    if ref is None:
        return False
    m = meta(pvc)
    if ref.get("name") != m.get("name") or (ref.get("namespace") or "default") != (
        m.get("namespace") or "default"
    ):
        return False
    return not ref.get("uid") or ref.get("uid") == m.get("uid")


def bind_volume_to_claim(pv: Mapping[str, Any], pvc: Mapping[str, Any]) -> tuple[Mapping[str, Any], bool]:
    """``GetBindVolumeToClaim``: a copy of the PV with claimRef set; and whether it changed."""
    m = meta(pvc)
    ref = claim_ref(pv) or {}
    bound_already = is_volume_bound_to_claim(pv, pvc)
    new = copy.deepcopy(dict(pv))
    dirty = False
    if (
        not ref
        or ref.get("name") != m.get("name")
        or ref.get("namespace") != m.get("namespace")
        or ref.get("uid") != m.get("uid")
    ):
        new_spec = dict(new.get("spec") or {})
        new_spec["claimRef"] = {
            "kind": "PersistentVolumeClaim",
            "apiVersion": "v1",
            "namespace": m.get("namespace") or "default",
            "name": m.get("name", ""),
            "uid": m.get("uid", ""),
            "resourceVersion": m.get("resourceVersion", ""),
        }
        new["spec"] = new_spec
        dirty = True
    if not bound_already and ANN_BOUND_BY_CONTROLLER not in annotations_of(new):
        new_meta = dict(new.get("metadata") or {})
        new_meta["annotations"] = {**dict(new_meta.get("annotations") or {}), ANN_BOUND_BY_CONTROLLER: "yes"}
        new["metadata"] = new_meta
        dirty = True
    return new, dirty


def access_modes(obj: Mapping[str, Any]) -> set[str]:
    return {str(m) for m in spec(obj).get("accessModes") or ()}


def volume_mode(obj: Mapping[str, Any]) -> str:
    return str(spec(obj).get("volumeMode") or "Filesystem")


def match_topology_terms(terms: Any, node_labels: Mapping[str, str]) -> bool:
    """``MatchTopologySelectorTerms`` over a StorageClass's allowedTopologies (no terms match all)."""
    if not terms:
        return True
    for term in terms:
        exprs = (term or {}).get("matchLabelExpressions") or ()
        if not exprs:
            continue
        if all(
            expr.get("key") in node_labels and node_labels[expr["key"]] in (expr.get("values") or ())
            for expr in exprs
        ):
            return True
    return False
