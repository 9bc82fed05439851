"""TaintToleration: hard taints (NoSchedule/NoExecute) filter; PreferNoSchedule taints score.

The vector forms only touch the few rows that carry taints: most clusters have untainted nodes,
which pass (and score 0 intolerable taints) without a Python-level look.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from kopf_scheduler.api.objects import Node, Pod
from kopf_scheduler.api.types import NO_EXECUTE, NO_SCHEDULE, PREFER_NO_SCHEDULE, Taint, Toleration
from kopf_scheduler.framework import signers
from kopf_scheduler.framework.interface import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EventResource,
    Plugin,
    QueueingHint,
    SignFragments,
    Status,
)
from kopf_scheduler.framework.types import NodeInfo
from kopf_scheduler.plugins.helper import default_normalize_score

if TYPE_CHECKING:
    from kopf_scheduler.framework.snapshot import Snapshot

__all__ = ["TaintToleration", "find_untolerated_taint"]

NAME = "TaintToleration"
PRE_SCORE_STATE_KEY = "PreScore" + NAME
ERR_REASON_UNTOLERATED = "node(s) had untolerated taint(s)"


def tolerations_tolerate(tolerations: Sequence[Toleration], taint: Taint) -> bool:
    return any(t.tolerates(taint) for t in tolerations)


def find_untolerated_taint(taints: Sequence[Taint], tolerations: Sequence[Toleration]) -> Taint | None:
    """First NoSchedule/NoExecute taint, in node order, that no toleration tolerates."""
    for taint in taints:
        if taint.effect in (NO_SCHEDULE, NO_EXECUTE) and not tolerations_tolerate(tolerations, taint):
            return taint
    return None


def prefer_no_schedule_tolerations(pod: Pod) -> tuple[Toleration, ...]:
    return tuple(t for t in pod.tolerations if not t.effect or t.effect == PREFER_NO_SCHEDULE)


def count_intolerable_prefer_no_schedule(taints: Sequence[Taint], tolerations: Sequence[Toleration]) -> int:
    return sum(
        1
        for taint in taints
        if taint.effect == PREFER_NO_SCHEDULE and not tolerations_tolerate(tolerations, taint)
    )


@dataclass(slots=True)
class _PreScoreState:
    tolerations: tuple[Toleration, ...]

    def clone(self) -> _PreScoreState:
        return self


class TaintToleration(Plugin):
    """Filter, PreScore, Score, NormalizeScore (reversed), EnqueueExtensions."""

    name = NAME

    def sign(self, pod: Pod) -> tuple[SignFragments, Status | None]:
        return [(signers.TOLERATIONS, signers.tolerations(pod))], None

    # -- Filter --

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status | None:
        node = node_info.node
        if node is None:
            return Status.as_error(LookupError("invalid nodeInfo"))
        if find_untolerated_taint(node.taints, pod.tolerations) is None:
            return None
        # Since 1.37 the reason names no taint, so nodes with different taints count together.
        return Status.unresolvable(ERR_REASON_UNTOLERATED)

    def filter_vector(
        self, state: CycleState, pod: Pod, snapshot: Snapshot, idx: np.ndarray
    ) -> np.ndarray | None:
        hard = snapshot.arrays.has_hard_taints[idx]
        mask: np.ndarray = ~hard
        if pod.tolerations:
            infos = snapshot.node_infos
            for j in np.flatnonzero(hard):
                node = infos[int(idx[j])].node
                mask[j] = node is not None and find_untolerated_taint(node.taints, pod.tolerations) is None
        return mask

    # -- Score --

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status | None:
        state.write(PRE_SCORE_STATE_KEY, _PreScoreState(prefer_no_schedule_tolerations(pod)))
        return None

    def _tolerations(self, state: CycleState, pod: Pod) -> tuple[Toleration, ...]:
        s = state.get(PRE_SCORE_STATE_KEY)
        return s.tolerations if isinstance(s, _PreScoreState) else prefer_no_schedule_tolerations(pod)

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> tuple[int, Status | None]:
        node = node_info.node
        if node is None:
            return 0, Status.as_error(LookupError("invalid nodeInfo"))
        return count_intolerable_prefer_no_schedule(node.taints, self._tolerations(state, pod)), None

    def score_vector(
        self, state: CycleState, pod: Pod, snapshot: Snapshot, idx: np.ndarray
    ) -> np.ndarray | None:
        counts = snapshot.arrays.prefer_no_schedule_taints[idx].astype(np.int64)
        tolerations = self._tolerations(state, pod)
        if tolerations:
            infos = snapshot.node_infos
            for j in np.flatnonzero(counts):
                node = infos[int(idx[j])].node
                counts[j] = count_intolerable_prefer_no_schedule(node.taints, tolerations) if node else 0
        return counts

    def normalize_score(self, state: CycleState, pod: Pod, scores: np.ndarray) -> Status | None:
        default_normalize_score(scores, reverse=True)
        return None

    # -- queueing hints --

    def events_to_register(self) -> Iterable[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT),
                self.is_schedulable_after_node_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_TOLERATIONS),
                self.is_schedulable_after_pod_toleration_change,
            ),
        ]

    def is_schedulable_after_node_change(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        if not isinstance(new, Node):
            return QueueingHint.QUEUE
        was_untolerated = True
        if isinstance(old, Node):
            was_untolerated = find_untolerated_taint(old.taints, pod.tolerations) is not None
        is_untolerated = find_untolerated_taint(new.taints, pod.tolerations) is not None
        if was_untolerated and not is_untolerated:
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    def is_schedulable_after_pod_toleration_change(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        if isinstance(new, Pod) and new.uid == pod.uid:
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP
