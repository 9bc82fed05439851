"""The framework runtime: one profile's plugins, run per extension point like ``framework.go``.

``Framework`` is also the ``Handle`` the plugins receive. The scheduling-cycle points are
synchronous; PreBind/Bind/PostBind and Permit's wait are coroutines run by the binding cycle.

Filtering and scoring work on snapshot rows (numpy index arrays). A plugin's ``filter_vector`` /
``score_vector`` is used when it answers; otherwise the per-node method runs for the nodes still
alive. Statuses of nodes a vector filter rejected are computed with the per-node method only if
somebody reads them (a FitError), which keeps the common "pod fits" path free of per-node Python.
"""

from __future__ import annotations

import asyncio
import bisect
import copy
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from kopf_scheduler.api.kinds import Objects
from kopf_scheduler.config.gotext import format_duration, go_quote
from kopf_scheduler.config.profile import SchedulerProfileSpec
from kopf_scheduler.dra.manager import DraManager
from kopf_scheduler.framework.batch import OpportunisticBatch, PodSignature, signature_of
from kopf_scheduler.framework.client import ApiError
from kopf_scheduler.framework.diagnosis import Diagnosis
from kopf_scheduler.framework.events import WILDCARD_EVENT
from kopf_scheduler.framework.extender import EXTENDER_NAME, Extender, run_now
from kopf_scheduler.framework.interface import (
    MAX_NODE_SCORE,
    MIN_NODE_SCORE,
    AsyncPodGroupPreemptionPlugin,
    AsyncPreemptionPlugin,
    ClusterEventWithHint,
    Code,
    CycleState,
    EnqueueExtensions,
    FilterStatuses,
    PlacementFeasiblePlugin,
    PlacementProgress,
    PodGroupManager,
    PodGroupPostFilterPlugin,
    PodGroupPostFilterResult,
    PodGroupSimulation,
    PostFilterResult,
    PostFilterWithExtenders,
    PreBindPreFlightPlugin,
    PreEnqueueSharedVerdict,
    PreFilterExtensions,
    PreFilterResult,
    PreQueueingHints,
    ScoreExtensions,
    SignFragments,
    SignPlugin,
    Status,
    VectorFilter,
    VectorScore,
    is_success,
)
from kopf_scheduler.framework.profiles import ResolvedPlugins, resolve_plugins
from kopf_scheduler.framework.registry import Registry
from kopf_scheduler.metrics.recorder import (
    BIND,
    CODE_LABELS,
    FILTER,
    PERMIT,
    POD_GROUP_POST_FILTER,
    POST_BIND,
    POST_FILTER,
    PRE_BIND,
    PRE_FILTER,
    PRE_FILTER_EXTENSION_ADD_POD,
    PRE_FILTER_EXTENSION_REMOVE_POD,
    PRE_SCORE,
    RESERVE,
    SCORE,
    SCORE_EXTENSION_NORMALIZE,
    SUCCESS,
    UNRESERVE,
    MetricsRecorder,
    NoopMetrics,
    Tally,
)

if TYPE_CHECKING:
    from kopf_scheduler.api.objects import Pod
    from kopf_scheduler.api.podgroup import PodGroup
    from kopf_scheduler.framework.client import ClusterClient
    from kopf_scheduler.framework.interface import PodNominator
    from kopf_scheduler.framework.snapshot import Snapshot
    from kopf_scheduler.framework.types import NodeInfo

__all__ = [
    "MAX_PERMIT_TIMEOUT",
    "Framework",
    "FrameworkError",
    "FrameworkServices",
    "WaitingPod",
    "go_duration",
    "go_quote",
]

log = logging.getLogger(__name__)

MAX_PERMIT_TIMEOUT = 15 * 60.0  # the reference's maxTimeout for Permit waits
_ALL_EVENTS = [ClusterEventWithHint(WILDCARD_EVENT)]
_CHUNK = 512  # rows filtered per batch before checking whether enough feasible nodes were found
_perf = time.perf_counter
# preemption_attempts_total counts this PostFilter plugin's runs (the reference counts in the plugin).
_PREEMPTION_PLUGIN = "DefaultPreemption"
_NODE_RESOURCES_FIT = "NodeResourcesFit"


def _code(status: Status | None) -> str:
    """The status label of metrics: the code as the reference prints it; None is Success."""
    return SUCCESS if status is None else CODE_LABELS[status.code]


def _count_evaluations(
    looked: list[tuple[Tally, np.ndarray | list[int]]], cut: int, special: np.ndarray
) -> None:
    """Filter evaluations of one chunk: each plugin's rows before ``cut`` (the rows the reference's
    node-by-node search processes; the rest of a chunk was filtered ahead in bulk).

    The plugins ran in order on the rows no earlier one rejected, so each count is the previous
    one less that plugin's rejections: no per-plugin array work when nothing was rejected."""
    alive = cut - int(np.searchsorted(special, cut)) if len(special) else cut  # nominated rows: apart
    for tally, rejected in looked:
        tally.n += alive
        if len(rejected):  # sorted positions: a vector call's array, or the per-node loop's list
            if isinstance(rejected, np.ndarray):
                alive -= int(np.searchsorted(rejected, cut))
            else:
                alive -= bisect.bisect_left(rejected, cut)


@dataclass(slots=True)
class _Timing:
    """One timed Filter call of a sampled cycle, recorded once the search's cut is known."""

    plugin: Any
    positions: np.ndarray  # chunk positions it ran on (sorted)
    rejected: np.ndarray | None  # positions a vector call rejected; None for a per-node call
    seconds: float
    code: str = SUCCESS  # a per-node call's status


class _Tallies(dict[str, Tally]):
    """Plugin name -> its plugin_evaluation_total counter at one extension point (made on first use,
    so plugin lists edited after construction still count)."""

    __slots__ = ("_make",)

    def __init__(self, make: Callable[[str], Tally]) -> None:
        super().__init__()
        self._make = make

    def __missing__(self, plugin: str) -> Tally:
        tally = self[plugin] = self._make(plugin)
        return tally


class FrameworkError(Exception):
    """A plugin returned an Error status; the cycle is aborted with reason SchedulerError."""

    def __init__(self, status: Status) -> None:
        super().__init__(status.message)
        self.status = status


# fwk.Code.String()
_CODE_NAMES = {
    Code.SUCCESS: "Success",
    Code.ERROR: "Error",
    Code.UNSCHEDULABLE: "Unschedulable",
    Code.UNSCHEDULABLE_AND_UNRESOLVABLE: "UnschedulableAndUnresolvable",
    Code.WAIT: "Wait",
    Code.SKIP: "Skip",
    Code.PENDING: "Pending",
}


def _as_error(status: Status, prefix: str) -> Status:
    err = Status(Code.ERROR, f"{prefix}: {status.message}", plugin=status.plugin, error=status.error)
    return err


def _raised(exc: Exception, plugin: str, point: str, pod: Pod | PodGroup) -> Status:
    """A plugin's exception as the Error status it stands for, so that the framework reports it
    as the reference reports an error a plugin returns (one pod's cycle fails, the loop goes on).
    The message is ``<Type>: <text>`` (a KeyError's text alone is a bare key); the traceback is
    logged here, the one place that still has it."""
    log.error("%s plugin %s raised for %s", point, plugin, pod.key, exc_info=exc)
    text = str(exc)
    return Status(Code.ERROR, f"{type(exc).__name__}: {text}" if text else type(exc).__name__, error=exc)


def _filter_failure(p: Any, status: Status) -> Status:
    """A Filter plugin's non-success status as the framework reports it."""
    if not status.is_rejected():
        status = _as_error(status, f"running {go_quote(p.name)} filter plugin")
    status.plugin = p.name
    return status


def go_duration(seconds: float) -> str:
    """Seconds as Go's ``time.Duration.String()`` (messages quote durations)."""
    return format_duration(round(seconds * 1e9))


# --- Permit's waiting pods ----------------------------------------------------------------------


class WaitingPod:
    """A pod parked by Permit until every waiting plugin allows it, one rejects it, or time runs out."""

    def __init__(self, pod: Pod, timeouts: Mapping[str, float], clock: Callable[[], float]) -> None:
        self.pod = pod
        self._clock = clock
        start = clock()
        self._timeouts = dict(timeouts)
        self._deadlines = {name: start + t for name, t in timeouts.items()}
        self._done = False
        self._result: Status | None = None
        self._future: asyncio.Future[Status | None] | None = None

    @property
    def pending_plugins(self) -> list[str]:
        return sorted(self._deadlines)

    def allow(self, plugin_name: str) -> None:
        self._deadlines.pop(plugin_name, None)
        if not self._deadlines:
            self._finish(None)

    def reject(self, plugin_name: str, message: str) -> None:
        self._finish(Status(Code.UNSCHEDULABLE, message, plugin=plugin_name))

    def _finish(self, status: Status | None) -> None:
        if self._done:
            return
        self._done = True
        self._result = status
        if self._future is not None and not self._future.done():
            self._future.set_result(status)

    async def wait(self) -> Status | None:
        if self._done:
            return self._result
        loop = asyncio.get_running_loop()
        self._future = loop.create_future()
        now = self._clock()
        timers = [
            loop.call_later(
                max(0.0, deadline - now),
                self.reject,
                name,
                f"rejected due to timeout after waiting {go_duration(self._timeouts[name])} at plugin {name}",
            )
            for name, deadline in self._deadlines.items()
        ]
        try:
            return await self._future
        finally:
            for t in timers:
                t.cancel()


def _with_extender_ignored_resources(args: dict[str, Any], extenders: Sequence[Extender]) -> dict[str, Any]:
    """The extenders' ``ignoredByScheduler`` resources replace NodeResourcesFit's ``ignoredResources``
    in every profile, as the reference's ``buildExtenders`` sets them (they take precedence)."""
    ignored = [name for ext in extenders for name in ext.ignored_resources()]
    fit = args.get(_NODE_RESOURCES_FIT)
    if not ignored or fit is None:
        return args
    fit = copy.copy(fit)  # the profile's own args stay as they are; a copy, not re-validated
    fit.ignored_resources = ignored
    return {**args, _NODE_RESOURCES_FIT: fit}


# --- the framework ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FrameworkServices:
    """What every profile's framework is built with and hands its plugins as the ``Handle``
    (the reference's ``frameworkruntime.Option``s), and what the scheduler shares with them:
    built once by ``engine.new_engine``, fixed for the engine's lifetime (a profile rebuilt from a
    SchedulerProfile edit gets the same ones)."""

    snapshot: Snapshot  # the scheduler refreshes it each cycle; the plugins read it
    objects: Objects
    client: ClusterClient
    nominator: PodNominator
    metrics: MetricsRecorder
    pod_groups: PodGroupManager
    dra: DraManager  # one for all profiles, kept across a rebuild (its claims in flight)
    parallelism: int = 16
    clock: Callable[[], float] = time.monotonic
    opportunistic_batching: bool = True  # the reference's OpportunisticBatching gate (beta, on)
    extenders: tuple[Extender, ...] = ()  # the scheduler's HTTP extenders (its PostFilter asks them)

    def build(self, profile: SchedulerProfileSpec, registry: Registry | None = None) -> Framework:
        return Framework(
            profile,
            registry,
            snapshot=self.snapshot,
            objects=self.objects,
            client=self.client,
            nominator=self.nominator,
            parallelism=self.parallelism,
            clock=self.clock,
            metrics=self.metrics,
            pod_groups=self.pod_groups,
            dra=self.dra,
            opportunistic_batching=self.opportunistic_batching,
            extenders=self.extenders,
        )


class Framework:
    """One profile's plugin instances and the logic to run them (``frameworkImpl``)."""

    def __init__(
        self,
        profile: SchedulerProfileSpec,
        registry: Registry | None = None,
        *,
        snapshot: Snapshot | None = None,
        objects: Objects | None = None,
        client: ClusterClient | None = None,
        nominator: PodNominator | None = None,
        parallelism: int = 16,
        clock: Callable[[], float] = time.monotonic,
        metrics: MetricsRecorder | None = None,
        pod_groups: PodGroupManager | None = None,
        dra: DraManager | None = None,
        opportunistic_batching: bool = True,
        extenders: Sequence[Extender] = (),
    ) -> None:
        self.profile = profile
        self.extenders = tuple(extenders)
        self._pod_groups = pod_groups
        self.profile_name = profile.scheduler_name
        self.metrics = metrics if metrics is not None else NoopMetrics()
        self.percentage_of_nodes_to_score = profile.percentage_of_nodes_to_score
        self._snapshot = snapshot
        self._objects: Objects = objects if objects is not None else {}
        self._dra = dra if dra is not None else DraManager(self._objects)
        self._client = client
        self._nominator = nominator
        self._parallelism = parallelism
        self.clock = clock
        self.waiting_pods: dict[str, WaitingPod] = {}

        resolved: ResolvedPlugins = profile.resolved or resolve_plugins(profile, registry)
        self.resolved = resolved
        args = _with_extender_ignored_resources(resolved.args, self.extenders)
        self.plugins: dict[str, Any] = {}
        for name in resolved.names:
            cls = resolved.classes[name]
            self.plugins[name] = cls(args.get(name), self)
        pts = resolved.points

        def at(point: str) -> list[Any]:
            return [self.plugins[n] for n in pts.get(point, [])]

        self.pre_enqueue_plugins = at("preEnqueue")
        self.queue_sort_plugins = at("queueSort")
        self.pre_filter_plugins = at("preFilter")
        self.filter_plugins = at("filter")
        self.post_filter_plugins = at("postFilter")
        self.pre_score_plugins = at("preScore")
        self.score_plugins = at("score")
        self.reserve_plugins = at("reserve")
        self.permit_plugins = at("permit")
        self.pre_bind_plugins = at("preBind")
        self.bind_plugins = at("bind")
        self.post_bind_plugins = at("postBind")
        self.score_weights = {p.name: resolved.weights.get(p.name, 1) for p in self.score_plugins}
        # Each optional capability resolved once, here, from the protocols the registry checked the
        # classes against (an isinstance() against one costs ~10 us: never per pod); the cycle
        # looks a plugin's hook up by its name.
        filters, scores = self.filter_plugins, self.score_plugins
        self._filter_vectors = {p.name: p.filter_vector for p in filters if isinstance(p, VectorFilter)}
        self._filter_statuses = {p.name: p.filter_statuses for p in filters if isinstance(p, FilterStatuses)}
        self._score_vectors = {p.name: p.score_vector for p in scores if isinstance(p, VectorScore)}
        self._normalizers = {p.name: p.normalize_score for p in scores if isinstance(p, ScoreExtensions)}
        self.normalizing_plugins = frozenset(self._normalizers)
        extensions = [p for p in self.pre_filter_plugins if isinstance(p, PreFilterExtensions)]
        self._add_pod_extensions = [(p.name, p.add_pod) for p in extensions]
        self._remove_pod_extensions = [(p.name, p.remove_pod) for p in extensions]
        post_filters = self.post_filter_plugins
        self._post_filters_with_extenders = {
            p.name: p.post_filter_with_extenders
            for p in post_filters
            if isinstance(p, PostFilterWithExtenders)
        }
        self.async_preemption_plugins = [p for p in post_filters if isinstance(p, AsyncPreemptionPlugin)]
        # Not extension points of the profile API: enabled plugins that implement them take part.
        enabled = [self.plugins[n] for n in resolved.names]
        self._enqueue_extensions = {p.name: p for p in enabled if isinstance(p, EnqueueExtensions)}
        # The queue asks these to narrow an event to the waiting pods it may concern (and indexes its
        # pool by their keys): the reference's PreQueueingHintFns, taken with the plugin's events.
        self.pre_queueing_hints: dict[str, PreQueueingHints] = {
            p.name: p
            for p in enabled
            if isinstance(p, PreQueueingHints) and p.name in self._enqueue_extensions
        }
        self.placement_feasible_plugins = [p for p in enabled if isinstance(p, PlacementFeasiblePlugin)]
        self.pod_group_post_filter_plugins = [p for p in enabled if isinstance(p, PodGroupPostFilterPlugin)]
        self.async_pod_group_preemption_plugins = [
            p for p in self.pod_group_post_filter_plugins if isinstance(p, AsyncPodGroupPreemptionPlugin)
        ]
        self._pre_flight_plugins = [p for p in self.pre_bind_plugins if isinstance(p, PreBindPreFlightPlugin)]
        # OpportunisticBatching: every plugin that filters or scores must be able to sign pods.
        filtering = (*self.pre_filter_plugins, *self.filter_plugins)
        cycle_plugins = {p.name: p for p in (*filtering, *self.pre_score_plugins, *self.score_plugins)}
        self._sign_plugins = [p for p in cycle_plugins.values() if isinstance(p, SignPlugin)]
        # Extenders filter and score outside the plugins: no signature covers them (as the reference).
        self.signatures_enabled = len(self._sign_plugins) == len(cycle_plugins) and not self.extenders
        self._sign_refuser = -1  # index in _sign_plugins of the plugin that refused to sign last
        # Which enabled plugins have each optional capability (by its protocol's name), as resolved.
        with_extenders = self._post_filters_with_extenders
        self.capabilities: dict[str, list[str]] = {
            protocol.__name__: [p.name for p in plugins]
            for protocol, plugins in (
                (PreFilterExtensions, extensions),
                (
                    PreEnqueueSharedVerdict,
                    [p for p in self.pre_enqueue_plugins if isinstance(p, PreEnqueueSharedVerdict)],
                ),
                (VectorFilter, [p for p in filters if p.name in self._filter_vectors]),
                (FilterStatuses, [p for p in filters if p.name in self._filter_statuses]),
                (PostFilterWithExtenders, [p for p in post_filters if p.name in with_extenders]),
                (AsyncPreemptionPlugin, self.async_preemption_plugins),
                (VectorScore, [p for p in scores if p.name in self._score_vectors]),
                (ScoreExtensions, [p for p in scores if p.name in self._normalizers]),
                (PreBindPreFlightPlugin, self._pre_flight_plugins),
                (EnqueueExtensions, list(self._enqueue_extensions.values())),
                (PreQueueingHints, list(self.pre_queueing_hints.values())),
                (SignPlugin, self._sign_plugins),
                (PlacementFeasiblePlugin, self.placement_feasible_plugins),
                (PodGroupPostFilterPlugin, self.pod_group_post_filter_plugins),
                (AsyncPodGroupPreemptionPlugin, self.async_pod_group_preemption_plugins),
            )
        }
        self.batch = OpportunisticBatch(self, clock) if opportunistic_batching else None

    # -- metrics --

    @property
    def metrics(self) -> MetricsRecorder:
        return self._metrics

    @metrics.setter
    def metrics(self, recorder: MetricsRecorder) -> None:
        """Setting the recorder binds the evaluation counters to it too."""
        self._metrics = recorder
        profile = self.profile_name

        def tallies(point: str) -> _Tallies:
            return _Tallies(lambda plugin: recorder.plugin_evaluations(plugin, point, profile))

        self._evals_pre_filter = tallies(PRE_FILTER)
        self._evals_filter = tallies(FILTER)
        self._filter_entries: tuple[list[Any], list[tuple[Any, str, Tally]]] = ([], [])
        self._evals_pre_score = tallies(PRE_SCORE)
        self._evals_score = tallies(SCORE)

    def _observe(self, point: str, status: Status | None, start: float) -> None:
        self._metrics.extension_point(point, _code(status), self.profile_name, _perf() - start)

    # -- Handle --

    @property
    def snapshot(self) -> Snapshot:
        """The snapshot the owner refreshes each cycle (the scheduler's, via FrameworkServices)."""
        if self._snapshot is None:
            raise RuntimeError("this framework was built without a snapshot")
        return self._snapshot

    @property
    def objects(self) -> Objects:
        return self._objects

    @property
    def client(self) -> ClusterClient | None:
        return self._client

    @property
    def nominator(self) -> PodNominator | None:
        return self._nominator

    @property
    def parallelism(self) -> int:
        return self._parallelism

    @property
    def pod_groups(self) -> PodGroupManager | None:
        return self._pod_groups

    @property
    def dra(self) -> DraManager:
        return self._dra

    def schedules_pod_groups(self) -> bool:
        """Members of a PodGroup go through whole-group cycles: the profile names a
        PlacementFeasible plugin (GangScheduling), our stand-in for the GenericWorkload gate."""
        return bool(self.placement_feasible_plugins) and self._pod_groups is not None

    def run_placement_feasible_plugins(self, group: PodGroup, progress: PlacementProgress) -> Status | None:
        """Success, Wait or Unschedulable (the first plugin not succeeding decides), or an error."""
        result: Status | None = None
        for p in self.placement_feasible_plugins:
            try:
                status = p.placement_feasible(group, progress)
            except Exception as exc:
                status = _raised(exc, p.name, "PlacementFeasible", group)
            if is_success(status):
                continue
            assert status is not None
            status.plugin = p.name
            if status.code == Code.ERROR:
                return _as_error(status, f"running PlacementFeasible plugin {go_quote(p.name)}")
            if status.code == Code.WAIT:
                result = result or status
                continue
            return status
        return result

    def run_pod_group_post_filter_plugins(
        self, state: CycleState, group: PodGroup, members: Sequence[Pod], simulation: PodGroupSimulation
    ) -> tuple[PodGroupPostFilterResult | None, Status]:
        """The first plugin to succeed or to find the group unresolvable decides; otherwise their
        reasons together (``RunPodGroupPostFilterPlugins``)."""
        start = _perf()
        status = Status(Code.UNSCHEDULABLE)
        try:
            reasons: list[str] = []
            rejector = ""
            for p in self.pod_group_post_filter_plugins:
                try:
                    result, s = p.pod_group_post_filter(state, group, members, simulation)
                except Exception as exc:
                    result, s = None, _raised(exc, p.name, "PodGroupPostFilter", group)
                if is_success(s):
                    status = s if s is not None else Status(Code.SUCCESS)
                    return result, status
                assert s is not None
                if s.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                    status = s.with_plugin(p.name)
                    return result, status
                if s.code != Code.UNSCHEDULABLE:
                    msg = f"error in {go_quote(p.name)} PodGroupPostFilter plugins: {s.message}"
                    status = Status(Code.ERROR, msg, plugin=p.name, error=s.error)
                    return None, status
                reasons.extend(s.reasons)
                rejector = rejector or p.name
            status = Status(Code.UNSCHEDULABLE, *reasons, plugin=rejector)
            return None, status
        finally:
            self._observe(POD_GROUP_POST_FILTER, status, start)

    def nominated_pods_for_node(self, node_name: str) -> list[Pod]:
        if self._nominator is None:
            return []
        return self._nominator.nominated_pods_for_node(node_name)

    def has_filter_plugins(self) -> bool:
        return bool(self.filter_plugins)

    def has_post_filter_plugins(self) -> bool:
        return bool(self.post_filter_plugins)

    def has_score_plugins(self) -> bool:
        return bool(self.score_plugins)

    def queue_sort_less(self) -> Callable[[Any, Any], bool]:
        less: Callable[[Any, Any], bool] = self.queue_sort_plugins[0].less
        return less

    def queueing_hints(self) -> dict[str, list[ClusterEventWithHint]]:
        """Events each plugin wants to requeue pods on; plugins without a list get every event.

        As in the reference only PreEnqueue, PreFilter, Filter, Reserve and Permit plugins count.
        """
        out: dict[str, list[ClusterEventWithHint]] = {}
        for group in (
            self.pre_enqueue_plugins,
            self.pre_filter_plugins,
            self.filter_plugins,
            self.reserve_plugins,
            self.permit_plugins,
        ):
            for p in group:
                if p.name in out:
                    continue
                ext = self._enqueue_extensions.get(p.name)
                try:
                    out[p.name] = list(ext.events_to_register() if ext is not None else _ALL_EVENTS)
                except Exception:  # then every event may requeue its pods: never stranded
                    log.exception("EventsToRegister of plugin %s failed; it hears every event", p.name)
                    out[p.name] = list(_ALL_EVENTS)
        if self.extenders:  # a pod the extenders rejected nodes for is retried on any event
            out[EXTENDER_NAME] = list(_ALL_EVENTS)
        return out

    # -- PreEnqueue --

    def run_pre_enqueue_plugins(self, pod: Pod) -> Status | None:
        for p in self.pre_enqueue_plugins:
            try:
                status = p.pre_enqueue(pod)
            except Exception as exc:
                status = _raised(exc, p.name, "PreEnqueue", pod)
            if not is_success(status):
                assert status is not None
                status.plugin = p.name
                if not status.is_rejected():
                    return _as_error(status, f"running PreEnqueue plugin {go_quote(p.name)}")
                return status
        return None

    # -- PreFilter --

    def run_pre_filter_plugins(
        self, state: CycleState, pod: Pod
    ) -> tuple[PreFilterResult | None, Status | None, set[str]]:
        """Merged result, status, and the plugins that narrowed the node set."""
        start = _perf()
        result, status, with_nodes = self._run_pre_filter_plugins(state, pod)
        self._observe(PRE_FILTER, status, start)
        return result, status, with_nodes

    def _run_pre_filter_plugins(
        self, state: CycleState, pod: Pod
    ) -> tuple[PreFilterResult | None, Status | None, set[str]]:
        skip: set[str] = set()
        evals = self._evals_pre_filter
        timed = state.record_plugin_metrics
        nodes = self.snapshot.list()
        result: PreFilterResult | None = None
        with_nodes: set[str] = set()
        returned: Status | None = None
        try:
            for p in self.pre_filter_plugins:
                t0 = _perf() if timed else 0.0
                try:
                    r, s = p.pre_filter(state, pod, nodes)
                except Exception as exc:
                    r, s = None, _raised(exc, p.name, "PreFilter", pod)
                if timed:
                    self._metrics.plugin_duration(p.name, PRE_FILTER, _code(s), _perf() - t0)
                if s is not None and s.is_skip():
                    skip.add(p.name)
                    continue
                evals[p.name].n += 1
                if not is_success(s):
                    assert s is not None
                    s.plugin = p.name
                    if s.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                        return None, s, set()
                    if s.code == Code.UNSCHEDULABLE:
                        returned = s  # keep going so preemption has every plugin's state
                        continue
                    return None, _as_error(s, f"running PreFilter plugin {go_quote(p.name)}"), set()
                if r is not None and r.node_names is not None:
                    with_nodes.add(p.name)
                result = r if result is None else result.merge(r)
                if result is not None and result.node_names is not None and not result.node_names:
                    names = sorted(with_nodes)
                    if len(names) == 1:
                        msg = f"node(s) didn't satisfy plugin {names[0]}"
                    else:
                        msg = f"node(s) didn't satisfy plugin(s) [{' '.join(names)}] simultaneously"
                    return result, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, msg), with_nodes
            return result, returned, with_nodes
        finally:
            state.skip_filter_plugins = skip

    def run_pre_filter_extension_add_pod(
        self, state: CycleState, pod: Pod, pod_to_add: Pod, node_info: NodeInfo
    ) -> Status | None:
        skip = state.skip_filter_plugins
        for name, fn in self._add_pod_extensions:
            if name in skip:
                continue
            t0 = _perf() if state.record_plugin_metrics else 0.0
            try:
                status = fn(state, pod, pod_to_add, node_info)
            except Exception as exc:
                status = _raised(exc, name, "PreFilter AddPod", pod)
            if state.record_plugin_metrics:
                self._metrics.plugin_duration(name, PRE_FILTER_EXTENSION_ADD_POD, _code(status), _perf() - t0)
            if not is_success(status):
                assert status is not None
                return _as_error(status, f"running AddPod on PreFilter plugin {go_quote(name)}")
        return None

    def run_pre_filter_extension_remove_pod(
        self, state: CycleState, pod: Pod, pod_to_remove: Pod, node_info: NodeInfo
    ) -> Status | None:
        skip = state.skip_filter_plugins
        for name, fn in self._remove_pod_extensions:
            if name in skip:
                continue
            t0 = _perf() if state.record_plugin_metrics else 0.0
            try:
                status = fn(state, pod, pod_to_remove, node_info)
            except Exception as exc:
                status = _raised(exc, name, "PreFilter RemovePod", pod)
            if state.record_plugin_metrics:
                point = PRE_FILTER_EXTENSION_REMOVE_POD
                self._metrics.plugin_duration(name, point, _code(status), _perf() - t0)
            if not is_success(status):
                assert status is not None
                return _as_error(status, f"running RemovePod on PreFilter plugin {go_quote(name)}")
        return None

    # -- Filter --

    def _filter_status(self, p: Any, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status | None:
        """One node's verdict (the caller guards the call: it is per node in the search)."""
        status: Status | None = p.filter(state, pod, node_info)
        if is_success(status):
            return None
        assert status is not None
        return _filter_failure(p, status)

    def _filter_status_guarded(
        self, p: Any, state: CycleState, pod: Pod, node_info: NodeInfo
    ) -> Status | None:
        """:meth:`_filter_status` with an exception as the Error status it stands for."""
        try:
            return self._filter_status(p, state, pod, node_info)
        except Exception as exc:
            return _filter_failure(p, _raised(exc, p.name, "Filter", pod))

    def run_filter_plugins(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status | None:
        """First failing Filter plugin's status for one node, or None."""
        # Hot in preemption's dry run (once per victim per node): the success check is inlined.
        if state.record_plugin_metrics:
            return self._run_filter_plugins_timed(state, pod, node_info)
        skip = state.skip_filter_plugins
        success = Code.SUCCESS
        entries = self._filter_entries
        if entries[0] is not self.filter_plugins or len(entries[1]) != len(self.filter_plugins):
            entries = self._bind_filter_entries()
        try:  # around the loop: no cost per plugin call while nothing raises
            for p, name, tally in entries[1]:
                if name in skip:
                    continue
                tally.n += 1
                status = p.filter(state, pod, node_info)
                if status is not None and status.code != success:
                    return _filter_failure(p, status)
        except Exception as exc:
            return _filter_failure(p, _raised(exc, p.name, "Filter", pod))
        return None

    def _bind_filter_entries(self) -> tuple[list[Any], list[tuple[Any, str, Tally]]]:
        """(plugin, name, evaluations counter) per Filter plugin, rebuilt if the list is replaced
        or resized: the dry run calls ``run_filter_plugins`` per victim per node, and looking the
        name and counter up there cost more than the counting itself."""
        evals = self._evals_filter
        entries = (self.filter_plugins, [(p, p.name, evals[p.name]) for p in self.filter_plugins])
        self._filter_entries = entries
        return entries

    def _run_filter_plugins_timed(
        self, state: CycleState, pod: Pod, node_info: NodeInfo
    ) -> Status | None:
        """``run_filter_plugins`` in a cycle sampled for plugin_execution_duration_seconds."""
        skip = state.skip_filter_plugins
        evals = self._evals_filter
        record = self._metrics.plugin_duration
        for p in self.filter_plugins:
            if p.name in skip:
                continue
            evals[p.name].n += 1
            t0 = _perf()
            try:
                status = p.filter(state, pod, node_info)
            except Exception as exc:
                status = _raised(exc, p.name, "Filter", pod)
            record(p.name, FILTER, _code(status), _perf() - t0)
            if not is_success(status):
                assert status is not None
                return _filter_failure(p, status)
        return None

    def run_filter_plugins_each(
        self, state: CycleState, pod: Pod, node_info: NodeInfo
    ) -> dict[str, Status | None]:
        """Every (not skipped) Filter plugin's own verdict on one node, without stopping at the first
        failure: what ``explain`` shows. Same plugin calls as :meth:`run_filter_plugins`; a node
        with nominated pods of higher/equal priority is judged with them added and, if all pass,
        without them too (the two passes of :meth:`run_filter_plugins_with_nominated_pods`)."""
        skip = state.skip_filter_plugins
        passes: list[tuple[CycleState, NodeInfo]] = [(state, node_info)]
        if self.nominator is not None and len(self.nominator):
            try:
                added, state_1, info_1 = self._add_ge_nominated_pods(pod, state, node_info)
            except FrameworkError as exc:
                return {exc.status.plugin or "AddPod": exc.status}
            if added:
                passes.insert(0, (state_1, info_1))
        out: dict[str, Status | None] = {}
        for st, info in passes:
            for p in self.filter_plugins:
                if p.name not in skip and out.get(p.name) is None:
                    out[p.name] = self._filter_status_guarded(p, st, pod, info)
            if any(v is not None for v in out.values()):
                break
        return out

    def _add_ge_nominated_pods(
        self, pod: Pod, state: CycleState, node_info: NodeInfo
    ) -> tuple[bool, CycleState, NodeInfo]:
        nominated = self.nominated_pods_for_node(node_info.name)
        if not nominated:
            return False, state, node_info
        info_out: NodeInfo | None = None
        state_out: CycleState | None = None
        for np_ in nominated:
            if np_.priority >= pod.priority and np_.uid != pod.uid:
                if info_out is None or state_out is None:
                    info_out, state_out = node_info.clone(), state.clone()
                info_out.add_pod(np_)
                status = self.run_pre_filter_extension_add_pod(state_out, pod, np_, info_out)
                if not is_success(status):
                    assert status is not None
                    raise FrameworkError(status)
        if info_out is None or state_out is None:
            return False, state, node_info
        return True, state_out, info_out

    def run_filter_plugins_with_nominated_pods(
        self, state: CycleState, pod: Pod, node_info: NodeInfo
    ) -> Status | None:
        """Filters with higher/equal priority nominated pods added, then (if that passed) without."""
        nominator = self.nominator
        if nominator is None or not len(nominator):
            return self.run_filter_plugins(state, pod, node_info)  # nobody nominated anywhere
        try:
            added, state_1, info_1 = self._add_ge_nominated_pods(pod, state, node_info)
        except FrameworkError as exc:
            return exc.status
        status = self.run_filter_plugins(state_1, pod, info_1)
        if not added or not is_success(status):
            return status
        return self.run_filter_plugins(state, pod, node_info)

    def _rows_with_nominated(self, rows: np.ndarray, pod: Pod) -> np.ndarray:
        """Mask of rows whose node has a nominated pod of priority >= pod's (two-pass nodes)."""
        mask = np.zeros(len(rows), dtype=bool)
        nominator = self.nominator
        if nominator is None or not len(nominator):
            return mask
        infos = self.snapshot.node_infos
        for j, r in enumerate(rows.tolist()):
            for other in nominator.nominated_pods_for_node(infos[r].name):
                if other.priority >= pod.priority and other.uid != pod.uid:
                    mask[j] = True
                    break
        return mask

    def find_feasible_rows(
        self, state: CycleState, pod: Pod, rows: np.ndarray, num_to_find: int, diagnosis: Diagnosis
    ) -> tuple[np.ndarray, int]:
        """Rows (in ``rows`` order) passing every Filter, stopping after ``num_to_find`` of them.

        Returns the feasible rows and how many rows were processed (feasible + rejected), like the
        reference's sequential semantics. Rejected nodes go to ``diagnosis``; raises FrameworkError
        on a plugin Error.
        """
        snapshot = self.snapshot
        infos = snapshot.node_infos
        n = len(rows)
        if not self.filter_plugins:
            take = rows[: min(num_to_find, n)]
            return take, len(take)
        filters = [p for p in self.filter_plugins if p.name not in state.skip_filter_plugins]
        vectors = self._filter_vectors
        vector_fns = [vectors.get(p.name) for p in filters]
        evals = self._evals_filter
        timed = state.record_plugin_metrics
        feasible_parts: list[np.ndarray] = []
        found = 0
        pos = 0
        processed = 0
        chunk = max(_CHUNK, num_to_find)
        while pos < n and found < num_to_find:
            idx = rows[pos : pos + chunk]
            m = len(idx)
            ok = np.ones(m, dtype=bool)
            special = self._rows_with_nominated(idx, pod)
            special_pos = np.flatnonzero(special)
            plain = ~special
            eager: list[tuple[int, Status]] = []  # (position in chunk, status)
            lazy: list[tuple[Any, np.ndarray]] = []  # (plugin, positions it rejected)
            looked: list[tuple[Tally, np.ndarray | list[int]]] = []  # (evaluations, positions it rejected)
            timings: list[_Timing] | None = [] if timed else None  # sampled cycle: plugin durations
            # The plain rows no plugin has rejected yet (``ok & plain``), and their snapshot rows:
            # narrowed only when a plugin rejects some (most plugins pass every row of most pods).
            alive = np.flatnonzero(plain)
            sub = idx[alive]
            for p, vfn in zip(filters, vector_fns, strict=True):
                if not alive.size:
                    break
                t0 = _perf() if timed else 0.0
                keep: np.ndarray | None = None
                try:
                    mask = vfn(state, pod, snapshot, sub) if vfn is not None else None
                    if mask is not None:
                        keep = np.asarray(mask, dtype=bool)
                        rejected = alive[:0] if keep.all() else alive[~keep]
                except Exception as exc:
                    _count_evaluations(looked, m, special_pos)
                    self._observe_filter_timings(timings, state, pod, idx, m)
                    raise FrameworkError(_filter_failure(p, _raised(exc, p.name, "Filter", pod))) from exc
                if keep is not None:
                    looked.append((evals[p.name], rejected))
                    if timings is not None:
                        timings.append(_Timing(p, alive, rejected, _perf() - t0))
                    if rejected.size:
                        ok[rejected] = False
                        lazy.append((p, rejected))
                        alive, sub = alive[keep], sub[keep]
                    continue
                node_rejected: list[int] = []
                looked.append((evals[p.name], node_rejected))
                # The last Filter, node by node: rows it passes are feasible, so it may stop once it
                # has passed as many as are still needed (rows past that are never counted).
                stop_after = num_to_find - found if p is filters[-1] and not special_pos.size else 0
                passed = 0
                try:  # around the loop: nothing per node while no plugin raises
                    for j, r in zip(alive.tolist(), sub.tolist(), strict=True):
                        if timings is not None:
                            t0 = _perf()
                            raw = p.filter(state, pod, infos[r])
                            timings.append(_Timing(p, np.array([j]), None, _perf() - t0, _code(raw)))
                            status = None if is_success(raw) else _filter_failure(p, raw)
                        else:
                            status = self._filter_status(p, state, pod, infos[r])
                        if status is not None:
                            if status.code == Code.ERROR:
                                raise FrameworkError(status)
                            ok[j] = False
                            node_rejected.append(j)
                            eager.append((j, status))
                        elif stop_after:
                            passed += 1
                            if passed >= stop_after:
                                break
                except Exception as exc:
                    _count_evaluations(looked, m, special_pos)
                    self._observe_filter_timings(timings, state, pod, idx, m)
                    if isinstance(exc, FrameworkError):
                        raise
                    raise FrameworkError(_filter_failure(p, _raised(exc, p.name, "Filter", pod))) from exc
                if node_rejected:
                    alive = np.flatnonzero(ok & plain)
                    sub = idx[alive]
            for j in special_pos.tolist():
                status = self.run_filter_plugins_with_nominated_pods(state, pod, infos[int(idx[j])])
                if status is not None and not is_success(status):
                    if status.code == Code.ERROR:
                        _count_evaluations(looked, m, special_pos)
                        self._observe_filter_timings(timings, state, pod, idx, m)
                        raise FrameworkError(status)
                    ok[j] = False
                    eager.append((j, status))
            ok_pos = np.flatnonzero(ok)
            need = num_to_find - found
            cut = m
            if len(ok_pos) >= need:
                cut = int(ok_pos[need - 1]) + 1
                ok_pos = ok_pos[:need]
            feasible_parts.append(idx[ok_pos])
            found += len(ok_pos)
            processed += cut
            _count_evaluations(looked, cut, special_pos)
            self._observe_filter_timings(timings, state, pod, idx, cut)
            self._record(diagnosis, state, pod, idx, cut, eager, lazy)
            pos += m
        feasible = np.concatenate(feasible_parts) if feasible_parts else rows[:0]
        return feasible, processed

    def _observe_filter_timings(
        self, timings: list[_Timing] | None, state: CycleState, pod: Pod, idx: np.ndarray, cut: int
    ) -> None:
        """A sampled chunk's Filter durations for the rows the search processed (before ``cut``).

        A vector call stands for one call per row, each taking an equal share of its time. Its
        rejections carry the code the per-node method gives the first rejected row: asking every
        rejected row would cost more than the cycle (plugins reject with one code in all but rare
        cases)."""
        if not timings:
            return
        record = self._metrics.plugin_duration
        for t in timings:
            calls = int(np.searchsorted(t.positions, cut))
            if not calls:
                continue
            each = t.seconds / len(t.positions)
            if t.rejected is None:  # one per-node call
                record(t.plugin.name, FILTER, t.code, each)
                continue
            rejected = int(np.searchsorted(t.rejected, cut))
            record(t.plugin.name, FILTER, SUCCESS, each, calls - rejected)
            if rejected:
                row = self.snapshot.node_infos[int(idx[int(t.rejected[0])])]
                try:
                    status = t.plugin.filter(state, pod, row)
                except Exception as exc:
                    status = _raised(exc, t.plugin.name, "Filter", pod)
                code = CODE_LABELS[Code.UNSCHEDULABLE] if is_success(status) else _code(status)
                record(t.plugin.name, FILTER, code, each, rejected)

    def _record(
        self,
        diagnosis: Diagnosis,
        state: CycleState,
        pod: Pod,
        idx: np.ndarray,
        cut: int,
        eager: list[tuple[int, Status]],
        lazy: list[tuple[Any, np.ndarray]],
    ) -> None:
        infos = self.snapshot.node_infos
        statuses = diagnosis.node_to_status
        for j, status in eager:
            if j < cut:
                statuses.set(infos[int(idx[j])].name, status)
                diagnosis.add_plugin_status(status)
        for p, positions in lazy:
            rows = idx[positions[positions < cut]]
            if not rows.size:
                continue
            diagnosis.unschedulable_plugins.add(p.name)
            node_infos = [infos[r] for r in rows.tolist()]

            def fill(p: Any = p, node_infos: list[NodeInfo] = node_infos, rows: np.ndarray = rows) -> None:
                # A plugin may compute its statuses for many rows at once (shared per outcome).
                bulk = self._filter_statuses.get(p.name)
                try:
                    many = bulk(state, pod, self.snapshot, rows) if bulk is not None else None
                except Exception as exc:  # each node's own status then (a per-node error, if it is one)
                    _raised(exc, p.name, "Filter", pod)
                    many = None
                if many is not None:
                    reported: dict[int, Status] = {}  # one framework status per shared plugin status
                    for info, shared in zip(node_infos, many, strict=True):
                        shown = reported.get(id(shared))
                        if shown is None:
                            shown = reported[id(shared)] = _filter_failure(p, shared)
                            diagnosis.add_plugin_status(shown)
                        statuses.set(info.name, shown)
                    return
                for info in node_infos:
                    status = self._filter_status_guarded(p, state, pod, info)
                    if status is None:  # vector and per-node disagree: a plugin bug, say so
                        msg = f"plugin {go_quote(p.name)}: filter_vector rejected a node filter accepts"
                        status = Status(Code.ERROR, msg)
                        status.plugin = p.name
                    statuses.set(info.name, status)
                    diagnosis.add_plugin_status(status)

            statuses.defer(fill)

    # -- PostFilter --

    def run_post_filter_plugins(
        self, state: CycleState, pod: Pod, node_statuses: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status]:
        start = _perf()
        result, status = run_now(self._run_post_filter_plugins(state, pod, node_statuses, ()))
        self._observe(POST_FILTER, status, start)
        return result, status

    async def run_post_filter_plugins_with_extenders(
        self, state: CycleState, pod: Pod, node_statuses: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status]:
        """PostFilter when extenders are configured: a plugin that can consult them (preemption's
        ``post_filter_with_extenders``) does, the others run as usual."""
        start = _perf()
        result, status = await self._run_post_filter_plugins(state, pod, node_statuses, self.extenders)
        self._observe(POST_FILTER, status, start)
        return result, status

    async def _run_post_filter_plugins(
        self,
        state: CycleState,
        pod: Pod,
        node_statuses: Mapping[str, Status],
        extenders: Sequence[Extender],
    ) -> tuple[PostFilterResult | None, Status]:
        """Awaits only a plugin's ``post_filter_with_extenders``, so without ``extenders`` it never
        suspends (``run_post_filter_plugins`` completes it in place)."""
        result: PostFilterResult | None = None
        reasons: list[str] = []
        rejector = ""
        metrics = self._metrics
        with_extenders_of = self._post_filters_with_extenders if extenders else {}
        for p in self.post_filter_plugins:
            t0 = _perf()
            try:
                with_extenders = with_extenders_of.get(p.name)
                if with_extenders is not None:
                    r, s = await with_extenders(state, pod, node_statuses, extenders)
                else:
                    r, s = p.post_filter(state, pod, node_statuses)
            except Exception as exc:
                # The reference passes a returned error through as it is; a raised one is named
                # after its plugin, as nothing else in the message would say which plugin it was.
                err = _raised(exc, p.name, "PostFilter", pod)
                r, s = None, _as_error(err, f"running PostFilter plugin {go_quote(p.name)}")
            finally:
                if p.name == _PREEMPTION_PLUGIN:
                    metrics.preemption_attempt()
            if state.record_plugin_metrics:
                metrics.plugin_duration(p.name, POST_FILTER, _code(s), _perf() - t0)
            if is_success(s):
                return r, s if s is not None else Status(Code.SUCCESS)
            assert s is not None
            if s.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                return r, s.with_plugin(p.name)
            if not s.is_rejected():
                # The reference passes the plugin's error through unprefixed here.
                return None, Status(Code.ERROR, s.message, plugin=p.name, error=s.error)
            if r is not None:
                # A result (even PostFilterResult("")) is the reference's non-Noop nominating info:
                # "" tells the scheduler to clear the pod's nomination.
                result = r
            reasons.extend(s.reasons)
            rejector = rejector or p.name
        return result, Status(Code.UNSCHEDULABLE, *reasons, plugin=rejector)

    # -- Score --

    def run_pre_score_plugins(
        self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]
    ) -> Status | None:
        start = _perf()
        status = self._run_pre_score_plugins(state, pod, nodes)
        self._observe(PRE_SCORE, status, start)
        return status

    def _run_pre_score_plugins(
        self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]
    ) -> Status | None:
        skip: set[str] = set()
        evals = self._evals_pre_score
        timed = state.record_plugin_metrics
        try:
            for p in self.pre_score_plugins:
                t0 = _perf() if timed else 0.0
                try:
                    status = p.pre_score(state, pod, nodes)
                except Exception as exc:
                    status = _raised(exc, p.name, "PreScore", pod)
                if timed:
                    self._metrics.plugin_duration(p.name, PRE_SCORE, _code(status), _perf() - t0)
                if status is not None and status.is_skip():
                    skip.add(p.name)
                    continue
                evals[p.name].n += 1
                if not is_success(status):
                    assert status is not None
                    return _as_error(status, f"running PreScore plugin {go_quote(p.name)}")
            return None
        finally:
            state.skip_score_plugins = skip

    def run_score_plugins(
        self,
        state: CycleState,
        pod: Pod,
        rows: np.ndarray,
        nodes: Sequence[NodeInfo],
        raw: dict[str, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Weighted total per row and each plugin's normalized (unweighted) scores.

        ``raw``, when given (``explain``), receives each plugin's scores before NormalizeScore.
        """
        start = _perf()
        try:
            out = self._run_score_plugins(state, pod, rows, nodes, raw)
        except FrameworkError as exc:
            self._observe(SCORE, exc.status, start)
            raise
        self._observe(SCORE, None, start)
        return out

    def _run_score_plugins(
        self,
        state: CycleState,
        pod: Pod,
        rows: np.ndarray,
        nodes: Sequence[NodeInfo],
        raw: dict[str, np.ndarray] | None,
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        total = np.zeros(len(rows), dtype=np.int64)
        per_plugin: dict[str, np.ndarray] = {}
        for p in self.score_plugins:
            if p.name in state.skip_score_plugins:
                continue
            scores = self._raw_scores(p, state, pod, rows, nodes)
            if raw is not None:
                raw[p.name] = scores.copy()
            self._normalize(p, state, pod, scores)
            per_plugin[p.name] = scores
            total += scores * self.score_weights[p.name]
        return total, per_plugin

    def _raw_scores(
        self, p: Any, state: CycleState, pod: Pod, rows: np.ndarray, nodes: Sequence[NodeInfo]
    ) -> np.ndarray:
        """One Score plugin's scores for ``rows`` before NormalizeScore."""
        evals = self._evals_score
        timed = state.record_plugin_metrics
        record = self._metrics.plugin_duration
        # One node (a batch's re-score): the per-node method costs less than the vector's set-up.
        vfn = self._score_vectors.get(p.name) if len(rows) > 1 else None
        t0 = _perf() if timed else 0.0
        try:
            vec = vfn(state, pod, self.snapshot, rows) if vfn is not None else None
            if vec is not None:
                scores = np.array(vec, dtype=np.int64)
        except Exception as exc:
            raise self._score_failure(p, _raised(exc, p.name, "Score", pod)) from exc
        if vec is not None:
            evals[p.name].n += len(rows)  # one Score call per node in the reference
            if timed and len(rows):
                record(p.name, SCORE, SUCCESS, (_perf() - t0) / len(rows), len(rows))
            return scores
        scores = np.empty(len(rows), dtype=np.int64)
        tally = evals[p.name]
        try:  # around the loop: no cost per node while nothing raises
            for j, info in enumerate(nodes):
                tally.n += 1
                if timed:
                    t0 = _perf()
                    s, status = p.score(state, pod, info)
                    record(p.name, SCORE, _code(status), _perf() - t0)
                else:
                    s, status = p.score(state, pod, info)
                if not is_success(status):
                    assert status is not None
                    raise self._score_failure(p, status)
                scores[j] = s
        except FrameworkError:
            raise
        except Exception as exc:
            raise self._score_failure(p, _raised(exc, p.name, "Score", pod)) from exc
        return scores

    @staticmethod
    def _score_failure(p: Any, status: Status) -> FrameworkError:
        """Score's error, named as the reference names it (quoted on error paths only: costly)."""
        quoted = go_quote(p.name)
        return FrameworkError(_as_error(status, f"running Score plugins: plugin {quoted} failed with"))

    def _normalize(self, p: Any, state: CycleState, pod: Pod, scores: np.ndarray) -> None:
        """NormalizeScore in place, then the range check the reference applies before weights."""
        normalize = self._normalizers.get(p.name)
        if normalize is not None:
            t0 = _perf() if state.record_plugin_metrics else 0.0
            try:
                status = normalize(state, pod, scores)
            except Exception as exc:
                status = _raised(exc, p.name, "NormalizeScore", pod)
            if state.record_plugin_metrics:
                self._metrics.plugin_duration(p.name, SCORE_EXTENSION_NORMALIZE, _code(status), _perf() - t0)
            if not is_success(status):
                assert status is not None
                quoted = go_quote(p.name)  # quoted on error paths only: it is costly per cycle
                raise FrameworkError(
                    _as_error(status, f"running Normalize on Score plugins: plugin {quoted} failed with")
                )
        if scores.size and (scores.min() < MIN_NODE_SCORE or scores.max() > MAX_NODE_SCORE):
            quoted = go_quote(p.name)
            bad = int(scores[(scores < MIN_NODE_SCORE) | (scores > MAX_NODE_SCORE)][0])
            msg = (
                f"applying score defaultWeights on Score plugins: plugin {quoted} returns an invalid "
                f"score {bad}, it should in the range of [{MIN_NODE_SCORE}, {MAX_NODE_SCORE}] "
                "after normalizing"
            )
            raise FrameworkError(Status(Code.ERROR, msg))

    # -- OpportunisticBatching (batch.go's handle) --

    def run_raw_score_plugins(
        self,
        state: CycleState,
        pod: Pod,
        rows: np.ndarray,
        nodes: Sequence[NodeInfo],
        out: dict[str, np.ndarray],
    ) -> None:
        """Each Score plugin's raw scores for ``rows`` into ``out``; raises FrameworkError."""
        for p in self.score_plugins:
            if p.name not in state.skip_score_plugins:
                out[p.name] = self._raw_scores(p, state, pod, rows, nodes)

    def normalize_scores(
        self, state: CycleState, pod: Pod, raw: Mapping[str, np.ndarray], *, in_range: bool = False
    ) -> np.ndarray | None:
        """Weighted totals of raw scores (NormalizeScore on copies); None when a plugin fails.

        ``in_range``: the caller knows the raw scores of plugins without NormalizeScore are within
        [MinNodeScore, MaxNodeScore] (checked when first scored): they are only weighted."""
        total: np.ndarray | None = None
        for p in self.score_plugins:
            scores = raw.get(p.name)
            if scores is None:
                continue
            if not (in_range and p.name not in self.normalizing_plugins):
                scores = scores.copy()
                try:
                    self._normalize(p, state, pod, scores)
                except FrameworkError:
                    return None
            weighted = scores * self.score_weights[p.name]
            total = weighted if total is None else total + weighted
        if total is None:
            n = len(next(iter(raw.values()))) if raw else 0
            total = np.zeros(n, dtype=np.int64)
        return total

    def sign_pod(self, pod: Pod) -> PodSignature | None:
        """The pod's signature, or None when a plugin cannot sign it or some PreFilter, Filter,
        PreScore or Score plugin has no Sign (then this profile never batches)."""
        if not self.signatures_enabled:
            return None
        plugins = self._sign_plugins
        # The plugin that refused the last pod is asked first: under a profile whose pods never sign
        # (system-default spreading) that is the only call. Fragments still merge in plugin order.
        first = self._sign_refuser
        early: SignFragments = ()
        i = first
        try:  # an error is logged and the pod is not batched, as the reference's SignPod does
            if first >= 0:
                early, status = plugins[first].sign(pod)
                if not is_success(status):
                    return None
            fragments: list[tuple[str, Any]] = []
            for i, p in enumerate(plugins):
                if i == first:
                    fragments.extend(early)
                    continue
                frags, status = p.sign(pod)
                if not is_success(status):
                    self._sign_refuser = i
                    return None
                fragments.extend(frags)
            return signature_of(pod.scheduler_name, fragments)
        except Exception as exc:
            _raised(exc, plugins[i].name, "Sign", pod)
            return None

    # -- Reserve / Permit --

    def run_reserve_plugins_reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        start = _perf()
        status = self._run_reserve_plugins_reserve(state, pod, node_name)
        self._observe(RESERVE, status, start)
        return status

    def _run_reserve_plugins_reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        for p in self.reserve_plugins:
            t0 = _perf() if state.record_plugin_metrics else 0.0
            try:
                status = p.reserve(state, pod, node_name)
            except Exception as exc:  # the caller unreserves every plugin, as after a returned error
                status = _raised(exc, p.name, "Reserve", pod)
            if state.record_plugin_metrics:
                self._metrics.plugin_duration(p.name, RESERVE, _code(status), _perf() - t0)
            if not is_success(status):
                assert status is not None
                if status.is_rejected():
                    return status.with_plugin(p.name)
                return _as_error(status, f"running Reserve plugin {go_quote(p.name)}")
        return None

    def run_reserve_plugins_unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        """Unreserve in reverse order; a failing plugin must not stop the others from cleaning up."""
        start = _perf()
        for p in reversed(self.reserve_plugins):
            t0 = _perf()
            try:
                p.unreserve(state, pod, node_name)
            except Exception:
                log.exception("Unreserve of plugin %s failed for pod %s", p.name, pod.key)
            if state.record_plugin_metrics:
                self._metrics.plugin_duration(p.name, UNRESERVE, SUCCESS, _perf() - t0)
        self._observe(UNRESERVE, None, start)

    def run_permit_plugins(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        start = _perf()
        status = self._run_permit_plugins(state, pod, node_name)
        self._observe(PERMIT, status, start)
        return status

    def _run_permit_plugins(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        waits: dict[str, float] = {}
        for p in self.permit_plugins:
            t0 = _perf()
            try:
                status, timeout = p.permit(state, pod, node_name)
            except Exception as exc:
                status, timeout = _raised(exc, p.name, "Permit", pod), 0.0
            if state.record_plugin_metrics:
                self._metrics.plugin_duration(p.name, PERMIT, _code(status), _perf() - t0)
            if is_success(status):
                continue
            assert status is not None
            if status.is_rejected():
                return status.with_plugin(p.name)
            if status.is_wait():
                waits[p.name] = min(float(timeout), MAX_PERMIT_TIMEOUT)
                continue
            return _as_error(status, f"running Permit plugin {go_quote(p.name)}").with_plugin(p.name)
        if waits:
            self.waiting_pods[pod.uid] = WaitingPod(pod, waits, self.clock)
            msg = f"one or more plugins asked to wait and no plugin rejected pod {go_quote(pod.name)}"
            return Status(Code.WAIT, msg)
        return None

    def will_wait_on_permit(self, pod: Pod) -> bool:
        return pod.uid in self.waiting_pods

    async def wait_on_permit(self, pod: Pod) -> Status | None:
        wp = self.waiting_pods.get(pod.uid)
        if wp is None:
            return None
        start = _perf()
        try:
            status = await wp.wait()
        finally:
            self.waiting_pods.pop(pod.uid, None)
        self._metrics.permit_wait(_code(status), _perf() - start)
        if is_success(status):
            return None
        assert status is not None
        if status.is_rejected():
            return status
        return _as_error(status, "waiting on permit for pod").with_plugin(status.plugin)

    def get_waiting_pod(self, uid: str) -> WaitingPod | None:
        return self.waiting_pods.get(uid)

    def iterate_over_waiting_pods(self) -> Iterable[WaitingPod]:
        return list(self.waiting_pods.values())

    def reject_waiting_pod(self, uid: str) -> bool:
        wp = self.waiting_pods.get(uid)
        if wp is None:
            return False
        wp.reject("", "removed")
        return True

    # -- binding --

    def run_pre_bind_pre_flights(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        """None (Success) when some PreBind plugin will act, Skip when none will, Error on a failure
        (``RunPreBindPreFlights``); plugins without a pre-flight do not count."""
        result: Status | None = Status(Code.SKIP)
        for p in self._pre_flight_plugins:
            try:
                status = p.pre_bind_pre_flight(state, pod, node_name)
            except Exception as exc:
                status = _raised(exc, p.name, "PreBindPreFlight", pod)
            if is_success(status):
                result = None
            elif status is not None and status.is_skip():
                continue
            elif status is not None and status.code == Code.ERROR:
                return _as_error(status, f"running PreBindPreFlight {go_quote(p.name)}")
            else:
                assert status is not None
                code = go_quote(_CODE_NAMES[status.code])
                return Status(
                    Code.ERROR,
                    f"PreBindPreFlight {p.name} returned {code}, which is unsupported. "
                    "It is supposed to return Success, Skip, or Error status",
                )
        return result

    async def run_pre_bind_plugins(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        start = _perf()
        status = await self._run_pre_bind_plugins(state, pod, node_name)
        self._observe(PRE_BIND, status, start)
        return status

    async def _run_pre_bind_plugins(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        for p in self.pre_bind_plugins:
            t0 = _perf()
            status = await _binding_call(p, p.pre_bind, state, pod, node_name, "PreBind")
            if state.record_plugin_metrics:
                self._metrics.plugin_duration(p.name, PRE_BIND, _code(status), _perf() - t0)
            if status is not None and not status.is_skip() and not status.is_success():
                return _binding_failure(status, p.name, "PreBind")
        return None

    async def run_bind_plugins(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        """Bind plugins in order until one does not Skip; exceptions (Conflict, ...) become Error."""
        start = _perf()
        status = await self._run_bind_plugins(state, pod, node_name)
        self._observe(BIND, status, start)
        return status

    async def _run_bind_plugins(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        status: Status | None = Status(Code.SKIP)
        for p in self.bind_plugins:
            t0 = _perf()
            status = await _binding_call(p, p.bind, state, pod, node_name, "Bind")
            if state.record_plugin_metrics:
                self._metrics.plugin_duration(p.name, BIND, _code(status), _perf() - t0)
            if status is not None and status.is_skip():
                continue
            if is_success(status):
                return None
            assert status is not None
            return _binding_failure(status, p.name, "Bind")
        return status

    async def run_post_bind_plugins(self, state: CycleState, pod: Pod, node_name: str) -> None:
        start = _perf()
        for p in self.post_bind_plugins:
            t0 = _perf()
            try:
                await p.post_bind(state, pod, node_name)
            except Exception:
                log.exception("PostBind of plugin %s failed for pod %s", p.name, pod.key)
            if state.record_plugin_metrics:
                self._metrics.plugin_duration(p.name, POST_BIND, SUCCESS, _perf() - t0)
        self._observe(POST_BIND, None, start)


async def _binding_call(
    p: Any,
    method: Callable[[CycleState, Pod, str], Awaitable[Status | None]],
    state: CycleState,
    pod: Pod,
    node_name: str,
    point: str,
) -> Status | None:
    """A binding-side plugin's verdict. An API error (Conflict, NotFound, ...) is an Error status
    carrying it (the binding cycle reads it back, or requeues); anything else a plugin raises is
    an Error status too, so the pod is unreserved, forgotten and requeued, never lost."""
    try:
        return await method(state, pod, node_name)
    except ApiError as exc:
        return Status.as_error(exc)
    except Exception as exc:
        return _raised(exc, p.name, point, pod)


def _binding_failure(status: Status, plugin: str, point: str) -> Status:
    """Rejections keep their code and gain the plugin; anything else is an Error naming the point."""
    if status.is_rejected():
        return status.with_plugin(plugin)
    return _as_error(status, f"running {point} plugin {go_quote(plugin)}")
