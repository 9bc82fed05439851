"""Builders for resource.k8s.io/v1 objects, shaped like the reference allocator tests' helpers."""

from __future__ import annotations

from typing import Any

DRIVER_A, DRIVER_B = "driver-a", "driver-b"
CLASS_A, CLASS_B = "class-a", "class-b"
POOL1, POOL2, POOL3, POOL4 = "pool-1", "pool-2", "pool-3", "pool-4"
NODE1, NODE2 = "node-1", "node-2"
REGION_KEY, REGION1, REGION2 = "region", "region-1", "region-2"
PLANET_KEY, EARTH = "planet", "earth"
REQ0, REQ1 = "req-0", "req-1"


def device_class(name: str, driver: str, *, config: list[Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}
    if config:
        spec["config"] = config
    return {"metadata": {"name": name}, "spec": spec}


def device(
    name: str,
    capacity: dict[str, str] | None = None,
    attributes: dict[str, dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name}
    if capacity:
        out["capacity"] = {k: {"value": v} for k, v in capacity.items()}
    if attributes:
        out["attributes"] = attributes
    out.update(extra)
    return out


def resource_slice(
    name: str,
    where: str | dict[str, Any],
    pool: str,
    driver: str,
    *devices: dict[str, Any],
    count: int = 1,
    generation: int = 1,
    **extra_spec: Any,
) -> dict[str, Any]:
    """``where``: a node name, ``"all"``, or a node selector."""
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
        "devices": list(devices) if devices else [device("device-1")],
    }
    if isinstance(where, dict):
        spec["nodeSelector"] = where
    elif where == "all":
        spec["allNodes"] = True
    else:
        spec["nodeName"] = where
    spec.update(extra_spec)
    return {"metadata": {"name": name}, "spec": spec}


def label_selector(key: str, value: str) -> dict[str, Any]:
    return {"nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}]}


def local_selector(node: str) -> dict[str, Any]:
    return {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
    }


def request(name: str, class_name: str, count: int = 1, *selectors: str, **extra: Any) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": class_name, "allocationMode": "ExactCount", "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    exactly.update(extra)
    return {"name": name, "exactly": exactly}


def all_request(name: str, class_name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": class_name, "allocationMode": "All", **extra}}


def claim(
    name: str,
    *requests: dict[str, Any],
    constraints: list[dict[str, Any]] | None = None,
    config: list[dict[str, Any]] | None = None,
    namespace: str = "",
) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    if config:
        devices["config"] = config
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"metadata": meta, "spec": {"devices": devices}}


def result(req: str, driver: str, pool: str, dev: str, admin: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"request": req, "driver": driver, "pool": pool, "device": dev}
    if admin:
        out["adminAccess"] = True
    return out


def allocation(node_selector: dict[str, Any] | None, *results: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"devices": {"results": list(results)}}
    if node_selector is not None:
        out["nodeSelector"] = node_selector
    return out
