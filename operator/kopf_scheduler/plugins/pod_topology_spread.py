"""PodTopologySpread (the reference's ``plugins/podtopologyspread``).

Filter enforces DoNotSchedule constraints (``matchNum + selfMatch - globalMin <= maxSkew``), Score
prefers domains with fewer matching pods for ScheduleAnyway constraints. Pods without constraints get
the profile's default constraints, with a selector built from the Services / ReplicationControllers /
ReplicaSets / StatefulSets that own or select them.

PreFilter counts matching pods per domain once per cycle (per-node counts memoised by NodeInfo
generation); Filter is then a dictionary lookup per constraint, and ``filter_vector`` does the same
for all nodes at once with numpy. With a ``Snapshot`` and no node-inclusion policy that depends on
the pod (no nodeSelector/required node affinity under Honor, no Honor taint policy), the per-domain
sums are np.bincount over the rows' domain codes of per-row matching counts that are refreshed only
for rows whose generation moved; otherwise the walk over nodes runs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from kopf_scheduler.api.kinds import Objects
from kopf_scheduler.api.objects import Node, Pod
from kopf_scheduler.api.selectors import parse_topology_spread
from kopf_scheduler.api.types import TopologySpreadConstraint
from kopf_scheduler.config.profile import ARGS_CONFIG, ValidDefaults, adapter
from kopf_scheduler.framework.interface import (
    MAX_NODE_SCORE,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    Code,
    CycleState,
    EventResource,
    Handle,
    Plugin,
    PreFilterResult,
    QueueingHint,
    SignFragments,
    Status,
)
from kopf_scheduler.framework.types import NodeInfo
from kopf_scheduler.plugins.pod_topology_spread_common import (
    HOSTNAME_LABEL,
    ZONE_LABEL,
    NodeMemo,
    SpreadConstraint,
    TallyStore,
    count_pods_match_selector,
    default_selector,
    filter_constraints,
    go_round,
    has_nodeless_rows,
    lookup_array,
    node_labels_match_constraints,
    required_node_affinity_matches,
    topology_codes,
)

__all__ = ["PodTopologySpread", "PodTopologySpreadArgs"]

NAME = "PodTopologySpread"
PRE_FILTER_KEY = "PreFilter" + NAME
PRE_SCORE_KEY = "PreScore" + NAME

ERR_REASON_CONSTRAINTS_NOT_MATCH = "node(s) didn't match pod topology spread constraints"
ERR_REASON_NODE_LABEL_NOT_MATCH = ERR_REASON_CONSTRAINTS_NOT_MATCH + " (missing required label)"

DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"

# The reference's systemDefaultConstraints.
SYSTEM_DEFAULT_CONSTRAINTS: tuple[TopologySpreadConstraint, ...] = (
    TopologySpreadConstraint(
        max_skew=3, topology_key=HOSTNAME_LABEL, when_unsatisfiable=SCHEDULE_ANYWAY, selector=None
    ),
    TopologySpreadConstraint(
        max_skew=5, topology_key=ZONE_LABEL, when_unsatisfiable=SCHEDULE_ANYWAY, selector=None
    ),
)

_MAX_INT32 = 2**31 - 1


# --- args -------------------------------------------------------------------------------------------


@dataclass
class DefaultConstraint:
    """A ``v1.TopologySpreadConstraint`` in ``defaultConstraints`` (no selector: deduced per pod)."""

    __pydantic_config__ = ARGS_CONFIG

    max_skew: int = field(metadata={"alias": "maxSkew"})
    topology_key: str = field(metadata={"alias": "topologyKey"})
    when_unsatisfiable: str = field(metadata={"alias": "whenUnsatisfiable"})
    label_selector: dict[str, Any] | None = field(default=None, metadata={"alias": "labelSelector"})
    min_domains: int | None = field(default=None, metadata={"alias": "minDomains"})
    node_affinity_policy: str | None = field(default=None, metadata={"alias": "nodeAffinityPolicy"})
    node_taints_policy: str | None = field(default=None, metadata={"alias": "nodeTaintsPolicy"})
    match_label_keys: list[str] = field(default_factory=list, metadata={"alias": "matchLabelKeys"})

    def __post_init__(self) -> None:
        if self.max_skew <= 0:
            raise ValueError(f"maxSkew: Invalid value: {self.max_skew}: not in valid range (0, inf)")
        if not self.topology_key:
            raise ValueError("topologyKey: Required value: can not be empty")
        if self.when_unsatisfiable not in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY):
            raise ValueError(
                f'whenUnsatisfiable: Unsupported value: "{self.when_unsatisfiable}": '
                'supported values: "DoNotSchedule", "ScheduleAnyway"'
            )
        if self.label_selector is not None:
            raise ValueError(
                "labelSelector: Forbidden: "
                "constraint must not define a selector, as they deduced for each pod"
            )

    def to_constraint(self) -> TopologySpreadConstraint:
        # The API's spelling from the fields' own aliases (a constraint given here was validated:
        # pydantic is loaded already).
        raw = adapter(DefaultConstraint).dump_python(self, by_alias=True, exclude_none=True)
        return parse_topology_spread(raw, "defaultConstraints")


@dataclass
class PodTopologySpreadArgs(ValidDefaults):
    """``PodTopologySpreadArgs``; ``System`` defaulting uses the reference's built-in constraints."""

    __pydantic_config__ = ARGS_CONFIG

    default_constraints: list[DefaultConstraint] = field(
        default_factory=list, metadata={"alias": "defaultConstraints"}
    )
    defaulting_type: Literal["System", "List"] = field(default="System", metadata={"alias": "defaultingType"})

    def __post_init__(self) -> None:
        if self.defaulting_type == "System" and self.default_constraints:
            raise ValueError(
                'defaultingType: Invalid value: "System": when .defaultConstraints are not empty'
            )
        seen: set[tuple[str, str]] = set()
        for i, c in enumerate(self.default_constraints):
            pair = (c.topology_key, c.when_unsatisfiable)
            if pair in seen:
                raise ValueError(f"defaultConstraints[{i}]: Duplicate value: {{{pair[0]}, {pair[1]}}}")
            seen.add(pair)


# --- states -----------------------------------------------------------------------------------------


@dataclass(slots=True)
class PreFilterState:
    """Matching pods per domain for each DoNotSchedule constraint, and each constraint's global minimum.

    ``domains_at_count[i][k]`` is how many domains hold exactly k pods; it keeps ``min_match_num`` exact
    under the +-1 updates of add_pod/remove_pod without rescanning the domains.
    """

    constraints: list[SpreadConstraint] = field(default_factory=list)
    min_match_num: list[int] = field(default_factory=list)
    domains_at_count: list[dict[int, int]] = field(default_factory=list)
    tp_value_to_match_num: list[dict[str, int]] = field(default_factory=list)

    def clone(self) -> PreFilterState:
        return PreFilterState(
            self.constraints,
            list(self.min_match_num),
            [dict(h) for h in self.domains_at_count],
            [dict(m) for m in self.tp_value_to_match_num],
        )

    def global_min(self, i: int) -> int:
        if len(self.tp_value_to_match_num[i]) < self.constraints[i].min_domains:
            return 0  # fewer eligible domains than minDomains: the global minimum is 0
        return self.min_match_num[i]

    def _update_min(self, i: int, old: int, cur: int) -> None:
        hist = self.domains_at_count[i]
        hist[old] = hist.get(old, 0) - 1
        if hist[old] <= 0:
            del hist[old]
        hist[cur] = hist.get(cur, 0) + 1
        if cur < self.min_match_num[i] or (old == self.min_match_num[i] and hist.get(old, 0) == 0):
            self.min_match_num[i] = cur


@dataclass(slots=True)
class PreScoreState:
    constraints: list[SpreadConstraint] = field(default_factory=list)
    ignored_nodes: set[str] = field(default_factory=set)
    ignored_mask: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # filtered-node order
    topology_value_to_pod_counts: list[dict[str, int]] = field(default_factory=list)
    topology_normalizing_weight: list[float] = field(default_factory=list)
    count_sids: list[int] = field(default_factory=list)  # NodeMemo signature ids of the constraints

    def clone(self) -> PreScoreState:
        return self


def _topology_normalizing_weight(size: int) -> float:
    return math.log(size + 2)


def _score_for_count(cnt: int, max_skew: int, weight: float) -> float:
    return float(cnt) * weight + float(max_skew - 1)


# --- plugin -----------------------------------------------------------------------------------------


class PodTopologySpread(Plugin):
    """Spread pods evenly over topology domains (hard DoNotSchedule filter, soft ScheduleAnyway score)."""

    name = NAME

    def sign(self, pod: Pod) -> tuple[SignFragments, Status | None]:
        # Spreading depends on where every matching pod went, the previous one included.
        if pod.topology_spread_constraints:
            return [], Status.unschedulable("pods with topology constraints are not signable")
        if self.default_constraints:
            return [], Status.unschedulable("pods with default topology constraints are not signable")
        return [], None
    Args = PodTopologySpreadArgs

    def __init__(self, args: PodTopologySpreadArgs | None = None, handle: Handle | None = None) -> None:
        args = args if args is not None else PodTopologySpreadArgs()
        super().__init__(args, handle)
        self.system_defaulted = args.defaulting_type == "System"
        if self.system_defaulted:
            self.default_constraints: tuple[TopologySpreadConstraint, ...] = SYSTEM_DEFAULT_CONSTRAINTS
        else:
            self.default_constraints = tuple(c.to_constraint() for c in args.default_constraints)
        self._memo = NodeMemo()
        self._tallies = TallyStore(limit=32)

    # -- helpers --

    def _vector_snapshot(
        self, pod: Pod, constraints: Sequence[SpreadConstraint], nodes: Sequence[NodeInfo] | None = None
    ) -> Any:
        """The handle's snapshot when every row with the constraints' keys is included for this pod
        (so inclusion needs no per-node check) and ``nodes`` are its rows; else None (walk)."""
        snapshot: Any = self.handle.snapshot if self.handle is not None else None
        if snapshot is None or not TallyStore.supports(snapshot):
            return None
        if nodes is not None and nodes is not snapshot.node_infos:
            return None
        if any(c.node_taints_policy == "Honor" for c in constraints):
            return None
        if any(c.node_affinity_policy == "Honor" for c in constraints):
            na = pod.affinity.node_affinity if pod.affinity else None
            if pod.node_selector or (na is not None and na.required is not None):
                return None
        if has_nodeless_rows(snapshot):
            return None
        return snapshot

    def _row_counts(self, snapshot: Any, c: SpreadConstraint, namespace: str) -> np.ndarray:
        """Matching pods per snapshot row (``_count`` for every row), refreshed for changed rows."""
        sel = c.selector
        if sel is None or sel.is_empty():
            return np.zeros(len(snapshot.node_infos), dtype=np.int64)
        sid = self._count_sid(c, namespace)
        return self._tallies.counts(
            snapshot, (sel, namespace), lambda info: self._count(info, c, namespace, sid)
        )

    @staticmethod
    def _keys_present(snapshot: Any, constraints: Sequence[SpreadConstraint]) -> np.ndarray:
        present = np.ones(len(snapshot.node_infos), dtype=bool)
        for c in constraints:
            present &= topology_codes(snapshot, c.topology_key)[0] >= 0
        return present

    def _domain_sums(
        self, snapshot: Any, c: SpreadConstraint, namespace: str, rows_mask: np.ndarray
    ) -> dict[str, int]:
        """{value: matching pods over the masked rows in that domain} for every domain they cover."""
        codes, values = topology_codes(snapshot, c.topology_key)
        dom = codes[rows_mask]
        m = len(values)
        seen = np.bincount(dom, minlength=m) > 0
        # float64 weights hold these integer sums exactly (far below 2**53)
        sums = np.bincount(dom, weights=self._row_counts(snapshot, c, namespace)[rows_mask], minlength=m)
        names = list(values)  # codes are assigned in insertion order: names[code] is the value
        return {names[k]: int(sums[k]) for k in np.flatnonzero(seen).tolist()}

    def _objects(self) -> Objects:
        return self.handle.objects if self.handle is not None else {}

    def _all_nodes(self, fallback: Sequence[NodeInfo]) -> Sequence[NodeInfo]:
        return self.handle.snapshot.list() if self.handle is not None else fallback

    def _constraints(self, pod: Pod, action: str) -> list[SpreadConstraint]:
        """The pod's own constraints of ``action``, or the default ones with a deduced selector."""
        if pod.topology_spread_constraints:
            return filter_constraints(pod.topology_spread_constraints, pod.labels, action)
        constraints = filter_constraints(self.default_constraints, pod.labels, action)
        if not constraints:
            return []
        selector = default_selector(pod, self._objects())
        if selector.is_empty():
            return []
        return [
            SpreadConstraint(
                c.max_skew,
                c.topology_key,
                selector,
                c.min_domains,
                c.node_affinity_policy,
                c.node_taints_policy,
            )
            for c in constraints
        ]

    def _count_sid(self, c: SpreadConstraint, namespace: str) -> int:
        return self._memo.scope((c.selector, namespace))

    def _count(self, info: NodeInfo, c: SpreadConstraint, namespace: str, sid: int) -> int:
        sel = c.selector
        if sel is None or sel.is_empty():
            return 0
        return self._memo.get(info, sid, lambda ni: count_pods_match_selector(ni.pods, sel, namespace))

    # -- PreFilter --

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        constraints = self._constraints(pod, DO_NOT_SCHEDULE)
        if not constraints:
            return None, Status(Code.SKIP)
        s = PreFilterState(
            constraints=constraints,
            min_match_num=[0] * len(constraints),
            domains_at_count=[{} for _ in constraints],
            tp_value_to_match_num=[{} for _ in constraints],
        )
        snapshot = self._vector_snapshot(pod, constraints, nodes)
        if snapshot is not None:
            present = self._keys_present(snapshot, constraints)
            for i, c in enumerate(constraints):
                s.tp_value_to_match_num[i] = self._domain_sums(snapshot, c, pod.namespace, present)
            nodes = ()  # counted above
        sids = [self._count_sid(c, pod.namespace) for c in constraints]
        need_affinity = any(c.node_affinity_policy == "Honor" for c in constraints)
        for info in nodes:
            node = info.node
            if node is None or not node_labels_match_constraints(node.labels, constraints):
                continue
            affinity_ok = required_node_affinity_matches(pod, node) if need_affinity else True
            for i, c in enumerate(constraints):
                if not c.includes_node(pod, node, affinity_ok):
                    continue
                value = node.labels[c.topology_key]
                counts = s.tp_value_to_match_num[i]
                counts[value] = counts.get(value, 0) + self._count(info, c, pod.namespace, sids[i])
        for i in range(len(constraints)):
            hist = s.domains_at_count[i]
            for num in s.tp_value_to_match_num[i].values():
                hist[num] = hist.get(num, 0) + 1
            s.min_match_num[i] = min(s.tp_value_to_match_num[i].values(), default=_MAX_INT32)
        state.write(PRE_FILTER_KEY, s)
        return None, None

    def add_pod(
        self, state: CycleState, pod: Pod, pod_to_add: Pod, node_info: NodeInfo
    ) -> Status | None:
        return self._update_with_pod(state, pod_to_add, pod, node_info.node, 1)

    def remove_pod(
        self, state: CycleState, pod: Pod, pod_to_remove: Pod, node_info: NodeInfo
    ) -> Status | None:
        return self._update_with_pod(state, pod_to_remove, pod, node_info.node, -1)

    def _update_with_pod(
        self, state: CycleState, updated: Pod, preemptor: Pod, node: Node | None, delta: int
    ) -> Status | None:
        s = state.get(PRE_FILTER_KEY)
        if not isinstance(s, PreFilterState):
            return None  # PreFilter skipped this pod: nothing to keep up to date
        if updated.namespace != preemptor.namespace or node is None:
            return None
        if not node_labels_match_constraints(node.labels, s.constraints):
            return None
        for i, c in enumerate(s.constraints):
            if not c.matches(updated.labels) or not c.includes_node(preemptor, node):
                continue
            value = node.labels[c.topology_key]
            counts = s.tp_value_to_match_num[i]
            old = counts.get(value, 0)
            counts[value] = old + delta
            s._update_min(i, old, old + delta)
        return None

    # -- Filter --

    def _state(self, state: CycleState, key: str) -> Any:
        try:
            return state.read(key)
        except KeyError:
            return None

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status | None:
        s = self._state(state, PRE_FILTER_KEY)
        if not isinstance(s, PreFilterState):
            return Status.as_error(RuntimeError(f'reading "{PRE_FILTER_KEY}" from cycleState: not found'))
        node = node_info.node
        if node is None:
            return Status.as_error(RuntimeError("node not found"))
        for i, c in enumerate(s.constraints):
            value = node.labels.get(c.topology_key)
            if value is None:
                return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ERR_REASON_NODE_LABEL_NOT_MATCH)
            self_match = 1 if c.matches(pod.labels) else 0
            skew = s.tp_value_to_match_num[i].get(value, 0) + self_match - s.global_min(i)
            if skew > c.max_skew:
                return Status(Code.UNSCHEDULABLE, ERR_REASON_CONSTRAINTS_NOT_MATCH)
        return None

    def filter_vector(
        self, state: CycleState, pod: Pod, snapshot: Any, idx: np.ndarray
    ) -> np.ndarray | None:
        s = self._state(state, PRE_FILTER_KEY)
        if not isinstance(s, PreFilterState):
            return None
        ok = np.ones(len(idx), dtype=bool)
        for i, c in enumerate(s.constraints):
            codes, values = topology_codes(snapshot, c.topology_key)
            rows = codes[idx]
            counts = lookup_array(values, s.tp_value_to_match_num[i])
            self_match = 1 if c.matches(pod.labels) else 0
            skew = counts[rows + 1] + (self_match - s.global_min(i))
            ok &= (rows >= 0) & (skew <= c.max_skew)
        return ok

    # -- Score --

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status | None:
        all_nodes = self._all_nodes(nodes)
        if not all_nodes:
            return Status(Code.SKIP)
        require_all = bool(pod.topology_spread_constraints) or not self.system_defaulted
        constraints = self._constraints(pod, SCHEDULE_ANYWAY)
        if not constraints:
            return Status(Code.SKIP)
        s = PreScoreState(constraints=constraints, topology_value_to_pod_counts=[{} for _ in constraints])
        if self._pre_score_vector(s, pod, nodes, constraints, require_all):
            state.write(PRE_SCORE_KEY, s)
            return None
        ignored = np.zeros(len(nodes), dtype=bool)
        topo_size = [0] * len(constraints)
        for pos, info in enumerate(nodes):
            node = info.node
            if node is None:
                continue
            if require_all and not node_labels_match_constraints(node.labels, constraints):
                s.ignored_nodes.add(node.name)
                ignored[pos] = True
                continue
            for i, c in enumerate(constraints):
                if c.topology_key == HOSTNAME_LABEL:
                    continue  # per-node counts are taken in Score
                value = node.labels.get(c.topology_key, "")
                if value not in s.topology_value_to_pod_counts[i]:
                    s.topology_value_to_pod_counts[i][value] = 0
                    topo_size[i] += 1
        s.ignored_mask = ignored
        for i, c in enumerate(constraints):
            size = len(nodes) - len(s.ignored_nodes) if c.topology_key == HOSTNAME_LABEL else topo_size[i]
            s.topology_normalizing_weight.append(_topology_normalizing_weight(size))
        s.count_sids = [self._count_sid(c, pod.namespace) for c in constraints]
        need_affinity = any(c.node_affinity_policy == "Honor" for c in constraints)
        for info in all_nodes:
            node = info.node
            if node is None:
                continue
            if require_all and not node_labels_match_constraints(node.labels, constraints):
                continue
            affinity_ok = required_node_affinity_matches(pod, node) if need_affinity else True
            for i, c in enumerate(constraints):
                if not c.includes_node(pod, node, affinity_ok):
                    continue
                counts = s.topology_value_to_pod_counts[i]
                value = node.labels.get(c.topology_key, "")
                if value not in counts:
                    continue
                counts[value] += self._count(info, c, pod.namespace, s.count_sids[i])
        state.write(PRE_SCORE_KEY, s)
        return None

    def _pre_score_vector(
        self,
        s: PreScoreState,
        pod: Pod,
        nodes: Sequence[NodeInfo],
        constraints: list[SpreadConstraint],
        require_all: bool,
    ) -> bool:
        """PreScore's two walks with numpy over snapshot rows; False (state untouched) when a case
        needs the walk: no usable snapshot, or a node lacking a non-hostname key (value "")."""
        snapshot = self._vector_snapshot(pod, constraints)
        if snapshot is None:
            return False
        rows = snapshot.rows_of(nodes)
        if rows is None:
            return False
        present = self._keys_present(snapshot, constraints) if require_all else None
        ignored = ~present[rows] if present is not None else np.zeros(len(rows), dtype=bool)
        kept = rows[~ignored]
        domains: list[dict[str, int]] = []
        for c in constraints:
            if c.topology_key == HOSTNAME_LABEL:
                domains.append({})
                continue
            codes, values = topology_codes(snapshot, c.topology_key)
            if "" in values or (present is None and bool((codes < 0).any())):
                return False  # the walk's labels.get(key, "") would merge missing keys into ""
            names = list(values)
            domains.append({names[k]: 0 for k in np.unique(codes[kept]).tolist()})
        infos = snapshot.node_infos
        s.ignored_nodes = {infos[r].name for r in rows[ignored].tolist()}
        s.ignored_mask = ignored
        for i, c in enumerate(constraints):
            hostname = c.topology_key == HOSTNAME_LABEL
            size = len(nodes) - len(s.ignored_nodes) if hostname else len(domains[i])
            s.topology_normalizing_weight.append(_topology_normalizing_weight(size))
        s.count_sids = [self._count_sid(c, pod.namespace) for c in constraints]
        eligible = present if present is not None else np.ones(len(infos), dtype=bool)
        for i, c in enumerate(constraints):
            counts = domains[i]
            if counts:
                sums = self._domain_sums(snapshot, c, pod.namespace, eligible)
                for value in counts:
                    counts[value] = sums.get(value, 0)
        s.topology_value_to_pod_counts = domains
        return True

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> tuple[int, Status | None]:
        s = self._state(state, PRE_SCORE_KEY)
        if not isinstance(s, PreScoreState):
            return 0, Status.as_error(RuntimeError(f'reading "{PRE_SCORE_KEY}" from cycleState: not found'))
        node = node_info.node
        if node is None:
            return 0, Status.as_error(RuntimeError("node not found"))
        if node.name in s.ignored_nodes:
            return 0, None
        total = 0.0
        for i, c in enumerate(s.constraints):
            value = node.labels.get(c.topology_key)
            if value is None:
                continue
            if c.topology_key == HOSTNAME_LABEL:
                cnt = self._count(node_info, c, pod.namespace, s.count_sids[i])
            else:
                cnt = s.topology_value_to_pod_counts[i].get(value, 0)
            total += _score_for_count(cnt, c.max_skew, s.topology_normalizing_weight[i])
        return go_round(total), None

    def score_vector(
        self, state: CycleState, pod: Pod, snapshot: Any, idx: np.ndarray
    ) -> np.ndarray | None:
        s = self._state(state, PRE_SCORE_KEY)
        if not isinstance(s, PreScoreState):
            return None
        total = np.zeros(len(idx), dtype=np.float64)
        infos: Sequence[NodeInfo] = snapshot.node_infos
        for i, c in enumerate(s.constraints):
            codes, values = topology_codes(snapshot, c.topology_key)
            rows = codes[idx]
            if (
                c.topology_key == HOSTNAME_LABEL
                and TallyStore.supports(snapshot)
                and snapshot is (self.handle.snapshot if self.handle is not None else None)
            ):
                cnt = self._row_counts(snapshot, c, pod.namespace)[idx]
            elif c.topology_key == HOSTNAME_LABEL:
                cnt = np.fromiter(
                    (self._count(infos[r], c, pod.namespace, s.count_sids[i]) for r in idx),
                    dtype=np.int64,
                    count=len(idx),
                )
            else:
                cnt = lookup_array(values, s.topology_value_to_pod_counts[i])[rows + 1]
            term = cnt.astype(np.float64) * s.topology_normalizing_weight[i] + float(c.max_skew - 1)
            total += np.where(rows >= 0, term, 0.0)
        floor = np.floor(total)
        out = (floor + (total - floor >= 0.5)).astype(np.int64)
        if s.ignored_nodes:
            ignored = np.fromiter((infos[r].name in s.ignored_nodes for r in idx), dtype=bool, count=len(idx))
            out[ignored] = 0
        return out

    def normalize_score(self, state: CycleState, pod: Pod, scores: np.ndarray) -> Status | None:
        s = self._state(state, PRE_SCORE_KEY)
        if not isinstance(s, PreScoreState):
            return Status.as_error(RuntimeError(f'reading "{PRE_SCORE_KEY}" from cycleState: not found'))
        if len(s.ignored_mask) != len(scores):
            return Status.as_error(RuntimeError("scores do not line up with the nodes given to PreScore"))
        valid = ~s.ignored_mask
        if not valid.any():
            scores[:] = 0
            return None
        max_score = max(int(scores[valid].max()), 0)
        min_score = int(scores[valid].min())
        if max_score == 0:
            scores[valid] = MAX_NODE_SCORE
        else:
            scores[valid] = MAX_NODE_SCORE * (max_score + min_score - scores[valid]) // max_score
        scores[~valid] = 0
        return None

    # -- events --

    def events_to_register(self) -> Iterable[ClusterEventWithHint]:
        pod_actions = (
            ActionType.ADD
            | ActionType.UPDATE_POD_LABEL
            | ActionType.UPDATE_POD_TOLERATIONS
            | ActionType.DELETE
        )
        node_actions = (
            ActionType.ADD | ActionType.DELETE | ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_TAINT
        )
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD, pod_actions), self.is_schedulable_after_pod_change
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, node_actions), self.is_schedulable_after_node_change
            ),
        ]

    def is_schedulable_after_pod_change(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        def involved(incoming: Pod) -> bool:
            return incoming.uid == pod.uid or (
                bool(incoming.node_name) and incoming.namespace == pod.namespace
            )

        if (new is not None and not involved(new)) or (old is not None and not involved(old)):
            return QueueingHint.QUEUE_SKIP
        constraints = self._constraints(pod, DO_NOT_SCHEDULE)
        if new is not None and old is not None:
            if (
                pod.uid == new.uid
                and new.tolerations != old.tolerations
                and any(c.node_taints_policy == "Honor" for c in constraints)
            ):
                return QueueingHint.QUEUE
            if new.labels == old.labels:
                return QueueingHint.QUEUE_SKIP
            if any(c.matches(old.labels) != c.matches(new.labels) for c in constraints):
                return QueueingHint.QUEUE
            return QueueingHint.QUEUE_SKIP
        changed = new if new is not None else old
        if changed is not None and any(c.matches(changed.labels) for c in constraints):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    def is_schedulable_after_node_change(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        constraints = self._constraints(pod, DO_NOT_SCHEDULE)
        old_match = old is not None and node_labels_match_constraints(old.labels, constraints)
        new_match = new is not None and node_labels_match_constraints(new.labels, constraints)
        if old is not None and new is not None:
            if old_match != new_match:
                return QueueingHint.QUEUE
            labels_changed = any(
                old.labels.get(c.topology_key) != new.labels.get(c.topology_key) for c in constraints
            )
            if new_match and (labels_changed or old.taints != new.taints):
                return QueueingHint.QUEUE
            return QueueingHint.QUEUE_SKIP
        if new is not None:
            return QueueingHint.QUEUE if new_match else QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE if old_match else QueueingHint.QUEUE_SKIP
