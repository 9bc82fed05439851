"""DefaultPreemption: the PostFilter that frees room for a pod by evicting lower-priority pods
(the reference's ``plugins/defaultpreemption``).

It decides only: the result names the node to nominate and the victims; the scheduler records
the nomination and evicts the victims asynchronously (see "Preemption seam" in docs/design.md).
While the scheduler is evicting for a pod it may call :meth:`DefaultPreemption.preemption_started`
/ :meth:`preemption_finished`, and PreEnqueue keeps that pod out of the queue meanwhile, as the
reference's async preemption does.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kopf_scheduler.config.profile import ARGS_CONFIG, ValidDefaults
from kopf_scheduler.framework.interface import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    Code,
    CycleState,
    EventResource,
    Plugin,
    PodGroupPostFilterResult,
    PodGroupSimulation,
    PostFilterResult,
    QueueingHint,
    Status,
)
from kopf_scheduler.framework.podgroup_preemption import PodGroupEvaluator
from kopf_scheduler.framework.preemption import (
    Candidate,
    Evaluator,
    pod_start_time,
    terminating_by_preemption,
)
from kopf_scheduler.metrics.recorder import CODE_LABELS

if TYPE_CHECKING:
    from kopf_scheduler.api.objects import Pod
    from kopf_scheduler.api.podgroup import PodGroup
    from kopf_scheduler.api.policy import PodDisruptionBudget
    from kopf_scheduler.framework.extender import Extender
    from kopf_scheduler.framework.interface import Handle
    from kopf_scheduler.framework.types import NodeInfo

__all__ = ["DefaultPreemption", "DefaultPreemptionArgs", "PdbIndex", "filter_pods_with_pdb_violation"]

NAME = "DefaultPreemption"
PREEMPT_NEVER = "Never"
NO_VICTIMS_MSG = "No preemption victims found for incoming pod"
NOT_ELIGIBLE_NEVER = "not eligible due to preemptionPolicy=Never."
NOT_ELIGIBLE_TERMINATING = "not eligible due to a terminating pod on the nominated node."
WAITING_FOR_PREEMPTION = "waiting for the preemption for this pod to be finished"
WAITING_FOR_GROUP_PREEMPTION = "waiting for the preemption for this pod group to be finished"

# (node info, victim, preemptor) -> may the victim be preempted, on top of the priority rule
IsEligiblePodFunc = Callable[["NodeInfo", "Pod", "Pod"], bool]
# (a, b) -> is a more important than b (b is preempted first)
MoreImportantPodFunc = Callable[["Pod", "Pod"], bool]


def _prefixed(
    result: PostFilterResult | None, status: Status | None
) -> tuple[PostFilterResult | None, Status | None]:
    if status is not None and status.message:
        prefixed = Status(status.code, "preemption: " + status.message, error=status.error)
        return result, prefixed.with_plugin(NAME)
    return result, status


@dataclass
class DefaultPreemptionArgs(ValidDefaults):
    """``DefaultPreemptionArgs`` with the reference's defaults and validation."""

    __pydantic_config__ = ARGS_CONFIG

    min_candidate_nodes_percentage: int = field(default=10, metadata={"alias": "minCandidateNodesPercentage"})
    min_candidate_nodes_absolute: int = field(default=100, metadata={"alias": "minCandidateNodesAbsolute"})

    def __post_init__(self) -> None:
        errors: list[str] = []
        pct, absolute = self.min_candidate_nodes_percentage, self.min_candidate_nodes_absolute
        if pct < 0 or pct > 100:
            errors.append(f"minCandidateNodesPercentage: Invalid value: {pct}: not in valid range [0, 100]")
        if absolute < 0:
            errors.append(
                f"minCandidateNodesAbsolute: Invalid value: {absolute}: not in valid range [0, inf)"
            )
        if pct == 0 and absolute == 0:
            errors.append(
                "minCandidateNodesPercentage: Invalid value: 0: cannot be zero at the same time as "
                "minCandidateNodesAbsolute"
            )
            errors.append(
                "minCandidateNodesAbsolute: Invalid value: 0: cannot be zero at the same time as "
                "minCandidateNodesPercentage"
            )
        if errors:
            raise ValueError("; ".join(errors))


class PdbIndex:
    """PDBs indexed by one required label, so each pod is matched only against plausible PDBs.

    Built once per dry run (the PDB list does not change while nodes are tried) instead of once
    per node; the budgets are independent, so the order PDBs are checked in does not matter.
    """

    __slots__ = ("by_label", "pdbs", "unindexed")

    def __init__(self, pdbs: Sequence[PodDisruptionBudget]) -> None:
        self.pdbs = pdbs
        self.by_label: dict[tuple[str, str], list[int]] = {}
        self.unindexed: list[int] = []
        for i, pdb in enumerate(pdbs):
            selector = pdb.selector
            if selector is None or selector.is_empty():
                continue  # a nil or empty selector matches nothing
            if selector.match_labels:
                self.by_label.setdefault(selector.match_labels[0], []).append(i)
            else:
                self.unindexed.append(i)


def filter_pods_with_pdb_violation(
    pods: Sequence[Pod], pdbs: Sequence[PodDisruptionBudget], index: PdbIndex | None = None
) -> tuple[list[Pod], list[Pod]]:
    """Split pods (order kept) into those whose eviction would exceed a PDB's budget and the rest.

    Budgets are spent in the given order, so with one disruption allowed the second matching pod
    is the violating one. A pod already in a PDB's disruptedPods was counted by the apiserver.
    ``index`` (built from the same ``pdbs``) saves re-indexing when called once per node.
    """
    if index is None or index.pdbs is not pdbs:
        index = PdbIndex(pdbs)
    by_label, unindexed = index.by_label, index.unindexed
    # Only PDBs a pod matches spend budget: track the ones touched instead of copying them all.
    spent: dict[int, int] = {}
    violating: list[Pod] = []
    non_violating: list[Pod] = []
    for pod in pods:
        violated = False
        if pod.labels and (by_label or unindexed):  # a pod without labels matches no PDB
            candidates = [i for item in pod.labels.items() for i in by_label.get(item, ())]
            if unindexed:
                candidates += unindexed
            if len(candidates) > 1:
                candidates.sort()
            for i in candidates:
                pdb = pdbs[i]
                if pdb.metadata.namespace != pod.namespace:
                    continue
                if pdb.selector is None or not pdb.selector.matches(pod.labels):
                    continue
                if pod.name in pdb.disrupted_pods:
                    continue
                left = spent.get(i, pdb.disruptions_allowed) - 1
                spent[i] = left
                if left < 0:
                    violated = True
        (violating if violated else non_violating).append(pod)
    return violating, non_violating


class _PreemptionError(Exception):
    def __init__(self, status: Status) -> None:
        super().__init__(status.message)
        self.status = status


class DefaultPreemption(Plugin):
    """PostFilter (and PreEnqueue while its evictions run) like the reference's plugin."""

    name = NAME
    Args = DefaultPreemptionArgs

    def __init__(self, args: DefaultPreemptionArgs | None = None, handle: Handle | None = None) -> None:
        super().__init__(args if args is not None else DefaultPreemptionArgs(), handle)
        self.args: DefaultPreemptionArgs
        # Extra eligibility on top of "lower priority than the preemptor" (the reference's IsEligiblePod).
        self.is_eligible_pod: IsEligiblePodFunc | None = None
        # Victim importance; None = priority descending, then earlier start time.
        self.more_important_pod: MoreImportantPodFunc | None = None
        self.rng = random.Random()
        self._preempting: set[str] = set()
        self._preempting_groups: set[str] = set()  # PodGroup keys
        # The index of the PDB list the evaluator passes to every node of one dry run.
        self._pdb_index: PdbIndex | None = None
        self.evaluator = Evaluator(NAME, handle, self)
        self.pod_group_evaluator = PodGroupEvaluator(handle) if handle is not None else None

    # -- extension points --

    def post_filter(
        self, state: CycleState, pod: Pod, node_statuses: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status | None]:
        return _prefixed(*self.evaluator.preempt(state, pod, node_statuses))

    async def post_filter_with_extenders(
        self, state: CycleState, pod: Pod, node_statuses: Mapping[str, Status], extenders: Sequence[Extender]
    ) -> tuple[PostFilterResult | None, Status | None]:
        """PostFilter when HTTP extenders are configured: they narrow the candidates first."""
        return _prefixed(*await self.evaluator.preempt_with_extenders(state, pod, node_statuses, extenders))

    def pod_group_post_filter(
        self, state: CycleState, group: PodGroup, members: Sequence[Pod], simulation: PodGroupSimulation
    ) -> tuple[PodGroupPostFilterResult | None, Status | None]:
        """Workload-aware preemption (``PodGroupPostFilter``): the whole cluster is the domain."""
        if self.pod_group_evaluator is None:
            raise RuntimeError("DefaultPreemption needs a framework handle")
        result, status = self.pod_group_evaluator.preempt(group, members, simulation)
        self._handle().metrics.workload_preemption_attempt(CODE_LABELS[status.code])
        if status.message:
            status = Status(status.code, "pod group preemption: " + status.message, error=status.error)
        return result, status

    def pre_enqueue(self, pod: Pod) -> Status | None:
        if pod.pod_group and pod.pod_group_key in self._preempting_groups:
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, WAITING_FOR_GROUP_PREEMPTION)
        if pod.uid in self._preempting:
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, WAITING_FOR_PREEMPTION)
        return None

    def events_to_register(self) -> Iterable[ClusterEventWithHint]:
        # Pods gated by PreEnqueue are requeued by the plugins that rejected them, never by us.
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE), _queue_skip)
        ]

    # -- the scheduler reports its asynchronous evictions --

    def preemption_started(self, pod_uid: str) -> None:
        self._preempting.add(pod_uid)

    def preemption_finished(self, pod_uid: str) -> None:
        self._preempting.discard(pod_uid)

    def is_pod_running_preemption(self, pod_uid: str) -> bool:
        return pod_uid in self._preempting

    def pod_group_preemption_started(self, group_key: str) -> None:
        self._preempting_groups.add(group_key)

    def pod_group_preemption_finished(self, group_key: str) -> None:
        self._preempting_groups.discard(group_key)

    # -- PreemptionPolicy --

    def calculate_num_candidates(self, num_nodes: int) -> int:
        n = num_nodes * self.args.min_candidate_nodes_percentage // 100
        n = max(n, self.args.min_candidate_nodes_absolute)
        return min(n, num_nodes)

    def get_offset_and_num_candidates(self, num_nodes: int) -> tuple[int, int]:
        """A random start, so that concurrent preemptors do not all pick the first nodes."""
        return self.rng.randrange(num_nodes), self.calculate_num_candidates(num_nodes)

    def pod_eligible_to_preempt_others(
        self, pod: Pod, nominated_node_status: Status | None
    ) -> tuple[bool, str]:
        if pod.preemption_policy == PREEMPT_NEVER:
            return False, NOT_ELIGIBLE_NEVER
        nominated = pod.nominated_node_name
        if nominated:
            # A nominated node that became unresolvable is worth preempting elsewhere.
            if (
                nominated_node_status is not None
                and nominated_node_status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
            ):
                return True, ""
            info = self._handle().snapshot.get(nominated)
            if info is not None:
                for p in info.pods:
                    if self._is_preemption_allowed(info, p, pod) and terminating_by_preemption(p):
                        # Our earlier victims are still leaving: wait for them.
                        return False, NOT_ELIGIBLE_TERMINATING
        return True, ""

    def select_victims_on_node(
        self, state: CycleState, pod: Pod, node_info: NodeInfo, pdbs: Sequence[PodDisruptionBudget]
    ) -> tuple[list[Pod], int, Status | None]:
        """Remove every lower-priority pod, check the pod fits, then re-add (reprieve) as many
        as still fit: PDB-violating ones first, each group most important first."""
        handle = self._handle()

        def remove(victim: Pod) -> None:
            node_info.remove_pod(victim)
            status = handle.run_pre_filter_extension_remove_pod(state, pod, victim, node_info)
            if status is not None and not status.is_success():
                raise _PreemptionError(status)

        def add(victim: Pod) -> None:
            node_info.add_pod(victim)
            status = handle.run_pre_filter_extension_add_pod(state, pod, victim, node_info)
            if status is not None and not status.is_success():
                raise _PreemptionError(status)

        potential = [p for p in node_info.pods if self._is_preemption_allowed(node_info, p, pod)]
        try:
            for victim in potential:
                remove(victim)
            if not potential:
                return [], 0, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, NO_VICTIMS_MSG)
            status = handle.run_filter_plugins_with_nominated_pods(state, pod, node_info)
            if status is not None and not status.is_success():
                # Not supported, as in the reference: pod affinity to a victim.
                return [], 0, status
            potential = self._sort_by_importance(potential)
            index = self._pdb_index
            if index is None or index.pdbs is not pdbs:
                index = self._pdb_index = PdbIndex(pdbs)
            violating, non_violating = filter_pods_with_pdb_violation(potential, pdbs, index)
            victims: list[Pod] = []

            def reprieve(victim: Pod) -> bool:
                add(victim)
                fits = handle.run_filter_plugins_with_nominated_pods(state, pod, node_info)
                if fits is not None and not fits.is_success():
                    remove(victim)
                    victims.append(victim)
                    return False
                return True

            num_violating = sum(1 for v in violating if not reprieve(v))
            for v in non_violating:
                reprieve(v)
        except _PreemptionError as exc:
            return [], 0, Status(Code.ERROR, exc.status.message, error=exc.status.error)
        if violating and non_violating:
            victims = self._sort_by_importance(victims)
        return victims, num_violating, None

    def ordered_score_funcs(self, candidates: Sequence[Candidate]) -> list[Callable[[Candidate], int]] | None:
        return None  # the default tie-breaks

    # -- helpers --

    def _handle(self) -> Handle:
        if self.handle is None:
            raise RuntimeError("DefaultPreemption needs a framework handle")
        return self.handle

    def _is_preemption_allowed(self, node_info: NodeInfo, victim: Pod, preemptor: Pod) -> bool:
        if victim.priority >= preemptor.priority:
            return False
        return self.is_eligible_pod is None or self.is_eligible_pod(node_info, victim, preemptor)

    def _sort_by_importance(self, pods: Sequence[Pod]) -> list[Pod]:
        """Most important first (stable): priority descending, then longest running."""
        custom = self.more_important_pod
        if custom is not None:

            def cmp(a: Pod, b: Pod) -> int:
                return -1 if custom(a, b) else (1 if custom(b, a) else 0)

            return sorted(pods, key=functools.cmp_to_key(cmp))
        now = time.time()
        return sorted(pods, key=lambda p: (-p.priority, pod_start_time(p, now)))


def _queue_skip(pod: Pod, old: Any, new: Any) -> QueueingHint:
    return QueueingHint.QUEUE_SKIP
