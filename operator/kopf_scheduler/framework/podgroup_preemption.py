"""Workload-aware preemption: a pod group preempting across the whole cluster (the reference's
``framework/preemption/podgrouppreemption.go``, behind GenericWorkload).

The domain is every node. Its victims are preemption units: a pod, or every placed pod of a
PodGroup whose ``disruptionMode`` is ``all`` (evicted together or not at all); a unit's priority is
its group's when its pod belongs to one. Every unit of lower priority than the group is taken off
the snapshot, the whole group is placed once on what is left, and then units are given back (the
PDB-violating ones first, each list most important first) while every member still passes its
filters where it was placed. What could not be given back is evicted. Like the single-pod
evaluator this only decides; the scheduler evicts and nominates.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kopf_scheduler.framework.interface import (
    Code,
    PodGroupPostFilterResult,
    PodGroupSimulation,
    ProposedAssignment,
    Status,
    is_success,
)
from kopf_scheduler.framework.preemption import disruption_budgets, terminating_by_preemption

if TYPE_CHECKING:
    from kopf_scheduler.api.objects import Pod
    from kopf_scheduler.api.podgroup import PodGroup
    from kopf_scheduler.api.policy import PodDisruptionBudget
    from kopf_scheduler.framework.interface import Handle, PodGroupManager

__all__ = [
    "NO_VICTIMS_MSG",
    "ONGOING_MSG",
    "PodGroupEvaluator",
    "Victim",
    "domain_victims",
    "filter_victims_with_pdb_violation",
    "more_important_victim",
    "success_message",
]

NO_VICTIMS_MSG = "No preemption victims found for incoming preemptor"
ONGOING_MSG = "ongoing preemption on nominated nodes"
NOT_ELIGIBLE_NEVER = "not eligible due to preemptionPolicy=Never."
PREEMPT_NEVER = "Never"

# victimRank: composite pod groups (not built here) 3, pod groups 2, pods 1.
POD_RANK = 1
POD_GROUP_RANK = 2


def success_message(num_victims: int) -> str:
    return f"found a placement for podgroup, preempting {num_victims} victims"


@dataclass(slots=True)
class Victim:
    """A preemption unit. ``rank`` is 2 for a pod of any PodGroup too (the reference counts such
    a pod as a group disruption)."""

    pods: list[Pod]
    priority: int
    rank: int
    earliest_start: float

    @property
    def is_group(self) -> bool:
        return self.rank >= POD_GROUP_RANK


def more_important_victim(a: Victim, b: Victim) -> bool:
    """``MoreImportantVictim``: higher priority, then groups before pods, then more pods, then the
    one that started first."""
    if a.priority != b.priority:
        return a.priority > b.priority
    if a.rank != b.rank:
        return a.rank > b.rank
    if len(a.pods) != len(b.pods):
        return len(a.pods) > len(b.pods)
    return a.earliest_start < b.earliest_start


def _cmp(a: Victim, b: Victim) -> int:
    return -1 if more_important_victim(a, b) else (1 if more_important_victim(b, a) else 0)


def sort_by_importance(victims: Sequence[Victim]) -> list[Victim]:
    return sorted(victims, key=functools.cmp_to_key(_cmp))


def _effective_priority(pod: Pod, groups: PodGroupManager | None) -> int:
    """``GetPodPriority``: a member's priority is its PodGroup's, while that is known."""
    if pod.pod_group and groups is not None:
        group = groups.get(pod.namespace, pod.pod_group)
        if group is not None:
            return group.priority
    return pod.priority


def domain_victims(pods_by_node: Sequence[Sequence[Pod]], groups: PodGroupManager | None) -> list[Victim]:
    """``getCrossNodesVictims``: units in node order, a ``disruptionMode: all`` group once, with
    its pods from every node.

    A pod that has not started counts as starting when it is first seen: the reference's
    ``GetPodStartTime`` answers "now" for it, a little later for each unit it builds.
    """
    now = time.time()
    tick = 0

    def start_of(pod: Pod) -> float:
        nonlocal tick
        if pod.start_time:
            return pod.start_time
        tick += 1
        return now + tick * 1e-6

    all_groups: dict[str, list[Pod]] = {}
    if groups is not None:
        for pods in pods_by_node:
            for pod in pods:
                if pod.pod_group:
                    group = groups.get(pod.namespace, pod.pod_group)
                    if group is not None and group.disruption_all:
                        all_groups.setdefault(group.key, []).append(pod)
    seen: set[str] = set()
    victims: list[Victim] = []
    for pods in pods_by_node:
        for pod in pods:
            group_key = pod.pod_group_key if pod.pod_group else ""
            members = all_groups.get(group_key) if group_key else None
            if members is None:
                if pod.uid in seen:
                    continue
                seen.add(pod.uid)
                rank = POD_GROUP_RANK if pod.pod_group and groups is not None else POD_RANK
                victims.append(Victim([pod], _effective_priority(pod, groups), rank, start_of(pod)))
                continue
            if group_key in seen:
                continue
            seen.add(group_key)
            start = min(start_of(p) for p in members)
            victims.append(Victim(list(members), _effective_priority(pod, groups), POD_GROUP_RANK, start))
    return victims


def filter_victims_with_pdb_violation(
    victims: Sequence[Victim], pdbs: Sequence[PodDisruptionBudget]
) -> tuple[list[tuple[Victim, int]], list[Victim]]:
    """``FilterVictimsWithPDBViolation``: a unit violates when any of its pods would exceed a
    budget (spent in unit order, pods in order); with it, how many of its pods do."""
    spent: dict[int, int] = {}

    def violates(pod: Pod) -> bool:
        if not pod.labels:
            return False
        for i, pdb in enumerate(pdbs):
            if pdb.metadata.namespace != pod.namespace or pdb.selector is None or pdb.selector.is_empty():
                continue
            if not pdb.selector.matches(pod.labels) or pod.name in pdb.disrupted_pods:
                continue
            left = spent.get(i, pdb.disruptions_allowed) - 1
            spent[i] = left
            if left < 0:
                return True
        return False

    violating: list[tuple[Victim, int]] = []
    non_violating: list[Victim] = []
    for victim in victims:
        count = sum(1 for pod in victim.pods if violates(pod))
        if count:
            violating.append((victim, count))
        else:
            non_violating.append(victim)
    return violating, non_violating


class _ExtensionError(Exception):
    def __init__(self, status: Status) -> None:
        super().__init__(status.message)
        self.status = status


class PodGroupEvaluator:
    """``PodGroupEvaluator``: eligibility, victim selection on the cluster domain, the result."""

    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    def preempt(
        self, group: PodGroup, members: Sequence[Pod], sim: PodGroupSimulation
    ) -> tuple[PodGroupPostFilterResult | None, Status]:
        if any(pod.preemption_policy == PREEMPT_NEVER for pod in members):
            # Without the PodGroupPreemptionPolicy gate (alpha, off) the members' policy decides.
            return None, Status(Code.UNSCHEDULABLE, NOT_ELIGIBLE_NEVER)
        if self._ongoing(group, members):
            current = PodGroupPostFilterResult({pod.uid: pod.nominated_node_name for pod in members})
            return current, Status(Code.SUCCESS, ONGOING_MSG)
        try:
            return self._select_victims(group, sim)
        except _ExtensionError as exc:
            return None, Status(Code.ERROR, exc.status.message, error=exc.status.error)

    def _ongoing(self, group: PodGroup, members: Sequence[Pod]) -> bool:
        """Some member's nominated node still has a lower-priority pod leaving because we preempted it."""
        snapshot = self.handle.snapshot
        groups = self.handle.pod_groups
        for name in {pod.nominated_node_name for pod in members if pod.nominated_node_name}:
            info = snapshot.get(name)
            if info is None:
                continue
            for pod in info.pods:
                if _effective_priority(pod, groups) < group.priority and terminating_by_preemption(pod):
                    return True
        return False

    def _select_victims(
        self, group: PodGroup, sim: PodGroupSimulation
    ) -> tuple[PodGroupPostFilterResult | None, Status]:
        handle = self.handle
        snapshot = handle.snapshot
        victims = domain_victims([info.pods for info in snapshot.list()], handle.pod_groups)
        potential = [v for v in victims if v.priority < group.priority]
        if not potential:
            return None, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, NO_VICTIMS_MSG)
        pdbs = disruption_budgets(handle.objects)
        for victim in potential:
            for pod in victim.pods:
                sim.remove_pod(pod)
        assignments, status = sim.schedule()
        if not is_success(status):
            assert status is not None
            return None, status
        placed = [a for a in assignments if a.node_name]
        violating, non_violating = filter_victims_with_pdb_violation(sort_by_importance(potential), pdbs)
        to_preempt: list[Victim] = []
        num_violating = 0
        for victim, count in violating:
            if not self._reprieve(victim, placed, sim):
                to_preempt.append(victim)
                num_violating += count
        for victim in non_violating:
            if not self._reprieve(victim, placed, sim):
                to_preempt.append(victim)
        to_preempt = sort_by_importance(to_preempt)
        pods = [pod for victim in to_preempt for pod in victim.pods]
        result = PodGroupPostFilterResult(
            nominations={a.pod.uid: a.node_name for a in placed},
            victims=pods,
            disruptions=sum(1 for v in to_preempt if v.is_group),
            pdb_violations=num_violating,
        )
        return result, Status(Code.SUCCESS, success_message(len(pods)))

    def _reprieve(
        self, victim: Victim, placed: Sequence[ProposedAssignment], sim: PodGroupSimulation
    ) -> bool:
        """Give the unit back; True when every placed member still passes its filters on its node,
        members assumed one after another as in the cycle that placed them."""
        handle = self.handle
        snapshot = handle.snapshot
        self._move(victim, placed, sim, back=True)
        assumed: list[ProposedAssignment] = []
        try:
            for a in placed:
                info = snapshot.get(a.node_name)
                fits = info is not None and is_success(
                    handle.run_filter_plugins_with_nominated_pods(a.state, a.pod, info)
                )
                if not fits:
                    self._move(victim, placed, sim, back=False)
                    return False
                sim.assume(a)
                assumed.append(a)
            return True
        finally:
            for a in reversed(assumed):
                sim.forget(a)

    def _move(
        self, victim: Victim, placed: Sequence[ProposedAssignment], sim: PodGroupSimulation, *, back: bool
    ) -> None:
        """Put the unit's pods back on their nodes (or take them off again), telling every placed
        member's PreFilter state through its AddPod/RemovePod extension."""
        handle = self.handle
        extension = (
            handle.run_pre_filter_extension_add_pod if back else handle.run_pre_filter_extension_remove_pod
        )
        for pod in victim.pods:
            if back:
                sim.add_pod(pod)
            else:
                sim.remove_pod(pod)
            info = handle.snapshot.get(pod.node_name)
            if info is None:
                continue
            for a in placed:
                status = extension(a.state, a.pod, pod, info)
                if status is not None and not status.is_success():
                    raise _ExtensionError(status)
