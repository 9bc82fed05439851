"""Cluster invariants that must hold after any run of the scheduler, whatever faults were injected.

Fault tests and benchmarks end with :func:`check`: it reads only what the apiserver holds (raw pods,
nodes, events), so it judges the scheduler from the outside and cannot share a bug with the engine's
cache. Requests are computed by the engine's own parser (``api.objects``) so "fits" means the same
thing to the checker as to ``NodeResourcesFit``.

Checked:

* ``bound-twice``: a pod of ours with more than one ``Scheduled`` event (the scheduler believed two
  Bindings were accepted), or a ``Scheduled`` event naming a node other than the pod's ``nodeName``
  (the scheduler believed a bind that the apiserver did not keep).
* ``no-reason``: a pending pod of ours with neither ``PodScheduled=False`` nor a ``FailedScheduling``
  event: the pod was lost (dropped from the queue without a word).
* ``overcommit``: a node whose bound, non-terminal pods request more than its allocatable
  (cpu, memory, ephemeral-storage, pods, extended resources; an extended resource a DeviceClass
  stands for, on a node not offering it, is met by DRA devices, not counted here).
* ``host-port``: two pods on a node using the same host port/protocol on overlapping IPs.
* ``anti-affinity``: a required anti-affinity term of a bound pod matched by another pod in the same
  topology domain (only pairs where at least one pod is ours).
* ``spread``: a ``DoNotSchedule`` topology spread constraint of a pod of ours whose skew over the
  eligible domains exceeds ``maxSkew``. This is a final-state check; it is exact when the matching
  pods are placed by us under the same constraint and none is deleted (then the last pod placed in
  the fullest domain passed the filter against a minimum that can only have grown since).
* ``device-shared``: a device (driver/pool/device) in the allocation of two ResourceClaims, neither
  with admin access nor as a share (``shareID``) of a device that allows several: DynamicResources
  gave one exclusive device twice.
* ``partial-gang``: a PodGroup with a gang policy with some, but fewer than ``minCount``, members
  bound: the all-or-nothing promise broken (a gang may be partly bound only while its binds land).
* ``stranded`` (optional): a pending pod of ours with only resource requirements (no affinity, spread,
  ports, tolerations, gates, pod group) that fits the free resources of a schedulable untainted node
  matching its nodeSelector: a sign of phantom (leaked) assumed pods in the scheduler's cache or a lost pod.

Pods bound to nodes that no longer exist are not violations (no controller GCs them here) but are
counted in ``Report.orphaned``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kopf_scheduler.api.objects import Node, Pod, parse_node, parse_pod
from kopf_scheduler.api.podgroup import parse_pod_group
from kopf_scheduler.api.resource import parse_device_class
from kopf_scheduler.api.types import (
    CPU,
    EPHEMERAL_STORAGE,
    MEMORY,
    PODS,
    LabelSelector,
    LabelSelectorRequirement,
    ObjectError,
    PodAffinityTerm,
    Resource,
    TopologySpreadConstraint,
)
from kopf_scheduler.api.volumes import PERSISTENT_VOLUME_CLAIM
from kopf_scheduler.dra.extended import ExtendedResources

__all__ = [
    "ClusterState",
    "Report",
    "Violation",
    "check",
]

_ANY_IP = "0.0.0.0"


@dataclass(frozen=True, slots=True)
class Violation:
    # bound-twice | no-reason | overcommit | host-port | anti-affinity | spread | device-shared |
    # partial-gang | stranded | malformed
    kind: str
    subject: str  # ns/pod or node name
    detail: str

    def __str__(self) -> str:
        return f"[{self.kind}] {self.subject}: {self.detail}"


@dataclass
class Report:
    violations: list[Violation] = field(default_factory=list)
    ours: int = 0  # pods whose schedulerName is one of ours
    bound: int = 0  # of ours, bound
    pending: int = 0  # of ours, not bound
    orphaned: int = 0  # of ours, bound to a node that does not exist

    @property
    def ok(self) -> bool:
        return not self.violations

    def kinds(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for v in self.violations:
            out[v.kind] += 1
        return dict(out)

    def summary(self) -> str:
        head = (
            f"{self.ours} pods of ours: {self.bound} bound, {self.pending} pending; {self.orphaned} orphaned"
        )
        if self.ok:
            return f"{head}; no violations"
        lines = [f"{head}; {len(self.violations)} violation(s) {self.kinds()}"]
        lines += [f"  {v}" for v in self.violations[:50]]
        return "\n".join(lines)


@dataclass
class ClusterState:
    """Raw API objects as listed (dicts); ``events`` are events.k8s.io/v1 or core/v1 Events."""

    pods: Sequence[Mapping[str, Any]] = field(default_factory=list)
    nodes: Sequence[Mapping[str, Any]] = field(default_factory=list)
    events: Sequence[Mapping[str, Any]] = field(default_factory=list)
    namespaces: Sequence[Mapping[str, Any]] = field(default_factory=list)
    # DRAExtendedResource: an extended resource a DeviceClass stands for is met by devices on a node
    # that does not offer it as allocatable, so it is no overcommit there.
    device_classes: Sequence[Mapping[str, Any]] = field(default_factory=list)
    resource_claims: Sequence[Mapping[str, Any]] = field(default_factory=list)
    # scheduling.k8s.io/v1beta1 PodGroups (empty where the API is not served).
    pod_groups: Sequence[Mapping[str, Any]] = field(default_factory=list)


# --- helpers --------------------------------------------------------------------------------------


def _conditions(raw: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    status = raw.get("status")
    conds = status.get("conditions") if isinstance(status, Mapping) else None
    return [c for c in conds or () if isinstance(c, Mapping)]


def _scheduled_false(raw: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in _conditions(raw))


@dataclass(frozen=True, slots=True)
class _Event:
    reason: str
    uid: str
    key: str  # ns/name of the regarded object
    note: str
    count: int


def _event(raw: Mapping[str, Any]) -> _Event | None:
    """Normalise an events.k8s.io/v1 or core/v1 Event about a Pod."""
    regarding = raw.get("regarding") or raw.get("involvedObject") or {}
    if not isinstance(regarding, Mapping) or regarding.get("kind") not in (None, "Pod"):
        return None
    series = raw.get("series") if isinstance(raw.get("series"), Mapping) else None
    if series is not None:
        count = int(series.get("count") or 1)
    else:
        count = int(raw.get("count") or raw.get("deprecatedCount") or 1)
    return _Event(
        reason=str(raw.get("reason") or ""),
        uid=str(regarding.get("uid") or ""),
        key=f"{regarding.get('namespace') or 'default'}/{regarding.get('name') or ''}",
        note=str(raw.get("note") or raw.get("message") or ""),
        count=max(count, 1),
    )


def _used_resources(pods: Iterable[Pod]) -> Resource:
    total = Resource()
    for pod in pods:
        total.add(pod.requests)
        total.allowed_pod_number += 1
    return total


def _resource_names(used: Resource) -> list[str]:
    return [CPU, MEMORY, EPHEMERAL_STORAGE, PODS, *sorted(used.scalar)]


def _ports_conflict(a: tuple[str, str, int], b: tuple[str, str, int]) -> bool:
    (pa, ia, na), (pb, ib, nb) = a, b
    if na != nb or pa != pb:
        return False
    ia, ib = ia or _ANY_IP, ib or _ANY_IP
    return _ANY_IP in (ia, ib) or ia == ib


def _term_selector(
    owner: Pod, selector: LabelSelector | None, match: Sequence[str], mismatch: Sequence[str]
) -> LabelSelector | None:
    """The selector with matchLabelKeys / mismatchLabelKeys merged as the apiserver would."""
    if selector is None:
        return None
    labels = owner.labels
    extra = [LabelSelectorRequirement(k, "In", frozenset({labels[k]})) for k in match if k in labels]
    extra += [LabelSelectorRequirement(k, "NotIn", frozenset({labels[k]})) for k in mismatch if k in labels]
    return selector.with_requirements(extra) if extra else selector


def _term_namespaces(
    owner: Pod, term: PodAffinityTerm, ns_labels: Mapping[str, Mapping[str, str]]
) -> set[str] | None:
    """Namespaces a term applies to; None means all (an empty namespaceSelector)."""
    names = set(term.namespaces)
    if term.namespace_selector is not None:
        if term.namespace_selector.is_empty():
            return None
        names |= {ns for ns, labels in ns_labels.items() if term.namespace_selector.matches(labels)}
    elif not names:
        names = {owner.namespace}
    return names


def _node_eligible(pod: Pod, node: Node, c: TopologySpreadConstraint) -> bool:
    """Whether a node's domain counts for the pod's spread constraint (nodeAffinity/Taints policies)."""
    if c.topology_key not in node.labels:
        return False
    if c.node_affinity_policy != "Ignore":
        if any(node.labels.get(k) != v for k, v in pod.node_selector.items()):
            return False
        na = pod.affinity.node_affinity if pod.affinity else None
        if na is not None and na.required is not None and not na.required.matches(node.name, node.labels):
            return False
    if c.node_taints_policy == "Honor":
        for taint in node.taints:
            hard = taint.effect in ("NoSchedule", "NoExecute")
            if hard and not any(t.tolerates(taint) for t in pod.tolerations):
                return False
    return True


# --- the checker ----------------------------------------------------------------------------------


def check(
    state: ClusterState,
    scheduler_names: Iterable[str] = ("kopf-scheduler",),
    *,
    namespaces: Iterable[str] | None = None,
    check_stranded: bool = False,
    check_spread: bool = True,
) -> Report:
    """Judge a cluster state; ``namespaces`` limits which of our pods are judged (all count on nodes)."""
    ours_names = set(scheduler_names)
    only_ns = set(namespaces) if namespaces is not None else None
    report = Report()

    nodes: dict[str, Node] = {}
    for raw in state.nodes:
        try:
            node = parse_node(raw)
        except ObjectError as exc:
            name = str((raw.get("metadata") or {}).get("name"))
            report.violations.append(Violation("malformed", name, f"node does not parse: {exc}"))
            continue
        nodes[node.name] = node
    ns_labels: dict[str, Mapping[str, str]] = {
        str((n.get("metadata") or {}).get("name")): dict((n.get("metadata") or {}).get("labels") or {})
        for n in state.namespaces
    }

    def is_ours(pod: Pod) -> bool:
        return pod.scheduler_name in ours_names and (only_ns is None or pod.namespace in only_ns)

    all_pods: list[Pod] = []
    for raw in state.pods:
        try:
            pod = parse_pod(raw)
        except ObjectError as exc:
            meta = raw.get("metadata") or {}
            key = f"{meta.get('namespace')}/{meta.get('name')}"
            spec = raw.get("spec") or {}
            pending = spec.get("schedulerName") in ours_names and not spec.get("nodeName")
            if pending and not _scheduled_false(raw):
                report.violations.append(Violation("no-reason", key, f"malformed, and no condition: {exc}"))
            continue
        if pod.is_terminal:
            continue
        all_pods.append(pod)

    by_node: dict[str, list[Pod]] = defaultdict(list)
    for pod in all_pods:
        if pod.node_name:
            if pod.node_name in nodes:
                by_node[pod.node_name].append(pod)
            elif is_ours(pod):
                report.orphaned += 1

    # Events about pods: Scheduled counts, FailedScheduling presence.
    scheduled: dict[str, list[_Event]] = defaultdict(list)
    failed: set[str] = set()
    for raw in state.events:
        ev = _event(raw)
        if ev is None:
            continue
        if ev.reason == "Scheduled":
            scheduled[ev.uid or ev.key].append(ev)
        elif ev.reason == "FailedScheduling":
            failed.add(ev.uid or ev.key)
            failed.add(ev.key)

    # 1. bound exactly once, or pending with a reason.
    for pod in all_pods:
        if not is_ours(pod):
            continue
        report.ours += 1
        evs = scheduled.get(pod.uid, [])
        if pod.node_name:
            report.bound += 1
            total = sum(e.count for e in evs)
            if total > 1:
                report.violations.append(
                    Violation("bound-twice", pod.key, f"{total} Scheduled events: {[e.note for e in evs]}")
                )
            for e in evs:
                if not e.note.endswith(f" to {pod.node_name}"):
                    report.violations.append(
                        Violation("bound-twice", pod.key, f"event {e.note!r} but nodeName={pod.node_name}")
                    )
        else:
            report.pending += 1
            if evs:
                report.violations.append(
                    Violation("bound-twice", pod.key, f"event {evs[0].note!r} but the pod is not bound")
                )
            if not _scheduled_false(pod.raw) and pod.uid not in failed and pod.key not in failed:
                report.violations.append(
                    Violation("no-reason", pod.key, "pending; no PodScheduled=False, no FailedScheduling")
                )

    # 2. resources, 3. host ports.
    by_device_class = ExtendedResources().classes(
        {c.metadata.name: c for c in map(parse_device_class, state.device_classes)}
    )
    free: dict[str, Resource] = {}
    for name, pods_on in sorted(by_node.items()):
        node = nodes[name]
        used = _used_resources(pods_on)
        for res in _resource_names(used):
            want, have = used.get(res), node.allocatable.get(res)
            if want > have and not (have == 0 and res in by_device_class):
                report.violations.append(
                    Violation("overcommit", name, f"{res}: {len(pods_on)} pods request {want} > {have}")
                )
        left = node.allocatable.clone()
        left.sub(used)
        free[name] = left
        seen: list[tuple[tuple[str, str, int], str]] = []
        for pod in pods_on:
            for hp in pod.host_ports:
                port = (hp.protocol or "TCP", hp.host_ip, hp.port)
                for used_port, user in seen:
                    if user != pod.key and _ports_conflict(port, used_port):
                        report.violations.append(
                            Violation("host-port", name, f"{port[0]}/{port[2]} used by {user} and {pod.key}")
                        )
                seen.append((port, pod.key))

    bound = [p for p in all_pods if p.node_name in nodes]

    # 4. required anti-affinity (either direction; at least one pod of the pair is ours).
    for owner in bound:
        for term in owner.required_anti_affinity:
            selector = _term_selector(owner, term.selector, term.match_label_keys, term.mismatch_label_keys)
            if selector is None:
                continue
            scope = _term_namespaces(owner, term, ns_labels)
            domain = nodes[owner.node_name].labels.get(term.topology_key)
            if domain is None:
                continue
            for other in bound:
                if other is owner or not (is_ours(owner) or is_ours(other)):
                    continue
                if scope is not None and other.namespace not in scope:
                    continue
                if nodes[other.node_name].labels.get(term.topology_key) != domain:
                    continue
                if selector.matches(other.labels):
                    report.violations.append(
                        Violation(
                            "anti-affinity",
                            owner.key,
                            f"{other.key} shares {term.topology_key}={domain} against a required term",
                        )
                    )

    # 5. DoNotSchedule topology spread.
    if check_spread:
        seen_constraints: set[tuple[Any, ...]] = set()
        for owner in bound:
            if not is_ours(owner):
                continue
            for c in owner.topology_spread_constraints:
                if c.when_unsatisfiable != "DoNotSchedule" or c.selector is None:
                    continue
                selector = _term_selector(owner, c.selector, c.match_label_keys, ())
                assert selector is not None
                ident = (owner.namespace, c, selector)
                if ident in seen_constraints:
                    continue
                seen_constraints.add(ident)
                counts: dict[str, int] = {}
                for node in nodes.values():
                    if _node_eligible(owner, node, c):
                        counts.setdefault(node.labels[c.topology_key], 0)
                if not counts:
                    continue
                for other in bound:
                    if other.namespace != owner.namespace or not selector.matches(other.labels):
                        continue
                    dom = nodes[other.node_name].labels.get(c.topology_key)
                    if dom in counts:
                        counts[dom] += 1
                minimum = min(counts.values())
                if c.min_domains is not None and len(counts) < c.min_domains:
                    minimum = 0
                worst = max(counts, key=lambda d: counts[d])
                if counts[worst] - minimum > c.max_skew:
                    report.violations.append(
                        Violation(
                            "spread",
                            owner.key,
                            f"{c.topology_key}: skew {counts[worst] - minimum} > {c.max_skew} ({counts})",
                        )
                    )

    # 6. stranded simple pods.
    if check_stranded:
        for pod in all_pods:
            if pod.node_name or not is_ours(pod) or pod.deletion_timestamp:
                continue
            if pod.affinity or pod.topology_spread_constraints or pod.host_ports or pod.tolerations:
                continue
            if pod.scheduling_gates or pod.pod_group:  # gated, or placed only with its group
                continue
            if any(v.source.kind == PERSISTENT_VOLUME_CLAIM for v in pod.volumes):
                continue
            for name, node in nodes.items():
                if node.unschedulable or any(t.effect in ("NoSchedule", "NoExecute") for t in node.taints):
                    continue
                if any(node.labels.get(k) != v for k, v in pod.node_selector.items()):
                    continue
                left = free.get(name, node.allocatable)
                need = pod.filter_requests  # what NodeResourcesFit checks
                if left.allowed_pod_number < 1:
                    continue
                if all(need.get(r) <= left.get(r) for r in _resource_names(need) if r != PODS):
                    report.violations.append(
                        Violation("stranded", pod.key, f"pending but fits node {name} by every resource")
                    )
                    break
    _check_devices(state.resource_claims, report)
    _check_gangs(state.pod_groups, all_pods, report)
    return report


def _check_gangs(groups: Sequence[Mapping[str, Any]], pods: Sequence[Pod], report: Report) -> None:
    """No partial gang: a gang's bound members are none or at least its minCount."""
    bound: dict[str, int] = defaultdict(int)
    for pod in pods:
        if pod.pod_group and pod.node_name:
            bound[pod.pod_group_key] += 1
    for raw in groups:
        try:
            group = parse_pod_group(raw)
        except ObjectError as exc:
            meta = raw.get("metadata") or {}
            subject = f"{meta.get('namespace')}/{meta.get('name')}"
            report.violations.append(Violation("malformed", subject, f"PodGroup does not parse: {exc}"))
            continue
        need = group.gang_min_count
        have = bound.get(group.key, 0)
        if need is not None and 0 < have < need:
            report.violations.append(
                Violation("partial-gang", group.key, f"{have} member(s) bound, minCount is {need}")
            )


def _check_devices(claims: Sequence[Mapping[str, Any]], report: Report) -> None:
    holders: dict[str, list[str]] = {}
    for claim in claims:
        meta = claim.get("metadata") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or ():
            if result.get("adminAccess") or result.get("shareID"):
                continue
            device = f"{result.get('driver')}/{result.get('pool')}/{result.get('device')}"
            holders.setdefault(device, []).append(key)
    for device, keys in sorted(holders.items()):
        if len(set(keys)) > 1:
            report.violations.append(Violation("device-shared", device, f"allocated to {sorted(set(keys))}"))
