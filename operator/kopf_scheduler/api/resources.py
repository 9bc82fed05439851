"""A pod's resource requests and a ResourceList in canonical units (the reference's
``k8s.io/component-helpers/resource`` and ``pkg/api/v1/resource``).

The reference computes a pod's requests with component-helpers' ``resource.PodRequests`` under
different options at different places, and they give different answers for pods with pod-level
resources (``spec.resources``) or in-place resize state in their status:

- ``NodeInfo`` accounting (``PodInfo.CalculateResource``), BalancedAllocation and the queue's
  scale-down check: status-aware (the max of spec, allocated and actuated resources), pod-level
  resources applied  -> ``Pod.requests`` (and ``non_zero_cpu``/``non_zero_memory``);
- NodeResourcesFit's PreFilter/Filter: spec only, pod-level applied -> ``Pod.filter_requests``;
- NodeResourcesFit's Score: spec only, container level only (its scorer never enables pod-level
  resources), per-container defaults for missing cpu/memory -> ``Pod.score_requests``.

Amounts are summed as exact fractions and rounded up once at the end, as Quantity arithmetic is.
A malformed amount raises :class:`~kopf_scheduler.api.types.ObjectError` naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from kopf_scheduler.api.quantity import QuantityError, ceil_milli, ceil_value, parse_quantity
from kopf_scheduler.api.types import (
    CPU,
    EPHEMERAL_STORAGE,
    MEMORY,
    PODS,
    ObjectError,
    Resource,
    as_list,
    as_mapping,
)

__all__ = [
    "DEFAULT_MEMORY_REQUEST",
    "DEFAULT_MILLI_CPU_REQUEST",
    "RESIZE_PENDING",
    "PodRequests",
    "is_supported_pod_level_resource",
    "parse_resource_list",
    "pod_requests",
    "resize_reason",
    "status_affects_requests",
]

# The reference's defaults for pods that request nothing (scoring only):
# ``schedutil.DefaultMilliCPURequest`` and ``DefaultMemoryRequest``.
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024

_RList = dict[str, Fraction]

_DEFAULTS: _RList = {CPU: Fraction(DEFAULT_MILLI_CPU_REQUEST, 1000), MEMORY: Fraction(DEFAULT_MEMORY_REQUEST)}
RESIZE_PENDING = "PodResizePending"


def _parse_rlist(raw: Any, path: str) -> _RList:
    out: _RList = {}
    for name, qty in as_mapping(raw, path).items():
        try:
            amount = parse_quantity(qty)
        except QuantityError as exc:
            raise ObjectError(f"{path}.{name}", str(exc)) from None
        if amount < 0:
            raise ObjectError(f"{path}.{name}", f"must be greater than or equal to 0, got {qty!r}")
        out[str(name)] = amount
    return out


def _to_resource(rl: Mapping[str, Fraction]) -> Resource:
    """``framework.Resource.Add`` of a ResourceList: canonical integer units, rounded up."""
    res = Resource()
    for name, amount in rl.items():
        if name == CPU:
            res.milli_cpu = ceil_milli(amount)
        elif name == MEMORY:
            res.memory = ceil_value(amount)
        elif name == EPHEMERAL_STORAGE:
            res.ephemeral_storage = ceil_value(amount)
        elif name == PODS:
            res.allowed_pod_number = ceil_value(amount)
        elif _is_scalar_resource(name):
            res.scalar[name] = ceil_value(amount)
    return res


# Parsed ResourceLists by their items, for lists of string quantities (a node's allocatable: most
# nodes of a cluster have one of a few). Each caller gets a clone (Resource is mutable).
_PARSED: dict[tuple[tuple[str, str], ...], Resource] = {}
_PARSED_MAX = 1024


def parse_resource_list(raw: Any, path: str) -> Resource:
    """A ResourceList (``{"cpu": "100m", ...}``) in canonical units; negatives are rejected.

    Why the cache: parsing ~3.6 us of a node's ~6.3 us is this, for the same few lists (5,000
    nodes listed at start-up: ~18 ms before the first cycle); a hit is a clone (~0.8 us).
    """
    key = None
    if type(raw) is dict:
        # Looked up before the values' types are checked: only lists of strings are stored, and
        # nothing JSON decodes to equals a string but a string (an unhashable value: no key).
        try:
            found = _PARSED.get(tuple(raw.items()))
        except TypeError:
            found = None
        if found is not None:
            return found.clone()
        if all(type(q) is str for q in raw.values()):
            key = tuple(raw.items())
    res = _to_resource(_parse_rlist(raw, path))
    if key is not None:
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[key] = res.clone()
    return res


def _is_scalar_resource(name: str) -> bool:
    # schedutil.IsScalarResourceName: extended (domain-qualified), prefixed native, hugepages-*,
    # attachable volumes; quota names ("requests.*") are not resources a node offers.
    if name.startswith("requests."):
        return False
    return "/" in name or name.startswith("hugepages-") or name.startswith("attachable-volumes-")


def is_supported_pod_level_resource(name: str) -> bool:
    """``IsSupportedPodLevelResource``: cpu, memory and hugepages-* may be set for the whole pod."""
    return name in (CPU, MEMORY) or name.startswith("hugepages-")


def _add_into(acc: _RList, other: Mapping[str, Fraction]) -> None:
    for name, amount in other.items():
        acc[name] = acc.get(name, 0) + amount


def _max_into(acc: _RList, other: Mapping[str, Fraction]) -> None:
    for name, amount in other.items():
        if name not in acc or amount > acc[name]:
            acc[name] = amount


def _max_of(*lists: Mapping[str, Fraction] | None) -> _RList:
    out: _RList = {}
    for rl in lists:
        if rl:
            _max_into(out, rl)
    return out


def _container_requests(container: Mapping[str, Any], path: str) -> _RList:
    """One container's requests; limits default missing requests (apiserver defaulting)."""
    resources = as_mapping(container.get("resources"), f"{path}.resources")
    limits = as_mapping(resources.get("limits"), f"{path}.resources.limits")
    requests = dict(as_mapping(resources.get("requests"), f"{path}.resources.requests"))
    for name, qty in limits.items():
        requests.setdefault(name, qty)
    return _parse_rlist(requests, f"{path}.resources.requests")


@dataclass(slots=True)
class _Container:
    requests: _RList  # spec
    init: bool
    sidecar: bool
    allocated: _RList | None = None  # status.*ContainerStatuses[].allocatedResources
    actuated: _RList | None = None  # status.*ContainerStatuses[].resources.requests


@dataclass(slots=True)
class _PodResources:
    containers: list[_Container]
    pod_level: _RList | None  # spec.resources.requests when it names a supported resource
    overhead: _RList
    # Status (read only when it carries resize state: see status_affects_requests).
    use_status: bool = False
    infeasible: bool = False
    pod_allocated: _RList | None = None  # status.allocatedResources
    pod_actuated: _RList | None = None  # status.resources.requests
    pod_status_resources: bool = False  # status.resources is set


def _apply_non_missing(rl: _RList, non_missing: Mapping[str, Fraction] | None) -> _RList:
    if not non_missing:
        return rl
    out = dict(rl)
    for name, amount in non_missing.items():
        if name not in rl:
            out[name] = amount
    return out


def _aggregate(pr: _PodResources, which: str, non_missing: Mapping[str, Fraction] | None) -> _RList:
    """``aggregateContainerResourcesByFn``: sidecars add up, init containers take the max."""
    result: _RList = {}
    sidecars: _RList = {}
    init_max: _RList = {}
    for c in pr.containers:
        rl = _container_view(c, which, pr.infeasible)
        rl = _apply_non_missing(rl, non_missing)
        if not c.init:
            _add_into(result, rl)
        elif c.sidecar:
            _add_into(result, rl)
            _add_into(sidecars, rl)
            _max_into(init_max, sidecars)
        else:
            combined = dict(rl)
            _add_into(combined, sidecars)
            _max_into(init_max, combined)
    _max_into(result, init_max)
    return result


def _container_view(c: _Container, which: str, infeasible: bool) -> _RList:
    """A container's requests as spec, allocated or actuated (``container*Requests``)."""
    if which == "allocated":
        if c.allocated is not None:
            return c.allocated
        return {} if infeasible else c.requests
    if which == "actuated":
        if c.actuated is not None:
            return c.actuated
        if c.allocated is not None:
            return c.allocated
        return {} if infeasible else c.requests
    return c.requests


def _requests(
    pr: _PodResources,
    *,
    use_status: bool,
    pod_level: bool,
    non_missing: Mapping[str, Fraction] | None = None,
) -> _RList:
    """``resource.PodRequests`` with InPlacePodLevelResourcesVerticalScaling on (its 1.37 default)."""
    spec = _aggregate(pr, "spec", non_missing)
    if use_status and pr.use_status:
        if pr.pod_allocated is not None and pr.pod_actuated is not None:
            allocated, actuated = pr.pod_allocated, pr.pod_actuated
        else:
            allocated = _aggregate(pr, "allocated", non_missing)
            actuated = _aggregate(pr, "actuated", non_missing)
        reqs = _max_of(actuated, allocated) if pr.infeasible else _max_of(spec, actuated, allocated)
    else:
        reqs = spec
    if pod_level and pr.pod_level is not None:
        effective: Mapping[str, Fraction] = pr.pod_level
        if use_status and pr.use_status and pr.pod_status_resources:
            effective = _max_of(None if pr.infeasible else pr.pod_level, pr.pod_actuated, pr.pod_allocated)
        for name, amount in effective.items():
            if is_supported_pod_level_resource(name):
                reqs[name] = amount
    _add_into(reqs, pr.overhead)
    return reqs


def _statuses(raw: Any, path: str) -> dict[str, Mapping[str, Any]]:
    out: dict[str, Mapping[str, Any]] = {}
    for i, cs in enumerate(as_list(raw, path)):
        cs = as_mapping(cs, f"{path}[{i}]")
        out.setdefault(str(cs.get("name", "")), cs)
    return out


def resize_reason(status: Mapping[str, Any]) -> str | None:
    for cond in as_list(status.get("conditions"), "status.conditions"):
        if isinstance(cond, Mapping) and cond.get("type") == RESIZE_PENDING:
            return str(cond.get("reason") or "")
    return None


def status_affects_requests(status: Mapping[str, Any]) -> bool:
    """Whether the status can change the requests (else status-aware == spec, cheaply)."""
    if status.get("allocatedResources") is not None or status.get("resources") is not None:
        return True
    for group in ("containerStatuses", "initContainerStatuses"):
        for cs in status.get(group) or ():
            if isinstance(cs, Mapping) and (
                cs.get("allocatedResources") is not None or cs.get("resources") is not None
            ):
                return True
    return resize_reason(status) is not None


def _pod_resources(spec: Mapping[str, Any], status: Mapping[str, Any] | None) -> _PodResources:
    containers: list[_Container] = []
    for i, container in enumerate(as_list(spec.get("containers"), "spec.containers")):
        path = f"spec.containers[{i}]"
        container = as_mapping(container, path)
        containers.append(_Container(_container_requests(container, path), init=False, sidecar=False))
    for i, container in enumerate(as_list(spec.get("initContainers"), "spec.initContainers")):
        path = f"spec.initContainers[{i}]"
        container = as_mapping(container, path)
        sidecar = container.get("restartPolicy") == "Always"
        containers.append(_Container(_container_requests(container, path), init=True, sidecar=sidecar))
    level_raw = as_mapping(as_mapping(spec.get("resources"), "spec.resources").get("requests"), "")
    pod_level = _parse_rlist(level_raw, "spec.resources.requests") if level_raw else None
    if pod_level is not None and not any(is_supported_pod_level_resource(n) for n in pod_level):
        pod_level = None  # IsPodLevelRequestsSet: only cpu, memory and hugepages count
    pr = _PodResources(containers, pod_level, _parse_rlist(spec.get("overhead"), "spec.overhead"))
    if status is not None and status_affects_requests(status):
        _read_status(pr, spec, status)
    return pr


def _read_status(pr: _PodResources, spec: Mapping[str, Any], status: Mapping[str, Any]) -> None:
    pr.use_status = True
    pr.infeasible = resize_reason(status) == "Infeasible"
    # findContainerStatus: regular statuses first, then init ones, by name.
    by_name = _statuses(status.get("initContainerStatuses"), "status.initContainerStatuses")
    by_name.update(_statuses(status.get("containerStatuses"), "status.containerStatuses"))
    names = [
        str(as_mapping(c, "").get("name", ""))
        for group in ("containers", "initContainers")
        for c in as_list(spec.get(group), f"spec.{group}")
    ]
    for c, name in zip(pr.containers, names, strict=True):
        cs = by_name.get(name)
        if cs is None:
            continue
        path = f"status.containerStatuses[{name}]"
        if cs.get("allocatedResources") is not None:
            c.allocated = _parse_rlist(cs["allocatedResources"], f"{path}.allocatedResources")
        res = as_mapping(cs.get("resources"), f"{path}.resources")
        if res.get("requests") is not None:
            c.actuated = _parse_rlist(res["requests"], f"{path}.resources.requests")
    if status.get("allocatedResources") is not None:
        pr.pod_allocated = _parse_rlist(status["allocatedResources"], "status.allocatedResources")
    if status.get("resources") is not None:
        pr.pod_status_resources = True
        res = as_mapping(status["resources"], "status.resources")
        if res.get("requests") is not None:
            pr.pod_actuated = _parse_rlist(res["requests"], "status.resources.requests")


@dataclass(frozen=True, slots=True)
class PodRequests:
    """A pod's requests as each consumer in the reference computes them (see the module note)."""

    requests: Resource
    non_zero_cpu: int
    non_zero_memory: int
    filter_requests: Resource | None  # None: the same as ``requests``
    score_requests: Resource | None  # None: ``requests`` with the non-zero cpu/memory


def pod_requests(spec: Mapping[str, Any], status: Mapping[str, Any] | None = None) -> PodRequests:
    """Parse a pod's requests once, in every form the scheduler uses."""
    pr = _pod_resources(spec, status)
    requests = _requests(pr, use_status=True, pod_level=True)
    # getNonMissingContainerRequests: with pod-level requests, a container default only applies
    # for a resource that nothing at all (pod level, containers, overhead) requests.
    if pr.pod_level is None:
        non_missing: _RList = dict(_DEFAULTS)
    else:
        non_missing = {name: amount for name, amount in _DEFAULTS.items() if name not in requests}
    non_zero = requests
    if non_missing:
        non_zero = _requests(pr, use_status=True, pod_level=True, non_missing=non_missing)
    nz_cpu = ceil_milli(non_zero.get(CPU, Fraction(0)))
    nz_mem = ceil_value(non_zero.get(MEMORY, Fraction(0)))
    filter_requests = None
    if pr.use_status:
        filter_requests = _to_resource(_requests(pr, use_status=False, pod_level=True))
    score_requests = None
    if pr.use_status or pr.pod_level is not None:
        score_requests = _to_resource(_requests(pr, use_status=False, pod_level=False, non_missing=_DEFAULTS))
    return PodRequests(_to_resource(requests), nz_cpu, nz_mem, filter_requests, score_requests)
