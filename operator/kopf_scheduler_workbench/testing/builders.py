"""Plain-object builders for unit tests: raw API dicts in, parsed engine objects out.

Tests build pods and nodes the way the API would send them and parse them with the same code the
operator uses, so a unit test never exercises a shortcut the cluster would not take.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from kopf_scheduler.api.objects import Node, Pod, parse_node, parse_pod

__all__ = ["make_node", "make_pod", "node_dict", "pod_dict"]

_uids = itertools.count(1)


def pod_dict(
    name: str,
    namespace: str = "default",
    *,
    cpu: str | None = None,
    memory: str | None = None,
    resources: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    node_name: str = "",
    scheduler_name: str = "kopf-scheduler",
    priority: int | None = None,
    uid: str | None = None,
    containers: Sequence[Mapping[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A raw Pod; ``cpu``/``memory``/``resources`` become the single container's requests."""
    requests: dict[str, str] = dict(resources or {})
    if cpu is not None:
        requests["cpu"] = cpu
    if memory is not None:
        requests["memory"] = memory
    if containers is None:
        container: dict[str, Any] = {"name": "c", "image": "registry.k8s.io/pause:3.10"}
        if requests:
            container["resources"] = {"requests": requests}
        containers = [container]
    body: dict[str, Any] = {"containers": list(containers), "schedulerName": scheduler_name, **spec}
    if node_name:
        body["nodeName"] = node_name
    if priority is not None:
        body["priority"] = priority
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{next(_uids)}",
            "labels": dict(labels or {}),
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": body,
        "status": {"phase": "Pending"},
    }


def make_pod(name: str, namespace: str = "default", **kwargs: Any) -> Pod:
    return parse_pod(pod_dict(name, namespace, **kwargs))


def node_dict(
    name: str,
    *,
    cpu: str = "4",
    memory: str = "16Gi",
    pods: str = "110",
    extra: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    unschedulable: bool = False,
    images: Sequence[tuple[Sequence[str], int]] = (),
) -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": memory, "pods": pods, **dict(extra or {})}
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"node-uid-{name}",
            "labels": {"kubernetes.io/hostname": name, **dict(labels or {})},
        },
        "spec": spec,
        "status": {
            "allocatable": allocatable,
            "capacity": allocatable,
            "images": [{"names": list(n), "sizeBytes": s} for n, s in images],
        },
    }


def make_node(name: str, **kwargs: Any) -> Node:
    return parse_node(node_dict(name, **kwargs))
