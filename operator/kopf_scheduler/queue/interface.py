"""The scheduling queue's seam (the reference's ``SchedulingQueue`` in ``backend/queue``).

The scheduler, the event handlers and the profile set program against this protocol; the one
implementation is ``PriorityQueue``. Hint and PreEnqueue types live here so that callers need not
import the implementation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from kopf_scheduler.api.objects import Pod
    from kopf_scheduler.framework.events import ClusterEvent, ClusterEventWithHint
    from kopf_scheduler.framework.interface import PodNominator, PreEnqueuePlugin, PreQueueingHints
    from kopf_scheduler.framework.types import QueuedPodInfo

__all__ = ["HintsMap", "LessFn", "PreEnqueueCheck", "PreEnqueueFn", "PreQueueingHintsFn", "SchedulingQueue"]

# plugin name -> the events it registered (with their hints)
HintsMap = Mapping[str, "Sequence[ClusterEventWithHint]"]
# a pod -> its profile's PreEnqueue plugins
PreEnqueueFn = Callable[["Pod"], "Sequence[PreEnqueuePlugin]"]
# a pod -> its profile's plugins with PreQueueingHints, by name
PreQueueingHintsFn = Callable[["Pod"], "Mapping[str, PreQueueingHints]"]
# which pool pods an event may move at all (e.g. lower-priority ones after a nomination changes)
PreEnqueueCheck = Callable[["Pod"], bool]
LessFn = Callable[["QueuedPodInfo", "QueuedPodInfo"], bool]


class SchedulingQueue(Protocol):
    """Pending pods: activeQ, backoffQ and the unschedulable pool, plus the nominator."""

    @property
    def nominator(self) -> PodNominator: ...

    @property
    def scheduling_cycle(self) -> int: ...

    # -- configured by the profile set --

    def set_pre_enqueue(self, pre_enqueue: PreEnqueueFn | None) -> None: ...

    def set_hints(
        self,
        hints: HintsMap | Callable[[Pod], HintsMap],
        all_profiles: Iterable[HintsMap] | None = None,
    ) -> None: ...

    def set_less(self, less: LessFn) -> None: ...

    def set_pre_queueing_hints(
        self,
        plugins: PreQueueingHintsFn | None,
        profiles: Iterable[tuple[HintsMap, Mapping[str, PreQueueingHints]]] = (),
    ) -> None: ...

    # -- unscheduled pods from the event handlers --

    def add(self, pod: Pod) -> None: ...

    def update(self, old: Pod, new: Pod) -> None: ...

    def delete(self, pod: Pod) -> None: ...

    def is_known(self, uid: str) -> bool: ...

    def get(self, uid: str) -> QueuedPodInfo | None:
        """The queued pod (active, backoff or unschedulable), or None."""
        ...

    # -- cluster events --

    def move_all_to_active_or_backoff(
        self,
        event: ClusterEvent,
        old: Any = None,
        new: Any = None,
        pre_check: PreEnqueueCheck | None = None,
    ) -> None: ...

    # -- the scheduling loop --

    async def pop(self) -> QueuedPodInfo | None: ...

    def pop_nowait(self) -> QueuedPodInfo | None: ...

    def pop_pod_group_members(self, pod: Pod) -> list[QueuedPodInfo]: ...

    def pod_group_gate(self, pod: Pod) -> str: ...

    def done(self, uid: str) -> None: ...

    def is_gone(self, uid: str) -> bool: ...

    def add_unschedulable_if_not_present(self, qpi: QueuedPodInfo, scheduling_cycle: int) -> None: ...

    def activate(self, pods: Iterable[Pod] | Mapping[str, Pod]) -> None: ...

    def release(self, pods: Iterable[Pod], event: str) -> None:
        """Pool pods a PreEnqueue plugin held, asked again; let go, they finish their backoff."""
        ...

    async def run_flushers(self) -> None: ...

    def pending_pods(self) -> dict[str, int]: ...

    def close(self) -> None: ...

    def __contains__(self, uid: object) -> bool: ...
