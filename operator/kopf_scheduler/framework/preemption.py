"""The generic preemption evaluator (the reference's ``framework/preemption`` ``Evaluator``).

A preemption PostFilter plugin supplies the policy (who may preempt, which victims on one node,
how many nodes to try) through :class:`PreemptionPolicy`; the evaluator does the common work:
pick the nodes worth trying from the filter statuses, dry-run the policy on clones of them,
and choose one candidate. It only decides: the scheduler acts on the returned
``PostFilterResult`` (nomination, evictions), so nothing here does I/O.

The reference dry-runs nodes in parallel goroutines and stops early; here the nodes are tried one
after another in the same rotated order with the same stopping rule, which makes the outcome
deterministic (the reference's is the same set whenever parallelism is 1).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from kopf_scheduler.api import kinds
from kopf_scheduler.api.containers import DISRUPTION_TARGET
from kopf_scheduler.api.policy import PodDisruptionBudget
from kopf_scheduler.framework.diagnosis import Diagnosis, FitError, NodeToStatus
from kopf_scheduler.framework.extender import Extender, Victims, process_preemption
from kopf_scheduler.framework.interface import Code, CycleState, PostFilterResult, Status

if TYPE_CHECKING:
    from kopf_scheduler.api.objects import Pod
    from kopf_scheduler.framework.interface import Handle
    from kopf_scheduler.framework.types import NodeInfo

__all__ = [
    "PREEMPTION_NOT_HELPFUL_MSG",
    "Candidate",
    "Evaluator",
    "PreemptionPolicy",
    "disruption_budgets",
    "earliest_start_time_of_highest_priority",
    "lower_priority_nominated_pods",
    "pick_one_node_for_preemption",
    "pod_start_time",
    "success_message",
    "terminating_by_preemption",
]

PREEMPTION_NOT_HELPFUL_MSG = "Preemption is not helpful for scheduling"


def success_message(node_name: str, num_victims: int) -> str:
    """What a successful preemption reports (the plugin prefixes ``preemption: ``); the
    reference words it so whatever the count, e.g. ``preempting 1 victims``."""
    return f"found a potential placement for pod on node {node_name}, preempting {num_victims} victims"


_MAX_INT32 = 2**31 - 1


def disruption_budgets(objects: Mapping[str, Mapping[str, object]]) -> list[PodDisruptionBudget]:
    """The PDBs of ``handle.objects`` (views parsed at the edge) in key order, so dry runs spend
    budgets in the same order whatever order the informer delivered them in."""
    pdbs = kinds.objects_of(objects, kinds.POD_DISRUPTION_BUDGET)
    return [pdbs[key] for key in sorted(pdbs)]


@dataclass(slots=True)
class Candidate:
    """A node where the preemptor fits once ``victims`` (most important first) are gone."""

    name: str
    victims: list[Pod] = field(default_factory=list)
    num_pdb_violations: int = 0


class PreemptionPolicy(Protocol):
    """The plugin side of the evaluator (the reference's ``preemption.Interface``)."""

    def get_offset_and_num_candidates(self, num_nodes: int) -> tuple[int, int]: ...

    def pod_eligible_to_preempt_others(
        self, pod: Pod, nominated_node_status: Status | None
    ) -> tuple[bool, str]: ...

    def select_victims_on_node(
        self, state: CycleState, pod: Pod, node_info: NodeInfo, pdbs: Sequence[PodDisruptionBudget]
    ) -> tuple[list[Pod], int, Status | None]: ...

    def ordered_score_funcs(
        self, candidates: Sequence[Candidate]
    ) -> list[Callable[[Candidate], int]] | None: ...


class _CandidateList:
    """A bounded list: candidates beyond ``size`` are dropped, as the reference's candidateList."""

    __slots__ = ("items", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self.items: list[Candidate] = []

    def add(self, c: Candidate) -> None:
        if len(self.items) < self.size:
            self.items.append(c)


def _absent_status(node_statuses: Mapping[str, Status]) -> Status:
    """Status of nodes missing from the map: a NodeToStatus's own (the scheduler's diagnosis),
    UnschedulableAndUnresolvable for a plain mapping (nodes a PreFilter ruled out)."""
    if isinstance(node_statuses, NodeToStatus):
        return node_statuses.absent_nodes_status
    return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE)


def _code(status: Status | None) -> Code:
    return Code.SUCCESS if status is None else status.code


def _aggregate(errors: Sequence[str]) -> str:
    """``utilerrors.NewAggregate(errs).Error()``."""
    if len(errors) == 1:
        return errors[0]
    return "[" + ", ".join(errors) + "]"


def pod_start_time(pod: Pod, now: float) -> float:
    """``util.GetPodStartTime``: status.startTime, or now for pods that have not started."""
    return pod.start_time if pod.start_time else now


def earliest_start_time_of_highest_priority(victims: Sequence[Pod], now: float) -> float:
    """``util.GetEarliestPodStartTime``: earliest start among the highest-priority victims."""
    max_priority = victims[0].priority
    earliest = pod_start_time(victims[0], now)
    for pod in victims:
        if pod.priority == max_priority:
            earliest = min(earliest, pod_start_time(pod, now))
        elif pod.priority > max_priority:
            max_priority = pod.priority
            earliest = pod_start_time(pod, now)
    return earliest


def pick_one_node_for_preemption(
    candidates: Sequence[Candidate],
    score_funcs: Sequence[Callable[[Candidate], int | float]] | None = None,
    now: float | None = None,
) -> Candidate | None:
    """Choose by successive tie-breaks; each function keeps the highest-scoring candidates.

    Default order (the reference's): fewest PDB violations, lowest highest-victim priority,
    smallest sum of (priority + 2^31) over victims, fewest victims, latest earliest start time
    of the highest-priority victims, then the first remaining candidate.
    """
    if not candidates:
        return None
    at = time.time() if now is None else now
    if not score_funcs:
        score_funcs = [
            lambda c: -c.num_pdb_violations,
            lambda c: -c.victims[0].priority,
            # +MaxInt32+1 keeps every term positive, so more victims never looks cheaper.
            lambda c: -sum(p.priority + _MAX_INT32 + 1 for p in c.victims),
            lambda c: -len(c.victims),
            lambda c: earliest_start_time_of_highest_priority(c.victims, at),
        ]
    remaining = list(candidates)
    for func in score_funcs:
        best: list[Candidate] = []
        best_score: int | float | None = None
        for c in remaining:
            score = func(c)
            if best_score is None or score > best_score:
                best_score = score
                best = [c]
            elif score == best_score:
                best.append(c)
        if len(best) == 1:
            return best[0]
        remaining = best
    return remaining[0]


class Evaluator:
    """Runs preemption for one plugin: eligibility, candidate dry-run, choice."""

    def __init__(self, plugin_name: str, handle: Handle | None, policy: PreemptionPolicy) -> None:
        self.plugin_name = plugin_name
        self._handle = handle
        self.policy = policy

    @property
    def handle(self) -> Handle:
        if self._handle is None:
            raise RuntimeError(f"{self.plugin_name} needs a framework handle")
        return self._handle

    def preempt(
        self, state: CycleState, pod: Pod, node_statuses: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status | None]:
        """Decide a nominated node and its victims.

        Returns ``(None, Unschedulable)`` when the pod may not preempt (keep its nomination),
        ``(PostFilterResult(""), Unschedulable)`` when no node helps (clear its nomination),
        ``(None, Error)`` on a plugin error, and ``(PostFilterResult(node, victims), Success)``
        with :func:`success_message` on success.
        """
        found = self._candidates(state, pod, node_statuses)
        return self._choose(found) if isinstance(found, list) else found

    async def preempt_with_extenders(
        self, state: CycleState, pod: Pod, node_statuses: Mapping[str, Status], extenders: Sequence[Extender]
    ) -> tuple[PostFilterResult | None, Status | None]:
        """:meth:`preempt`, the extenders that support preemption narrowing the candidates before
        one is chosen (the reference's ``callExtenders``); an extender's error is this Error."""
        found = self._candidates(state, pod, node_statuses)
        if not isinstance(found, list):
            return found
        by_node = {c.name: Victims(c.victims, c.num_pdb_violations) for c in found}
        narrowed = await process_preemption(extenders, pod, by_node, self.handle.snapshot)
        if isinstance(narrowed, Status):
            return None, narrowed
        return self._choose([Candidate(n, v.pods, v.num_pdb_violations) for n, v in narrowed.items()])

    def _candidates(
        self, state: CycleState, pod: Pod, node_statuses: Mapping[str, Status]
    ) -> list[Candidate] | tuple[PostFilterResult | None, Status | None]:
        """Eligibility and the dry run: the candidates, or the outcome when there can be none."""
        absent = _absent_status(node_statuses)
        nominated_status: Status | None = None
        if pod.nominated_node_name:
            nominated_status = node_statuses.get(pod.nominated_node_name, absent)
        ok, msg = self.policy.pod_eligible_to_preempt_others(pod, nominated_status)
        if not ok:
            return None, Status(Code.UNSCHEDULABLE, msg)

        all_nodes = self.handle.snapshot.list()
        if not all_nodes:
            return None, Status(Code.ERROR, "no nodes available")
        candidates, statuses, errors = self.find_candidates(state, pod, all_nodes, node_statuses)
        if errors and not candidates:
            return None, Status(Code.ERROR, _aggregate(errors))
        if not candidates:
            diagnosis = Diagnosis()
            for name, status in statuses.items():
                diagnosis.node_to_status.set(name, status)
            diagnosis.node_to_status.set_absent_nodes_status(
                Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, PREEMPTION_NOT_HELPFUL_MSG)
            )
            message = str(FitError(pod, len(all_nodes), diagnosis))
            return PostFilterResult(nominated_node_name=""), Status(Code.UNSCHEDULABLE, message)
        return candidates

    def _choose(self, candidates: list[Candidate]) -> tuple[PostFilterResult | None, Status | None]:
        best = self.select_candidate(candidates)
        if best is None or not best.name:
            return None, Status(Code.UNSCHEDULABLE, "no candidate node for preemption")
        # Success carries a message: it ends the pod's FailedScheduling note (victims already
        # terminating are counted too, as the reference counts the candidate's whole list).
        message = success_message(best.name, len(best.victims))
        result = PostFilterResult(nominated_node_name=best.name, victims=list(best.victims))
        return result, Status(Code.SUCCESS, message)

    def find_candidates(
        self,
        state: CycleState,
        pod: Pod,
        all_nodes: Sequence[NodeInfo],
        node_statuses: Mapping[str, Status],
    ) -> tuple[list[Candidate], dict[str, Status], list[str]]:
        """Dry-run on the nodes the filters found Unschedulable (not Unresolvable)."""
        unschedulable = Code.UNSCHEDULABLE
        if isinstance(node_statuses, NodeToStatus):
            potential = node_statuses.infos_with_code(unschedulable, all_nodes)
        else:
            absent = _absent_status(node_statuses)
            potential = [
                info for info in all_nodes if node_statuses.get(info.name, absent).code == unschedulable
            ]
        if not potential:
            return [], {}, []
        pdbs = disruption_budgets(self.handle.objects)
        offset, num_candidates = self.policy.get_offset_and_num_candidates(len(potential))
        return self.dry_run_preemption(state, pod, potential, pdbs, offset, num_candidates)

    def dry_run_preemption(
        self,
        state: CycleState,
        pod: Pod,
        potential_nodes: Sequence[NodeInfo],
        pdbs: Sequence[PodDisruptionBudget],
        offset: int,
        num_candidates: int,
    ) -> tuple[list[Candidate], dict[str, Status], list[str]]:
        """Try nodes from ``offset`` round-robin until enough candidates, one non-violating.

        Returns non-PDB-violating candidates first, the statuses of nodes that did not make
        it, and the error messages met on the way.
        """
        non_violating = _CandidateList(num_candidates)
        violating = _CandidateList(num_candidates)
        statuses: dict[str, Status] = {}
        errors: list[str] = []
        n = len(potential_nodes)
        for i in range(n):
            info = potential_nodes[(offset + i) % n].clone()
            victims, num_violations, status = self.policy.select_victims_on_node(
                state.clone(), pod, info, pdbs
            )
            if _code(status) == Code.SUCCESS and victims:
                c = Candidate(info.name, victims, num_violations)
                (non_violating if num_violations == 0 else violating).add(c)
                found_nv, found_v = len(non_violating.items), len(violating.items)
                if found_nv > 0 and found_nv + found_v >= num_candidates:
                    break
                continue
            if status is None or status.code == Code.SUCCESS:
                status = Status(Code.ERROR, f'expected at least one victim pod on node "{info.name}"')
            if status.code == Code.ERROR:
                errors.append(status.message)
            statuses[info.name] = status
        return non_violating.items + violating.items, statuses, errors

    def select_candidate(self, candidates: Sequence[Candidate]) -> Candidate | None:
        if not candidates:
            return None
        if len(candidates) == 1:
            return candidates[0]
        return pick_one_node_for_preemption(candidates, self.policy.ordered_score_funcs(candidates))


def terminating_by_preemption(pod: Pod) -> bool:
    """Deleting, with the DisruptionTarget condition the scheduler sets when it preempts."""
    if not pod.deletion_timestamp:
        return False
    cond = pod.condition(DISRUPTION_TARGET)
    return cond is not None and cond.status == "True" and cond.reason == "PreemptionByScheduler"


def lower_priority_nominated_pods(pods: Iterable[Pod], preemptor: Pod) -> list[Pod]:
    """Pods nominated to the chosen node with lower priority than the preemptor; their
    nomination should be cleared (the reference's ``getLowerPriorityNominatedPods``)."""
    return [p for p in pods if p.priority < preemptor.priority]
