"""Parsing label and node selectors, affinity, taints, tolerations and topology spread constraints
(what the reference keeps in ``k8s.io/component-helpers/scheduling/corev1`` and
``k8s.io/apimachinery/pkg/apis/meta/v1`` ``LabelSelector``).

Shared by the Pod parser and by every typed view of another kind that carries a selector (PVs'
node affinity, ResourceSlices' node selectors, PDBs' label selectors...). A malformed field
raises :class:`~kopf_scheduler.api.types.ObjectError` naming it.
"""

from __future__ import annotations

from typing import Any

from kopf_scheduler.api.types import (
    Affinity,
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
    Taint,
    Toleration,
    TopologySpreadConstraint,
    WeightedPodAffinityTerm,
    as_int,
    as_list,
    as_mapping,
    as_str_map,
)

__all__ = [
    "parse_affinity",
    "parse_label_selector",
    "parse_node_selector",
    "parse_node_selector_term",
    "parse_taint",
    "parse_toleration",
    "parse_topology_spread",
]

_NODE_OPS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
_LABEL_OPS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


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
