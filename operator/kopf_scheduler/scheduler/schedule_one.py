"""The scheduling loop: one pod at a time through the scheduling cycle, bindings in the background.

Mirrors the reference's ``schedule_one.go``. The scheduling cycle is synchronous and pure (snapshot,
PreFilter/Filter over a sampled, rotating window of nodes, scoring, host selection, assume, Reserve,
Permit); the binding cycle (WaitOnPermit, PreBind, Bind, PostBind) runs as an asyncio task bounded
by a semaphore so the next pod is scheduled while the apiserver answers. All writes go through the
``ClusterClient``; the cluster edge supplies the real one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

import numpy as np

from kopf_scheduler.api.kinds import Objects
from kopf_scheduler.api.objects import Pod
from kopf_scheduler.api.podgroup import PodGroup
from kopf_scheduler.cache.interface import SchedulerCache
from kopf_scheduler.framework.batch import OpportunisticBatch, PodSignature, ScoredNodes
from kopf_scheduler.framework.client import ApiError, ClusterClient, Conflict, NotFound
from kopf_scheduler.framework.diagnosis import Diagnosis, FitError, NoNodesAvailable
from kopf_scheduler.framework.events import EVENT_ASSIGNED_POD_DELETE
from kopf_scheduler.framework.extender import (
    EXTENDER_NAME,
    extender_scores,
    extenders_binding,
    find_nodes_that_pass_extenders,
)
from kopf_scheduler.framework.interface import (
    AsyncPreemptionPlugin,
    Code,
    CycleState,
    PodNominator,
    PostFilterResult,
    PreFilterResult,
    Status,
    is_success,
)
from kopf_scheduler.framework.preemption import lower_priority_nominated_pods
from kopf_scheduler.framework.runtime import Framework, FrameworkError
from kopf_scheduler.framework.snapshot import Snapshot
from kopf_scheduler.framework.types import QueuedPodInfo
from kopf_scheduler.metrics.recorder import (
    CODE_LABELS,
    ERROR_RESULT,
    FILTER,
    SCHEDULED_RESULT,
    SUCCESS,
    UNSCHEDULABLE_RESULT,
    MetricsRecorder,
)
from kopf_scheduler.queue.interface import SchedulingQueue
from kopf_scheduler.scheduler.cycle import (
    SCHEDULER_ERROR,
    UNSCHEDULABLE,
    Failure,
    Outcome,
    ScheduleResult,
    failure_on,
    unfit,
)
from kopf_scheduler.scheduler.profiles import ProfileSet
from kopf_scheduler.scheduler.schedule_one_podgroup import PodGroupCycle

__all__ = [
    "EVENT_WORKERS",
    "MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND",
    "MIN_FEASIBLE_NODES_TO_FIND",
    "FitErrorHook",
    "Scheduler",
    "num_feasible_nodes_to_find",
]

log = logging.getLogger(__name__)

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5
# client-go's event broadcaster queues at most 1000 events and drops the newest when full
# (watch.DropIfChannelFull): events are best-effort and must never hold binding back.
MAX_QUEUED_EVENTS = 1000
EVENT_WORKERS = 4

# Called with the profile's name, the pod and its FitError after each such failure's report
# (``run --explain-annotation`` writes a summary on the pod).
FitErrorHook = Callable[[str, Pod, FitError], Coroutine[Any, Any, None]]


_NO_ROWS = np.zeros(0, dtype=np.int64)


def num_feasible_nodes_to_find(percentage: int | None, num_all_nodes: int, global_percentage: int = 0) -> int:
    """How many feasible nodes are enough (the reference's adaptive percentageOfNodesToScore)."""
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    pct = percentage if percentage is not None else global_percentage
    if pct == 0:
        pct = max(50 - num_all_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    num = num_all_nodes * pct // 100
    return max(num, MIN_FEASIBLE_NODES_TO_FIND)


# --- the scheduler ------------------------------------------------------------------------------


def _algorithm_error(pod: Pod, exc: NoNodesAvailable | FrameworkError) -> Failure:
    if isinstance(exc, NoNodesAvailable):
        return Failure(Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, str(exc)), exc, nominating="")
    log.error("error selecting node for pod %s: %s", pod.key, exc)
    return Failure(exc.status, exc, nominating="")


class Scheduler:
    """The reference's ``Scheduler`` minus informers: queue in, ClusterClient writes out."""

    def __init__(
        self,
        cache: SchedulerCache,
        queue: SchedulingQueue,
        profiles: ProfileSet,
        *,
        parallel_binds: int = 16,
        event_workers: int = EVENT_WORKERS,
        max_queued_events: int = MAX_QUEUED_EVENTS,
        rng: random.Random | None = None,
        percentage_of_nodes_to_score: int = 0,
        clock: Callable[[], float] = time.monotonic,
        on_fit_error: FitErrorHook | None = None,
    ) -> None:
        """``profiles`` come built (``engine.new_engine``) around ``queue`` with the services the
        scheduler shares with their plugins: the snapshot it refreshes and they read, the
        client, the nominator, the object store, the metrics and the HTTP extenders."""
        if profiles.queue is not queue:
            raise ValueError("the profiles configure another queue than the scheduler's")
        services = profiles.services
        self.cache = cache
        # HTTP extenders (``extenders[]`` of a KubeSchedulerConfiguration), in the reference's
        # order: the ignorable ones last. With none, the cycle runs synchronously as before.
        self.extenders = services.extenders
        self.queue = queue
        self.client: ClusterClient = services.client
        self.profiles = profiles
        self.rng = rng if rng is not None else random.Random()
        self.metrics: MetricsRecorder = services.metrics
        self.percentage_of_nodes_to_score = percentage_of_nodes_to_score
        self.clock = clock
        self.snapshot: Snapshot = services.snapshot
        self.nominator: PodNominator = services.nominator
        self.objects: Objects = services.objects
        self.next_start_node_index = 0
        self._np_rng = np.random.default_rng(self.rng.getrandbits(64))  # batch lists' tie-breakers
        self._bind_sem = asyncio.Semaphore(parallel_binds)
        self._tasks: set[asyncio.Task[Any]] = set()
        # Scheduled events, posted by a few background workers (the reference's asynchronous
        # broadcaster): a bind never waits for its event, and events never take more than
        # ``event_workers`` of the apiserver's in-flight slots from binds.
        self._scheduled_events: deque[tuple[Pod, str]] = deque()
        self._max_queued_events = max_queued_events
        self._event_workers_max = max(1, event_workers)
        self._event_workers = 0
        self.events_dropped = 0
        self._stop = asyncio.Event()
        self._pod_group_cycle = PodGroupCycle(self)
        # Optional (``run --explain-annotation``): called with each FitError, writes a summary.
        self._on_fit_error = on_fit_error

    # -- loop --

    async def run(self) -> None:
        """Schedule pods until ``stop()``, with the queue's periodic flushes running meanwhile
        (the reference's ``Run`` starts ``SchedulingQueue.Run``: backoffQ every second, the
        unschedulable pool's leftovers every 30 s); without them a pod that failed with an error
        would wait in backoffQ for ever."""
        self._stop.clear()
        stop_wait = asyncio.ensure_future(self._stop.wait())
        flushers = asyncio.ensure_future(self.queue.run_flushers())
        try:
            while not self._stop.is_set():
                # A pod already queued needs no task and no wait: per-pod overhead while draining.
                qpi = self.queue.pop_nowait()
                if qpi is not None:
                    await self._schedule_one_guarded(qpi)
                    await asyncio.sleep(0)  # let binding tasks and watch handlers run
                    continue
                pop = asyncio.ensure_future(self.queue.pop())
                done, _ = await asyncio.wait({pop, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                if pop not in done:
                    pop.cancel()
                    break
                qpi = pop.result()
                if qpi is None:  # queue closed
                    break
                await self._schedule_one_guarded(qpi)
                await asyncio.sleep(0)  # let binding tasks and watch handlers run
        finally:
            stop_wait.cancel()
            flushers.cancel()

    def stop(self) -> None:
        self._stop.set()

    async def _schedule_one_guarded(self, qpi: QueuedPodInfo) -> None:
        """``schedule_one``, which must never end the loop: plugin exceptions are Error statuses
        already (the framework's doing); what still escapes is a bug of ours, logged here with the
        pod put back (after backoff) so that one pod cannot stop every other's scheduling."""
        try:
            await self.schedule_one(qpi)
        except Exception:
            log.exception("scheduling %s failed; requeued", qpi.pod.key)
            try:
                self.queue.add_unschedulable_if_not_present(qpi, self.queue.scheduling_cycle)
            except Exception:
                log.exception("requeueing %s failed", qpi.pod.key)

    async def wait_for_bindings(self) -> None:
        """Drain binding cycles and the background writes they started."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def skip_pod_schedule(self, pod: Pod) -> bool:
        """``skipPodSchedule``: a pod being deleted (told in an event) or already assumed (an update
        of it queued it again) is not scheduled; the caller marks it done in the queue."""
        if pod.deletion_timestamp:
            self.spawn(self.client.record_skipped_deleting(pod), f"reporting the skip of {pod.key}")
            return True
        return self.cache.is_assumed(pod.uid)

    def spawn(self, coro: Coroutine[Any, Any, Any], what: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.error("%s failed", what, exc_info=t.exception())

        task.add_done_callback(done)
        return task

    # -- one pod --

    async def schedule_one(self, qpi: QueuedPodInfo | None = None) -> bool:
        """One scheduling cycle (popping a pod when none is given); False when there was none."""
        if qpi is None:
            qpi = self.queue.pop_nowait()
            if qpi is None:
                return False
        pod: Pod = qpi.pod
        fw = self.profiles.get(pod.scheduler_name)
        if fw is None:
            log.error("no profile for scheduler name %r (pod %s)", pod.scheduler_name, pod.key)
            self.queue.done(pod.uid)
            return True
        if pod.pod_group and fw.schedules_pod_groups():
            members = [qpi, *self.queue.pop_pod_group_members(pod)]
            gate = self.queue.pod_group_gate(pod)
            if gate:  # a gated member holds its whole group back, silently, as the reference's entity
                for member in members:
                    member.unschedulable_plugins = {gate}
                    self.queue.add_unschedulable_if_not_present(member, self.queue.scheduling_cycle)
                return True
            await self._pod_group_cycle.schedule(fw, members)
            return True
        if self.skip_pod_schedule(pod):
            self.queue.done(pod.uid)
            return True
        start = self.clock()
        state = CycleState()
        # Plugin durations are timed in a sample of cycles only, as the reference does.
        state.record_plugin_metrics = self.metrics.sample_plugin_metrics()
        try:
            if self.extenders:
                outcome = await self._extended_scheduling_cycle(state, fw, qpi, start)
            else:
                outcome = self._scheduling_cycle(state, fw, qpi, start)
        except Exception as exc:  # past the framework's per-plugin guards: a bug, this pod's alone
            log.exception("scheduling cycle of %s failed", pod.key)
            outcome = self._abandon_cycle(fw, state, pod, exc)
        if isinstance(outcome, Failure):
            self.handle_failure(fw, qpi, outcome, start)
        else:
            result, assumed = outcome
            self.start_binding_cycle(state, fw, qpi, result, assumed, start)
        return True

    async def scheduling_cycle(self, state: CycleState, fw: Framework, qpi: QueuedPodInfo) -> Outcome:
        """A pod group member's scheduling cycle (``state.pod_group_cycle``: Permit waits for the group)."""
        if self.extenders:
            return await self._extended_scheduling_cycle(state, fw, qpi, self.clock())
        return self._scheduling_cycle(state, fw, qpi, self.clock())

    def _scheduling_cycle(
        self, state: CycleState, fw: Framework, qpi: QueuedPodInfo, start: float
    ) -> tuple[ScheduleResult, Pod] | Failure:
        pod: Pod = qpi.pod
        try:  # the reference's schedulingAlgorithm: node selection and PostFilter
            try:
                result = self.schedule_pod(fw, state, pod)
            except FitError as fit:
                if state.pod_group_cycle or not fw.has_post_filter_plugins():
                    return unfit(state, fit)
                pf_result, pf_status = fw.run_post_filter_plugins(state, pod, fit.diagnosis.node_to_status)
                return self._post_filtered(pod, fit, pf_result, pf_status)
            except (NoNodesAvailable, FrameworkError) as exc:
                return _algorithm_error(pod, exc)
        finally:
            self.metrics.scheduling_algorithm(self.clock() - start)
        return self._assume_reserve_permit(state, fw, pod, result)

    async def _extended_scheduling_cycle(
        self, state: CycleState, fw: Framework, qpi: QueuedPodInfo, start: float
    ) -> tuple[ScheduleResult, Pod] | Failure:
        """:meth:`_scheduling_cycle` with the HTTP extenders: filtered and scored by them too, their
        preemption verbs asked in PostFilter (the reference's order, ``schedule_one.go``)."""
        pod: Pod = qpi.pod
        try:
            try:
                result = await self.schedule_pod_with_extenders(fw, state, pod)
            except FitError as fit:
                if state.pod_group_cycle or not fw.has_post_filter_plugins():
                    return unfit(state, fit)
                statuses = fit.diagnosis.node_to_status
                pf_result, pf_status = await fw.run_post_filter_plugins_with_extenders(state, pod, statuses)
                return self._post_filtered(pod, fit, pf_result, pf_status)
            except (NoNodesAvailable, FrameworkError) as exc:
                return _algorithm_error(pod, exc)
        finally:
            self.metrics.scheduling_algorithm(self.clock() - start)
        return self._assume_reserve_permit(state, fw, pod, result)

    def _post_filtered(
        self, pod: Pod, fit: FitError, pf_result: PostFilterResult | None, pf_status: Status
    ) -> Failure:
        fit.diagnosis.post_filter_msg = pf_status.message
        if pf_status.code == Code.ERROR:
            log.error("PostFilter failed for pod %s: %s", pod.key, pf_status.message)
        if pf_result is not None and pf_result.victims:  # the chosen candidate's victims
            self.metrics.preemption_victims(len(pf_result.victims))
        # None: leave the nomination; PostFilterResult("") clears it; a name nominates.
        nominating = pf_result.nominated_node_name if pf_result is not None else None
        return Failure(Status(Code.UNSCHEDULABLE, str(fit)), fit, nominating, pf_result)

    def _assume_reserve_permit(
        self, state: CycleState, fw: Framework, pod: Pod, result: ScheduleResult
    ) -> tuple[ScheduleResult, Pod] | Failure:
        host = result.suggested_host
        assumed = pod.on_node(host)
        try:
            self.cache.assume_pod(assumed)
        except Exception as exc:
            return Failure(Status.as_error(exc), exc, nominating="")
        self.nominator.delete_nominated_pod_if_exists(assumed)

        status = fw.run_reserve_plugins_reserve(state, assumed, host)
        if not is_success(status):
            assert status is not None
            return self.undo_assume(fw, state, pod, assumed, host, status)
        if state.pod_group_cycle:
            return result, assumed  # Permit runs once the whole group is placed
        status = fw.run_permit_plugins(state, assumed, host)
        if status is not None and not status.is_wait() and not status.is_success():
            return self.undo_assume(fw, state, pod, assumed, host, status)
        return result, assumed

    def undo_assume(
        self, fw: Framework, state: CycleState, pod: Pod, assumed: Pod, host: str, status: Status
    ) -> Failure:
        fw.run_reserve_plugins_unreserve(state, assumed, host)
        self.forget(assumed)
        return failure_on(pod, host, status)

    def _abandon_cycle(self, fw: Framework, state: CycleState, pod: Pod, exc: Exception) -> Failure:
        """A cycle that raised: whatever it assumed is unreserved (Unreserve must bear being called
        for what was never reserved) and forgotten, and the pod fails with the error."""
        assumed = self.cache.get_pod(pod.uid) if self.cache.is_assumed(pod.uid) else None
        if assumed is not None:
            fw.run_reserve_plugins_unreserve(state, assumed, assumed.node_name)
            self.forget(assumed)
        fw.waiting_pods.pop(pod.uid, None)
        return Failure(Status.as_error(exc), exc, nominating="")

    def forget(self, assumed: Pod) -> None:
        try:
            self.cache.forget_pod(assumed)
        except Exception:
            log.exception("forgetting assumed pod %s failed", assumed.key)

    # -- the algorithm --

    def schedule_pod(
        self, fw: Framework, state: CycleState, pod: Pod, *, dry_run: bool = False
    ) -> ScheduleResult:
        """Pick a node or raise FitError / NoNodesAvailable / FrameworkError (``schedulePod``).

        ``dry_run``: on the snapshot as it is (a what-if edited it), without batching's results.
        """
        if not dry_run:
            self.cache.update_snapshot(self.snapshot)
        num_nodes = len(self.snapshot)
        if num_nodes == 0:
            raise NoNodesAvailable()
        batch = fw.batch if not dry_run else None
        signature = fw.sign_pod(pod) if batch is not None else None
        feasible, diagnosis, evaluated, hint = self._find_nodes(fw, state, pod, signature, batch)
        if not len(feasible):
            raise FitError(pod, num_nodes, diagnosis)
        infos = self.snapshot.node_infos
        cycle = self.queue.scheduling_cycle
        if len(feasible) == 1:
            host = infos[int(feasible[0])].name
            if batch is not None:
                batch.store_schedule_results(signature, hint, host, None, cycle)
            return ScheduleResult(host, evaluated, 1)
        # Raw scores are kept only for a pod with a signature: no other pod could use its list.
        raw: dict[str, np.ndarray] | None = {} if batch is not None and signature is not None else None
        totals = self.prioritize_nodes(fw, state, pod, feasible, raw)
        best = self.select_host(totals)
        host = infos[int(feasible[best])].name
        if batch is not None:
            others = None
            if raw is not None:
                others = ScoredNodes.around(
                    [infos[int(r)].name for r in feasible],
                    feasible,
                    self.snapshot.layout,
                    raw,
                    totals,
                    self._np_rng.integers(0, 2**62, len(feasible)),
                    best,
                )
            batch.store_schedule_results(signature, hint, host, others, cycle, num_others=len(feasible) - 1)
        return ScheduleResult(host, evaluated, len(feasible))

    def find_nodes_that_fit_pod(
        self, fw: Framework, state: CycleState, pod: Pod
    ) -> tuple[np.ndarray, Diagnosis, int]:
        """Feasible snapshot rows, the diagnosis of the rejected ones, and how many were evaluated."""
        feasible, diagnosis, evaluated, _ = self._find_nodes(fw, state, pod, None, None)
        return feasible, diagnosis, evaluated

    def _find_nodes(
        self,
        fw: Framework,
        state: CycleState,
        pod: Pod,
        signature: PodSignature | None,
        batch: OpportunisticBatch | None,
    ) -> tuple[np.ndarray, Diagnosis, int, str]:
        """``findNodesThatFitPod``, with OpportunisticBatching's node hint (tried like a nominated
        node, right after PreFilter) when the framework batches."""
        diagnosis = Diagnosis()
        pre = self._pre_filter(fw, state, pod, diagnosis)
        if pre is None:
            return _NO_ROWS, diagnosis, 0, ""
        hint = ""
        if batch is not None:
            hint = batch.get_node_hint(pod, signature, state, self.queue.scheduling_cycle)
        target = pod.nominated_node_name or hint
        if target:
            row = self._filter_nominated(fw, state, pod, target, diagnosis)
            if row is not None:
                return np.array([row], dtype=np.int64), diagnosis, 1, hint
        feasible, processed = self._search(fw, state, pod, diagnosis, *pre, fw.has_score_plugins())
        return feasible, diagnosis, processed, hint

    def _pre_filter(
        self, fw: Framework, state: CycleState, pod: Pod, diagnosis: Diagnosis
    ) -> tuple[PreFilterResult | None, set[str]] | None:
        """PreFilter: its result and the plugins that narrowed the nodes, or None when it rejected
        the pod (``diagnosis`` then says why); an error raises."""
        pre_res, status, plugins_with_nodes = fw.run_pre_filter_plugins(state, pod)
        diagnosis.unschedulable_plugins = set(plugins_with_nodes)
        if not is_success(status):
            assert status is not None
            if not status.is_rejected():
                raise FrameworkError(status)
            diagnosis.node_to_status.set_absent_nodes_status(status)
            diagnosis.pre_filter_msg = status.message
            diagnosis.add_plugin_status(status)
            return None
        return pre_res, plugins_with_nodes

    def _filter_nominated(
        self, fw: Framework, state: CycleState, pod: Pod, target: str, diagnosis: Diagnosis
    ) -> int | None:
        """The nominated (or hinted) node's row when it passes the Filter plugins."""
        snapshot = self.snapshot
        info = snapshot.get(target)
        if info is None:
            return None
        t0 = time.perf_counter()
        nstatus = fw.run_filter_plugins_with_nominated_pods(state, pod, info)
        self._observe_filter(fw, nstatus is not None and nstatus.code == Code.ERROR, t0)
        if is_success(nstatus):
            return snapshot.index[info.name]
        assert nstatus is not None
        if nstatus.code == Code.ERROR:
            log.error("evaluating nominated node %s for %s: %s", info.name, pod.key, nstatus.message)
        else:
            diagnosis.node_to_status.set(info.name, nstatus)
            diagnosis.add_plugin_status(nstatus)
        return None

    def _search(
        self,
        fw: Framework,
        state: CycleState,
        pod: Pod,
        diagnosis: Diagnosis,
        pre_res: PreFilterResult | None,
        plugins_with_nodes: set[str],
        scoring: bool,
    ) -> tuple[np.ndarray, int]:
        """The Filter plugins over the rotating window of nodes (PreFilter's, if it named some):
        the feasible rows and how many were processed. ``scoring``: more than one feasible node
        is worth finding (else the first one found is taken)."""
        snapshot = self.snapshot
        num_all = len(snapshot)
        if pre_res is not None and pre_res.node_names is not None:
            rows = np.array(
                sorted(snapshot.index[n] for n in pre_res.node_names if n in snapshot.index), dtype=np.int64
            )
            diagnosis.node_to_status.set_absent_nodes_status(
                Status(
                    Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                    f"node(s) didn't satisfy plugin(s) [{' '.join(sorted(plugins_with_nodes))}]",
                )
            )
        else:
            rows = np.arange(num_all, dtype=np.int64)
        n = len(rows)
        if n == 0:
            self._observe_filter(fw, False, time.perf_counter())  # the reference's search of no nodes
            return _NO_ROWS, 0
        num_to_find = num_feasible_nodes_to_find(
            fw.percentage_of_nodes_to_score, n, self.percentage_of_nodes_to_score
        )
        if not scoring:
            num_to_find = 1
        start = self.next_start_node_index % n
        if start:
            rows = np.concatenate((rows[start:], rows[:start]))
        t0 = time.perf_counter()
        try:
            feasible, processed = fw.find_feasible_rows(state, pod, rows, num_to_find, diagnosis)
        except FrameworkError:
            self._observe_filter(fw, True, t0)
            raise
        self._observe_filter(fw, False, t0)
        self.next_start_node_index = (self.next_start_node_index + processed) % num_all
        return feasible, processed

    # -- the algorithm with HTTP extenders --

    async def schedule_pod_with_extenders(self, fw: Framework, state: CycleState, pod: Pod) -> ScheduleResult:
        """:meth:`schedule_pod` with the extenders (``schedulePod``): their filters after the Filter
        plugins, their scores added to the Score plugins'. No batching: no signature covers them.
        An extender's error (one not ignorable) is this cycle's error, as a plugin's would be."""
        self.cache.update_snapshot(self.snapshot)
        num_nodes = len(self.snapshot)
        if num_nodes == 0:
            raise NoNodesAvailable()
        feasible, diagnosis, evaluated = await self._find_nodes_with_extenders(fw, state, pod)
        if not len(feasible):
            raise FitError(pod, num_nodes, diagnosis)
        infos = self.snapshot.node_infos
        if len(feasible) == 1:
            return ScheduleResult(infos[int(feasible[0])].name, evaluated, 1)
        totals = self.prioritize_nodes(fw, state, pod, feasible, extenders=True)
        nodes = self.snapshot.infos_at(feasible)
        scores = await extender_scores(self.extenders, pod, nodes)
        if scores:
            totals = totals + np.array([scores.get(info.name, 0) for info in nodes], dtype=np.int64)
        host = infos[int(feasible[self.select_host(totals)])].name
        return ScheduleResult(host, evaluated, len(feasible))

    async def _find_nodes_with_extenders(
        self, fw: Framework, state: CycleState, pod: Pod
    ) -> tuple[np.ndarray, Diagnosis, int]:
        """``findNodesThatFitPod`` with the extenders' filters: on the nominated node when it passes
        the Filter plugins (an extender's error there is only logged, the search goes on), and on
        what the search found; "Extender" is then a rejector if they dropped any node."""
        diagnosis = Diagnosis()
        pre = self._pre_filter(fw, state, pod, diagnosis)
        if pre is None:
            return _NO_ROWS, diagnosis, 0
        if pod.nominated_node_name:
            row = self._filter_nominated(fw, state, pod, pod.nominated_node_name, diagnosis)
            if row is not None:
                try:
                    rows = await self._pass_extenders(pod, np.array([row], dtype=np.int64), diagnosis)
                except FrameworkError as exc:
                    log.error("evaluating nominated node for %s: %s", pod.key, exc)
                    rows = _NO_ROWS
                if len(rows):
                    return rows, diagnosis, 1
        extenders = self.extenders
        scoring = (
            fw.has_score_plugins()
            or any(e.is_filter() for e in extenders)
            or any(e.is_prioritizer() for e in extenders)
        )
        feasible, processed = self._search(fw, state, pod, diagnosis, *pre, scoring)
        passed = await self._pass_extenders(pod, feasible, diagnosis)
        if len(passed) != len(feasible):
            diagnosis.unschedulable_plugins.add(EXTENDER_NAME)
        return passed, diagnosis, processed

    async def _pass_extenders(self, pod: Pod, rows: np.ndarray, diagnosis: Diagnosis) -> np.ndarray:
        """The rows the extenders keep; an extender's error raises as a FrameworkError."""
        if not len(rows):
            return rows
        snapshot = self.snapshot
        try:
            passed = await find_nodes_that_pass_extenders(
                self.extenders, pod, snapshot.infos_at(rows), diagnosis.node_to_status
            )
        except Exception as exc:
            raise FrameworkError(Status(Code.ERROR, str(exc), error=exc)) from exc
        return np.array([snapshot.index[info.name] for info in passed], dtype=np.int64)

    def _observe_filter(self, fw: Framework, error: bool, start: float) -> None:
        """The Filter extension point's duration over all nodes of one search (the reference times
        it around its node loop, not per node); nothing without Filter plugins, as there."""
        if fw.has_filter_plugins():
            status = CODE_LABELS[Code.ERROR] if error else SUCCESS
            self.metrics.extension_point(FILTER, status, fw.profile_name, time.perf_counter() - start)

    def prioritize_nodes(
        self,
        fw: Framework,
        state: CycleState,
        pod: Pod,
        rows: np.ndarray,
        raw: dict[str, np.ndarray] | None = None,
        *,
        extenders: bool = False,
    ) -> np.ndarray:
        """Weighted total score per feasible row (all ones when the profile has no Score plugins
        and no ``extenders`` are to add theirs); ``raw`` receives each plugin's scores before
        NormalizeScore."""
        if not extenders and not fw.has_score_plugins():
            return np.ones(len(rows), dtype=np.int64)
        nodes = self.snapshot.infos_at(rows)
        status = fw.run_pre_score_plugins(state, pod, nodes)
        if not is_success(status):
            assert status is not None
            raise FrameworkError(status)
        totals, _ = fw.run_score_plugins(state, pod, rows, nodes, raw)
        return totals

    def select_host(self, totals: np.ndarray) -> int:
        """Index of a highest-scoring node; ties broken uniformly at random (as reservoir sampling)."""
        best = totals.max()
        ties = np.flatnonzero(totals == best)
        if len(ties) == 1:
            return int(ties[0])
        return int(ties[self.rng.randrange(len(ties))])

    # -- failures --

    def handle_failure(
        self,
        fw: Framework,
        qpi: QueuedPodInfo,
        failure: Failure,
        start: float,
        *,
        group_member: bool = False,
    ) -> None:
        """Requeue and report (``handleSchedulingFailure``); the API writes go to the background.

        ``group_member``: the pod failed with its group; the group is retried after backoff as a
        whole (the reference's group entity has no rejector plugins), not on its own rejectors' events.
        """
        pod: Pod = qpi.pod
        status = failure.status
        reason = UNSCHEDULABLE if status.is_rejected() else SCHEDULER_ERROR
        err = failure.error
        if isinstance(err, FitError):
            len(err.diagnosis.node_to_status)  # materialize deferred statuses (plugin bookkeeping)
            if not group_member:
                qpi.unschedulable_plugins = set(err.diagnosis.unschedulable_plugins)
                qpi.pending_plugins = set(err.diagnosis.pending_plugins)
            message = str(err)
        else:
            message = status.message
        result = UNSCHEDULABLE_RESULT if reason == UNSCHEDULABLE else ERROR_RESULT
        self.metrics.schedule_attempt(result, fw.profile_name, self.clock() - start)
        gone = self.queue.is_gone(pod.uid)
        pf = failure.post_filter
        preemption: tuple[list[AsyncPreemptionPlugin], list[Pod]] | None = None
        if not gone and pf is not None and pf.nominated_node_name and pf.victims:
            preemption = self._start_preemption(fw, pod, pf)
        self.queue.add_unschedulable_if_not_present(qpi, self.queue.scheduling_cycle)
        if gone:  # deleted meanwhile: nothing to report, and nobody to nominate
            self.nominator.delete_nominated_pod_if_exists(pod)
            return

        nominating = failure.nominating
        if nominating is not None:
            if nominating:
                self.nominator.add_nominated_pod(pod, nominating)
            else:
                self.nominator.delete_nominated_pod_if_exists(pod)
        self.spawn(self._report_failure(pod, reason, message, nominating), f"reporting failure of {pod.key}")
        if self._on_fit_error is not None and isinstance(err, FitError):
            self.spawn(self._on_fit_error(fw.profile_name, pod, err), f"annotating {pod.key}")
        if preemption is not None and pf is not None:
            plugins, victims = preemption
            self.spawn(self._preempt(fw, pod, pf, plugins, victims), f"preemption for {pod.key}")

    async def _report_failure(self, pod: Pod, reason: str, message: str, nominating: str | None) -> None:
        # The full message: the edge truncates the event note to the apiserver's limit, not us.
        await self.client.record_failed(pod, reason, message, nominated_node=nominating)

    def _start_preemption(
        self, fw: Framework, pod: Pod, result: PostFilterResult
    ) -> tuple[list[AsyncPreemptionPlugin], list[Pod]] | None:
        """Mark the preemptor as preempting before it is requeued, so PreEnqueue keeps it out of
        activeQ until the evictions are sent (``prepareCandidateAsync``).

        Victims already being deleted need no API call; with none left nothing is started.
        """
        victims = [v for v in result.victims if not v.deletion_timestamp]
        if not victims:
            return None
        plugins = fw.async_preemption_plugins
        for p in plugins:
            p.preemption_started(pod.uid)
        return plugins, victims

    async def _preempt(
        self,
        fw: Framework,
        pod: Pod,
        result: PostFilterResult,
        plugins: list[AsyncPreemptionPlugin],
        victims: list[Pod],
    ) -> None:
        """Clear lower-priority nominations on the node and evict the victims concurrently.

        As the reference's async preemption, a successful run does not requeue the preemptor: the
        victims' deletion events do (through the plugins' queueing hints), so it is not retried,
        and told "terminating pod on the nominated node", while its victims are still leaving.
        It is activated when that event will not come or came too early: on an error, when the
        last victim was a pod waiting on Permit (rejected in memory, nothing is deleted), or when
        a victim's deletion was seen while PreEnqueue still held the pod back.
        """
        node = result.nominated_node_name
        message = f"{pod.scheduler_name}: preempting to accommodate a higher priority pod"
        retry = True  # until the evictions are known to have been sent
        try:
            failed = not await self._clear_lower_priority_nominations(pod, node)
            outcomes = await asyncio.gather(
                *(self.preempt_victim(fw, v, pod, message) for v in victims), return_exceptions=True
            )
            for victim, out in zip(victims, outcomes, strict=True):
                if isinstance(out, BaseException) and not isinstance(out, NotFound):
                    log.error("evicting %s for %s failed: %s", victim.key, pod.key, out)
                    failed = True
            last_in_memory = outcomes[-1] is True
            seen_gone = any(self.cache.get_pod(v.uid) is None for v in victims)
            retry = failed or last_in_memory or seen_gone
        finally:
            for p in plugins:
                p.preemption_finished(pod.uid)
            if retry:
                self.queue.activate([pod])

    def reject_waiting_pod(self, pod: Pod) -> bool:
        """Reject ``pod`` if it waits at Permit (``RejectWaitingPod``, on its deletion): its binding
        cycle then unreserves, forgets and requeues it (and, the pod being gone, drops it)."""
        fw = self.profiles.get(pod.scheduler_name)
        return fw is not None and fw.reject_waiting_pod(pod.uid)

    async def preempt_victim(
        self, fw: Framework, victim: Pod, preemptor: Pod | PodGroup, message: str, plugin: str = ""
    ) -> bool:
        """A victim waiting on Permit is rejected instead of deleted, as the reference does;
        True when it was (preempted in memory)."""
        for other in self.profiles.frameworks.values():
            waiting = other.get_waiting_pod(victim.uid)
            if waiting is not None:
                waiting.reject(plugin or fw.post_filter_plugins[0].name, "preempted")
                return True
        await self.client.evict(victim, preemptor, message)
        return False

    async def _clear_lower_priority_nominations(self, pod: Pod, node: str) -> bool:
        """Lower-priority pods nominated to ``node`` may no longer fit there: clear their nomination
        so they look elsewhere sooner (``getLowerPriorityNominatedPods`` + ``clearNominatedNodeName``).

        The nominator is updated right away; the API only for pods whose status carries a node.
        False when an API write failed (not critical, as in the reference, but it retries the pod).
        """
        ok = True
        lower = lower_priority_nominated_pods(self.nominator.nominated_pods_for_node(node), pod)
        for other in lower:
            self.nominator.delete_nominated_pod_if_exists(other)
        for other in lower:
            if not other.nominated_node_name:
                continue
            try:
                await self.client.set_nominated_node(other, "")
            except Exception as exc:
                log.error("clearing the nominated node of %s failed: %s", other.key, exc)
                ok = False
        return ok

    # -- binding cycle --

    def start_binding_cycle(
        self,
        state: CycleState,
        fw: Framework,
        qpi: QueuedPodInfo,
        result: ScheduleResult,
        assumed: Pod,
        start: float,
    ) -> None:
        """The binding cycle of a placed pod, in the background (the reference's goroutine)."""
        self.spawn(self._run_binding_cycle(state, fw, qpi, result, assumed, start), f"binding {assumed.key}")

    async def _run_binding_cycle(
        self,
        state: CycleState,
        fw: Framework,
        qpi: QueuedPodInfo,
        result: ScheduleResult,
        assumed: Pod,
        start: float,
    ) -> None:
        """The binding cycle, counted in goroutines{operation="binding"} while it runs.

        Plugin exceptions come back as Error statuses (the framework's doing); anything that still
        escapes before the bind is a bug of ours, and the pod is handled as after a failed bind:
        unreserved, forgotten and requeued, never left assumed with nobody to bind it."""
        self.metrics.binding_goroutines(1)
        host = result.suggested_host
        try:
            try:
                bound = await self._binding_cycle(state, fw, qpi, result, assumed, start)
            except Exception as exc:
                log.exception("binding cycle of %s failed", assumed.key)
                waiting = fw.waiting_pods.pop(assumed.uid, None)
                if waiting is not None:
                    waiting.reject("", "binding cycle failed")
                self._binding_failure(fw, state, qpi, assumed, host, Status.as_error(exc), exc, start)
                return
            if bound:
                await self._after_bind(state, fw, qpi, assumed, host, start)
        finally:
            self.metrics.binding_goroutines(-1)

    async def _binding_cycle(
        self,
        state: CycleState,
        fw: Framework,
        qpi: QueuedPodInfo,
        result: ScheduleResult,
        assumed: Pod,
        start: float,
    ) -> bool:
        """WaitOnPermit, PreBind and Bind; True when the pod is bound (failures are handled here)."""
        host = result.suggested_host
        async with self._bind_sem:
            # NominatedNodeNameForExpectation (beta, on in v1.37): when Permit or PreBind may hold
            # the bind, tell others (autoscalers, our own preemption) where the pod is going.
            preflight = fw.run_pre_bind_pre_flights(state, assumed, host)
            if preflight is not None and (preflight.code == Code.ERROR or preflight.is_rejected()):
                waiting = fw.waiting_pods.pop(assumed.uid, None)
                if waiting is not None:  # nobody will wait on it now: end its timers
                    waiting.reject("", "binding cycle failed")
                self._binding_failure(fw, state, qpi, assumed, host, preflight, preflight.error, start)
                return False
            if is_success(preflight) or fw.will_wait_on_permit(assumed):
                await self._nominate_before_binding(assumed, host)
                qpi.pod = dataclasses.replace(qpi.pod, nominated_node_name=host)
            status = await fw.wait_on_permit(assumed)
            if not is_success(status):
                assert status is not None
                if status.is_rejected():
                    diag = Diagnosis()
                    diag.node_to_status.set(host, status)
                    if status.plugin:
                        diag.unschedulable_plugins.add(status.plugin)
                    fit = FitError(assumed, 1, diag)
                    failed = Status(status.code, str(fit))
                    self._binding_failure(fw, state, qpi, assumed, host, failed, fit, start)
                    return False
                self._binding_failure(fw, state, qpi, assumed, host, status, status.error, start)
                return False
            self.queue.done(assumed.uid)
            status = await fw.run_pre_bind_plugins(state, assumed, host)
            if not is_success(status):
                assert status is not None
                self._binding_failure(fw, state, qpi, assumed, host, status, status.error, start)
                return False
            if self.extenders:
                status = await self._bind_with_extenders(state, fw, assumed, host)
            else:
                status = await fw.run_bind_plugins(state, assumed, host)
            try:
                self.cache.finish_binding(assumed)
            except Exception:
                log.exception("finish_binding of %s failed", assumed.key)
            if not is_success(status) and await self._bind_landed(assumed, host, status):
                status = None
            if not is_success(status):
                assert status is not None
                self._binding_failure(fw, state, qpi, assumed, host, status, status.error, start)
                return False
        return True

    async def _bind_with_extenders(
        self, state: CycleState, fw: Framework, assumed: Pod, host: str
    ) -> Status | None:
        """``bind``: an interested binder extender binds, else the Bind plugins (its error is the
        bind's, as ``fwk.AsStatus(err)``)."""
        try:
            if await extenders_binding(self.extenders, assumed, host):
                return None
        except Exception as exc:
            return Status(Code.ERROR, str(exc), error=exc)
        return await fw.run_bind_plugins(state, assumed, host)

    async def _after_bind(
        self, state: CycleState, fw: Framework, qpi: QueuedPodInfo, assumed: Pod, host: str, start: float
    ) -> None:
        """A bound pod: its metrics, its Scheduled event, PostBind."""
        self.metrics.schedule_attempt(SCHEDULED_RESULT, fw.profile_name, self.clock() - start)
        initial = qpi.initial_attempt_timestamp
        sli = self.clock() - initial if initial is not None else None
        self.metrics.pod_scheduled(qpi.attempts, sli)
        self._queue_scheduled_event(assumed, host)
        await fw.run_post_bind_plugins(state, assumed, host)

    async def _nominate_before_binding(self, pod: Pod, host: str) -> None:
        """``status.nominatedNodeName`` = the chosen node; a failure is logged, not fatal (as there).

        The queued pod then carries the nomination, so a failed binding cycle's report clears it.
        """
        try:
            await self.client.set_nominated_node(pod, host)
        except Exception as exc:
            log.error("setting the nominated node of %s to %s before binding failed: %s", pod.key, host, exc)

    def _queue_scheduled_event(self, pod: Pod, host: str) -> None:
        """Hand the ``Scheduled`` event to the background workers; drop it when the queue is full.

        Dropping is what the reference does (its broadcaster's channel drops on overflow): an event
        is informational, the bind already happened, and queueing without bound would let a slow
        apiserver grow our memory and steal its in-flight slots from binds.
        """
        if len(self._scheduled_events) >= self._max_queued_events:
            self.events_dropped += 1
            if self.events_dropped == 1 or self.events_dropped % 1000 == 0:
                log.warning("event queue full: %d Scheduled events dropped so far", self.events_dropped)
            return
        self._scheduled_events.append((pod, host))
        if self._event_workers < self._event_workers_max:
            self._event_workers += 1
            self.spawn(self._post_scheduled_events(), "posting Scheduled events")

    async def _post_scheduled_events(self) -> None:
        """One worker: post queued events until none is left (then end, so nothing lingers)."""
        try:
            events = self._scheduled_events
            while events:
                pod, host = events.popleft()
                try:
                    await self.client.record_scheduled(pod, host)
                except Exception:
                    log.exception("recording Scheduled for %s failed", pod.key)
        finally:
            self._event_workers -= 1

    async def _bind_landed(self, pod: Pod, host: str, status: Status | None) -> bool:
        """Did a bind that reported an API error bind the pod to ``host`` after all?

        A lost response (timeout, reset after sending) or a 409 from a retry may hide a Binding the
        apiserver applied. Forgetting the assumed pod then would free its room on the node until
        the watch shows the pod there, and another pod could take it: an overcommitted node
        (seen under injected bind faults). So read the pod back; only a pod bound to ``host`` is a
        success, and when the read fails too the failure path runs as before. One log line per
        read-back, its outcome worded for operators and the fault tests alike.
        """
        error = status.error if status is not None else None
        if not isinstance(error, ApiError) or isinstance(error, NotFound):
            return False
        what = "bind of %s to %s: outcome unknown (%s); read back: %s"
        try:
            node = await self.client.bound_node(pod)
        except Exception as exc:
            log.warning(what, pod.key, host, error, f"failed: {exc}")
            return False
        landed = node == host
        log.info(what, pod.key, host, error, "bound" if landed else f"not bound (node {node!r})")
        return landed

    def _binding_failure(
        self,
        fw: Framework,
        state: CycleState,
        qpi: QueuedPodInfo,
        assumed: Pod,
        host: str,
        status: Status,
        error: BaseException | None,
        start: float,
    ) -> None:
        """``handleBindingCycleError``: undo the reservation, then requeue unless the pod is gone/bound."""
        fw.run_reserve_plugins_unreserve(state, assumed, host)
        self.forget(assumed)
        if isinstance(error, Conflict):  # bound already (another replica, or ourselves before a retry)
            log.info("pod %s is already bound: %s", assumed.key, error)
            self.metrics.schedule_attempt(ERROR_RESULT, fw.profile_name, self.clock() - start)
            self.queue.done(assumed.uid)
            return
        if isinstance(error, NotFound):  # deleted while we were binding it
            self.metrics.schedule_attempt(ERROR_RESULT, fw.profile_name, self.clock() - start)
            self.queue.done(assumed.uid)
            self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, assumed, None)
            return
        failure = Failure(status, error, nominating="")
        if status.is_rejected():
            self.handle_failure(fw, qpi, failure, start)
            uid = assumed.uid
            self.queue.move_all_to_active_or_backoff(
                EVENT_ASSIGNED_POD_DELETE, assumed, None, lambda p: p.uid != uid
            )
        else:
            self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, assumed, None)
            self.handle_failure(fw, qpi, failure, start)
