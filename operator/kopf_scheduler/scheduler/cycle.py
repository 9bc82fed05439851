"""What a pod's scheduling cycle yields, and what a pod group's cycle needs of it.

Shared by :mod:`.schedule_one` (one pod) and :mod:`.schedule_one_podgroup` (a whole group, placing
its members through the pod's cycle), so that neither imports the other's internals.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from kopf_scheduler.framework.diagnosis import Diagnosis, FitError
from kopf_scheduler.framework.interface import Code, CycleState, PodNominator, PostFilterResult, Status

if TYPE_CHECKING:
    from kopf_scheduler.api.objects import Pod
    from kopf_scheduler.api.podgroup import PodGroup
    from kopf_scheduler.cache.interface import SchedulerCache
    from kopf_scheduler.framework.client import ClusterClient
    from kopf_scheduler.framework.runtime import Framework
    from kopf_scheduler.framework.snapshot import Snapshot
    from kopf_scheduler.framework.types import QueuedPodInfo
    from kopf_scheduler.metrics.recorder import MetricsRecorder
    from kopf_scheduler.queue.interface import SchedulingQueue

__all__ = [
    "SCHEDULER_ERROR",
    "UNSCHEDULABLE",
    "Failure",
    "Outcome",
    "Placed",
    "PodCycle",
    "ScheduleResult",
    "failure_on",
    "unfit",
]

UNSCHEDULABLE = "Unschedulable"
SCHEDULER_ERROR = "SchedulerError"


@dataclass(slots=True)
class ScheduleResult:
    suggested_host: str
    evaluated_nodes: int
    feasible_nodes: int


@dataclass(slots=True)
class Failure:
    status: Status
    error: BaseException | None = None
    nominating: str | None = None  # None: leave the nomination; "": clear; name: nominate
    post_filter: PostFilterResult | None = None


def unfit(state: CycleState, fit: FitError) -> Failure:
    """No node and no PostFilter: in a pod group's cycle the group's decides at its end (the
    nomination is left); otherwise there is no preemption and a nomination left is cleared."""
    nominating = None if state.pod_group_cycle else ""
    return Failure(Status(Code.UNSCHEDULABLE, str(fit)), fit, nominating=nominating)


def failure_on(pod: Pod, host: str, status: Status) -> Failure:
    """A pod's failure on its chosen node after Reserve or Permit said no: a rejection reads as a
    FitError over that one node, anything else is the error itself."""
    if status.is_rejected():
        diag = Diagnosis()
        diag.node_to_status.set(host, status)
        diag.add_plugin_status(status)
        fit = FitError(pod, 1, diag)
        return Failure(Status(status.code, str(fit)), fit, nominating="")
    return Failure(status, None, nominating="")


Outcome = tuple[ScheduleResult, "Pod"] | Failure  # placed (the assumed pod) or not
Placed = tuple["QueuedPodInfo", CycleState, Outcome]  # a member, its cycle's state, where it went


class PodCycle(Protocol):
    """What a pod group's cycle uses of the scheduler (the reference's methods of ``*Scheduler``
    that ``schedule_one_podgroup.go`` calls): its parts, and one member's cycle."""

    @property
    def cache(self) -> SchedulerCache: ...

    @property
    def queue(self) -> SchedulingQueue: ...

    @property
    def client(self) -> ClusterClient: ...

    @property
    def metrics(self) -> MetricsRecorder: ...

    @property
    def snapshot(self) -> Snapshot: ...

    @property
    def nominator(self) -> PodNominator: ...

    def clock(self) -> float: ...

    async def scheduling_cycle(self, state: CycleState, fw: Framework, qpi: QueuedPodInfo) -> Outcome:
        """One pod's scheduling cycle up to Reserve (Permit waits for the group, ``state`` says so)."""
        ...

    def schedule_pod(
        self, fw: Framework, state: CycleState, pod: Pod, *, dry_run: bool = False
    ) -> ScheduleResult: ...

    def handle_failure(
        self, fw: Framework, qpi: QueuedPodInfo, failure: Failure, start: float, *, group_member: bool = False
    ) -> None: ...

    def undo_assume(
        self, fw: Framework, state: CycleState, pod: Pod, assumed: Pod, host: str, status: Status
    ) -> Failure: ...

    def forget(self, assumed: Pod) -> None: ...

    def start_binding_cycle(
        self,
        state: CycleState,
        fw: Framework,
        qpi: QueuedPodInfo,
        result: ScheduleResult,
        assumed: Pod,
        start: float,
    ) -> None:
        """Start the binding cycle of a placed pod in the background."""
        ...

    def skip_pod_schedule(self, pod: Pod) -> bool:
        """``skipPodSchedule``: True for a pod being deleted (an event tells so) or already assumed."""
        ...

    def spawn(self, coro: Coroutine[Any, Any, Any], what: str) -> asyncio.Task[Any]: ...

    async def preempt_victim(
        self, fw: Framework, victim: Pod, preemptor: Pod | PodGroup, message: str, plugin: str = ""
    ) -> bool: ...
