"""The ``MetricsRecorder`` the operator serves: kube-scheduler v1.37.2's STABLE and BETA metrics.

Names, help texts (with component-base's ``[STABLE]``/``[BETA]`` prefix), label names and bucket
layouts are the reference's, so dashboards and alerts written for kube-scheduler work unchanged.

The metrics are our own lean ones, not prometheus-client's, for two reasons:

- Cold start (issue 30): prometheus-client's import is ~17 ms of the way to the first bind
  (its exposition alone pulls in http.server, urllib.request, email, wsgiref). Nothing here imports
  it: the metrics record from the first cycle on, and :meth:`PrometheusMetrics.expose` registers
  them with a ``CollectorRegistry`` (``exposition.py``, which does import it) once something is to
  scrape them, for the operator when its metrics server starts after the first cycles.
- Cost per pod (the engine is benchmarked against the reference): a counter's or gauge's child is
  a slot object kept in a plain dict, and the hot paths add to its ``value`` (a third of
  prometheus-client's ``inc``, which takes a lock); histograms take one lock and a bisect per
  observation, and an observation may stand for several calls, as a vector filter stands for one
  call per node; ``plugin_evaluation_total`` and ``pending_pods`` are read from the engine when
  scraped.

Counters and gauges are written from the event loop's thread only (the engine's), and read by the
scrape's thread: a float store is atomic there, and a snapshot copies the children's dict first.
"""

from __future__ import annotations

import bisect
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar, TypeVar

from kopf_scheduler.metrics.recorder import PLUGIN_METRICS_SAMPLE_PERCENT, Tally, attempts_label

if TYPE_CHECKING:  # prometheus-client is imported by exposition.py only, when exposed
    from prometheus_client import CollectorRegistry

__all__ = [
    "PENDING_QUEUES",
    "PLUGIN_BUFFER_SIZE",
    "PLUGIN_FLUSH_INTERVAL",
    "Counter",
    "Gauge",
    "Histogram",
    "LeanMetric",
    "PrometheusMetrics",
    "Sample",
    "exponential_buckets",
]

# pending_pods' queue label values; the last two are the reference's pod-group queues (always
# empty here: no pod groups), present as 0 as the reference registers them.
PENDING_QUEUES = ("active", "backoff", "unschedulable", "gated", "incomplete", "pending")

# The reference hands plugin durations to a buffer of 1000 that is emptied once a second and drops
# what does not fit: at most ~1000 plugin_execution_duration observations a second reach its
# histogram (a sampled cycle over many nodes alone makes thousands). We keep the same budget, which
# also bounds what the sampled cycles cost us.
PLUGIN_BUFFER_SIZE = 1000
PLUGIN_FLUSH_INTERVAL = 1.0


def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    """Upper bounds like component-base's ``ExponentialBuckets`` (multiplied step by step, so
    the 1.5-factor bounds round exactly as the reference's)."""
    out = []
    for _ in range(count):
        out.append(start)
        start *= factor
    return tuple(out)


def _stable(text: str) -> str:
    return "[STABLE] " + text


def _beta(text: str) -> str:
    return "[BETA] " + text


def _alpha(text: str) -> str:
    return "[ALPHA] " + text


_ATTEMPT_BUCKETS = exponential_buckets(0.001, 2, 15)
_EXTENSION_POINT_BUCKETS = exponential_buckets(0.0001, 2, 12)
_PLUGIN_BUCKETS = exponential_buckets(0.00001, 1.5, 20)
_SLI_BUCKETS = exponential_buckets(0.01, 2, 20)
_BATCH_BUCKETS = exponential_buckets(0.00001, 2, 12)


Sample = tuple[tuple[str, ...], float]  # label values (in the metric's label order), value


class Child:
    """One series of a counter or gauge: the recorder's hot paths add to ``value`` directly."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def set(self, value: float) -> None:
        self.value = float(value)


class LeanMetric:
    """A metric family of ours: what ``exposition.py`` renders as prometheus-client's would be."""

    kind: ClassVar[str]  # "counter", "gauge" or "histogram"

    def __init__(self, name: str, documentation: str, labels: Sequence[str] = ()) -> None:
        self.name = name  # a counter's with its ``_total``, as prometheus-client's family writes it
        self.documentation = documentation
        self.label_names = tuple(labels)

    def samples(self) -> list[Sample]:
        """A counter's or gauge's series now (a histogram has ``series`` instead)."""
        raise NotImplementedError


class _Children(LeanMetric):
    """Counter and gauge: children by label values in a plain dict, created on first use; an
    unlabelled one has its only child from the start (exposed as 0, as prometheus-client's is)."""

    def __init__(self, name: str, documentation: str, labels: Sequence[str] = ()) -> None:
        super().__init__(name, documentation, labels)
        self.children: dict[tuple[str, ...], Child] = {}
        self._only = Child()
        if not self.label_names:
            self.children[()] = self._only

    def labels(self, *values: str) -> Child:
        child = self.children.get(values)
        if child is None:
            if len(values) != len(self.label_names):
                raise ValueError(f"{self.name}: label values {values} for labels {self.label_names}")
            child = self.children.setdefault(values, Child())
        return child

    def samples(self) -> list[Sample]:
        return [(key, child.value) for key, child in list(self.children.items())]


class Counter(_Children):
    kind = "counter"

    def inc(self, amount: float = 1.0) -> None:
        self._only.value += amount


class Gauge(_Children):
    kind = "gauge"

    def __init__(self, name: str, documentation: str, labels: Sequence[str] = ()) -> None:
        super().__init__(name, documentation, labels)
        self._function: Callable[[], float] | None = None

    def set(self, value: float) -> None:
        self._only.value = float(value)

    def inc(self, amount: float = 1.0) -> None:
        self._only.value += amount

    def set_function(self, function: Callable[[], float]) -> None:
        """An unlabelled gauge read from ``function`` at each scrape."""
        self._function = function

    def samples(self) -> list[Sample]:
        if self._function is not None:
            return [((), float(self._function()))]
        return super().samples()


class Histogram(LeanMetric):
    """A histogram keyed by label-value tuples; ``observe`` may count N observations of one value."""

    kind = "histogram"

    def __init__(self, name: str, documentation: str, labels: Sequence[str], bounds: Sequence[float]) -> None:
        super().__init__(name, documentation, labels)
        self.bounds = list(bounds)
        self._series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}
        self._lock = threading.Lock()
        if not self.label_names:  # exposed (all zero) from the start, as an unlabelled histogram is
            self._series[()] = ([0] * (len(self.bounds) + 1), [0.0])

    def observe(self, key: tuple[str, ...], value: float, count: int = 1) -> None:
        i = bisect.bisect_left(self.bounds, value)
        with self._lock:
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = ([0] * (len(self.bounds) + 1), [0.0])
            series[0][i] += count
            series[1][0] += value * count

    def series(self) -> list[tuple[tuple[str, ...], list[int], float]]:
        """Each series' label values, per-bucket counts (the last is +Inf's) and sum, now."""
        with self._lock:
            return [(key, list(counts), total[0]) for key, (counts, total) in self._series.items()]


class _TallyCounters(LeanMetric):
    """plugin_evaluation_total read from the engine's ``Tally`` objects at scrape time."""

    kind = "counter"

    name = "scheduler_plugin_evaluation_total"
    documentation = _beta(
        "Number of attempts to schedule pods by each plugin and the extension point "
        "(available only in PreFilter, Filter, PreScore, and Score)."
    )

    def __init__(self) -> None:
        super().__init__(self.name, self.documentation, ("plugin", "extension_point", "profile"))
        self.tallies: dict[tuple[str, str, str], Tally] = {}

    def get(self, key: tuple[str, str, str]) -> Tally:
        tally = self.tallies.get(key)
        if tally is None:
            tally = self.tallies[key] = Tally()
        return tally

    def samples(self) -> list[Sample]:
        return [(key, float(tally.n)) for key, tally in list(self.tallies.items())]


class _PendingPods(LeanMetric):
    """pending_pods read from the queue when scraped: always the value of that moment, and no
    gauge writes on the hot path (the counts are plain lengths, safe to read from the HTTP thread)."""

    kind = "gauge"

    name = "scheduler_pending_pods"
    documentation = _stable(
        "Number of pending pods, by the queue type. 'active' means number of pods in activeQ; "
        "'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in "
        "unschedulableEntities that the scheduler attempted to schedule and failed; 'gated' is the "
        "number of unschedulable pods that the scheduler never attempted to schedule because they "
        "are gated; 'incomplete' means number of pods in incompletePodGroupPods; 'pending' means "
        "number of pods in pendingPodGroupPods."
    )

    def __init__(self) -> None:
        super().__init__(self.name, self.documentation, ("queue",))
        self.source: Callable[[], Mapping[str, int]] | None = None

    def samples(self) -> list[Sample]:
        counts = self.source() if self.source is not None else {}
        return [((queue,), float(max(0, counts.get(queue, 0)))) for queue in PENDING_QUEUES]


_M = TypeVar("_M", bound=LeanMetric)


class PrometheusMetrics:
    """kube-scheduler's STABLE and BETA metrics, recorded from the start and exposed in ``registry``
    (at once when given, else by :meth:`expose`); exposed in one registry at most."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        rng: random.Random | None = None,
        *,
        plugin_buffer: int = PLUGIN_BUFFER_SIZE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry: CollectorRegistry | None = None
        self.metrics: list[LeanMetric] = []  # in the order they are exposed (the reference's)
        self._rng = rng if rng is not None else random.Random()
        self._clock = clock
        self._plugin_buffer = plugin_buffer
        self._plugin_room = plugin_buffer  # observations left in this flush interval
        self._plugin_window_end = clock() + PLUGIN_FLUSH_INTERVAL

        # STABLE
        self.schedule_attempts = self._counter(
            "scheduler_schedule_attempts_total",
            _stable(
                "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could "
                "not be scheduled, while 'error' means an internal scheduler problem."
            ),
            ["result", "profile"],
        )
        self.scheduling_attempt_duration = self._histogram(
            "scheduler_scheduling_attempt_duration_seconds",
            _stable("Scheduling attempt latency in seconds (scheduling algorithm + binding)"),
            ["result", "profile"],
            _ATTEMPT_BUCKETS,
        )
        self.preemption_victims_hist = self._histogram(
            "scheduler_preemption_victims",
            _stable("Number of selected preemption victims for preemption initiated by a single pod"),
            [],
            exponential_buckets(1, 2, 7),
        )
        self.preemption_attempts = self._counter(
            "scheduler_preemption_attempts_total",
            _stable("Total preemption attempts in the cluster till now"),
        )
        self.pending = self._add(_PendingPods())
        self.pod_scheduling_attempts = self._histogram(
            "scheduler_pod_scheduling_attempts",
            _stable("Number of attempts to successfully schedule a pod."),
            [],
            exponential_buckets(1, 2, 5),
        )
        self.extension_point_duration = self._histogram(
            "scheduler_framework_extension_point_duration_seconds",
            _stable("Latency for running all plugins of a specific extension point."),
            ["extension_point", "status", "profile"],
            _EXTENSION_POINT_BUCKETS,
        )
        self.queue_incoming_pods = self._counter(
            "scheduler_queue_incoming_pods_total",
            _stable("Number of pods added to scheduling queues by event and queue type."),
            ["queue", "event"],
        )

        # BETA
        self.scheduling_algorithm_duration = self._histogram(
            "scheduler_scheduling_algorithm_duration_seconds",
            _beta("Scheduling algorithm latency in seconds"),
            [],
            _ATTEMPT_BUCKETS,
        )
        self.goroutines = self._gauge(
            "scheduler_goroutines",
            _beta("Number of running goroutines split by the work they do such as binding."),
            ["operation"],
        )
        self.pod_scheduling_sli_duration = self._histogram(
            "scheduler_pod_scheduling_sli_duration_seconds",
            _beta(
                "E2e latency for a pod being scheduled, from the time the pod enters the scheduling "
                "queue and might involve multiple scheduling attempts."
            ),
            ["attempts"],
            _SLI_BUCKETS,
        )
        self.plugin_execution_duration = self._histogram(
            "scheduler_plugin_execution_duration_seconds",
            _beta("Duration for running a plugin at a specific extension point."),
            ["plugin", "extension_point", "status"],
            _PLUGIN_BUCKETS,
        )
        self.permit_wait_duration = self._histogram(
            "scheduler_permit_wait_duration_seconds",
            _beta("Duration of waiting on permit."),
            ["result"],
            _ATTEMPT_BUCKETS,
        )
        self.unschedulable_pods = self._gauge(
            "scheduler_unschedulable_pods",
            _beta(
                "The number of unschedulable pods broken down by plugin name. A pod will increment the "
                "gauge for all plugins that caused it to not schedule and so this metric have meaning "
                "only when broken down by plugin."
            ),
            ["plugin", "profile"],
        )
        self.plugin_evaluation = self._add(_TallyCounters())

        # ALPHA: pod groups (GenericWorkload) and OpportunisticBatching.
        self.workload_preemption_attempts = self._counter(
            "scheduler_workload_preemption_attempts_total",
            _alpha(
                "Total preemption attempts initiated by workload (including pod groups) in the cluster "
                "till now."
            ),
            ["result"],
        )
        self.workload_preemption_victims_hist = self._histogram(
            "scheduler_workload_preemption_victims",
            _alpha("Number of pod preemption victims caused by workload preemption."),
            [],
            exponential_buckets(1, 2, 11),
        )
        self.workload_disruptions_hist = self._histogram(
            "scheduler_preemption_workload_disruptions",
            _alpha(
                "Number of workload preemption units being preempted. A single preemption unit can be all "
                "pods in a pod group (in case of DisruptionMode=all), or a single pod (in case of "
                "DisruptionMode=single)."
            ),
            ["preemptor"],
            exponential_buckets(1, 2, 11),
        )
        self.pod_group_attempts = self._counter(
            "scheduler_podgroup_schedule_attempts_total",
            _alpha(
                "Number of attempts to schedule pod group, by the result. 'unschedulable' means a pod group "
                "could not be scheduled, while 'error' means an internal scheduler problem."
            ),
            ["result", "profile"],
        )
        self.pod_group_attempt_duration = self._histogram(
            "scheduler_podgroup_scheduling_attempt_duration_seconds",
            _alpha("Pod group scheduling attempt latency in seconds"),
            ["result", "profile"],
            _ATTEMPT_BUCKETS,
        )
        self.pod_group_algorithm_duration = self._histogram(
            "scheduler_podgroup_scheduling_algorithm_duration_seconds",
            _alpha("Pod group scheduling algorithm latency in seconds"),
            [],
            _ATTEMPT_BUCKETS,
        )
        self.pre_queueing_hint_evaluations = self._counter(
            "scheduler_pre_queueing_hint_evaluations_total",
            _alpha(
                "Number of PreQueueingHint evaluations, labeled by plugin and result (all_pods or narrowed)."
            ),
            ["plugin", "result"],
        )
        self.batch_attempts = self._counter(
            "scheduler_batch_attempts_total",
            _alpha("Counts of results when we attempt to use batching."),
            ["profile", "result"],
        )
        self.batch_cache_flushed = self._counter(
            "scheduler_batch_cache_flushed_total",
            _alpha("Counts of cache flushes by reason."),
            ["profile", "reason"],
        )
        self.batch_rescore_attempts = self._counter(
            "scheduler_batch_rescore_attempts_total",
            _alpha("Counts of rescore attempts during opportunistic batching."),
            ["profile"],
        )
        self.batch_rescore_duration = self._histogram(
            "scheduler_batch_rescore_duration_seconds",
            _alpha("Latency for rescoring a node during opportunistic batching."),
            ["profile"],
            _BATCH_BUCKETS,
        )
        self.get_node_hint_duration = self._histogram(
            "scheduler_get_node_hint_duration_seconds",
            _alpha("Latency for getting a node hint."),
            ["hinted", "profile"],
            _BATCH_BUCKETS,
        )
        self.store_schedule_results_duration = self._histogram(
            "scheduler_store_schedule_results_duration_seconds",
            _alpha("Latency for storing scheduling results."),
            ["profile"],
            _BATCH_BUCKETS,
        )

        self._binding_goroutines = self.goroutines.labels("binding")
        self._binding_goroutines.set(0)
        if registry is not None:
            self.expose(registry)

    def _add(self, metric: _M) -> _M:
        self.metrics.append(metric)
        return metric

    def _counter(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Counter:
        return self._add(Counter(name, documentation, labels))

    def _gauge(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Gauge:
        return self._add(Gauge(name, documentation, labels))

    def _histogram(
        self, name: str, documentation: str, labels: list[str], bounds: Sequence[float]
    ) -> Histogram:
        return self._add(Histogram(name, documentation, labels, bounds))

    def expose(self, registry: CollectorRegistry) -> None:
        """Register every metric with ``registry`` (imports prometheus-client); once."""
        from kopf_scheduler.metrics.exposition import register

        if self.registry is not None:
            raise ValueError("these metrics are already exposed")
        register(registry, self.metrics)
        self.registry = registry

    # -- wiring (the edge) --

    def watch_pending_pods(self, source: Callable[[], Mapping[str, int]] | None) -> None:
        """Read pending_pods from ``source`` (the queue's ``pending_pods``) at each scrape."""
        self.pending.source = source

    # -- MetricsRecorder --

    def sample_plugin_metrics(self) -> bool:
        # With the interval's budget spent, timing the cycle would only produce dropped samples.
        sampled = self._rng.random() * 100 < PLUGIN_METRICS_SAMPLE_PERCENT
        return sampled and (self._plugin_room > 0 or self._refill_plugin_room() > 0)

    def _refill_plugin_room(self) -> int:
        now = self._clock()
        if now >= self._plugin_window_end:
            self._plugin_room = self._plugin_buffer
            self._plugin_window_end = now + PLUGIN_FLUSH_INTERVAL
        return self._plugin_room

    def schedule_attempt(self, result: str, profile: str, seconds: float) -> None:
        key = (result, profile)
        child = self.schedule_attempts.children.get(key) or self.schedule_attempts.labels(*key)
        child.value += 1
        self.scheduling_attempt_duration.observe(key, seconds)

    def scheduling_algorithm(self, seconds: float) -> None:
        self.scheduling_algorithm_duration.observe((), seconds)

    def pod_scheduled(self, attempts: int, sli_seconds: float | None) -> None:
        self.pod_scheduling_attempts.observe((), attempts)
        if sli_seconds is not None:
            self.pod_scheduling_sli_duration.observe((attempts_label(attempts),), sli_seconds)

    def binding_goroutines(self, delta: int) -> None:
        self._binding_goroutines.value += delta

    def extension_point(self, point: str, status: str, profile: str, seconds: float) -> None:
        self.extension_point_duration.observe((point, status, profile), seconds)

    def plugin_duration(self, plugin: str, point: str, status: str, seconds: float, count: int = 1) -> None:
        room = self._plugin_room
        if room < count:
            room = self._refill_plugin_room()
            count = min(count, room)
        if count > 0:
            self._plugin_room = room - count
            self.plugin_execution_duration.observe((plugin, point, status), seconds, count)

    def plugin_evaluations(self, plugin: str, point: str, profile: str) -> Tally:
        return self.plugin_evaluation.get((plugin, point, profile))

    def permit_wait(self, status: str, seconds: float) -> None:
        self.permit_wait_duration.observe((status,), seconds)

    def preemption_attempt(self) -> None:
        self.preemption_attempts.inc()

    def preemption_victims(self, victims: int) -> None:
        self.preemption_victims_hist.observe((), victims)

    def workload_preemption_attempt(self, code: str) -> None:
        self.workload_preemption_attempts.labels(code).inc()

    def workload_preemption_victims(self, victims: int, disruptions: int) -> None:
        self.workload_preemption_victims_hist.observe((), victims)
        if disruptions > 0:
            self.workload_disruptions_hist.observe(("podgroup",), disruptions)

    def queue_incoming(self, queue: str, event: str) -> None:
        key = (queue, event)
        child = self.queue_incoming_pods.children.get(key) or self.queue_incoming_pods.labels(*key)
        child.value += 1

    def pre_queueing_hint(self, plugin: str, result: str) -> None:
        self.pre_queueing_hint_evaluations.labels(plugin, result).inc()

    def unschedulable_reason(self, plugin: str, profile: str, delta: int) -> None:
        key = (plugin, profile)
        child = self.unschedulable_pods.children.get(key) or self.unschedulable_pods.labels(*key)
        child.value += delta

    def pod_group_attempt(self, result: str, profile: str, seconds: float) -> None:
        self.pod_group_attempts.labels(result, profile).inc()
        self.pod_group_attempt_duration.observe((result, profile), seconds)

    def pod_group_algorithm(self, seconds: float) -> None:
        self.pod_group_algorithm_duration.observe((), seconds)

    def batch_attempt(self, profile: str, result: str) -> None:
        self.batch_attempts.labels(profile, result).inc()

    def batch_flushed(self, profile: str, reason: str) -> None:
        self.batch_cache_flushed.labels(profile, reason).inc()

    def batch_rescore(self, profile: str, seconds: float) -> None:
        self.batch_rescore_attempts.labels(profile).inc()
        self.batch_rescore_duration.observe((profile,), seconds)

    def node_hint_duration(self, hinted: str, profile: str, seconds: float) -> None:
        self.get_node_hint_duration.observe((hinted, profile), seconds)

    def store_results_duration(self, profile: str, seconds: float) -> None:
        self.store_schedule_results_duration.observe((profile,), seconds)
