"""OpportunisticBatching (the reference's ``framework/runtime/batch.go``; beta, on in v1.37).

A pod with the same signature (``Framework.sign_pod``) as the pod scheduled just before it, within
half a second, gets a node hint instead of a full Filter and Score pass: the previous pass's feasible
nodes and raw scores are kept, the previous pod's node is re-filtered and, if still feasible,
re-scored and re-normalized with the others, and the best of the list is offered. The scheduler
then runs the Filter plugins on the hint alone and takes it when it passes. Only the chosen node
changed since the list was made (the pods are consecutive and pods of one signature score a node
the same way), which is what makes the cached results still the results.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from kopf_scheduler.framework.interface import MAX_NODE_SCORE, MIN_NODE_SCORE, CycleState, is_success

if TYPE_CHECKING:
    from kopf_scheduler.api.objects import Pod
    from kopf_scheduler.framework.runtime import Framework

__all__ = [
    "HINT_NOT_USED",
    "HINT_USED",
    "MAX_BATCH_AGE",
    "NO_HINT",
    "OpportunisticBatch",
    "PodSignature",
    "ScoredNodes",
]

MAX_BATCH_AGE = 0.5  # seconds (the reference's maxBatchAge)

# batch_attempts_total{result}
NO_HINT = "no_hint"
HINT_USED = "hint_used"
HINT_NOT_USED = "hint_not_used"

# batch_cache_flushed_total{reason}
FLUSH_POD_FAILED = "pod_failed"
FLUSH_POD_SKIPPED = "pod_skipped"
FLUSH_POD_NOMINATED = "pod_nominated"
FLUSH_NODE_MISSING = "node_missing"
FLUSH_EMPTY_LIST = "empty_list"
FLUSH_EXPIRED = "expired"
FLUSH_POD_INCOMPATIBLE = "pod_incompatible"
FLUSH_POD_NOT_BATCHABLE = "pod_not_batchable"
FLUSH_FILTER_ERROR = "filter_error"
FLUSH_PRESCORE_ERROR = "prescore_error"
FLUSH_RESCORE_ERROR = "rescore_error"
FLUSH_NORMALIZE_ERROR = "normalize_error"

PodSignature = tuple[tuple[str, Hashable], ...]


@dataclass(slots=True)
class ScoredNodes:
    """A pass's scored feasible nodes, best first on ``pop``. Entries never move: a popped entry is
    marked dead (total -1, below any score) and can come back when re-scored, so a hint costs no
    reallocation. Each plugin's raw (pre-NormalizeScore) scores are kept to normalize a re-scored
    node with the rest; ``randomizer`` breaks ties uniformly, as the reference's heap does.
    ``rows`` are snapshot rows while the snapshot's ``layout`` is the same."""

    names: list[str]
    rows: np.ndarray
    layout: int
    raw: dict[str, np.ndarray]
    totals: np.ndarray
    randomizer: np.ndarray
    alive: np.ndarray
    last: int = -1  # the entry popped last (or the chosen node the list was made around)

    @classmethod
    def around(
        cls,
        names: list[str],
        rows: np.ndarray,
        layout: int,
        raw: dict[str, np.ndarray],
        totals: np.ndarray,
        randomizer: np.ndarray,
        chosen: int,
    ) -> ScoredNodes:
        """The list of one pass, its chosen entry already taken."""
        alive = np.ones(len(names), dtype=bool)
        alive[chosen] = False
        totals = totals.astype(np.int64, copy=True)
        totals[chosen] = -1
        return cls(names, rows, layout, raw, totals, randomizer, alive, chosen)

    def __len__(self) -> int:
        return int(self.alive.sum())

    def pop(self) -> str:
        totals = self.totals
        best = totals.max()
        ties = np.flatnonzero(totals == best)
        i = int(ties[np.argmax(self.randomizer[ties])]) if len(ties) > 1 else int(ties[0])
        self.alive[i] = False
        totals[i] = -1
        self.last = i
        return self.names[i]


@dataclass(slots=True)
class _State:
    signature: PodSignature
    nodes: ScoredNodes
    created: float


class OpportunisticBatch:
    """One per framework (profile): the last pass's results, and the last cycle that stored them."""

    def __init__(self, framework: Framework, clock: Callable[[], float] = time.monotonic) -> None:
        self._fw = framework
        self._clock = clock
        self._state: _State | None = None
        self._last_cycle = -1
        self._last_chosen = ""
        self.batched_pods = 0
        self._rng = np.random.default_rng()  # tie-breakers of re-scored nodes (uniform, as Go's rand.Int)

    def reset(self) -> None:
        """Forget the stored results (their snapshot was rolled back)."""
        self._state = None

    def _flush(self, reason: str) -> bool:
        self._fw.metrics.batch_flushed(self._fw.profile_name, reason)
        return False

    # -- GetNodeHint --

    def get_node_hint(self, pod: Pod, signature: PodSignature | None, state: CycleState, cycle: int) -> str:
        """A node to try first, or "" (after PreFilter, as the reference calls it)."""
        start = time.perf_counter()
        hint = ""
        if self._compatible(pod, signature, cycle) and self._refresh(pod, state):
            assert self._state is not None
            hint = self._state.nodes.pop()
        fw = self._fw
        if not hint:
            fw.metrics.batch_attempt(fw.profile_name, NO_HINT)
        fw.metrics.node_hint_duration(
            "hint" if hint else NO_HINT, fw.profile_name, time.perf_counter() - start
        )
        return hint

    def _compatible(self, pod: Pod, signature: PodSignature | None, cycle: int) -> bool:
        st = self._state
        if st is None or not st.nodes:
            return False
        # Pods of one group share a cycle: their batch state carries over (GenericWorkload).
        if cycle not in (self._last_cycle + 1, self._last_cycle):
            return self._flush(FLUSH_POD_SKIPPED)
        if pod.nominated_node_name:
            return self._flush(FLUSH_POD_NOMINATED)
        if signature is None or signature != st.signature:
            return self._flush(FLUSH_POD_INCOMPATIBLE)
        if self._clock() > st.created + MAX_BATCH_AGE:
            return self._flush(FLUSH_EXPIRED)
        return True

    def _refresh(self, pod: Pod, state: CycleState) -> bool:
        """Re-filter the last chosen node; if it still fits, re-score it into the list."""
        fw = self._fw
        info = fw.snapshot.get(self._last_chosen)
        if info is None:
            return self._flush(FLUSH_NODE_MISSING)
        status = fw.run_filter_plugins(state, pod, info)
        if is_success(status):
            return self._rescore(pod, state)
        assert status is not None
        if not status.is_rejected():
            return self._flush(FLUSH_FILTER_ERROR)
        return True

    def _rescore(self, pod: Pod, state: CycleState) -> bool:
        fw = self._fw
        st = self._state
        assert st is not None
        nodes = st.nodes
        start = time.perf_counter()
        try:
            snapshot = fw.snapshot
            if nodes.layout != snapshot.layout:  # nodes came or went: find the rows again
                index = snapshot.index
                if any(n not in index for n in nodes.names):
                    return self._flush(FLUSH_NODE_MISSING)
                nodes.rows = np.array([index[n] for n in nodes.names], dtype=np.int64)
                nodes.layout = snapshot.layout
            x = nodes.last
            nodes.alive[x] = True
            sel = np.flatnonzero(nodes.alive)  # the candidates, the re-scored node among them
            rows = nodes.rows[sel]
            infos = snapshot.infos_at(rows)
            # The reference clones the cycle's state first; here the re-score's PreScore writes are
            # left in it: only Score reads them, and a full pass after an unused hint runs its own
            # PreScore over them. A clone per pod was a fifth of the hint's cost.
            scratch = state
            if not is_success(fw.run_pre_score_plugins(scratch, pod, infos)):
                nodes.alive[x] = False
                return self._flush(FLUSH_PRESCORE_ERROR)
            fresh: dict[str, np.ndarray] = {}
            try:
                fw.run_raw_score_plugins(
                    scratch, pod, nodes.rows[x : x + 1], [snapshot.node_infos[nodes.rows[x]]], fresh
                )
            except Exception:
                nodes.alive[x] = False
                return self._flush(FLUSH_RESCORE_ERROR)
            if fresh.keys() != nodes.raw.keys():
                nodes.alive[x] = False
                return self._flush(FLUSH_RESCORE_ERROR)
            for name, scores in fresh.items():
                if not MIN_NODE_SCORE <= scores[0] <= MAX_NODE_SCORE and name not in fw.normalizing_plugins:
                    nodes.alive[x] = False
                    return self._flush(FLUSH_NORMALIZE_ERROR)
                nodes.raw[name][x] = scores[0]
            selected = {name: raw[sel] for name, raw in nodes.raw.items()}
            totals = fw.normalize_scores(scratch, pod, selected, in_range=True)
            if totals is None:
                nodes.alive[x] = False
                return self._flush(FLUSH_NORMALIZE_ERROR)
            nodes.totals[sel] = totals
            nodes.randomizer[x] = self._rng.integers(0, 2**62)
            return True
        finally:
            fw.metrics.batch_rescore(fw.profile_name, time.perf_counter() - start)

    # -- StoreScheduleResults --

    def store_schedule_results(
        self,
        signature: PodSignature | None,
        hinted: str,
        chosen: str,
        others: ScoredNodes | None,
        cycle: int,
        *,
        num_others: int = 0,
    ) -> None:
        """``num_others``: how many other feasible nodes there were when ``others`` was not built
        (a pod without a signature: its list would never be used, only the flush reason needs it)."""
        fw = self._fw
        start = time.perf_counter()
        try:
            self._last_cycle = cycle
            self._last_chosen = chosen
            if hinted and hinted == chosen:
                fw.metrics.batch_attempt(fw.profile_name, HINT_USED)
                self.batched_pods += 1
                return
            if hinted:
                fw.metrics.batch_attempt(fw.profile_name, HINT_NOT_USED)
            count = len(others) if others is not None else num_others
            if signature is not None and others is not None and count:
                self._state = _State(signature, others, self._clock())
            else:
                self._flush(FLUSH_POD_NOT_BATCHABLE if count else FLUSH_EMPTY_LIST)
                self._state = None
        finally:
            fw.metrics.store_results_duration(fw.profile_name, time.perf_counter() - start)


def signature_of(scheduler_name: str, fragments: Sequence[tuple[str, Any]]) -> PodSignature:
    """Fragments merged by key, later plugins' values replacing earlier ones', as the reference's map."""
    merged: dict[str, Any] = {"SchedulerName": scheduler_name}
    for key, value in fragments:
        merged[key] = value
    return tuple(sorted(merged.items()))
