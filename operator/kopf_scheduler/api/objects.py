"""Parsing raw Pod and Node objects (API dicts) into the engine's compact forms.

A malformed object raises :class:`~kopf_scheduler.api.types.ObjectError` naming the field, so
that the operator can report it on the object (a FailedScheduling event) and go on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kopf_scheduler.api.quantity import QuantityError, milli_value, value
from kopf_scheduler.api.types import (
    CPU,
    EPHEMERAL_STORAGE,
    MEMORY,
    PODS,
    Affinity,
    HostPort,
    LabelSelector,
    LabelSelectorRequirement,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    ObjectError,
    PodAffinity,
    PodAffinityTerm,
    PreferredSchedulingTerm,
    Resource,
    Taint,
    Toleration,
    TopologySpreadConstraint,
    WeightedPodAffinityTerm,
    as_int,
    as_list,
    as_mapping,
    as_str_map,
    parse_timestamp,
)

__all__ = ["NodeSpec", "PodSpec", "parse_node", "parse_pod", "parse_resource_list", "pod_key"]

# The reference's defaults for pods that request nothing (scoring only):
# ``schedutil.DefaultMilliCPURequest`` and ``DefaultMemoryRequest``.
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024

_NODE_OPS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
_LABEL_OPS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


def pod_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


# weakref_slot: per-pod plugin caches hold their pods weakly, so an entry dies with its pod.
@dataclass(slots=True, eq=False, weakref_slot=True)
class PodSpec:
    """What the scheduler needs of a pod, parsed once (the reference's ``PodInfo`` + the pod)."""

    uid: str
    namespace: str
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    scheduler_name: str = "default-scheduler"
    node_name: str = ""
    nominated_node_name: str = ""
    priority: int = 0
    priority_class_name: str = ""
    preemption_policy: str = "PreemptLowerPriority"
    node_selector: dict[str, str] = field(default_factory=dict)
    affinity: Affinity | None = None
    tolerations: tuple[Toleration, ...] = ()
    topology_spread_constraints: tuple[TopologySpreadConstraint, ...] = ()
    host_ports: tuple[HostPort, ...] = ()
    requests: Resource = field(default_factory=Resource)
    non_zero_cpu: int = 0
    non_zero_memory: int = 0
    images: tuple[str, ...] = ()
    volumes: tuple[Mapping[str, Any], ...] = ()
    scheduling_gates: tuple[str, ...] = ()
    owner_references: tuple[Mapping[str, Any], ...] = ()
    creation_timestamp: float = 0.0
    start_time: float = 0.0
    deletion_timestamp: float = 0.0
    phase: str = ""
    resource_version: str = ""
    generation: int = 0
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def key(self) -> str:
        return pod_key(self.namespace, self.name)

    @property
    def is_terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def required_anti_affinity(self) -> tuple[PodAffinityTerm, ...]:
        anti = self.affinity.pod_anti_affinity if self.affinity else None
        return anti.required if anti else ()

    @property
    def has_pod_affinity_terms(self) -> bool:
        aff = self.affinity
        return bool(aff and (aff.pod_affinity or aff.pod_anti_affinity))


@dataclass(slots=True, eq=False)
class NodeSpec:
    """What the scheduler needs of a node."""

    name: str
    uid: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    allocatable: Resource = field(default_factory=Resource)
    unschedulable: bool = False
    images: tuple[tuple[tuple[str, ...], int], ...] = ()  # (names, sizeBytes)
    declared_features: tuple[str, ...] = ()  # status.declaredFeatures, as listed (kubelet sorts it)
    resource_version: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)


# --- resources --------------------------------------------------------------------------------


def parse_resource_list(raw: Any, path: str) -> Resource:
    """A ResourceList (``{"cpu": "100m", ...}``) in canonical units; negatives are rejected."""
    res = Resource()
    for name, qty in as_mapping(raw, path).items():
        try:
            amount = milli_value(qty) if name == CPU else value(qty)
        except QuantityError as exc:
            raise ObjectError(f"{path}.{name}", str(exc)) from None
        if amount < 0:
            raise ObjectError(f"{path}.{name}", f"must be greater than or equal to 0, got {qty!r}")
        if name == CPU:
            res.milli_cpu = amount
        elif name == MEMORY:
            res.memory = amount
        elif name == EPHEMERAL_STORAGE:
            res.ephemeral_storage = amount
        elif name == PODS:
            res.allowed_pod_number = amount
        elif _is_scalar_resource(name):
            res.scalar[name] = amount
    return res


def _is_scalar_resource(name: str) -> bool:
    # schedutil.IsScalarResourceName: extended (domain-qualified), prefixed native, hugepages-*,
    # attachable volumes; quota names ("requests.*") are not resources a node offers.
    if name.startswith("requests."):
        return False
    return "/" in name or name.startswith("hugepages-") or name.startswith("attachable-volumes-")


def _container_requests(container: Mapping[str, Any], path: str) -> tuple[Resource, bool, bool]:
    """Requests of one container (limits default missing requests), and whether cpu/memory were set."""
    resources = as_mapping(container.get("resources"), f"{path}.resources")
    limits = as_mapping(resources.get("limits"), f"{path}.resources.limits")
    requests = dict(as_mapping(resources.get("requests"), f"{path}.resources.requests"))
    for name, qty in limits.items():  # apiserver defaulting: requests default to limits
        requests.setdefault(name, qty)
    res = parse_resource_list(requests, f"{path}.resources.requests")
    return res, CPU in requests, MEMORY in requests


def _max_into(acc: Resource, other: Resource) -> None:
    acc.milli_cpu = max(acc.milli_cpu, other.milli_cpu)
    acc.memory = max(acc.memory, other.memory)
    acc.ephemeral_storage = max(acc.ephemeral_storage, other.ephemeral_storage)
    for name, amount in other.scalar.items():
        acc.scalar[name] = max(acc.scalar.get(name, 0), amount)


def _aggregate(spec: Mapping[str, Any], non_zero: bool) -> Resource:
    """``resourcehelper.AggregateContainerRequests``: sidecars add up, init containers take the max."""

    def requests_of(container: Mapping[str, Any], path: str) -> Resource:
        res, has_cpu, has_mem = _container_requests(container, path)
        if non_zero:
            if not has_cpu:
                res.milli_cpu = DEFAULT_MILLI_CPU_REQUEST
            if not has_mem:
                res.memory = DEFAULT_MEMORY_REQUEST
        return res

    total = Resource()
    for i, container in enumerate(as_list(spec.get("containers"), "spec.containers")):
        total.add(requests_of(as_mapping(container, f"spec.containers[{i}]"), f"spec.containers[{i}]"))
    sidecars = Resource()
    init_max = Resource()
    for i, container in enumerate(as_list(spec.get("initContainers"), "spec.initContainers")):
        path = f"spec.initContainers[{i}]"
        container = as_mapping(container, path)
        req = requests_of(container, path)
        if container.get("restartPolicy") == "Always":
            total.add(req)
            sidecars.add(req)
            req = sidecars.clone()
        else:
            req.add(sidecars)
        _max_into(init_max, req)
    _max_into(total, init_max)
    return total


def pod_requests(spec: Mapping[str, Any]) -> tuple[Resource, int, int]:
    """Pod requests (``resourcehelper.PodRequests``) and the non-zero cpu/memory used for scoring."""
    requests = _aggregate(spec, non_zero=False)
    non_zero = _aggregate(spec, non_zero=True)
    pod_level = as_mapping(as_mapping(spec.get("resources"), "spec.resources").get("requests"), "")
    if pod_level:  # PodLevelResources: pod-level requests win for the resources they name
        level = parse_resource_list(pod_level, "spec.resources.requests")
        for name in pod_level:
            if name == CPU:
                requests.milli_cpu = non_zero.milli_cpu = level.milli_cpu
            elif name == MEMORY:
                requests.memory = non_zero.memory = level.memory
    overhead = parse_resource_list(spec.get("overhead"), "spec.overhead")
    requests.add(overhead)
    non_zero.add(overhead)
    return requests, non_zero.milli_cpu, non_zero.memory


# --- selectors and affinity -------------------------------------------------------------------


def parse_label_selector(raw: Any, path: str) -> LabelSelector | None:
    if raw is None:
        return None
    raw = as_mapping(raw, path)
    labels = as_str_map(raw.get("matchLabels"), f"{path}.matchLabels")
    exprs = []
    for i, expr in enumerate(as_list(raw.get("matchExpressions"), f"{path}.matchExpressions")):
        epath = f"{path}.matchExpressions[{i}]"
        expr = as_mapping(expr, epath)
        op = expr.get("operator")
        if op not in _LABEL_OPS:
            raise ObjectError(f"{epath}.operator", f"{op!r} is not a valid label selector operator")
        values = [str(v) for v in as_list(expr.get("values"), f"{epath}.values")]
        if op in ("In", "NotIn") and not values:
            raise ObjectError(f"{epath}.values", "must be specified when `operator` is 'In' or 'NotIn'")
        exprs.append(LabelSelectorRequirement(str(expr.get("key", "")), op, frozenset(values)))
    return LabelSelector(tuple(sorted(labels.items())), tuple(exprs))


def _node_requirements(raw: Any, path: str) -> tuple[NodeSelectorRequirement, ...]:
    out = []
    for i, expr in enumerate(as_list(raw, path)):
        epath = f"{path}[{i}]"
        expr = as_mapping(expr, epath)
        op = expr.get("operator")
        if op not in _NODE_OPS:
            raise ObjectError(f"{epath}.operator", f"{op!r} is not a valid node selector operator")
        values = tuple(str(v) for v in as_list(expr.get("values"), f"{epath}.values"))
        out.append(NodeSelectorRequirement(str(expr.get("key", "")), op, values))
    return tuple(out)


def parse_node_selector_term(raw: Any, path: str) -> NodeSelectorTerm:
    raw = as_mapping(raw, path)
    return NodeSelectorTerm(
        _node_requirements(raw.get("matchExpressions"), f"{path}.matchExpressions"),
        _node_requirements(raw.get("matchFields"), f"{path}.matchFields"),
    )


def parse_node_selector(raw: Any, path: str) -> NodeSelector:
    raw = as_mapping(raw, path)
    terms = as_list(raw.get("nodeSelectorTerms"), f"{path}.nodeSelectorTerms")
    return NodeSelector(
        tuple(parse_node_selector_term(t, f"{path}.nodeSelectorTerms[{i}]") for i, t in enumerate(terms))
    )


def _pod_affinity_term(raw: Any, path: str) -> PodAffinityTerm:
    raw = as_mapping(raw, path)
    return PodAffinityTerm(
        selector=parse_label_selector(raw.get("labelSelector"), f"{path}.labelSelector"),
        topology_key=str(raw.get("topologyKey", "")),
        namespaces=frozenset(str(n) for n in as_list(raw.get("namespaces"), f"{path}.namespaces")),
        namespace_selector=parse_label_selector(raw.get("namespaceSelector"), f"{path}.namespaceSelector"),
        match_label_keys=tuple(str(k) for k in as_list(raw.get("matchLabelKeys"), f"{path}.matchLabelKeys")),
        mismatch_label_keys=tuple(
            str(k) for k in as_list(raw.get("mismatchLabelKeys"), f"{path}.mismatchLabelKeys")
        ),
    )


def _pod_affinity(raw: Any, path: str) -> PodAffinity | None:
    if raw is None:
        return None
    raw = as_mapping(raw, path)
    req_path = f"{path}.requiredDuringSchedulingIgnoredDuringExecution"
    pref_path = f"{path}.preferredDuringSchedulingIgnoredDuringExecution"
    required = tuple(
        _pod_affinity_term(t, f"{req_path}[{i}]")
        for i, t in enumerate(as_list(raw.get("requiredDuringSchedulingIgnoredDuringExecution"), req_path))
    )
    preferred = []
    for i, t in enumerate(as_list(raw.get("preferredDuringSchedulingIgnoredDuringExecution"), pref_path)):
        t = as_mapping(t, f"{pref_path}[{i}]")
        preferred.append(
            WeightedPodAffinityTerm(
                as_int(t.get("weight"), f"{pref_path}[{i}].weight"),
                _pod_affinity_term(t.get("podAffinityTerm"), f"{pref_path}[{i}]"),
            )
        )
    return PodAffinity(required, tuple(preferred))


def parse_affinity(raw: Any, path: str = "spec.affinity") -> Affinity | None:
    if raw is None:
        return None
    raw = as_mapping(raw, path)
    node_aff = None
    if raw.get("nodeAffinity") is not None:
        na = as_mapping(raw["nodeAffinity"], f"{path}.nodeAffinity")
        req_key = "requiredDuringSchedulingIgnoredDuringExecution"
        pref_key = "preferredDuringSchedulingIgnoredDuringExecution"
        required = (
            parse_node_selector(na[req_key], f"{path}.nodeAffinity.{req_key}")
            if na.get(req_key) is not None
            else None
        )
        preferred = []
        for i, p in enumerate(as_list(na.get(pref_key), f"{path}.nodeAffinity.{pref_key}")):
            ppath = f"{path}.nodeAffinity.{pref_key}[{i}]"
            p = as_mapping(p, ppath)
            preferred.append(
                PreferredSchedulingTerm(
                    as_int(p.get("weight"), f"{ppath}.weight"),
                    parse_node_selector_term(p.get("preference"), f"{ppath}.preference"),
                )
            )
        node_aff = NodeAffinity(required, tuple(preferred))
    return Affinity(
        node_affinity=node_aff,
        pod_affinity=_pod_affinity(raw.get("podAffinity"), f"{path}.podAffinity"),
        pod_anti_affinity=_pod_affinity(raw.get("podAntiAffinity"), f"{path}.podAntiAffinity"),
    )


def parse_toleration(raw: Any, path: str) -> Toleration:
    raw = as_mapping(raw, path)
    op = raw.get("operator") or "Equal"
    if op not in ("Equal", "Exists"):
        raise ObjectError(f"{path}.operator", f"{op!r} is not a valid toleration operator")
    secs = raw.get("tolerationSeconds")
    return Toleration(
        key=str(raw.get("key") or ""),
        operator=op,
        value=str(raw.get("value") or ""),
        effect=str(raw.get("effect") or ""),
        toleration_seconds=as_int(secs, f"{path}.tolerationSeconds") if secs is not None else None,
    )


def parse_taint(raw: Any, path: str) -> Taint:
    raw = as_mapping(raw, path)
    return Taint(str(raw.get("key", "")), str(raw.get("value") or ""), str(raw.get("effect", "")))


def parse_topology_spread(raw: Any, path: str) -> TopologySpreadConstraint:
    raw = as_mapping(raw, path)
    try:
        max_skew = int(raw.get("maxSkew", 0))
    except (TypeError, ValueError):
        raise ObjectError(f"{path}.maxSkew", "must be an integer") from None
    if max_skew <= 0:
        raise ObjectError(f"{path}.maxSkew", "must be greater than zero")
    when = raw.get("whenUnsatisfiable", "DoNotSchedule")
    if when not in ("DoNotSchedule", "ScheduleAnyway"):
        raise ObjectError(f"{path}.whenUnsatisfiable", f"unsupported value {when!r}")
    min_domains = raw.get("minDomains")
    return TopologySpreadConstraint(
        max_skew=max_skew,
        topology_key=str(raw.get("topologyKey", "")),
        when_unsatisfiable=when,
        selector=parse_label_selector(raw.get("labelSelector"), f"{path}.labelSelector"),
        min_domains=as_int(min_domains, f"{path}.minDomains") if min_domains is not None else None,
        node_affinity_policy=str(raw.get("nodeAffinityPolicy") or "Honor"),
        node_taints_policy=str(raw.get("nodeTaintsPolicy") or "Ignore"),
        match_label_keys=tuple(str(k) for k in as_list(raw.get("matchLabelKeys"), f"{path}.matchLabelKeys")),
    )


def _host_ports(spec: Mapping[str, Any]) -> tuple[HostPort, ...]:
    ports: list[HostPort] = []
    groups = (("containers", spec.get("containers")), ("initContainers", spec.get("initContainers")))
    for group, containers in groups:
        for i, container in enumerate(as_list(containers, f"spec.{group}")):
            container = as_mapping(container, f"spec.{group}[{i}]")
            if group == "initContainers" and container.get("restartPolicy") != "Always":
                continue
            for j, port in enumerate(as_list(container.get("ports"), f"spec.{group}[{i}].ports")):
                port = as_mapping(port, f"spec.{group}[{i}].ports[{j}]")
                host_port = as_int(port.get("hostPort"), f"spec.{group}[{i}].ports[{j}].hostPort")
                if host_port > 0:
                    ports.append(
                        HostPort(str(port.get("protocol") or "TCP"), str(port.get("hostIP") or ""), host_port)
                    )
    return tuple(ports)


# --- objects ----------------------------------------------------------------------------------


# --- memoised sub-structures -------------------------------------------------------------------
#
# Most pods of a cluster come from a handful of templates (Deployments, Jobs, DaemonSets), so the
# same containers, tolerations and affinity recur tens of thousands of times in a listing. Their
# parsed forms are memoised by an exact, hashable image of the raw sub-structure (``_freeze``), so a
# listing parses each template once. Only successes are memoised; any surprise (an unkeyable type, a
# parse error) re-parses the whole pod the plain way, so errors and their order are unchanged.


class _NoKey(Exception):
    """A raw value of a type the memo does not key (the plain parser decides what it means)."""


def _freeze(value: Any) -> Any:
    """An exact hashable image of JSON-shaped data: types are tagged, since ``1 == 1.0 == True``."""
    kind = type(value)
    if kind is str or value is None:
        return value
    if kind is dict:
        items = []
        for key, item in value.items():
            if type(key) is not str:
                raise _NoKey
            items.append((key, _freeze(item)))
        return (dict, tuple(items))
    if kind is list:
        return (list, tuple([_freeze(item) for item in value]))
    if kind is int or kind is float or kind is bool:
        return (kind, value)
    raise _NoKey  # tuples, Mapping views, ...: rare, and the plain path handles them


_MEMO_LIMIT = 4096  # entries per table; a cluster of unique templates just clears and refills


class _Memo:
    __slots__ = ("parse", "table")

    def __init__(self, parse: Callable[[Any], Any]) -> None:
        self.parse = parse
        self.table: dict[Any, Any] = {}

    def __call__(self, raw: Any) -> Any:
        if raw is None:
            return self.parse(None)
        key = _freeze(raw)
        try:
            return self.table[key]
        except KeyError:
            pass
        parsed = self.parse(raw)
        if len(self.table) >= _MEMO_LIMIT:
            self.table.clear()
        self.table[key] = parsed
        return parsed


def _parse_tolerations(raw: Any) -> tuple[Toleration, ...]:
    return tuple(
        parse_toleration(t, f"spec.tolerations[{i}]") for i, t in enumerate(as_list(raw, "spec.tolerations"))
    )


def _parse_spread(raw: Any) -> tuple[TopologySpreadConstraint, ...]:
    path = "spec.topologySpreadConstraints"
    return tuple(parse_topology_spread(t, f"{path}[{i}]") for i, t in enumerate(as_list(raw, path)))


def _images(spec: Mapping[str, Any]) -> tuple[str, ...]:
    images = []
    for group in ("initContainers", "containers"):
        for c in as_list(spec.get(group), f"spec.{group}"):
            if isinstance(c, Mapping) and c.get("image"):
                images.append(str(c["image"]))
    return tuple(images)


# Frozen dataclasses and tuples of them: safe to share between pods.
_AFFINITY = _Memo(parse_affinity)
_TOLERATIONS = _Memo(_parse_tolerations)
_SPREAD = _Memo(_parse_spread)
_CONTAINERS: dict[Any, tuple[Resource, int, int, tuple[HostPort, ...], tuple[str, ...]]] = {}


def _containers_key(spec: Mapping[str, Any]) -> Any:
    """What requests, host ports and images depend on, and nothing else (env, probes, ... vary)."""
    groups: list[tuple[Any, ...] | None] = []
    for group in ("containers", "initContainers"):
        containers = spec.get(group)
        if containers is None:
            groups.append(None)
            continue
        if type(containers) is not list:
            raise _NoKey
        keys = []
        for c in containers:
            if type(c) is not dict:
                raise _NoKey
            keys.append(
                (
                    _freeze(c.get("image")),
                    _freeze(c.get("restartPolicy")),
                    _freeze(c.get("resources")),
                    _freeze(c.get("ports")),
                )
            )
        groups.append(tuple(keys))
    return (*groups, _freeze(spec.get("overhead")), _freeze(spec.get("resources")))


def _containers(spec: Mapping[str, Any]) -> tuple[Resource, int, int, tuple[HostPort, ...], tuple[str, ...]]:
    key = _containers_key(spec)
    hit = _CONTAINERS.get(key)
    if hit is None:
        requests, nz_cpu, nz_mem = pod_requests(spec)
        hit = (requests, nz_cpu, nz_mem, _host_ports(spec), _images(spec))
        if len(_CONTAINERS) >= _MEMO_LIMIT:
            _CONTAINERS.clear()
        _CONTAINERS[key] = hit
    requests, nz_cpu, nz_mem, host_ports, images = hit
    return requests.clone(), nz_cpu, nz_mem, host_ports, images  # Resource is mutable: one per pod


# --- objects ----------------------------------------------------------------------------------


def parse_pod(obj: Mapping[str, Any]) -> PodSpec:
    """Parse a Pod; raises ObjectError naming the first malformed field."""
    try:
        return _parse_pod(obj, memo=True)
    except (_NoKey, ValueError, TypeError, KeyError, AttributeError):
        # Unkeyable or malformed: the plain parse raises the same first error as always.
        return _parse_pod(obj, memo=False)


def _parse_pod(obj: Mapping[str, Any], memo: bool) -> PodSpec:
    meta = as_mapping(obj.get("metadata"), "metadata")
    spec = as_mapping(obj.get("spec"), "spec")
    status = as_mapping(obj.get("status"), "status")
    # Evaluation order is the order fields are validated in, hence the first error reported.
    if memo:
        requests, nz_cpu, nz_mem, host_ports, images = _containers(spec)
    else:
        requests, nz_cpu, nz_mem = pod_requests(spec)
        images = _images(spec)
    labels = as_str_map(meta.get("labels"), "metadata.labels")
    annotations = as_str_map(meta.get("annotations"), "metadata.annotations")
    priority = as_int(spec.get("priority"), "spec.priority")
    node_selector = as_str_map(spec.get("nodeSelector"), "spec.nodeSelector")
    if memo:
        affinity = _AFFINITY(spec.get("affinity"))
        tolerations = _TOLERATIONS(spec.get("tolerations"))
        spread = _SPREAD(spec.get("topologySpreadConstraints"))
    else:
        affinity = parse_affinity(spec.get("affinity"))
        tolerations = _parse_tolerations(spec.get("tolerations"))
        spread = _parse_spread(spec.get("topologySpreadConstraints"))
        host_ports = _host_ports(spec)
    volumes = spec.get("volumes")
    gates = spec.get("schedulingGates")
    return PodSpec(
        uid=str(meta.get("uid") or f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"),
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name", "")),
        labels=labels,
        annotations=annotations,
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        node_name=str(spec.get("nodeName") or ""),
        nominated_node_name=str(status.get("nominatedNodeName") or ""),
        priority=priority,
        priority_class_name=str(spec.get("priorityClassName") or ""),
        preemption_policy=str(spec.get("preemptionPolicy") or "PreemptLowerPriority"),
        node_selector=node_selector,
        affinity=affinity,
        tolerations=tolerations,
        topology_spread_constraints=spread,
        host_ports=host_ports,
        requests=requests,
        non_zero_cpu=nz_cpu,
        non_zero_memory=nz_mem,
        images=images,
        volumes=tuple(
            as_mapping(v, f"spec.volumes[{i}]") for i, v in enumerate(as_list(volumes, "spec.volumes"))
        )
        if volumes is not None
        else (),
        scheduling_gates=tuple(
            str(as_mapping(g, f"spec.schedulingGates[{i}]").get("name", ""))
            for i, g in enumerate(as_list(gates, "spec.schedulingGates"))
        )
        if gates is not None
        else (),
        owner_references=tuple(as_list(meta.get("ownerReferences"), "metadata.ownerReferences")),
        creation_timestamp=parse_timestamp(meta.get("creationTimestamp"), "metadata.creationTimestamp"),
        start_time=parse_timestamp(status.get("startTime"), "status.startTime"),
        deletion_timestamp=parse_timestamp(meta.get("deletionTimestamp"), "metadata.deletionTimestamp"),
        phase=str(status.get("phase") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        generation=as_int(meta.get("generation"), "metadata.generation"),
        raw=obj,
    )


def parse_node(obj: Mapping[str, Any]) -> NodeSpec:
    meta = as_mapping(obj.get("metadata"), "metadata")
    spec = as_mapping(obj.get("spec"), "spec")
    status = as_mapping(obj.get("status"), "status")
    allocatable_raw = status.get("allocatable")
    if allocatable_raw is None:
        allocatable_raw = status.get("capacity")
    images: list[tuple[tuple[str, ...], int]] = []
    for i, img in enumerate(as_list(status.get("images"), "status.images")):
        img = as_mapping(img, f"status.images[{i}]")
        images.append(
            (
                tuple(str(n) for n in as_list(img.get("names"), "names")),
                as_int(img.get("sizeBytes"), f"status.images[{i}].sizeBytes"),
            )
        )
    return NodeSpec(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid") or ""),
        labels=as_str_map(meta.get("labels"), "metadata.labels"),
        taints=tuple(
            parse_taint(t, f"spec.taints[{i}]")
            for i, t in enumerate(as_list(spec.get("taints"), "spec.taints"))
        ),
        allocatable=parse_resource_list(allocatable_raw, "status.allocatable"),
        unschedulable=bool(spec.get("unschedulable")),
        images=tuple(images),
        declared_features=tuple(
            str(f) for f in as_list(status.get("declaredFeatures"), "status.declaredFeatures")
        ),
        resource_version=str(meta.get("resourceVersion") or ""),
        raw=obj,
    )


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return as_str_map(as_mapping(obj.get("metadata"), "metadata").get("labels"), "metadata.labels")
