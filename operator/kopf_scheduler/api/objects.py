"""Parsing raw Pod and Node objects (API dicts) into the engine's compact forms.

A malformed object raises :class:`~kopf_scheduler.api.types.ObjectError` naming the field, so
that the operator can report it on the object (a FailedScheduling event) and go on.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kopf_scheduler.api.containers import (
    Container,
    PodCondition,
    has_bind_mount_options,
    parse_conditions,
    parse_containers,
)
from kopf_scheduler.api.meta import OwnerReference, parse_owner_references
from kopf_scheduler.api.resources import (
    PodRequests,
    parse_resource_list,
    pod_requests,
    resize_reason,
    status_affects_requests,
)
from kopf_scheduler.api.selectors import parse_affinity, parse_taint, parse_toleration, parse_topology_spread
from kopf_scheduler.api.types import (
    Affinity,
    HostPort,
    PodAffinityTerm,
    Resource,
    Taint,
    Toleration,
    TopologySpreadConstraint,
    as_int,
    as_list,
    as_mapping,
    as_str_map,
    parse_timestamp,
)
from kopf_scheduler.api.volumes import PodVolume, parse_volumes

__all__ = [
    "Node",
    "Pod",
    "PodResourceClaim",
    "labels_of",
    "parse_node",
    "parse_pod",
    "pod_key",
]


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
    # The containers one by one (shared by the pods of a template): images, per-container requests.
    init_containers: tuple[Container, ...] = ()
    containers: tuple[Container, ...] = ()
    ephemeral_containers: tuple[Container, ...] = ()
    host_network: bool = False
    host_users: bool | None = None  # None when not set (the default: the host's user namespace)
    volumes: tuple[PodVolume, ...] = ()
    scheduling_gates: tuple[str, ...] = ()
    owner_references: tuple[OwnerReference, ...] = ()
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
    conditions: tuple[PodCondition, ...] = ()  # status.conditions
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
    def images(self) -> tuple[str, ...]:
        """The images init and regular containers name (those that name one), in that order."""
        return tuple(c.image for group in (self.init_containers, self.containers) for c in group if c.image)

    def condition(self, ctype: str) -> PodCondition | None:
        """The first condition of that type (``podutil.GetPodCondition``)."""
        for cond in self.conditions:
            if cond.type == ctype:
                return cond
        return None

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

    def on_node(self, node_name: str) -> Pod:
        """``dataclasses.replace(self, node_name=node_name)`` (the assumed pod of every cycle), at a
        fifth of its cost: every field is an ``__init__`` argument and there is no ``__post_init__``."""
        values = list(_pod_values(self))
        values[_NODE_NAME_AT] = node_name
        return Pod(*values)


_POD_FIELDS = tuple(f.name for f in dataclasses.fields(Pod))
_pod_values = operator.attrgetter(*_POD_FIELDS)
_NODE_NAME_AT = _POD_FIELDS.index("node_name")


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
    # Read by the queue only: a change of either is a node update event of its own.
    annotations: dict[str, str] = field(default_factory=dict)
    conditions: dict[str, str] = field(default_factory=dict)  # status.conditions: type -> status
    # spec.podPreemptionPolicy as listed (None when absent): compared whole, as the reference's
    # extractNodePreemptionPolicyChange compares the pointer's value.
    preemption_policy: Mapping[str, Any] | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)


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
            # Scalars (most values) inline: what ``_freeze(item)`` returns for them, without the call.
            item_kind = type(item)
            if item_kind is str or item is None:
                items.append((key, item))
            elif item_kind is int or item_kind is float or item_kind is bool:
                items.append((key, (item_kind, item)))
            else:
                items.append((key, _freeze(item)))
        return (dict, tuple(items))
    if kind is list:
        return (list, tuple([item if type(item) is str else _freeze(item) for item in value]))
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


def _typed_containers(spec: Mapping[str, Any]) -> tuple[tuple[Container, ...], tuple[Container, ...]]:
    return (
        parse_containers(spec.get("initContainers"), "spec.initContainers"),
        parse_containers(spec.get("containers"), "spec.containers"),
    )


# Frozen dataclasses and tuples of them: safe to share between pods.
_AFFINITY = _Memo(parse_affinity)
_TOLERATIONS = _Memo(_parse_tolerations)
_SPREAD = _Memo(_parse_spread)
_Containers = tuple[PodRequests, tuple[HostPort, ...], tuple[Container, ...], tuple[Container, ...]]
_CONTAINERS: dict[Any, _Containers] = {}


def _host_ports_key(ports: Any) -> Any:
    """What ``_host_ports`` reads of a container's ports: those that set ``hostPort`` (most ports
    only document a containerPort, which nothing reads)."""
    if ports is None:
        return None
    if type(ports) is not list:
        raise _NoKey
    out = []
    for port in ports:
        if type(port) is not dict:
            raise _NoKey
        if port.get("hostPort") is not None:
            out.append(_freeze(port))
    return tuple(out)


def _containers_key(spec: Mapping[str, Any]) -> Any:
    """What requests, host ports and the typed containers depend on, and nothing else (env,
    probes, mounts' names and paths, ... vary)."""
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
            # Strings (nearly always) as themselves: this runs for every container listed.
            name, image, policy = c.get("name"), c.get("image"), c.get("restartPolicy")
            rules = c.get("restartPolicyRules")
            keys.append(
                (
                    name if type(name) is str else _freeze(name),
                    image if type(image) is str else _freeze(image),
                    policy if type(policy) is str else _freeze(policy),
                    _freeze(c.get("resources")),
                    _host_ports_key(c.get("ports")),
                    None if rules is None else _freeze(rules),
                    has_bind_mount_options(c),
                )
            )
        groups.append(tuple(keys))
    overhead, resources = spec.get("overhead"), spec.get("resources")
    return (
        *groups,
        None if overhead is None else _freeze(overhead),
        None if resources is None else _freeze(resources),
    )


def _status_key(spec: Mapping[str, Any], status: Mapping[str, Any]) -> Any:
    """What the status adds to the requests: None for most pods (no resize state at all)."""
    if not status_affects_requests(status):
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
        resize_reason(status),
    )


def _containers(spec: Mapping[str, Any], status: Mapping[str, Any]) -> _Containers:
    key = (_containers_key(spec), _status_key(spec, status))
    hit = _CONTAINERS.get(key)
    if hit is None:
        hit = (pod_requests(spec, status), _host_ports(spec), *_typed_containers(spec))
        if len(_CONTAINERS) >= _MEMO_LIMIT:
            _CONTAINERS.clear()
        _CONTAINERS[key] = hit
    reqs, host_ports, init_containers, containers = hit
    # Resource is mutable: one per pod (the Fit-only forms are never changed, so they are shared).
    # (``dataclasses.replace(reqs, requests=...)``, without its walk over the fields: 1.2 us a pod.)
    own = PodRequests(
        requests=reqs.requests.clone(),
        non_zero_cpu=reqs.non_zero_cpu,
        non_zero_memory=reqs.non_zero_memory,
        filter_requests=reqs.filter_requests,
        score_requests=reqs.score_requests,
    )
    return own, host_ports, init_containers, containers


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
        reqs, host_ports, init_containers, containers = _containers(spec, status)
    else:
        reqs = pod_requests(spec, status)
        init_containers, containers = _typed_containers(spec)
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
    name = str(meta.get("name", ""))
    node_name = str(spec.get("nodeName") or "")
    return Pod(
        uid=str(meta.get("uid") or f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"),
        namespace=str(meta.get("namespace") or "default"),
        name=name,
        labels=labels,
        annotations=annotations,
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        node_name=node_name,
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
        init_containers=init_containers,
        containers=containers,
        ephemeral_containers=parse_containers(spec.get("ephemeralContainers"), "spec.ephemeralContainers"),
        host_network=spec.get("hostNetwork") is True,
        host_users=host_users if isinstance(host_users := spec.get("hostUsers"), bool) else None,
        volumes=parse_volumes(volumes, name, signed=not node_name, memo=memo),
        scheduling_gates=tuple(
            str(as_mapping(g, f"spec.schedulingGates[{i}]").get("name", ""))
            for i, g in enumerate(as_list(gates, "spec.schedulingGates"))
        )
        if gates is not None
        else (),
        owner_references=parse_owner_references(meta.get("ownerReferences")),
        creation_timestamp=parse_timestamp(meta.get("creationTimestamp"), "metadata.creationTimestamp"),
        start_time=parse_timestamp(status.get("startTime"), "status.startTime"),
        deletion_timestamp=parse_timestamp(meta.get("deletionTimestamp"), "metadata.deletionTimestamp"),
        phase=str(status.get("phase") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        generation=as_int(meta.get("generation"), "metadata.generation"),
        resource_claims=_resource_claims(spec),
        resource_claim_statuses=_resource_claim_statuses(status),
        pod_group=_pod_group(spec),
        conditions=parse_conditions(status.get("conditions")),
        raw=obj,
    )


def _pod_group(spec: Mapping[str, Any]) -> str:
    group = spec.get("schedulingGroup")
    if group is None:
        return ""
    return str(as_mapping(group, "spec.schedulingGroup").get("podGroupName") or "")


def parse_node(obj: Mapping[str, Any]) -> Node:
    # Absent lists (most nodes: no taints, no declared features) skip their parsers; the fields are
    # still read in the same order, so a malformed node reports the same first error.
    meta = as_mapping(obj.get("metadata"), "metadata")
    spec = as_mapping(obj.get("spec"), "spec")
    status = as_mapping(obj.get("status"), "status")
    allocatable_raw = status.get("allocatable")
    if allocatable_raw is None:
        allocatable_raw = status.get("capacity")
    raw_images = status.get("images")
    images = _node_images(raw_images) if raw_images is not None else ()
    taints = spec.get("taints")
    features = status.get("declaredFeatures")
    annotations = meta.get("annotations")
    return Node(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid") or ""),
        labels=as_str_map(meta.get("labels"), "metadata.labels"),
        taints=_node_taints(taints) if taints is not None else (),
        allocatable=parse_resource_list(allocatable_raw, "status.allocatable"),
        unschedulable=bool(spec.get("unschedulable")),
        images=images,
        declared_features=tuple([str(f) for f in as_list(features, "status.declaredFeatures")])
        if features is not None
        else (),
        resource_version=str(meta.get("resourceVersion") or ""),
        annotations=as_str_map(annotations, "metadata.annotations") if annotations is not None else {},
        conditions=_node_conditions(status.get("conditions")),
        preemption_policy=_preemption_policy(spec.get("podPreemptionPolicy")),
        raw=obj,
    )


def _node_images(raw: Any) -> tuple[tuple[tuple[str, ...], int], ...]:
    images: list[tuple[tuple[str, ...], int]] = []
    for i, img in enumerate(as_list(raw, "status.images")):
        img = as_mapping(img, f"status.images[{i}]")
        images.append(
            (
                tuple(str(n) for n in as_list(img.get("names"), "names")),
                as_int(img.get("sizeBytes"), f"status.images[{i}].sizeBytes"),
            )
        )
    return tuple(images)


def _node_taints(raw: Any) -> tuple[Taint, ...]:
    return tuple(parse_taint(t, f"spec.taints[{i}]") for i, t in enumerate(as_list(raw, "spec.taints")))


def _preemption_policy(raw: Any) -> Mapping[str, Any] | None:
    return None if raw is None else as_mapping(raw, "spec.podPreemptionPolicy")


def _node_conditions(raw: Any) -> dict[str, str]:
    """``status.conditions`` as type -> status: all the queue compares of them (the reference's
    ``extractNodeConditionsChange`` strips the heartbeat and transition times, reason, message)."""
    out: dict[str, str] = {}
    for i, cond in enumerate(as_list(raw, "status.conditions")):
        if type(cond) is not dict:
            cond = as_mapping(cond, f"status.conditions[{i}]")
        out[str(cond.get("type") or "")] = str(cond.get("status") or "")
    return out


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return as_str_map(as_mapping(obj.get("metadata"), "metadata").get("labels"), "metadata.labels")
