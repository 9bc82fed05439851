"""The scheduling queue (the reference's ``backend/queue/scheduling_queue.go``).

Three places a pending pod can be:

- activeQ: a heap ordered by the profile's QueueSort ``less``; ``pop`` takes its head.
- backoffQ: a heap ordered by backoff expiry; ``flush_backoff_completed`` moves expired pods to
  activeQ. Backoff is ``initial * 2**(attempts-1)`` capped at ``max``, counted from the time the
  pod was last put back.
- the unschedulable pool: pods rejected by plugins, or gated by PreEnqueue plugins. A cluster event
  moves a pod out only if one of the plugins that rejected it registered that event and that
  plugin's QueueingHint says Queue; ``flush_unschedulable_left_over`` retries pods stuck there for
  longer than ``max_unschedulable_duration``. A plugin with a PreQueueingHint (``PreQueueingHints``:
  DynamicResources for claim events) names the pool pods an event may concern, from an index of
  the pool by its keys, so that event asks the hints of those pods only (``_narrow``).

Events that arrive while a pod is being scheduled ("in flight", between ``pop`` and ``done``) are
recorded (``in_flight.InFlight``) and replayed against the pod when it comes back through
``add_unschedulable_if_not_present``, so an event during its cycle is never lost. Both heaps are
``heap.Heap``; the protocol callers program against is ``interface.SchedulingQueue``.

Single-threaded by design: everything runs on the operator's event loop, so no locks.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.framework.events import (
    EVENT_FORCE_ACTIVATE,
    EVENT_UNSCHEDULABLE_TIMEOUT,
    EVENT_UNSCHEDULED_POD_ADD,
    EVENT_UNSCHEDULED_POD_UPDATE,
    WILDCARD_EVENT,
    ClusterEvent,
    ClusterEventWithHint,
    QueueingHint,
    is_wildcard,
    match_cluster_event,
    pod_scheduling_properties_change,
)
from kopf_scheduler.framework.interface import (
    Code,
    PreEnqueuePlugin,
    PreEnqueueSharedVerdict,
    PreQueueingHintResult,
    PreQueueingHints,
    Status,
)
from kopf_scheduler.framework.types import QueuedPodInfo
from kopf_scheduler.metrics.recorder import PRE_ENQUEUE, SUCCESS, MetricsRecorder, NoopMetrics, code_label
from kopf_scheduler.queue.heap import Heap
from kopf_scheduler.queue.in_flight import InFlight
from kopf_scheduler.queue.interface import HintsMap, PreEnqueueCheck, PreEnqueueFn, PreQueueingHintsFn
from kopf_scheduler.queue.nominator import Nominator

__all__ = [
    "DEFAULT_MAX_UNSCHEDULABLE_DURATION",
    "DEFAULT_POD_INITIAL_BACKOFF",
    "DEFAULT_POD_MAX_BACKOFF",
    "HintsMap",
    "PriorityQueue",
    "QueuedPodInfo",
    "QueueingStrategy",
    "default_less",
]

log = logging.getLogger(__name__)

DEFAULT_POD_INITIAL_BACKOFF = 1.0
DEFAULT_POD_MAX_BACKOFF = 10.0
DEFAULT_MAX_UNSCHEDULABLE_DURATION = 300.0
BACKOFF_FLUSH_PERIOD = 1.0
UNSCHEDULABLE_FLUSH_PERIOD = 30.0

SCHEDULE_ATTEMPT_FAILURE = "ScheduleAttemptFailure"
BACKOFF_COMPLETE = "BackoffComplete"
POP_FROM_BACKOFF_Q = "PopFromBackoffQ"

_WILDCARD_REGISTRATION = (ClusterEventWithHint(WILDCARD_EVENT),)

PRE_QUEUEING_ALL_PODS = "all_pods"
PRE_QUEUEING_NARROWED = "narrowed"

# A PreQueueingHint's narrowing of one event: plugin name -> uids of the pool pods it named.
Narrowing = dict[str, set[str]]


class QueueingStrategy(enum.IntEnum):
    SKIP = 0
    AFTER_BACKOFF = 1
    IMMEDIATELY = 2


ACTIVE_Q = "active"
BACKOFF_Q = "backoff"
UNSCHEDULABLE_Q = "unschedulable"


def _errored(qpi: QueuedPodInfo) -> bool:
    """Failed with an error rather than rejected by plugins (the reference's podErrorBackoffQ)."""
    return not qpi.unschedulable_plugins and not qpi.pending_plugins


def default_less(a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
    """PrioritySort's order: higher priority first, then earlier timestamp."""
    if a.pod.priority != b.pod.priority:
        return a.pod.priority > b.pod.priority
    return a.timestamp < b.timestamp


class PriorityQueue:
    """activeQ + backoffQ + unschedulable pool, shared by all profiles.

    ``pre_enqueue`` maps a pod to its profile's PreEnqueue plugins; ``hints`` maps plugin names to
    the events they registered, either one map for all profiles or a callable mapping a pod to its
    profile's map. Both may be replaced at runtime (``set_pre_enqueue``/``set_hints``) when
    profiles are edited. A plugin absent from the map is treated as registered for every event
    with no hint, as the reference does for plugins without ``EventsToRegister``.
    """

    def __init__(
        self,
        less: Callable[[QueuedPodInfo, QueuedPodInfo], bool] = default_less,
        clock: Callable[[], float] = time.monotonic,
        initial_backoff: float = DEFAULT_POD_INITIAL_BACKOFF,
        max_backoff: float = DEFAULT_POD_MAX_BACKOFF,
        max_unschedulable_duration: float = DEFAULT_MAX_UNSCHEDULABLE_DURATION,
        pre_enqueue: PreEnqueueFn | None = None,
        hints: HintsMap | Callable[[Pod], HintsMap] | None = None,
        *,
        nominator: Nominator | None = None,
        pop_from_backoff: bool = True,
        metrics: MetricsRecorder | None = None,
        pre_queueing_hints: bool = False,
    ) -> None:
        self.clock = clock
        self.metrics: MetricsRecorder = metrics if metrics is not None else NoopMetrics()
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.max_unschedulable_duration = max_unschedulable_duration
        self.pre_enqueue = pre_enqueue
        self.hints: HintsMap | Callable[[Pod], HintsMap] = hints if hints is not None else {}
        self._all_hints: list[HintsMap] | None = None
        self.nominator = nominator if nominator is not None else Nominator()
        self.pop_from_backoff = pop_from_backoff

        self._less = less
        self._active = Heap(less)
        self._backoff = Heap(self._backoff_less)
        self._unschedulable: dict[str, QueuedPodInfo] = {}
        self._gated: set[str] = set()

        self.scheduling_cycle = 0
        self._in_flight = InFlight()
        self._seen_rejectors: set[str] = set()
        self._interest: dict[tuple[ClusterEvent, int], bool] = {}

        self._closed = False
        self._wakeup = asyncio.Event()

        # PreQueueingHints (see _narrow): the gate SchedulerPreQueueingHints, each pod's profile's
        # plugins with the capability, every profile's (hints, those plugins), and the pool indexed
        # by their keys as the reference's pod informer is by DynamicResources' indexer:
        # (plugin, key) -> pool uids.
        self.pre_queueing_hints_enabled = pre_queueing_hints
        self._pre_hints: PreQueueingHintsFn | None = None
        self._pre_hint_profiles: list[tuple[HintsMap, Mapping[str, PreQueueingHints]]] = []
        self._pool_index: dict[tuple[str, Hashable], dict[str, None]] = {}
        self._pool_keys: dict[str, list[tuple[str, Hashable]]] = {}
        self._unindexed: dict[str, None] = {}  # pool pods whose keys could not be had: always asked
        self._narrowable: dict[tuple[ClusterEvent, int], tuple[bool, frozenset[str]]] = {}

    # -- configuration --

    def set_pre_enqueue(self, pre_enqueue: PreEnqueueFn | None) -> None:
        self.pre_enqueue = pre_enqueue

    def set_hints(
        self,
        hints: HintsMap | Callable[[Pod], HintsMap],
        all_profiles: Iterable[HintsMap] | None = None,
    ) -> None:
        """``all_profiles`` (every profile's map) lets a callable ``hints`` still skip events that
        no plugin of any profile registered, instead of walking the pool for each."""
        self.hints = hints
        self._all_hints = list(all_profiles) if all_profiles is not None else None
        self._interest.clear()
        self._narrowable.clear()

    def set_pre_queueing_hints(
        self,
        plugins: PreQueueingHintsFn | None,
        profiles: Iterable[tuple[HintsMap, Mapping[str, PreQueueingHints]]] = (),
    ) -> None:
        """``plugins`` maps a pod to its profile's PreQueueingHints plugins (whose keys index it in
        the pool); ``profiles`` is every profile's hints with those plugins (what an event asks).
        The pool is indexed anew."""
        self._pre_hints = plugins
        self._pre_hint_profiles = [(h, p) for h, p in profiles if p]
        self._narrowable.clear()
        self._pool_index.clear()
        self._pool_keys.clear()
        self._unindexed.clear()
        for qpi in self._unschedulable.values():
            self._index(qpi)

    def set_less(self, less: Callable[[QueuedPodInfo, QueuedPodInfo], bool]) -> None:
        """Swap the QueueSort function (all profiles share it); re-heapifies activeQ."""
        self._less = less
        old = list(self._active)
        self._active = Heap(less)
        for qpi in old:
            self._active.push(qpi)

    # -- backoff --

    def backoff_duration(self, qpi: QueuedPodInfo) -> float:
        if qpi.attempts == 0:
            return 0.0
        duration = self.initial_backoff
        for _ in range(1, qpi.attempts):
            if duration > self.max_backoff - duration:
                return self.max_backoff
            duration += duration
        return duration

    def backoff_time(self, qpi: QueuedPodInfo) -> float:
        """When the pod's backoff ends; cached until its next attempt changes it."""
        if qpi.attempts == 0:
            return float("-inf")
        if qpi.backoff_expiration is None:
            qpi.backoff_expiration = qpi.timestamp + self.backoff_duration(qpi)
        return qpi.backoff_expiration

    def is_backing_off(self, qpi: QueuedPodInfo) -> bool:
        return self.backoff_time(qpi) > self.clock()

    def _backoff_less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        return self.backoff_time(a) < self.backoff_time(b)

    # -- PreEnqueue --

    def _run_pre_enqueue(self, qpi: QueuedPodInfo) -> None:
        """Run the pod's PreEnqueue plugins, the current gating plugin first; record the gate."""
        start = time.perf_counter()
        self._pre_enqueue_plugins(qpi)
        # The reference labels this "Success" whatever the plugins said (its deferred observation
        # reads a status variable the plugin loop shadows); so do we, to report the same series.
        seconds = time.perf_counter() - start
        self.metrics.extension_point(PRE_ENQUEUE, SUCCESS, qpi.pod.scheduler_name, seconds)

    def _pre_enqueue_plugins(self, qpi: QueuedPodInfo) -> None:
        plugins = list(self.pre_enqueue(qpi.pod)) if self.pre_enqueue is not None else []
        if not plugins:
            qpi.gating_plugin = ""
            qpi.gate_key = None
            return
        if qpi.gating_plugin:
            plugins.sort(key=lambda pl: pl.name != qpi.gating_plugin)
        metrics = self.metrics
        timed = metrics.sample_plugin_metrics()
        for plugin in plugins:
            t0 = time.perf_counter()
            try:
                status: Status | None = plugin.pre_enqueue(qpi.pod)
            except Exception as exc:
                log.exception("PreEnqueue plugin %s failed on pod %s", plugin.name, qpi.pod.key)
                status = Status.as_error(exc)
            if timed:
                code = code_label(status.code if status is not None else None)
                metrics.plugin_duration(plugin.name, PRE_ENQUEUE, code, time.perf_counter() - t0)
            if status is None or status.code == Code.SUCCESS:
                continue
            name = plugin.name
            if name not in qpi.unschedulable_plugins and name not in qpi.pending_plugins:
                metrics.unschedulable_reason(name, qpi.pod.scheduler_name, 1)
            qpi.unschedulable_plugins.add(name)
            qpi.gating_plugin = name
            qpi.gate_key = self._gate_key(plugin, qpi.pod)
            self._seen_rejectors.add(name)
            return
        qpi.gating_plugin = ""
        qpi.gate_key = None

    # -- pool helpers --

    def _pool_put(self, qpi: QueuedPodInfo, event: str | None = None) -> None:
        """Into the unschedulable pool; ``event`` (what brought it) is counted if it is new there."""
        if event is not None and qpi.uid not in self._unschedulable:
            self.metrics.queue_incoming(UNSCHEDULABLE_Q, event)
        self._unschedulable[qpi.uid] = qpi
        self._index(qpi)
        if qpi.gated:
            self._gated.add(qpi.uid)
        else:
            self._gated.discard(qpi.uid)

    def _pool_remove(self, uid: str) -> QueuedPodInfo | None:
        self._gated.discard(uid)
        self._unindex(uid)
        return self._unschedulable.pop(uid, None)

    def _index(self, qpi: QueuedPodInfo) -> None:
        """(Re)index a pool pod under its profile's PreQueueingHints keys (a pod's claims change
        while it waits: the index follows every put and every update)."""
        if self._pre_hints is None:
            return
        uid = qpi.uid
        self._unindex(uid)
        keys: list[tuple[str, Hashable]] = []
        try:
            for name, plugin in self._pre_hints(qpi.pod).items():
                keys.extend((name, key) for key in plugin.pre_queueing_keys(qpi.pod))
        except Exception:
            log.exception("PreQueueingHints keys failed for pod %s; it is asked on every event", qpi.pod.key)
            self._unindexed[uid] = None
            return
        if keys:
            self._pool_keys[uid] = keys
            index = self._pool_index
            for key in keys:
                index.setdefault(key, {})[uid] = None

    def _unindex(self, uid: str) -> None:
        self._unindexed.pop(uid, None)
        keys = self._pool_keys.pop(uid, None)
        if keys is None:
            return
        index = self._pool_index
        for key in keys:
            uids = index.get(key)
            if uids is not None:
                uids.pop(uid, None)
                if not uids:
                    del index[key]

    def _has(self, uid: str) -> bool:
        return uid in self._active or uid in self._backoff or uid in self._unschedulable

    def _broadcast(self) -> None:
        self._wakeup.set()

    def _new_qpi(self, pod: Pod) -> QueuedPodInfo:
        return QueuedPodInfo(pod=pod, timestamp=self.clock())

    def _move_to_active(
        self, qpi: QueuedPodInfo, event: str, from_backoff: bool = False, from_pool: bool = False
    ) -> bool:
        """``from_pool``: the pod was taken out of the pool for this move, so going back there is
        no incoming pod (the reference moves it without taking it out)."""
        if not (self.pop_from_backoff and from_backoff):
            self._run_pre_enqueue(qpi)
        if qpi.gated:
            if not self._has(qpi.uid):
                self._pool_put(qpi, None if from_pool else event)
            return False
        if qpi.initial_attempt_timestamp is None:
            qpi.initial_attempt_timestamp = self.clock()
        self._pool_remove(qpi.uid)
        self._backoff.remove(qpi.uid)
        self._active.push(qpi)
        self.metrics.queue_incoming(ACTIVE_Q, event)
        if event in (EVENT_UNSCHEDULED_POD_ADD.label, EVENT_UNSCHEDULED_POD_UPDATE.label):
            self.nominator.add_nominated_pod(qpi.pod)
        return True

    def _move_to_backoff(self, qpi: QueuedPodInfo, event: str, from_pool: bool = False) -> bool:
        if self.pop_from_backoff:
            self._run_pre_enqueue(qpi)
            if qpi.gated:
                if qpi.uid not in self._unschedulable:
                    self._pool_put(qpi, None if from_pool else event)
                return False
        self._pool_remove(qpi.uid)
        self._backoff.push(qpi)
        self.metrics.queue_incoming(BACKOFF_Q, event)
        if self.pop_from_backoff and not _errored(qpi):
            self._broadcast()  # an idle pop() may take it now (SchedulerPopFromBackoffQ)
        return True

    def _requeue(
        self, qpi: QueuedPodInfo, strategy: QueueingStrategy, event: str, from_pool: bool = False
    ) -> str:
        """Put a pod where ``strategy`` says; returns the queue it went to."""
        if strategy == QueueingStrategy.SKIP:
            self._pool_put(qpi, None if from_pool else event)
            return UNSCHEDULABLE_Q
        if strategy == QueueingStrategy.AFTER_BACKOFF and self.is_backing_off(qpi):
            return BACKOFF_Q if self._move_to_backoff(qpi, event, from_pool) else UNSCHEDULABLE_Q
        return ACTIVE_Q if self._move_to_active(qpi, event, from_pool=from_pool) else UNSCHEDULABLE_Q

    # -- adding and removing --

    def add(self, pod: Pod) -> None:
        """A new unscheduled pod. A pod already known is treated as an update (after a re-list)."""
        existing = self.get(pod.uid)
        if existing is not None:
            self.update(existing.pod, pod)
            return
        if pod.uid in self._in_flight:
            self._in_flight.update(pod)
            return
        if self._move_to_active(self._new_qpi(pod), EVENT_UNSCHEDULED_POD_ADD.label):
            self._broadcast()

    def update(self, old: Pod, new: Pod) -> None:
        """An update of an unscheduled pod; may lift a gate or make a rejected pod schedulable."""
        uid = new.uid
        events = pod_scheduling_properties_change(old, new)
        if uid in self._in_flight:
            # It comes back through add_unschedulable_if_not_present; replay the update then.
            self._in_flight.update(new)
            for ev in events:
                self._in_flight.record(ev, old, new)
            return
        for heap in (self._active, self._backoff):
            qpi = heap.get(uid)
            if qpi is not None:
                qpi.pod = new
                heap.fix(uid)
                self.nominator.update_nominated_pod(old, new)
                return
        qpi = self._unschedulable.get(uid)
        if qpi is not None:
            qpi.pod = new
            self._index(qpi)
            self.nominator.update_nominated_pod(old, new)
            for ev in events:
                strategy = self._worth_requeuing(qpi, ev, old, new)
                if strategy == QueueingStrategy.SKIP:
                    continue
                self._pool_remove(uid)
                where = self._requeue(qpi, strategy, ev.label, from_pool=True)
                if where == ACTIVE_Q:
                    self._broadcast()
                if where != UNSCHEDULABLE_Q:
                    break
            return
        # Not queued at all: added as new, under the reference's label for it.
        if self._move_to_active(self._new_qpi(new), EVENT_UNSCHEDULED_POD_ADD.label):
            self._broadcast()

    def delete(self, pod: Pod) -> None:
        """The pod is gone or bound elsewhere; an in-flight pod will not be requeued."""
        self.nominator.delete_nominated_pod_if_exists(pod)
        uid = pod.uid
        removed = self._active.remove(uid) or self._backoff.remove(uid) or self._pool_remove(uid)
        if removed is not None:
            self._drop_unschedulable_reasons(removed)
        if uid in self._in_flight:
            self._in_flight.mark_deleted(uid)

    def activate(self, pods: Iterable[Pod] | Mapping[str, Pod]) -> None:
        """Move pods waiting in backoffQ or the pool to activeQ right away (``Activate``)."""
        items = pods.values() if isinstance(pods, Mapping) else pods
        activated = False
        for pod in items:
            qpi = self._unschedulable.get(pod.uid)
            from_backoff = False
            if qpi is None:
                qpi = self._backoff.remove(pod.uid)
                from_backoff = True
            if qpi is not None:
                if self._move_to_active(qpi, EVENT_FORCE_ACTIVATE.label, from_backoff):
                    activated = True
                continue
            if pod.uid in self._in_flight:
                self._in_flight.record(EVENT_FORCE_ACTIVATE, None, pod)
        if activated:
            self._broadcast()

    def release(self, pods: Iterable[Pod], event: str) -> None:
        """Pool pods a PreEnqueue plugin held, asked again: those it lets go wait out whatever is
        left of their backoff, then go active (a pod with no rejector of its own, as the reference
        moves it on any event); pods elsewhere are left alone."""
        activated = False
        for pod in pods:
            qpi = self._pool_remove(pod.uid)
            if qpi is None:
                continue
            gate = qpi.gating_plugin
            if gate and gate in qpi.unschedulable_plugins:
                # A gate is not a rejection of the pod's attempt: a pod without rejectors of its own
                # keeps the error backoff it failed with (never popped early from backoff).
                qpi.unschedulable_plugins.discard(gate)
                self.metrics.unschedulable_reason(gate, qpi.pod.scheduler_name, -1)
            if self._requeue(qpi, QueueingStrategy.AFTER_BACKOFF, event, from_pool=True) == ACTIVE_Q:
                activated = True
        if activated:
            self._broadcast()

    # -- popping --

    def pop_nowait(self) -> QueuedPodInfo | None:
        """The head of activeQ (or of backoffQ when allowed and activeQ is empty), now in flight."""
        if self._closed:
            return None
        qpi = self._active.pop()
        if qpi is None and self.pop_from_backoff:
            qpi = self._pop_backoff()
            if qpi is not None:
                self.metrics.queue_incoming(ACTIVE_Q, POP_FROM_BACKOFF_Q)
        if qpi is None:
            return None
        self.scheduling_cycle += 1
        self._start_attempt(qpi)
        return qpi

    def _start_attempt(self, qpi: QueuedPodInfo) -> None:
        self._drop_unschedulable_reasons(qpi)
        qpi.attempts += 1
        qpi.backoff_expiration = None
        qpi.unschedulable_plugins.clear()
        qpi.pending_plugins.clear()
        self._in_flight.start(qpi.pod)

    def pop_pod_group_members(self, pod: Pod) -> list[QueuedPodInfo]:
        """The other queued members of ``pod``'s group (same profile, not gated), taken out and in
        flight with it, so the group is attempted in one cycle: the reference queues a pod group as
        one entity that moves between activeQ, backoffQ and the pool as a whole."""
        key = pod.pod_group_key
        if not key:
            return []

        def member(q: QueuedPodInfo) -> bool:
            other = q.pod
            same_profile = other.scheduler_name == pod.scheduler_name
            return other.pod_group_key == key and same_profile and q.uid != pod.uid

        out: list[QueuedPodInfo] = []
        for heap in (self._active, self._backoff):
            for qpi in [q for q in heap if member(q)]:
                heap.remove(qpi.uid)
                out.append(qpi)
        for qpi in [q for q in self._unschedulable.values() if member(q) and not q.gated]:
            self._pool_remove(qpi.uid)
            out.append(qpi)
        for qpi in out:
            self._start_attempt(qpi)
        return out

    def pod_group_gate(self, pod: Pod) -> str:
        """The gating plugin of a member of ``pod``'s group held in the pool by PreEnqueue, or "":
        in the reference one gated member gates its whole group."""
        key = pod.pod_group_key
        if not key:
            return ""
        for uid in self._gated:
            qpi = self._unschedulable.get(uid)
            if qpi is None or qpi.pod.scheduler_name != pod.scheduler_name:
                continue
            if qpi.pod.pod_group_key == key:
                return qpi.gating_plugin
        return ""

    def _drop_unschedulable_reasons(self, qpi: QueuedPodInfo) -> None:
        """unschedulable_pods counts queued pods by rejector: a pod popped or deleted leaves it."""
        if qpi.unschedulable_plugins or qpi.pending_plugins:
            profile = qpi.pod.scheduler_name
            for plugin in qpi.unschedulable_plugins | qpi.pending_plugins:
                self.metrics.unschedulable_reason(plugin, profile, -1)

    def _pop_backoff(self) -> QueuedPodInfo | None:
        """The rejected pod whose backoff ends first; pods that failed with an error keep their
        backoff (the reference pops its podBackoffQ only, never podErrorBackoffQ)."""
        best: QueuedPodInfo | None = None
        for qpi in self._backoff:
            if _errored(qpi):
                continue
            if best is None or self.backoff_time(qpi) < self.backoff_time(best):
                best = qpi
        if best is not None:
            self._backoff.remove(best.uid)
        return best

    async def pop(self) -> QueuedPodInfo | None:
        """Wait for a pod; None once the queue is closed."""
        while True:
            qpi = self.pop_nowait()
            if qpi is not None or self._closed:
                return qpi
            self._wakeup.clear()
            await self._wakeup.wait()

    def done(self, uid: str) -> None:
        """The pod's scheduling (and binding) attempt is over; forget events it no longer needs."""
        self._in_flight.finish(uid)

    def is_gone(self, uid: str) -> bool:
        """Deleted, or marked for deletion, while being scheduled: its failure is not reported."""
        if self._in_flight.is_deleted(uid):
            return True
        latest = self._in_flight.latest(uid)
        return latest is not None and bool(latest.deletion_timestamp)

    def in_flight_pods(self) -> list[str]:
        return self._in_flight.uids()

    def is_known(self, uid: str) -> bool:
        """Queued, or being scheduled and not deleted meanwhile."""
        return self._has(uid) or (uid in self._in_flight and not self._in_flight.is_deleted(uid))

    def add_unschedulable_if_not_present(self, qpi: QueuedPodInfo, scheduling_cycle: int) -> None:
        """Put back a pod whose attempt failed: to the pool, or to backoff/active when an event
        seen during its cycle may have made it schedulable."""
        uid = qpi.uid
        try:
            if self._in_flight.is_deleted(uid):
                return  # deleted or bound elsewhere while we were scheduling it
            if self._has(uid):
                log.warning("pod %s is already queued; not adding it again", qpi.pod.key)
                return
            latest = self._in_flight.latest(uid)
            if latest is not None:
                qpi.pod = latest
            if not qpi.unschedulable_plugins and not qpi.pending_plugins:
                qpi.consecutive_errors_count += 1
            else:
                qpi.unschedulable_count += 1
                qpi.consecutive_errors_count = 0
            qpi.timestamp = self.clock()
            qpi.backoff_expiration = None
            self._note_rejectors(qpi)
            profile = qpi.pod.scheduler_name
            for plugin in qpi.unschedulable_plugins | qpi.pending_plugins:
                self.metrics.unschedulable_reason(plugin, profile, 1)

            strategy = self._hint_for_in_flight(qpi)
            if self._requeue(qpi, strategy, SCHEDULE_ATTEMPT_FAILURE) == ACTIVE_Q:
                self._broadcast()
        finally:
            self.done(uid)

    def _hint_for_in_flight(self, qpi: QueuedPodInfo) -> QueueingStrategy:
        if not qpi.unschedulable_plugins and not qpi.pending_plugins:
            return QueueingStrategy.AFTER_BACKOFF
        seen = self._in_flight.events_for(qpi.uid)
        if seen is None:
            return QueueingStrategy.AFTER_BACKOFF
        strategy = QueueingStrategy.SKIP
        for rec in seen:
            got = self._worth_requeuing(qpi, rec.event, rec.old, rec.new)
            if got == QueueingStrategy.IMMEDIATELY:
                return got
            if got == QueueingStrategy.AFTER_BACKOFF:
                strategy = got
                if not qpi.pending_plugins:
                    return strategy
        return strategy

    # -- moving on cluster events --

    def _hints_for(self, pod: Pod) -> HintsMap:
        hints = self.hints
        return hints(pod) if callable(hints) else hints

    def _registrations(self, hints: HintsMap, plugin: str) -> Sequence[ClusterEventWithHint]:
        regs = hints.get(plugin)
        return _WILDCARD_REGISTRATION if regs is None else regs

    def is_event_of_interest(self, event: ClusterEvent) -> bool:
        """Can ``event`` move any pod? Lets most events skip walking the pool."""
        if is_wildcard(event):
            return True
        # Memoised per event: every assigned pod's add/update asks this while pods are in flight
        # (~3% of our CPU in SchedulingBasic). Valid while the hints and the rejectors seen stay
        # the same: set_hints clears it, and the rejectors only grow (their count is in the key).
        key = (event, len(self._seen_rejectors))
        known = self._interest.get(key)
        if known is None:
            known = self._interest[key] = self._event_of_interest(event)
            if len(self._interest) > 4096:  # rejectors grew many times: start over
                self._interest.clear()
        return known

    def _hint_maps(self) -> list[HintsMap] | None:
        """Every profile's hints, None when a per-pod lookup gives no list of them."""
        hints = self.hints
        if not callable(hints):
            return [hints]
        return self._all_hints

    def _event_of_interest(self, event: ClusterEvent) -> bool:
        maps = self._hint_maps()
        if maps is None:
            return True
        for name in self._seen_rejectors:
            if all(name not in m for m in maps):
                return True  # a plugin without registrations hears every event
        return any(match_cluster_event(reg.event, event) for m in maps for regs in m.values() for reg in regs)

    def _note_rejectors(self, qpi: QueuedPodInfo) -> None:
        self._seen_rejectors.update(qpi.unschedulable_plugins)
        self._seen_rejectors.update(qpi.pending_plugins)

    def _worth_requeuing(
        self, qpi: QueuedPodInfo, event: ClusterEvent, old: Any, new: Any, narrowing: Narrowing | None = None
    ) -> QueueingStrategy:
        """``isPodWorthRequeuing``: ask the hints of only the plugins that rejected the pod, and of
        a plugin that narrowed the event (``narrowing``) only if it named the pod."""
        rejectors = qpi.unschedulable_plugins | qpi.pending_plugins
        if not rejectors:
            return QueueingStrategy.AFTER_BACKOFF
        if is_wildcard(event):
            if new is not None and (not isinstance(new, Pod) or new.uid != qpi.uid):
                return QueueingStrategy.SKIP  # a wildcard aimed at another pod
            return QueueingStrategy.AFTER_BACKOFF
        hints = self._hints_for(qpi.pod)
        strategy = QueueingStrategy.SKIP
        for plugin in sorted(rejectors):
            named = narrowing.get(plugin) if narrowing is not None else None
            if named is not None and qpi.uid not in named:
                continue  # its PreQueueingHint left the pod out: its hint would say QueueSkip
            for reg in self._registrations(hints, plugin):
                if not match_cluster_event(reg.event, event):
                    continue
                hint = QueueingHint.QUEUE
                if reg.hint is not None:
                    try:
                        hint = reg.hint(qpi.pod, old, new)
                    except Exception:
                        # An erroring hint must not strand the pod in the pool.
                        log.exception("QueueingHint of %s failed for pod %s", plugin, qpi.pod.key)
                        hint = QueueingHint.QUEUE
                if hint == QueueingHint.QUEUE_SKIP:
                    continue
                if plugin in qpi.pending_plugins:
                    return QueueingStrategy.IMMEDIATELY
                if not qpi.pending_plugins:
                    return QueueingStrategy.AFTER_BACKOFF
                strategy = QueueingStrategy.AFTER_BACKOFF
        return strategy

    def move_all_to_active_or_backoff(
        self,
        event: ClusterEvent,
        old: Any = None,
        new: Any = None,
        pre_check: PreEnqueueCheck | None = None,
    ) -> None:
        """Move pool pods that ``event`` may make schedulable (``MoveAllToActiveOrBackoffQueue``).

        Only the pods a PreQueueingHint named are asked when the event is narrowed (``_narrow``)."""
        if self.pre_queueing_hints_enabled and self._pre_hint_profiles:
            # The reference asks its PreQueueingHints for every event of interest, pods waiting or
            # not (pre_queueing_hint_evaluations_total counts each).
            if not self.is_event_of_interest(event):
                return
            narrowing, restrict = self._narrow(event, old, new)
            if self._nothing_to_move():
                return
        else:
            if self._nothing_to_move() or not self.is_event_of_interest(event):
                return
            narrowing, restrict = self._narrow(event, old, new)
        pool = self._unschedulable
        if narrowing is None or not restrict:
            pods = [q for q in pool.values() if pre_check is None or pre_check(q.pod)]
        else:
            named: dict[str, None] = {}
            for uids in narrowing.values():
                named.update(dict.fromkeys(uids))
            found = (pool.get(uid) for uid in named)
            pods = [q for q in found if q is not None and (pre_check is None or pre_check(q.pod))]
        self._move_pods(pods, event, old, new, narrowing)

    def _narrow(self, event: ClusterEvent, old: Any, new: Any) -> tuple[Narrowing | None, bool]:
        """The PreQueueingHints' narrowing of ``event`` (``runPreQueueingHintPlugins``): which pool
        pods each plugin named (its hint is asked for those only), and whether only the pods some
        plugin named are asked at all. ``(None, False)``: every pod, with every hint.

        SchedulerPreQueueingHints on (alpha, off by default in v1.37.2): as the reference, each
        plugin with the capability whose registrations match the event is asked, once a profile,
        and counted in pre_queueing_hint_evaluations_total; one that says ``all_pods`` (or fails)
        ends the narrowing; otherwise only the pods named by some plugin are asked, a plugin
        without a PreQueueingHint asked for those (and only those) pods.

        Off: the reference asks every pod with every hint, and a plugin's hint answers QueueSkip
        for a pod its PreQueueingHint leaves out (the capability's contract), so skipping that hint
        for that pod changes nothing: each plugin that narrowed is asked only for the pods it named.
        Only the pods named at all are looked at when that is by construction the same as looking
        at all: every plugin registered for the event, in every profile, narrowed it and no
        rejector hears every event (a plugin without registrations); a pod none of them named is
        then skipped by all its rejectors' hints (a pool pod always has a rejector). Else every pod
        is looked at, another plugin's hint moving a pod the narrowing left out as before. Nothing
        is counted: the reference asks no PreQueueingHint with the gate off. Why narrow at all:
        each claim event asked DynamicResources' hint for every waiting pod (issue 30's
        SchedulingWithResourceClaimTemplate: O(pods^2) over the workload)."""
        if not self._pre_hint_profiles or (old is None and new is None) or is_wildcard(event):
            return None, False
        gate = self.pre_queueing_hints_enabled
        if gate:
            restrict, covered = True, None
        else:
            restrict, covered = self._narrow_plan(event)
            if not covered:
                return None, False
        index = self._pool_index
        unindexed = self._unindexed
        narrowing: Narrowing = {}
        refused: set[str] = set()  # gate off: plugins that said all_pods (or failed) in some profile
        for hints, plugins in self._pre_hint_profiles:
            for name, plugin in plugins.items():
                if name in refused or (covered is not None and name not in covered):
                    continue
                regs = hints.get(name)
                if not regs or not any(match_cluster_event(reg.event, event) for reg in regs):
                    continue
                try:
                    result = plugin.pre_queueing_hint(event, old, new)
                except Exception:
                    log.exception("PreQueueingHint of %s failed; every pod is asked", name)
                    result = PreQueueingHintResult(all_pods=True)
                    if gate:
                        return None, False  # the reference returns before counting it
                if result is not None and not result.all_pods:
                    if gate:
                        self.metrics.pre_queueing_hint(name, PRE_QUEUEING_NARROWED)
                    uids = narrowing.get(name)
                    if uids is None:
                        uids = narrowing[name] = set(unindexed)
                    for key in result.keys:
                        found = index.get((name, key))
                        if found:
                            uids.update(found)
                    continue
                if gate:
                    if result is None:
                        continue  # no PreQueueingHint for this event: it does not narrow
                    self.metrics.pre_queueing_hint(name, PRE_QUEUEING_ALL_PODS)
                    return None, False
                restrict = False
                refused.add(name)
                narrowing.pop(name, None)
        if not narrowing:
            return None, False
        return narrowing, restrict

    def _narrow_plan(self, event: ClusterEvent) -> tuple[bool, frozenset[str]]:
        """With the gate off: the plugins whose hints for ``event`` may be narrowed (those with a
        PreQueueingHint in every profile whose registrations of theirs match it), and whether the
        pods none of them names may be left unasked (every plugin registered for the event is one
        of them, and every rejector seen has registrations in every profile). Memoised as
        ``is_event_of_interest`` is."""
        key = (event, len(self._seen_rejectors))
        known = self._narrowable.get(key)
        if known is None:
            known = self._narrowable[key] = self._narrow_plan_now(event)
            if len(self._narrowable) > 4096:
                self._narrowable.clear()
        return known

    def _narrow_plan_now(self, event: ClusterEvent) -> tuple[bool, frozenset[str]]:
        maps = self._hint_maps()
        if maps is None:
            return False, frozenset()
        restrict = all(name in m for name in self._seen_rejectors for m in maps)
        with_pre_hint = {id(h): p for h, p in self._pre_hint_profiles}
        covered: set[str] = set()
        uncovered: set[str] = set()
        for m in maps:
            plugins = with_pre_hint.get(id(m), {})
            for name, regs in m.items():
                if any(match_cluster_event(reg.event, event) for reg in regs):
                    (covered if name in plugins else uncovered).add(name)
        covered -= uncovered
        return restrict and not uncovered, frozenset(covered)

    @staticmethod
    def _gate_key(plugin: PreEnqueuePlugin, pod: Pod) -> tuple[str, Hashable] | None:
        """The gating plugin and the key its PreEnqueue answers alike for, when it declares one
        (the same check as ``Framework.capabilities``; asked only when the plugin gates a pod)."""
        if not isinstance(plugin, PreEnqueueSharedVerdict):
            return None
        key = plugin.pre_enqueue_shared_by(pod)
        return None if key is None else (plugin.name, key)

    def _shared_verdict(self, qpi: QueuedPodInfo) -> tuple[str, Hashable] | None:
        """``gate_key`` when every way out of the pool runs the gating plugin first (with
        SchedulerPopFromBackoffQ, the default, the way to backoffQ runs PreEnqueue too)."""
        return qpi.gate_key if self.pop_from_backoff else None

    def _nothing_to_move(self) -> bool:
        """No pool pod could move and no in-flight pod could need the event replayed.

        The initial listing delivers every pod and node as an event while the queue is still empty;
        without this check each of them walked every plugin's registrations for nothing."""
        return not self._unschedulable and not self._in_flight

    def _move_pods(
        self,
        pods: Sequence[QueuedPodInfo],
        event: ClusterEvent,
        old: Any,
        new: Any,
        narrowing: Narrowing | None = None,
    ) -> None:
        if self._nothing_to_move():
            return
        if not self.is_event_of_interest(event):
            return
        activated = False
        # (gating plugin, its key) whose PreEnqueue gated a pod again in this pass: another gated
        # pod of that key would be gated again alike (PreEnqueueSharedVerdict; PreEnqueue runs the
        # gating plugin first, on the way to backoffQ too), so it stays where it is, untouched.
        regated: set[tuple[str, Hashable]] = set()
        for qpi in pods:
            shared = None
            if qpi.gated:
                shared = self._shared_verdict(qpi)
                if shared is not None and shared in regated:
                    continue
                hints = self._hints_for(qpi.pod)
                gating_regs = self._registrations(hints, qpi.gating_plugin)
                if not any(match_cluster_event(reg.event, event) for reg in gating_regs):
                    continue
            strategy = self._worth_requeuing(qpi, event, old, new, narrowing)
            if strategy == QueueingStrategy.SKIP:
                continue
            self._pool_remove(qpi.uid)
            if self._requeue(qpi, strategy, event.label, from_pool=True) == ACTIVE_Q:
                activated = True
            elif shared is not None and qpi.gate_key == shared:  # gated again, alike
                regated.add(shared)
        self._in_flight.record(event, old, new)
        if activated:
            self._broadcast()

    # -- flushing --

    def flush_backoff_completed(self) -> None:
        activated = False
        while True:
            head = self._backoff.peek()
            if head is None or self.is_backing_off(head):
                break
            self._backoff.pop()
            if self._move_to_active(head, BACKOFF_COMPLETE, from_backoff=True):
                activated = True
        if activated:
            self._broadcast()

    def flush_unschedulable_left_over(self) -> None:
        now = self.clock()
        stale = [
            q for q in self._unschedulable.values() if now - q.timestamp > self.max_unschedulable_duration
        ]
        if stale:
            self._move_pods(stale, EVENT_UNSCHEDULABLE_TIMEOUT, None, None)

    async def run_flushers(
        self,
        backoff_period: float = BACKOFF_FLUSH_PERIOD,
        unschedulable_period: float = UNSCHEDULABLE_FLUSH_PERIOD,
    ) -> None:
        """Run both periodic flushes until ``close()`` (or cancellation)."""

        async def every(period: float, fn: Callable[[], None]) -> None:
            while not self._closed:
                await asyncio.sleep(period)
                try:
                    fn()
                except Exception:
                    log.exception("queue flush failed")

        await asyncio.gather(
            every(backoff_period, self.flush_backoff_completed),
            every(unschedulable_period, self.flush_unschedulable_left_over),
        )

    # -- inspection --

    def get(self, uid: str) -> QueuedPodInfo | None:
        return self._active.get(uid) or self._backoff.get(uid) or self._unschedulable.get(uid)

    def where(self, uid: str) -> str | None:
        """Which sub-queue holds the pod (``active``, ``backoff``, ``unschedulable``), or None."""
        if uid in self._active:
            return ACTIVE_Q
        if uid in self._backoff:
            return BACKOFF_Q
        if uid in self._unschedulable:
            return UNSCHEDULABLE_Q
        return None

    def __contains__(self, uid: object) -> bool:
        if isinstance(uid, Pod):
            uid = uid.uid
        return isinstance(uid, str) and self._has(uid)

    def __len__(self) -> int:
        return len(self._active) + len(self._backoff) + len(self._unschedulable)

    def pending_pods(self) -> dict[str, int]:
        gated = len(self._gated)
        return {
            "active": len(self._active),
            "backoff": len(self._backoff),
            "unschedulable": len(self._unschedulable) - gated,
            "gated": gated,
        }

    def active_pods(self) -> list[Pod]:
        return [q.pod for q in self._active]

    def backoff_pods(self) -> list[Pod]:
        return [q.pod for q in self._backoff]

    def unschedulable_pods(self) -> list[Pod]:
        return [q.pod for q in self._unschedulable.values()]

    def nominated_pods_for_node(self, node_name: str) -> list[Pod]:
        return self.nominator.nominated_pods_for_node(node_name)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True
        self._broadcast()
