"""The InterPodAffinity plugin (``plugin.go``, ``filtering.go``, ``scoring.go``): PreFilter,
Filter and their vector forms, PreScore/Score/NormalizeScore, events and queueing hints."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import numpy as np

from kopf_scheduler.api import kinds
from kopf_scheduler.api.core import Namespace
from kopf_scheduler.api.objects import Node, Pod
from kopf_scheduler.framework import signers
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
from kopf_scheduler.plugins.inter_pod_affinity.args import InterPodAffinityArgs
from kopf_scheduler.plugins.inter_pod_affinity.state import (
    NAME,
    PRE_FILTER_KEY,
    PRE_SCORE_KEY,
    Pair,
    PreFilterState,
    PreScoreState,
    add_count,
)
from kopf_scheduler.plugins.inter_pod_affinity.terms import (
    AffinityTerm,
    PodTerms,
    TermCache,
    WeightedAffinityTerm,
    pod_matches_all_terms,
    pod_matches_any_term,
)
from kopf_scheduler.plugins.pod_topology_spread_common import (
    NodeMemo,
    TallyStore,
    lookup_array,
    topology_codes,
)

__all__ = ["AffinityTerm", "InterPodAffinity", "InterPodAffinityArgs"]


ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH = "node(s) didn't satisfy existing pods anti-affinity rules"


ERR_REASON_AFFINITY_RULES_NOT_MATCH = "node(s) didn't match pod affinity rules"


ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH = "node(s) didn't match pod anti-affinity rules"

_NO_LABELS: Mapping[str, str] = {}


class InterPodAffinity(Plugin):
    """Required and preferred inter-pod affinity and anti-affinity, both directions."""

    name = NAME

    def sign(self, pod: Pod) -> tuple[SignFragments, Status | None]:
        if pod.has_pod_affinity_terms:
            return [], Status.unschedulable("pods with InterPodAffinity are not signable")
        # Existing pods' preferred terms select by the incoming pod's labels, unless ignored.
        if self.ignore_preferred_terms_of_existing_pods:
            return [], None
        return [(signers.LABELS, signers.labels(pod))], None
    Args = InterPodAffinityArgs

    def __init__(self, args: InterPodAffinityArgs | None = None, handle: Handle | None = None) -> None:
        args = args if args is not None else InterPodAffinityArgs()
        super().__init__(args, handle)
        self.hard_pod_affinity_weight = args.hard_pod_affinity_weight
        self.ignore_preferred_terms_of_existing_pods = args.ignore_preferred_terms_of_existing_pods
        self._terms = TermCache()
        self._memo = NodeMemo()
        self._tallies = TallyStore()

    def _tally_snapshot(self, nodes: Sequence[NodeInfo] | None = None) -> Any:
        """The handle's snapshot when running sums over its rows can stand for a walk over ``nodes``
        (None: the walk is over the snapshot's own lists), else None."""
        snapshot: Any = self.handle.snapshot if self.handle is not None else None
        if snapshot is None or not TallyStore.supports(snapshot):
            return None
        if nodes is not None and nodes is not snapshot.node_infos:
            return None
        return snapshot

    def terms_of(self, pod: Pod) -> PodTerms:
        return self._terms.get(pod)

    # -- namespaces --

    def _namespaces(self) -> Mapping[str, Namespace]:
        if self.handle is None:
            return {}
        return kinds.objects_of(self.handle.objects, kinds.NAMESPACE)

    def _namespace_labels(self, namespace: str) -> Mapping[str, str]:
        ns = self._namespaces().get(namespace)
        return ns.metadata.labels if ns is not None else _NO_LABELS

    def _merge_namespaces(self, term: AffinityTerm) -> AffinityTerm:
        """Unroll a non-empty namespaceSelector into names (``mergeAffinityTermNamespacesIfNotEmpty``)."""
        sel = term.namespace_selector
        if sel is None or sel.is_empty():
            return term  # nil matches nothing; empty matches every namespace without a lookup
        names = set(term.namespaces)
        for name in self._namespaces():
            if sel.matches(self._namespace_labels(name)):
                names.add(name)
        return AffinityTerm(frozenset(names), term.selector, term.topology_key, None)

    def _lists(
        self, nodes: Sequence[NodeInfo]
    ) -> tuple[Sequence[NodeInfo], Sequence[NodeInfo], Sequence[NodeInfo]]:
        """(all nodes, nodes with affinity pods, nodes with required-anti-affinity pods)."""
        if self.handle is not None:
            lister = self.handle.snapshot
            return (
                lister.list(),
                lister.have_pods_with_affinity_list(),
                lister.have_pods_with_required_anti_affinity_list(),
            )
        return (
            nodes,
            [n for n in nodes if n.pods_with_affinity],
            [n for n in nodes if n.pods_with_required_anti_affinity],
        )

    # -- PreFilter --

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        _, _, with_anti = self._lists(nodes)
        raw = self.terms_of(pod)
        terms = PodTerms(
            tuple(self._merge_namespaces(t) for t in raw.required_affinity),
            tuple(self._merge_namespaces(t) for t in raw.required_anti_affinity),
        )
        s = PreFilterState(terms=terms, pod=pod, namespace_labels=self._namespace_labels(pod.namespace))
        s.existing_anti_affinity_counts = self._existing_anti_affinity_counts(
            pod, s.namespace_labels, with_anti
        )
        s.affinity_counts, s.anti_affinity_counts = self._incoming_counts(terms, nodes)
        if (
            not s.existing_anti_affinity_counts
            and not terms.required_affinity
            and not terms.required_anti_affinity
        ):
            return None, Status(Code.SKIP)
        state.write(PRE_FILTER_KEY, s)
        return None, None

    def _existing_anti_affinity_counts(
        self, pod: Pod, ns_labels: Mapping[str, str], nodes: Sequence[NodeInfo]
    ) -> dict[Pair, int]:
        if not nodes:  # before interning: the signature holds the pod's labels, unique per pod at times
            return {}
        signature = (
            "existing-anti",
            pod.namespace,
            frozenset(pod.labels.items()),
            frozenset(ns_labels.items()),
        )

        sid = self._memo.scope(signature)

        def per_node(info: NodeInfo) -> list[Pair]:
            node = info.node
            if node is None:
                return []
            out: list[Pair] = []
            for existing in info.pods_with_required_anti_affinity:
                for t in self.terms_of(existing).required_anti_affinity:
                    if t.matches(pod, ns_labels):
                        value = node.labels.get(t.topology_key)
                        if value is not None:
                            out.append((t.topology_key, value))
            return out

        snapshot = self._tally_snapshot()
        if snapshot is not None:  # rows without such pods contribute nothing, as in the walk below
            tally = self._tallies.get(
                snapshot, signature, lambda info: [(pair, 1) for pair in self._memo.get(info, sid, per_node)]
            )
            return cast(dict[Pair, int], dict(tally.weights))
        counts: dict[Pair, int] = {}
        for info in nodes:
            for pair in self._memo.get(info, sid, per_node):
                counts[pair] = counts.get(pair, 0) + 1
        return counts

    def _incoming_counts(
        self, terms: PodTerms, nodes: Sequence[NodeInfo]
    ) -> tuple[dict[Pair, int], dict[Pair, int]]:
        aff_terms, anti_terms = terms.required_affinity, terms.required_anti_affinity
        if not aff_terms and not anti_terms:
            return {}, {}
        signature = ("incoming", aff_terms, anti_terms)

        sid = self._memo.scope(signature)

        def per_node(info: NodeInfo) -> tuple[list[Pair], list[Pair]]:
            node = info.node
            if node is None:
                return [], []
            labels = node.labels
            aff: list[Pair] = []
            anti: list[Pair] = []
            for existing in info.pods:
                if aff_terms and pod_matches_all_terms(aff_terms, existing):
                    for t in aff_terms:
                        value = labels.get(t.topology_key)
                        if value is not None:
                            aff.append((t.topology_key, value))
                for t in anti_terms:
                    if t.matches(existing, None):
                        value = labels.get(t.topology_key)
                        if value is not None:
                            anti.append((t.topology_key, value))
            return aff, anti

        aff_counts: dict[Pair, int] = {}
        anti_counts: dict[Pair, int] = {}
        snapshot = self._tally_snapshot(nodes)
        if snapshot is not None:

            def tagged(info: NodeInfo) -> list[tuple[Any, int]]:
                aff, anti = self._memo.get(info, sid, per_node)
                return [((0, pair), 1) for pair in aff] + [((1, pair), 1) for pair in anti]

            tally = self._tallies.get(snapshot, signature, tagged)
            for tagged_pair, count in tally.weights.items():
                tag, pair = cast(tuple[int, Pair], tagged_pair)
                (anti_counts if tag else aff_counts)[pair] = count
            return aff_counts, anti_counts
        for info in nodes:
            aff, anti = self._memo.get(info, sid, per_node)
            for pair in aff:
                aff_counts[pair] = aff_counts.get(pair, 0) + 1
            for pair in anti:
                anti_counts[pair] = anti_counts.get(pair, 0) + 1
        return aff_counts, anti_counts

    def add_pod(
        self, state: CycleState, pod: Pod, pod_to_add: Pod, node_info: NodeInfo
    ) -> Status | None:
        return self._update_with_pod(state, pod_to_add, node_info, 1)

    def remove_pod(
        self, state: CycleState, pod: Pod, pod_to_remove: Pod, node_info: NodeInfo
    ) -> Status | None:
        return self._update_with_pod(state, pod_to_remove, node_info, -1)

    def _update_with_pod(
        self, state: CycleState, updated: Pod, node_info: NodeInfo, delta: int
    ) -> Status | None:
        s = state.get(PRE_FILTER_KEY)
        if not isinstance(s, PreFilterState) or s.pod is None:
            return None  # PreFilter skipped this pod: nothing to keep up to date
        node = node_info.node
        if node is None:
            return None
        labels = node.labels
        for t in self.terms_of(updated).required_anti_affinity:
            if t.matches(s.pod, s.namespace_labels) and t.topology_key in labels:
                add_count(s.existing_anti_affinity_counts, (t.topology_key, labels[t.topology_key]), delta)
        if pod_matches_all_terms(s.terms.required_affinity, updated):
            for t in s.terms.required_affinity:
                if t.topology_key in labels:
                    add_count(s.affinity_counts, (t.topology_key, labels[t.topology_key]), delta)
        for t in s.terms.required_anti_affinity:
            if t.matches(updated, None) and t.topology_key in labels:
                add_count(s.anti_affinity_counts, (t.topology_key, labels[t.topology_key]), delta)
        return None

    # -- Filter --

    @staticmethod
    def _read(state: CycleState, key: str) -> Any:
        try:
            return state.read(key)
        except KeyError:
            return None

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status | None:
        s = self._read(state, PRE_FILTER_KEY)
        if not isinstance(s, PreFilterState):
            return Status.as_error(
                RuntimeError(f'error reading "{PRE_FILTER_KEY}" from cycleState: not found')
            )
        node = node_info.node
        if node is None:
            return Status.as_error(RuntimeError("node not found"))
        labels = node.labels
        if not self._satisfies_affinity(s, labels):
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ERR_REASON_AFFINITY_RULES_NOT_MATCH)
        if s.anti_affinity_counts:
            for t in s.terms.required_anti_affinity:
                value = labels.get(t.topology_key)
                if value is not None and s.anti_affinity_counts.get((t.topology_key, value), 0) > 0:
                    return Status(Code.UNSCHEDULABLE, ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH)
        if s.existing_anti_affinity_counts:
            for pair, count in s.existing_anti_affinity_counts.items():
                if count > 0 and labels.get(pair[0]) == pair[1]:
                    return Status(Code.UNSCHEDULABLE, ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH)
        return None

    @staticmethod
    def _first_of_group(s: PreFilterState) -> bool:
        """No pod anywhere matches the affinity terms, but the pod matches its own terms."""
        return (
            not s.affinity_counts
            and s.pod is not None
            and pod_matches_all_terms(s.terms.required_affinity, s.pod)
        )

    def _satisfies_affinity(self, s: PreFilterState, labels: Mapping[str, str]) -> bool:
        pods_exist = True
        for t in s.terms.required_affinity:
            value = labels.get(t.topology_key)
            if value is None:
                return False  # every topology key must be on the node
            if s.affinity_counts.get((t.topology_key, value), 0) <= 0:
                pods_exist = False
        return pods_exist or self._first_of_group(s)

    def filter_vector(
        self, state: CycleState, pod: Pod, snapshot: Any, idx: np.ndarray
    ) -> np.ndarray | None:
        s = self._read(state, PRE_FILTER_KEY)
        if not isinstance(s, PreFilterState):
            return None
        n = len(idx)
        if s.terms.required_affinity:
            has_all = np.ones(n, dtype=bool)
            exist = np.ones(n, dtype=bool)
            for t in s.terms.required_affinity:
                codes, values = topology_codes(snapshot, t.topology_key)
                rows = codes[idx]
                table = {v: c for (k, v), c in s.affinity_counts.items() if k == t.topology_key}
                has_all &= rows >= 0
                exist &= lookup_array(values, table)[rows + 1] > 0
            ok = has_all & (exist | self._first_of_group(s))
        else:
            ok = np.ones(n, dtype=bool)
        if s.anti_affinity_counts:
            for t in s.terms.required_anti_affinity:
                codes, values = topology_codes(snapshot, t.topology_key)
                table = {v: c for (k, v), c in s.anti_affinity_counts.items() if k == t.topology_key}
                ok &= ~(lookup_array(values, table)[codes[idx] + 1] > 0)
        if s.existing_anti_affinity_counts:
            by_key: dict[str, dict[str, int]] = {}
            for (k, v), c in s.existing_anti_affinity_counts.items():
                if c > 0:
                    by_key.setdefault(k, {})[v] = 1
            for k, table in by_key.items():
                codes, values = topology_codes(snapshot, k)
                ok &= lookup_array(values, table)[codes[idx] + 1] == 0
        return ok

    # -- Score --

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status | None:
        aff = pod.affinity
        has_constraints = bool(
            aff
            and (
                (aff.pod_affinity is not None and aff.pod_affinity.preferred)
                or (aff.pod_anti_affinity is not None and aff.pod_anti_affinity.preferred)
            )
        )
        if self.ignore_preferred_terms_of_existing_pods and not has_constraints:
            return Status(Code.SKIP)
        all_nodes, with_affinity, _ = self._lists(nodes)
        to_visit = all_nodes if has_constraints else with_affinity
        raw = self.terms_of(pod)
        pref_aff = tuple(
            WeightedAffinityTerm(self._merge_namespaces(w.term), w.weight) for w in raw.preferred_affinity
        )
        pref_anti = tuple(
            WeightedAffinityTerm(self._merge_namespaces(w.term), w.weight)
            for w in raw.preferred_anti_affinity
        )
        ns_labels = self._namespace_labels(pod.namespace)
        hard_weight = self.hard_pod_affinity_weight
        signature = (
            "score",
            pref_aff,
            pref_anti,
            has_constraints,
            pod.namespace,
            frozenset(pod.labels.items()),
            frozenset(ns_labels.items()),
            hard_weight,
        )

        sid = self._memo.scope(signature)

        def per_node(info: NodeInfo) -> dict[Pair, int]:
            node = info.node
            out: dict[Pair, int] = {}
            if node is None or not node.labels:
                return out
            labels = node.labels

            def process(
                term: AffinityTerm, weight: int, target: Pod, nsl: Mapping[str, str] | None
            ) -> None:
                if term.matches(target, nsl):
                    value = labels.get(term.topology_key)
                    if value is not None:
                        pair = (term.topology_key, value)
                        out[pair] = out.get(pair, 0) + weight

            for existing in info.pods if has_constraints else info.pods_with_affinity:
                for w in pref_aff:
                    process(w.term, w.weight, existing, None)
                for w in pref_anti:
                    process(w.term, -w.weight, existing, None)
                existing_terms = self.terms_of(existing)
                if hard_weight > 0:
                    for t in existing_terms.required_affinity:
                        process(t, hard_weight, pod, ns_labels)
                for w in existing_terms.preferred_affinity:
                    process(w.term, w.weight, pod, ns_labels)
                for w in existing_terms.preferred_anti_affinity:
                    process(w.term, -w.weight, pod, ns_labels)
            return out

        topology_score: dict[str, dict[str, int]] = {}
        snapshot = self._tally_snapshot()
        if not to_visit:
            pass
        elif snapshot is not None:  # rows outside to_visit have no pods to visit: they add nothing
            tally = self._tallies.get(
                snapshot, signature, lambda info: self._memo.get(info, sid, per_node).items()
            )
            for pair, weight in tally.weights.items():
                key, value = cast(Pair, pair)
                topology_score.setdefault(key, {})[value] = weight
        else:
            self._walk_score(to_visit, sid, per_node, topology_score)
        if not topology_score:
            return Status(Code.SKIP)
        state.write(PRE_SCORE_KEY, PreScoreState(topology_score))
        return None

    def _walk_score(
        self,
        to_visit: Sequence[NodeInfo],
        sid: int,
        per_node: Any,
        topology_score: dict[str, dict[str, int]],
    ) -> None:
        for info in to_visit:
            for (key, value), weight in self._memo.get(info, sid, per_node).items():
                per_key = topology_score.setdefault(key, {})
                per_key[value] = per_key.get(value, 0) + weight

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> tuple[int, Status | None]:
        s = self._read(state, PRE_SCORE_KEY)
        if not isinstance(s, PreScoreState):
            return 0, Status.as_error(RuntimeError(f'failed to read "{PRE_SCORE_KEY}" from cycleState'))
        node = node_info.node
        if node is None:
            return 0, Status.as_error(RuntimeError("node not found"))
        total = 0
        for key, values in s.topology_score.items():
            value = node.labels.get(key)
            if value is not None:
                total += values.get(value, 0)
        return total, None

    def score_vector(
        self, state: CycleState, pod: Pod, snapshot: Any, idx: np.ndarray
    ) -> np.ndarray | None:
        s = self._read(state, PRE_SCORE_KEY)
        if not isinstance(s, PreScoreState):
            return None
        total = np.zeros(len(idx), dtype=np.int64)
        for key, table in s.topology_score.items():
            codes, values = topology_codes(snapshot, key)
            total += lookup_array(values, table)[codes[idx] + 1]
        return total

    def normalize_score(self, state: CycleState, pod: Pod, scores: np.ndarray) -> Status | None:
        s = self._read(state, PRE_SCORE_KEY)
        if not isinstance(s, PreScoreState):
            return Status.as_error(RuntimeError(f'failed to read "{PRE_SCORE_KEY}" from cycleState'))
        if not s.topology_score or len(scores) == 0:
            return None
        lo, hi = int(scores.min()), int(scores.max())
        diff = hi - lo
        if diff > 0:
            scores[:] = (float(MAX_NODE_SCORE) * ((scores - lo).astype(np.float64) / float(diff))).astype(
                np.int64
            )
        else:
            scores[:] = 0
        return None

    # -- events --

    def events_to_register(self) -> Iterable[ClusterEventWithHint]:
        # Pod covers the reference's AssignedPod add/label/delete and TargetPod label update.
        pod_actions = ActionType.ADD | ActionType.UPDATE_POD_LABEL | ActionType.DELETE
        node_actions = ActionType.ADD | ActionType.UPDATE_NODE_LABEL
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD, pod_actions), self.is_schedulable_after_pod_change
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, node_actions), self.is_schedulable_after_node_change
            ),
        ]

    def is_schedulable_after_pod_change(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        if isinstance(new, Pod) and new.uid == pod.uid:
            return (
                QueueingHint.QUEUE
            )  # the target pod's labels changed (isSchedulableAfterTargetPodUpdateLabel)
        if (new is not None and not new.node_name) or (old is not None and not old.node_name):
            return QueueingHint.QUEUE_SKIP  # only assigned pods' events reach the reference's hint
        terms = self.terms_of(pod)
        aff, anti = terms.required_affinity, terms.required_anti_affinity
        if new is not None and old is not None:
            if not pod_matches_all_terms(aff, old) and pod_matches_all_terms(aff, new):
                return QueueingHint.QUEUE
            if pod_matches_any_term(anti, old) and not pod_matches_any_term(anti, new):
                return QueueingHint.QUEUE
            return QueueingHint.QUEUE_SKIP
        if new is not None:
            return QueueingHint.QUEUE if pod_matches_all_terms(aff, new) else QueueingHint.QUEUE_SKIP
        if old is None:
            return QueueingHint.QUEUE_SKIP
        if pod_matches_any_term(anti, old):
            return QueueingHint.QUEUE
        # The deleted pod's own anti-affinity may have been what kept this pod out.
        if pod_matches_any_term(self.terms_of(old).required_anti_affinity, pod):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    def is_schedulable_after_node_change(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        """A topology key a term needs appears or changes value (affinity), or one an anti-affinity
        term counts on goes away or changes value; any new node for a pod with anti-affinity."""
        if not isinstance(new, Node):
            return QueueingHint.QUEUE
        terms = self.terms_of(pod)
        original = old if isinstance(old, Node) else None
        for t in terms.required_affinity:
            if original is None:
                if t.topology_key in new.labels:
                    return QueueingHint.QUEUE
                continue
            had, has = t.topology_key in original.labels, t.topology_key in new.labels
            if (not had and has) or (
                had and has and original.labels[t.topology_key] != new.labels[t.topology_key]
            ):
                return QueueingHint.QUEUE
        for t in terms.required_anti_affinity:
            if original is None:
                return QueueingHint.QUEUE
            had, has = t.topology_key in original.labels, t.topology_key in new.labels
            if (had and not has) or (
                had and has and original.labels[t.topology_key] != new.labels[t.topology_key]
            ):
                return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP
        terms = self.terms_of(pod)
        for t in (*terms.required_affinity, *terms.required_anti_affinity):
            if t.topology_key in new.labels:
                return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP
