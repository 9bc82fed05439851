"""PVC/PV/StorageClass/CSINode objects and a stand-in Handle for the volume plugin tests.

The builders write the API's dicts; ``view`` (and ``objects``) parse them through the kinds'
registered parsers, as the informers do, so the plugins only ever see typed views."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kopf_scheduler.api import kinds
from kopf_scheduler.api.objects import Pod
from kopf_scheduler.cache.snapshot import Snapshot
from kopf_scheduler.framework.types import NodeInfo
from kopf_scheduler_workbench.testing.builders import make_node, make_pod

_versions = itertools.count(1)


def pvc(
    name: str,
    storage_class: str | None = None,
    *,
    namespace: str = "default",
    bound_pv: str = "",
    bind_completed: bool | None = None,
    request: str | None = None,
    phase: str | None = None,
    access_modes: Sequence[str] = ("ReadWriteOnce",),
    annotations: Mapping[str, str] | None = None,
    deleting: bool = False,
    owner_uid: str = "",
    selector: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"pvc-uid-{namespace}-{name}",
        "resourceVersion": str(next(_versions)),
        "annotations": dict(annotations or {}),
    }
    if bound_pv and (bind_completed is None or bind_completed):
        meta["annotations"]["pv.kubernetes.io/bind-completed"] = "yes"
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if owner_uid:
        meta["ownerReferences"] = [{"kind": "Pod", "name": "x", "uid": owner_uid, "controller": True}]
    spec: dict[str, Any] = {"accessModes": list(access_modes)}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    if bound_pv:
        spec["volumeName"] = bound_pv
    if request is not None:
        spec["resources"] = {"requests": {"storage": request}}
    if selector is not None:
        spec["selector"] = dict(selector)
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta,
        "spec": spec,
    }
    if phase:
        body["status"] = {"phase": phase}
    return body


def pv(
    name: str,
    storage_class: str = "",
    *,
    phase: str = "Available",
    capacity: str | None = None,
    node_affinity: Mapping[str, Sequence[str]] | None = None,
    claim_ref: Mapping[str, str] | None = None,
    access_modes: Sequence[str] = ("ReadWriteOnce",),
    labels: Mapping[str, str] | None = None,
    csi: tuple[str, str] | None = None,
    source: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"storageClassName": storage_class, "accessModes": list(access_modes)}
    if capacity is not None:
        spec["capacity"] = {"storage": capacity}
    if node_affinity is not None:
        spec["nodeAffinity"] = {
            "required": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": k, "operator": "In", "values": list(v)} for k, v in node_affinity.items()
                        ]
                    }
                ]
            }
        }
    if claim_ref is not None:
        spec["claimRef"] = dict(claim_ref)
    if csi is not None:
        spec["csi"] = {"driver": csi[0], "volumeHandle": csi[1]}
    if source is not None:
        spec.update(source)
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "resourceVersion": str(next(_versions)), "labels": dict(labels or {})},
        "spec": spec,
        "status": {"phase": phase},
    }


def storage_class(
    name: str,
    mode: str | None = "Immediate",
    *,
    provisioner: str = "",
    allowed_topologies: Sequence[Mapping[str, Sequence[str]]] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name, "resourceVersion": str(next(_versions))},
        "provisioner": provisioner,
    }
    if mode is not None:
        body["volumeBindingMode"] = mode
    if allowed_topologies is not None:
        body["allowedTopologies"] = [
            {"matchLabelExpressions": [{"key": k, "values": list(v)} for k, v in term.items()]}
            for term in allowed_topologies
        ]
    return body


def csi_node(name: str, drivers: Mapping[str, int | None], migrated: Sequence[str] = ()) -> dict[str, Any]:
    annotations = {"storage.alpha.kubernetes.io/migrated-plugins": ",".join(migrated)} if migrated else {}
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "drivers": [
                {"name": d, "nodeID": name, **({"allocatable": {"count": c}} if c is not None else {})}
                for d, c in drivers.items()
            ]
        },
    }


def claim_volume(claim: str, name: str | None = None) -> dict[str, Any]:
    return {"name": name or f"vol-{claim}", "persistentVolumeClaim": {"claimName": claim}}


def pod_with(
    name: str = "pod-a", *volumes: Mapping[str, Any], namespace: str = "default", **kw: Any
) -> Pod:
    return make_pod(name, namespace, volumes=[dict(v) for v in volumes], **kw)


def pod_with_claims(*claims: str, name: str = "pod-a", namespace: str = "default", **kw: Any) -> Pod:
    return pod_with(name, *(claim_volume(c) for c in claims), namespace=namespace, **kw)


def node_info(
    name: str, labels: Mapping[str, str] | None = None, pods: Iterable[Pod] = (), **kw: Any
) -> NodeInfo:
    info = NodeInfo()
    info.set_node(make_node(name, labels=labels, **kw))
    for p in pods:
        info.add_pod(p)
    return info


def view(raw: Mapping[str, Any]) -> Any:
    """The typed view of an API dict, parsed by its kind's registered parser (as at the edge)."""
    return kinds.by_name(raw["kind"]).parse(raw)


def store(*raws: Mapping[str, Any]) -> dict[str, Any]:
    """``handle.objects[kind]`` for objects of one kind: key -> view."""
    out: dict[str, Any] = {}
    for raw in raws:
        obj = view(raw)
        out[kinds.by_name(raw["kind"]).key_of(obj)] = obj
    return out


def objects(
    pvcs: Iterable[Mapping[str, Any]] = (),
    pvs: Iterable[Mapping[str, Any]] = (),
    classes: Iterable[Mapping[str, Any]] = (),
    csi_nodes: Iterable[Mapping[str, Any]] = (),
) -> dict[str, dict[str, Any]]:
    return {
        "PersistentVolumeClaim": store(*pvcs),
        "PersistentVolume": store(*pvs),
        "StorageClass": store(*classes),
        "CSINode": store(*csi_nodes),
    }


@dataclass
class FakeHandle:
    """The parts of the framework Handle the volume plugins use."""

    snapshot: Snapshot = field(default_factory=Snapshot)
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    client: Any = None
