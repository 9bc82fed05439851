"""A pod group's scheduling cycle (the reference's ``schedule_one_podgroup.go``).

The members are placed one by one on the same snapshot through the pod's own cycle (each assumed
and reserved so the next sees it) while PlacementFeasible says the group can still make it; then
either all of them go to Permit and binding, or every placement is undone, the group's PostFilter
(workload-aware preemption) may try, and all of them are requeued. The :class:`Scheduler
<kopf_scheduler.scheduler.schedule_one.Scheduler>` stays the one front door: it builds a
:class:`PodGroupCycle` on itself (a :class:`~kopf_scheduler.scheduler.cycle.PodCycle`) and hands it
the groups it pops.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.api.podgroup import POD_GROUP_INITIALLY_SCHEDULED, PodGroup
from kopf_scheduler.framework.client import ApiError, NotFound
from kopf_scheduler.framework.diagnosis import FitError, NoNodesAvailable
from kopf_scheduler.framework.events import EVENT_FORCE_ACTIVATE
from kopf_scheduler.framework.extender import run_now
from kopf_scheduler.framework.interface import (
    Code,
    CycleState,
    PlacementProgress,
    PodGroupPostFilterResult,
    ProposedAssignment,
    Status,
    is_success,
)
from kopf_scheduler.framework.runtime import Framework, FrameworkError
from kopf_scheduler.framework.types import NodeInfo, QueuedPodInfo
from kopf_scheduler.metrics.recorder import (
    ERROR_RESULT,
    SCHEDULED_RESULT,
    UNSCHEDULABLE_RESULT,
    WAITING_ON_PREEMPTION_RESULT,
)
from kopf_scheduler.scheduler.cycle import (
    SCHEDULER_ERROR,
    UNSCHEDULABLE,
    Failure,
    Outcome,
    Placed,
    PodCycle,
    failure_on,
)

__all__ = ["POD_GROUP_UNSCHEDULABLE", "PodGroupCycle"]

log = logging.getLogger(__name__)

POD_GROUP_UNSCHEDULABLE = "pod group is unschedulable"  # the reference's errPodGroupUnschedulable


def _rfc3339(seconds: float) -> str:
    return dt.datetime.fromtimestamp(int(seconds), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _validate_pod_group(group: PodGroup, members: list[QueuedPodInfo]) -> str | None:
    """``validatePodGroup``: one schedulerName, the group's priority and one preemption policy."""
    first = members[0].pod
    for qpi in members:
        pod = qpi.pod
        if pod.scheduler_name != first.scheduler_name:
            return (
                "all pods in a single pod group should have the same .spec.schedulerName set, "
                f'got: "{pod.scheduler_name}" and "{first.scheduler_name}"'
            )
        if pod.priority != group.priority:
            return (
                "all pods in a single pod group should have the same priority as the pod group's "
                f"priority, got {pod.priority} and {group.priority}"
            )
        if pod.preemption_policy != first.preemption_policy:
            return (
                "all pods in a single pod group should have the same preemption policy, "
                f"got {pod.preemption_policy} and {first.preemption_policy}"
            )
    return None


class _PodGroupSimulation:
    """``PodGroupSimulation`` on the scheduler's snapshot for one group's PostFilter. A row is
    replaced by an edited copy (so the snapshot's per-row arrays follow), and :meth:`restore`
    puts the cache's copies of the touched rows back (the reference's Start/EndMutations)."""

    def __init__(
        self,
        cycle: PodGroupCycle,
        sched: PodCycle,
        fw: Framework,
        group: PodGroup,
        members: list[QueuedPodInfo],
    ) -> None:
        self._cycle = cycle
        self._sched = sched
        self._fw = fw
        self._group = group
        self._members = members
        self._touched: set[str] = set()

    def _edit(self, node_name: str, edit: Callable[[NodeInfo], object]) -> None:
        snapshot = self._sched.snapshot
        i = snapshot.index.get(node_name)
        if i is None:
            return
        info = snapshot.node_infos[i].clone()
        edit(info)
        snapshot.replace(i, info)
        self._touched.add(node_name)

    def remove_pod(self, pod: Pod) -> None:
        self._edit(pod.node_name, lambda info: info.remove_pod(pod))

    def add_pod(self, pod: Pod) -> None:
        self._edit(pod.node_name, lambda info: info.add_pod(pod))

    def assume(self, assignment: ProposedAssignment) -> Status | None:
        assumed = dataclasses.replace(assignment.pod, node_name=assignment.node_name)
        self.add_pod(assumed)
        return self._fw.run_reserve_plugins_reserve(assignment.state, assumed, assignment.node_name)

    def forget(self, assignment: ProposedAssignment) -> None:
        assumed = dataclasses.replace(assignment.pod, node_name=assignment.node_name)
        self._fw.run_reserve_plugins_unreserve(assignment.state, assumed, assignment.node_name)
        self.remove_pod(assumed)

    def schedule(self) -> tuple[list[ProposedAssignment], Status | None]:
        """The group's algorithm on the edited snapshot, members placed there only (not in the
        cache), every placement undone before returning."""
        sched, fw = self._sched, self._fw
        placed: list[ProposedAssignment] = []

        async def place(state: CycleState, qpi: QueuedPodInfo) -> Outcome:
            pod = qpi.pod
            try:  # on the edited snapshot, without the extenders (this runs inside a plugin)
                result = sched.schedule_pod(fw, state, pod, dry_run=True)
            except NoNodesAvailable as exc:
                return Failure(Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, str(exc)), exc)
            except FrameworkError as exc:
                return Failure(exc.status, exc)
            except FitError as fit:
                return Failure(Status(Code.UNSCHEDULABLE, str(fit)), fit)
            assignment = ProposedAssignment(pod, result.suggested_host, state)
            status = self.assume(assignment)
            if not is_success(status):  # as the real cycle: undone, and the member fails on that node
                assert status is not None
                self.forget(assignment)
                return failure_on(pod, assignment.node_name, status)
            placed.append(assignment)
            return result, dataclasses.replace(pod, node_name=assignment.node_name)

        try:  # a fresh group cycle state, as the reference's PodGroupSchedulingFunc
            algorithm = self._cycle.algorithm(fw, self._group, self._members, place, CycleState())
            outcomes, status = run_now(algorithm)
        finally:
            for assignment in reversed(placed):
                self.forget(assignment)
        assignments = [
            ProposedAssignment(qpi.pod, "" if isinstance(out, Failure) else out[0].suggested_host, state)
            for qpi, state, out in outcomes
        ]
        return assignments, status

    def restore(self) -> None:
        self._sched.cache.restore_snapshot_nodes(self._sched.snapshot, self._touched)
        self._touched.clear()


class PodGroupCycle:
    """``scheduleOnePodGroup`` and what belongs with it, on the scheduler's parts (``sched``)."""

    def __init__(self, sched: PodCycle) -> None:
        self._sched = sched

    async def schedule(self, fw: Framework, qpis: list[QueuedPodInfo]) -> None:
        """One cycle for a whole pod group: place members one by one on the same snapshot (each
        assumed and reserved so the next sees it) while PlacementFeasible says the group can still
        make it; bind them all if it does, else undo every placement, let the group's PostFilter
        (workload-aware preemption) try, and requeue them all."""
        sched = self._sched
        start = sched.clock()
        head = qpis[0].pod
        groups = fw.pod_groups
        group = groups.get(head.namespace, head.pod_group) if groups is not None else None
        members: list[QueuedPodInfo] = []
        for qpi in qpis:
            if sched.skip_pod_schedule(qpi.pod):
                sched.queue.done(qpi.uid)
            else:
                members.append(qpi)
        if not members:
            return
        if group is None or groups is None:  # deleted since PreEnqueue let the members in
            err = RuntimeError(f'pod group "{head.pod_group}" not found')
            for qpi in members:
                sched.handle_failure(fw, qpi, Failure(Status.as_error(err), err, nominating=""), start)
            return
        # The reference's PodGroupMemberPodsOrderingFunc: priority (higher first), attempts (more
        # first: an older member), the time it came into the queue, then its name.
        members.sort(key=lambda q: (-q.pod.priority, -q.attempts, q.timestamp, q.pod.name))
        problem = _validate_pod_group(group, members)
        if problem is not None:
            for qpi in members:
                failure = Failure(Status(Code.ERROR, problem), None, nominating="")
                sched.handle_failure(fw, qpi, failure, start)
            self._set_condition(group, "False", SCHEDULER_ERROR, problem)
            sched.metrics.pod_group_attempt(ERROR_RESULT, fw.profile_name, sched.clock() - start)
            return

        async def place(state: CycleState, qpi: QueuedPodInfo) -> Outcome:
            return await sched.scheduling_cycle(state, fw, qpi)

        group_state = CycleState()  # the group's, shared by its members' cycles (framework.NewCycleState)
        outcomes, group_status = await self.algorithm(fw, group, members, place, group_state)
        sched.metrics.pod_group_algorithm(sched.clock() - start)
        if is_success(group_status):
            self._submit(fw, group, outcomes, start)
            return
        assert group_status is not None
        self._undo(fw, outcomes)
        untried_msg = group_status.message
        preemption: PodGroupPostFilterResult | None = None
        if group_status.code == Code.UNSCHEDULABLE:
            pf_result, pf_status = self._post_filter(fw, group_state, group, members)
            if pf_status.code == Code.ERROR:
                group_status = pf_status
            else:
                group_status.reasons.append(pf_status.message)
                if is_success(pf_status):
                    preemption = pf_result or PodGroupPostFilterResult()
        self._reject(fw, group, members, outcomes, group_status, untried_msg, preemption, start)

    async def algorithm(
        self,
        fw: Framework,
        group: PodGroup,
        members: list[QueuedPodInfo],
        place: Callable[[CycleState, QueuedPodInfo], Awaitable[Outcome]],
        group_state: CycleState,
    ) -> tuple[list[Placed], Status | None]:
        """``podGroupSchedulingAlgorithm``: members in order through ``place`` (which assumes and
        reserves what it places), PlacementFeasible before and after each, each member's cycle
        state pointing at ``group_state``. The status is the group's: success, Unschedulable with
        PlacementFeasible's reasons, or an error. It waits only on ``place`` (on extenders)."""
        sched = self._sched
        groups = fw.pod_groups
        assert groups is not None
        scheduled = groups.scheduled_count(group.namespace, group.name)
        outcomes: list[Placed] = []
        group_status = fw.run_placement_feasible_plugins(group, PlacementProgress(scheduled, len(members)))
        if group_status is not None and group_status.code == Code.ERROR:
            msg = f"failed to evaluate placement feasibility: {group_status.message}"
            return outcomes, Status(Code.ERROR, msg)
        if group_status is None or not group_status.is_rejected():
            remaining = len(members)
            any_scheduled = False
            for qpi in members:
                state = CycleState()
                state.pod_group_state = group_state
                state.record_plugin_metrics = sched.metrics.sample_plugin_metrics()
                outcome = await place(state, qpi)
                outcomes.append((qpi, state, outcome))
                placed = not isinstance(outcome, Failure)
                if isinstance(outcome, Failure) and not outcome.status.is_rejected():
                    msg = f"failed to schedule other pod from a pod group: {outcome.status.message}"
                    return outcomes, Status(Code.ERROR, msg)
                remaining -= 1
                scheduled += placed
                progress = PlacementProgress(scheduled, remaining)
                group_status = fw.run_placement_feasible_plugins(group, progress)
                if group_status is not None and group_status.code == Code.ERROR:
                    msg = f"failed to evaluate placement feasibility: {group_status.message}"
                    return outcomes, Status(Code.ERROR, msg)
                if group_status is not None and group_status.is_rejected():
                    break
                any_scheduled = any_scheduled or placed
            if group_status is not None and group_status.is_wait():
                group_status = Status(Code.UNSCHEDULABLE, *group_status.reasons)
            elif is_success(group_status) and not any_scheduled:
                group_status = Status(Code.UNSCHEDULABLE)
        if group_status is not None and group_status.is_rejected():
            group_status = Status(Code.UNSCHEDULABLE, *group_status.reasons)
        return outcomes, group_status

    def _post_filter(
        self, fw: Framework, group_state: CycleState, group: PodGroup, members: list[QueuedPodInfo]
    ) -> tuple[PodGroupPostFilterResult | None, Status]:
        """The group's PostFilter on the snapshot without this cycle's placements, with the group's
        cycle state; whatever its plugins change there is put back from the cache afterwards."""
        sched = self._sched
        sched.cache.update_snapshot(sched.snapshot)  # the placements were just undone in the cache
        simulation = _PodGroupSimulation(self, sched, fw, group, members)
        try:
            pods = [q.pod for q in members]
            return fw.run_pod_group_post_filter_plugins(group_state, group, pods, simulation)
        finally:
            simulation.restore()

    def _undo(self, fw: Framework, outcomes: list[Placed]) -> None:
        """Unreserve and forget every placement of a failed group cycle, last first."""
        sched = self._sched
        for qpi, state, outcome in reversed(outcomes):
            if isinstance(outcome, Failure):
                continue
            result, assumed = outcome
            fw.run_reserve_plugins_unreserve(state, assumed, result.suggested_host)
            sched.forget(assumed)
            if qpi.pod.nominated_node_name:  # assuming dropped its nomination: give it back
                sched.nominator.add_nominated_pod(qpi.pod, qpi.pod.nominated_node_name)
        if fw.batch is not None and outcomes:
            # Its list was scored around placements now undone; only the last node would be
            # re-scored. (The reference keeps it; a freed node would stay out of its hints.)
            fw.batch.reset()

    def _submit(self, fw: Framework, group: PodGroup, outcomes: list[Placed], start: float) -> None:
        """The group is placed: Permit and bind its placed members, requeue the rest on their own."""
        sched = self._sched
        for qpi, state, outcome in outcomes:
            if isinstance(outcome, Failure):
                sched.handle_failure(fw, qpi, outcome, start)
                continue
            result, assumed = outcome
            state.pod_group_state = None  # binding: no longer the group's cycle
            host = result.suggested_host
            status = fw.run_permit_plugins(state, assumed, host)
            if status is not None and not status.is_wait() and not status.is_success():
                failure = sched.undo_assume(fw, state, qpi.pod, assumed, host, status)
                sched.handle_failure(fw, qpi, failure, start)
                continue
            sched.start_binding_cycle(state, fw, qpi, result, assumed, start)
        self._set_condition(group, "True", "Scheduled", "")
        sched.metrics.pod_group_attempt(SCHEDULED_RESULT, fw.profile_name, sched.clock() - start)

    def _reject(
        self,
        fw: Framework,
        group: PodGroup,
        members: list[QueuedPodInfo],
        outcomes: list[Placed],
        group_status: Status,
        untried_msg: str,
        preemption: PodGroupPostFilterResult | None,
        start: float,
    ) -> None:
        """Fail every member (its placement already undone): those placed with "pod group is
        unschedulable, " and the group's message, those that found no node with their own, those
        not tried with the group's message as it was before the group's PostFilter (the reference
        fills their results in before it runs). With ``preemption`` the members are nominated
        where it placed them and the victims are evicted in the background."""
        sched = self._sched
        own = {qpi.uid: outcome for qpi, _, outcome in outcomes if isinstance(outcome, Failure)}
        placed = {qpi.uid for qpi, _, outcome in outcomes if not isinstance(outcome, Failure)}
        nominations = preemption.nominations if preemption is not None else {}
        error = group_status.code == Code.ERROR
        # The group is marked as preempting before its members are requeued, so PreEnqueue holds
        # them while the evictions are sent (as the reference marks it within its PostFilter).
        evictions = None
        if preemption is not None and preemption.victims and not error:
            evictions = self._start_preemption(fw, group, members, preemption)
        group_msg = group_status.message
        try:  # the evictions run whatever happens here: else the group stays held
            for qpi in members:
                failure = own.get(qpi.uid)
                if error:
                    if failure is None or failure.status.code != Code.ERROR:
                        failure = Failure(group_status, None, nominating="")
                elif qpi.uid in placed:
                    msg = f"{POD_GROUP_UNSCHEDULABLE}, {group_msg}" if group_msg else POD_GROUP_UNSCHEDULABLE
                    failure = Failure(Status(Code.UNSCHEDULABLE, msg), None, nominating="")
                elif failure is None:
                    status = Status(Code.UNSCHEDULABLE, untried_msg or POD_GROUP_UNSCHEDULABLE)
                    failure = Failure(status, None, nominating="")
                elif failure.nominating is None:
                    failure.nominating = ""
                if not error and qpi.uid in nominations:
                    failure.nominating = nominations[qpi.uid]
                sched.handle_failure(fw, qpi, failure, start, group_member=True)
        finally:
            if evictions is not None:
                sched.spawn(evictions, f"preemption for pod group {group.key}")
        if error:
            self._set_condition(group, "False", SCHEDULER_ERROR, group_msg)
            sched.metrics.pod_group_attempt(ERROR_RESULT, fw.profile_name, sched.clock() - start)
            return
        self._set_condition(group, "False", UNSCHEDULABLE, group_msg)
        result = WAITING_ON_PREEMPTION_RESULT if preemption is not None else UNSCHEDULABLE_RESULT
        sched.metrics.pod_group_attempt(result, fw.profile_name, sched.clock() - start)

    def _start_preemption(
        self, fw: Framework, group: PodGroup, members: list[QueuedPodInfo], result: PodGroupPostFilterResult
    ) -> Coroutine[Any, Any, None] | None:
        """Mark the group as preempting (its members are held at PreEnqueue) and return the
        evictions to run in the background, as the reference's asynchronous group preemption."""
        sched = self._sched
        sched.metrics.workload_preemption_victims(len(result.victims), result.disruptions)
        victims = [v for v in result.victims if not v.deletion_timestamp]
        if not victims:
            return None
        plugins = fw.async_pod_group_preemption_plugins
        for p in plugins:
            p.pod_group_preemption_started(group.key)
        scheduler_name = members[0].pod.scheduler_name
        message = f"{scheduler_name}: preempting to accommodate a higher priority podgroup"
        plugins_name = fw.pod_group_post_filter_plugins[0].name

        async def evict() -> None:
            try:
                outcomes = await asyncio.gather(
                    *(sched.preempt_victim(fw, v, group, message, plugins_name) for v in victims),
                    return_exceptions=True,
                )
                for victim, out in zip(victims, outcomes, strict=True):
                    if isinstance(out, BaseException) and not isinstance(out, NotFound):
                        log.error("evicting %s for pod group %s failed: %s", victim.key, group.key, out)
            finally:
                for p in plugins:
                    p.pod_group_preemption_finished(group.key)
                # Held by PreEnqueue meanwhile, nothing else would move them: let them go to
                # finish their backoff, as the reference's group does.
                sched.queue.release([m.pod for m in members], EVENT_FORCE_ACTIVATE.label)

        return evict()

    def _set_condition(self, group: PodGroup, status: str, reason: str, message: str) -> None:
        """``PodGroupInitiallyScheduled`` as ``apimeta.SetStatusCondition`` would set it; never back
        from True, and no write when nothing changes."""
        sched = self._sched
        existing = group.condition(POD_GROUP_INITIALLY_SCHEDULED)
        if existing is not None and existing.get("status") == "True" and status != "True":
            return
        cond: dict[str, Any] = {"type": POD_GROUP_INITIALLY_SCHEDULED, "status": status, "reason": reason}
        cond["message"] = message
        if group.generation:
            cond["observedGeneration"] = group.generation
        if existing is not None and existing.get("status") == status:
            cond["lastTransitionTime"] = existing.get("lastTransitionTime")
            if all(existing.get(k) == v for k, v in cond.items()):
                return
        else:
            cond["lastTransitionTime"] = _rfc3339(time.time())
        conditions = [c for c in group.conditions if c.get("type") != POD_GROUP_INITIALLY_SCHEDULED]
        conditions.append(cond)
        sched.spawn(self._write_conditions(group, conditions), f"condition of PodGroup {group.key}")

    async def _write_conditions(self, group: PodGroup, conditions: list[Mapping[str, Any]]) -> None:
        sched = self._sched
        try:
            await sched.client.set_pod_group_conditions(group.namespace, group.name, conditions)
        except NotFound:
            pass
        except ApiError as exc:
            log.warning("updating the status of PodGroup %s failed: %s", group.key, exc)
