"""Parsing raw Pod and Node objects (API dicts) into the engine's compact forms.

A malformed object raises :class:`~kopf_scheduler.api.types.ObjectError` naming the field, so
that the operator can report it on the object (a FailedScheduling event) and go on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from kopf_scheduler.api.quantity import QuantityError, ceil_milli, ceil_value, parse_quantity
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

__all__ = [
    "Node",
    "Pod",
    "PodRequests",
    "PodResourceClaim",
    "is_supported_pod_level_resource",
    "parse_node",
    "parse_pod",
    "parse_resource_list",
    "pod_key",
    "pod_requests",
]

# The reference's defaults for pods that request nothing (scoring only):
# ``schedutil.DefaultMilliCPURequest`` and ``DefaultMemoryRequest``.
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024

_NODE_OPS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
_LABEL_OPS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


def pod_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


@dataclass(frozen=True, slots=True)
class PodResourceClaim:
    """One entry of ``spec.resourceClaims``: a claim by name, or one made from a template."""

    name: str
    resource_claim_name: str | None = None
    resource_claim_template_name: str | None = None


def _resource_claims(spec: Mapping[str, Any]) -> tuple[PodResourceClaim, ...]:
    raw = spec.get("resourceClaims")
    if not raw:
        return ()
    out = []
    for i, item in enumerate(as_list(raw, "spec.resourceClaims")):
        item = as_mapping(item, f"spec.resourceClaims[{i}]")
        claim_name, template = item.get("resourceClaimName"), item.get("resourceClaimTemplateName")
        out.append(
            PodResourceClaim(
                str(item.get("name", "")),
                str(claim_name) if claim_name is not None else None,
                str(template) if template is not None else None,
            )
        )
    return tuple(out)


def _resource_claim_statuses(status: Mapping[str, Any]) -> tuple[tuple[str, str | None], ...]:
    raw = status.get("resourceClaimStatuses")
    if not raw:
        return ()
    out = []
    for i, item in enumerate(as_list(raw, "status.resourceClaimStatuses")):
        item = as_mapping(item, f"status.resourceClaimStatuses[{i}]")
        claim_name = item.get("resourceClaimName")
        out.append((str(item.get("name", "")), str(claim_name) if claim_name is not None else None))
    return tuple(out)


# weakref_slot: per-pod plugin caches hold their pods weakly, so an entry dies with its pod.
@dataclass(slots=True, eq=False, weakref_slot=True)
class Pod:
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
    requests: Resource = field(default_factory=Resource)  # NodeInfo accounting (status-aware)
    non_zero_cpu: int = 0
    non_zero_memory: int = 0
    # NodeResourcesFit's forms where they differ from ``requests`` (see ``pod_requests``).
    spec_requests: Resource | None = None
    container_requests: Resource | None = None
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
    # DynamicResources: spec.resourceClaims and status.resourceClaimStatuses (name -> claim name,
    # None when the resourceclaim controller decided no claim is needed).
    resource_claims: tuple[PodResourceClaim, ...] = ()
    resource_claim_statuses: tuple[tuple[str, str | None], ...] = ()
    # spec.schedulingGroup.podGroupName: the PodGroup (same namespace) this pod is a member of.
    pod_group: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def key(self) -> str:
        return pod_key(self.namespace, self.name)

    @property
    def pod_group_key(self) -> str:
        """``namespace/podGroupName``, or "" for a pod of no group."""
        return f"{self.namespace}/{self.pod_group}" if self.pod_group else ""

    @property
    def filter_requests(self) -> Resource:
        """What NodeResourcesFit's Filter checks: spec requests with pod-level resources."""
        return self.spec_requests if self.spec_requests is not None else self.requests

    @property
    def score_requests(self) -> Resource:
        """What NodeResourcesFit's Score counts for the pod: container-level spec requests with
        per-container defaults for missing cpu/memory (its scorer ignores pod-level resources)."""
        if self.container_requests is not None:
            return self.container_requests
        res = self.requests.clone()
        res.milli_cpu, res.memory = self.non_zero_cpu, self.non_zero_memory
        return res

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
class Node:
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
#
# The reference computes a pod's requests with component-helpers' ``resource.PodRequests`` under
# different options at different places, and they give different answers for pods with pod-level
# resources (``spec.resources``) or in-place resize state in their status:
#
# - ``NodeInfo`` accounting (``PodInfo.CalculateResource``), BalancedAllocation and the queue's
#   scale-down check: status-aware (the max of spec, allocated and actuated resources), pod-level
#   resources applied  -> ``Pod.requests`` (and ``non_zero_cpu``/``non_zero_memory``);
# - NodeResourcesFit's PreFilter/Filter: spec only, pod-level applied -> ``Pod.filter_requests``;
# - NodeResourcesFit's Score: spec only, container level only (its scorer never enables pod-level
#   resources), per-container defaults for missing cpu/memory -> ``Pod.score_requests``.
#
# Amounts are summed as exact fractions and rounded up once at the end, as Quantity arithmetic is.

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


def parse_resource_list(raw: Any, path: str) -> Resource:
    """A ResourceList (``{"cpu": "100m", ...}``) in canonical units; negatives are rejected."""
    return _to_resource(_parse_rlist(raw, path))


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
    # Status (read only when it carries resize state: see _status_relevant).
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


def _resize_reason(status: Mapping[str, Any]) -> str | None:
    for cond in as_list(status.get("conditions"), "status.conditions"):
        if isinstance(cond, Mapping) and cond.get("type") == RESIZE_PENDING:
            return str(cond.get("reason") or "")
    return None


def _status_relevant(status: Mapping[str, Any]) -> bool:
    """Whether the status can change the requests (else status-aware == spec, cheaply)."""
    if status.get("allocatedResources") is not None or status.get("resources") is not None:
        return True
    for group in ("containerStatuses", "initContainerStatuses"):
        for cs in status.get(group) or ():
            if isinstance(cs, Mapping) and (
                cs.get("allocatedResources") is not None or cs.get("resources") is not None
            ):
                return True
    return _resize_reason(status) is not None


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
    if status is not None and _status_relevant(status):
        _read_status(pr, spec, status)
    return pr


def _read_status(pr: _PodResources, spec: Mapping[str, Any], status: Mapping[str, Any]) -> None:
    pr.use_status = True
    pr.infeasible = _resize_reason(status) == "Infeasible"
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
    """A pod's requests as each consumer in the reference computes them (see the section note)."""

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
_CONTAINERS: dict[Any, tuple[PodRequests, tuple[HostPort, ...], tuple[str, ...]]] = {}


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


def _status_key(spec: Mapping[str, Any], status: Mapping[str, Any]) -> Any:
    """What the status adds to the requests: None for most pods (no resize state at all)."""
    if not _status_relevant(status):
        return None
    names = tuple(
        _freeze(c.get("name")) for group in ("containers", "initContainers") for c in spec.get(group) or ()
    )
    per: list[tuple[Any, ...] | None] = []
    for group in ("containerStatuses", "initContainerStatuses"):
        statuses = status.get(group)
        if statuses is None:
            per.append(None)
            continue
        if type(statuses) is not list:
            raise _NoKey
        items = []
        for cs in statuses:
            if type(cs) is not dict:
                raise _NoKey
            items.append(
                (_freeze(cs.get("name")), _freeze(cs.get("allocatedResources")), _freeze(cs.get("resources")))
            )
        per.append(tuple(items))
    return (
        names,
        *per,
        _freeze(status.get("allocatedResources")),
        _freeze(status.get("resources")),
        _resize_reason(status),
    )


def _containers(
    spec: Mapping[str, Any], status: Mapping[str, Any]
) -> tuple[PodRequests, tuple[HostPort, ...], tuple[str, ...]]:
    key = (_containers_key(spec), _status_key(spec, status))
    hit = _CONTAINERS.get(key)
    if hit is None:
        hit = (pod_requests(spec, status), _host_ports(spec), _images(spec))
        if len(_CONTAINERS) >= _MEMO_LIMIT:
            _CONTAINERS.clear()
        _CONTAINERS[key] = hit
    reqs, host_ports, images = hit
    # Resource is mutable: one per pod (the Fit-only forms are never changed, so they are shared).
    return dataclasses.replace(reqs, requests=reqs.requests.clone()), host_ports, images


# --- objects ----------------------------------------------------------------------------------


def parse_pod(obj: Mapping[str, Any]) -> Pod:
    """Parse a Pod; raises ObjectError naming the first malformed field."""
    try:
        return _parse_pod(obj, memo=True)
    except (_NoKey, ValueError, TypeError, KeyError, AttributeError):
        # Unkeyable or malformed: the plain parse raises the same first error as always.
        return _parse_pod(obj, memo=False)


def _parse_pod(obj: Mapping[str, Any], memo: bool) -> Pod:
    meta = as_mapping(obj.get("metadata"), "metadata")
    spec = as_mapping(obj.get("spec"), "spec")
    status = as_mapping(obj.get("status"), "status")
    # Evaluation order is the order fields are validated in, hence the first error reported.
    if memo:
        reqs, host_ports, images = _containers(spec, status)
    else:
        reqs = pod_requests(spec, status)
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
    return Pod(
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
        requests=reqs.requests,
        non_zero_cpu=reqs.non_zero_cpu,
        non_zero_memory=reqs.non_zero_memory,
        spec_requests=reqs.filter_requests,
        container_requests=reqs.score_requests,
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
        resource_claims=_resource_claims(spec),
        resource_claim_statuses=_resource_claim_statuses(status),
        pod_group=_pod_group(spec),
        raw=obj,
    )


def _pod_group(spec: Mapping[str, Any]) -> str:
    group = spec.get("schedulingGroup")
    if group is None:
        return ""
    return str(as_mapping(group, "spec.schedulingGroup").get("podGroupName") or "")


def parse_node(obj: Mapping[str, Any]) -> Node:
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
    return Node(
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
