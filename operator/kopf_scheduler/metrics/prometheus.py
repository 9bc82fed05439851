"""The ``MetricsRecorder`` the operator serves: kube-scheduler v1.37.2's STABLE and BETA metrics.

Names, help texts (with component-base's ``[STABLE]``/``[BETA]`` prefix), label names and bucket
layouts are the reference's, so dashboards and alerts written for kube-scheduler work unchanged.
Everything goes into one ``CollectorRegistry`` (the process-wide one for the operator, a fresh one
per test).

Cost per pod matters (the engine is benchmarked against the reference): histograms are a lean
collector here (one lock and a bisect per observation, about a third of prometheus-client's
``Histogram.observe``; an observation may stand for several calls, as a vector filter stands for
one call per node), counter and gauge children are kept in plain dicts once created, and
``plugin_evaluation_total`` and ``pending_pods`` are read from the engine when scraped.
"""

from __future__ import annotations

import bisect
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from kopf_scheduler.metrics.recorder import PLUGIN_METRICS_SAMPLE_PERCENT, Tally, attempts_label

__all__ = [
    "PENDING_QUEUES",
    "PLUGIN_BUFFER_SIZE",
    "PLUGIN_FLUSH_INTERVAL",
    "PrometheusMetrics",
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


class _Histogram(Collector):
    """A histogram keyed by label-value tuples; ``observe`` may count N observations of one value."""

    def __init__(self, name: str, documentation: str, labels: Sequence[str], bounds: Sequence[float]) -> None:
        self.name = name
        self.documentation = documentation
        self.labels = list(labels)
        self.bounds = list(bounds)
        self._les = [floatToGoString(b) for b in bounds] + ["+Inf"]
        self._series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}
        self._lock = threading.Lock()
        if not self.labels:  # exposed (all zero) from the start, as an unlabelled histogram is
            self._series[()] = ([0] * (len(self.bounds) + 1), [0.0])

    def observe(self, key: tuple[str, ...], value: float, count: int = 1) -> None:
        i = bisect.bisect_left(self.bounds, value)
        with self._lock:
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = ([0] * (len(self.bounds) + 1), [0.0])
            series[0][i] += count
            series[1][0] += value * count

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labels)
        with self._lock:
            snapshot = [(key, list(counts), total[0]) for key, (counts, total) in self._series.items()]
        for key, counts, total in snapshot:
            cumulative = 0
            buckets = []
            for le, n in zip(self._les, counts, strict=True):
                cumulative += n
                buckets.append((le, float(cumulative)))
            family.add_metric(list(key), buckets, total)
        yield family

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=self.labels)


class _TallyCounters(Collector):
    """plugin_evaluation_total read from the engine's ``Tally`` objects at scrape time."""

    name = "scheduler_plugin_evaluation_total"
    documentation = _beta(
        "Number of attempts to schedule pods by each plugin and the extension point "
        "(available only in PreFilter, Filter, PreScore, and Score)."
    )
    labels = ("plugin", "extension_point", "profile")

    def __init__(self) -> None:
        self.tallies: dict[tuple[str, str, str], Tally] = {}

    def get(self, key: tuple[str, str, str]) -> Tally:
        tally = self.tallies.get(key)
        if tally is None:
            tally = self.tallies[key] = Tally()
        return tally

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labels)
        for key, tally in list(self.tallies.items()):
            family.add_metric(list(key), float(tally.n))
        yield family

    def describe(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self.name, self.documentation, labels=self.labels)


class _PendingPods(Collector):
    """pending_pods read from the queue when scraped: always the value of that moment, and no
    gauge writes on the hot path (the counts are plain lengths, safe to read from the HTTP thread)."""

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
        self.source: Callable[[], Mapping[str, int]] | None = None

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(self.name, self.documentation, labels=["queue"])
        counts = self.source() if self.source is not None else {}
        for queue in PENDING_QUEUES:
            family.add_metric([queue], float(max(0, counts.get(queue, 0))))
        yield family

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(self.name, self.documentation, labels=["queue"])


class PrometheusMetrics:
    """kube-scheduler's STABLE and BETA metrics in ``registry``; one instance per registry."""

    def __init__(
        self,
        registry: CollectorRegistry,
        rng: random.Random | None = None,
        *,
        plugin_buffer: int = PLUGIN_BUFFER_SIZE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self._rng = rng if rng is not None else random.Random()
        self._clock = clock
        self._plugin_buffer = plugin_buffer
        self._plugin_room = plugin_buffer  # observations left in this flush interval
        self._plugin_window_end = clock() + PLUGIN_FLUSH_INTERVAL
        reg = registry

        # STABLE
        self.schedule_attempts = Counter(
            "scheduler_schedule_attempts_total",
            _stable(
                "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could "
                "not be scheduled, while 'error' means an internal scheduler problem."
            ),
            ["result", "profile"],
            registry=reg,
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
        self.preemption_attempts = Counter(
            "scheduler_preemption_attempts_total",
            _stable("Total preemption attempts in the cluster till now"),
            registry=reg,
        )
        self.pending = _PendingPods()
        reg.register(self.pending)
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
        self.queue_incoming_pods = Counter(
            "scheduler_queue_incoming_pods_total",
            _stable("Number of pods added to scheduling queues by event and queue type."),
            ["queue", "event"],
            registry=reg,
        )

        # BETA
        self.scheduling_algorithm_duration = self._histogram(
            "scheduler_scheduling_algorithm_duration_seconds",
            _beta("Scheduling algorithm latency in seconds"),
            [],
            _ATTEMPT_BUCKETS,
        )
        self.goroutines = Gauge(
            "scheduler_goroutines",
            _beta("Number of running goroutines split by the work they do such as binding."),
            ["operation"],
            registry=reg,
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
        self.unschedulable_pods = Gauge(
            "scheduler_unschedulable_pods",
            _beta(
                "The number of unschedulable pods broken down by plugin name. A pod will increment the "
                "gauge for all plugins that caused it to not schedule and so this metric have meaning "
                "only when broken down by plugin."
            ),
            ["plugin", "profile"],
            registry=reg,
        )
        self.plugin_evaluation = _TallyCounters()
        reg.register(self.plugin_evaluation)

        # ALPHA: pod groups (GenericWorkload) and OpportunisticBatching.
        self.workload_preemption_attempts = Counter(
            "scheduler_workload_preemption_attempts_total",
            _alpha(
                "Total preemption attempts initiated by workload (including pod groups) in the cluster "
                "till now."
            ),
            ["result"],
            registry=reg,
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
        self.pod_group_attempts = Counter(
            "scheduler_podgroup_schedule_attempts_total",
            _alpha(
                "Number of attempts to schedule pod group, by the result. 'unschedulable' means a pod group "
                "could not be scheduled, while 'error' means an internal scheduler problem."
            ),
            ["result", "profile"],
            registry=reg,
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
        self.pre_queueing_hint_evaluations = Counter(
            "scheduler_pre_queueing_hint_evaluations_total",
            _alpha(
                "Number of PreQueueingHint evaluations, labeled by plugin and result (all_pods or narrowed)."
            ),
            ["plugin", "result"],
            registry=reg,
        )
        self.batch_attempts = Counter(
            "scheduler_batch_attempts_total",
            _alpha("Counts of results when we attempt to use batching."),
            ["profile", "result"],
            registry=reg,
        )
        self.batch_cache_flushed = Counter(
            "scheduler_batch_cache_flushed_total",
            _alpha("Counts of cache flushes by reason."),
            ["profile", "reason"],
            registry=reg,
        )
        self.batch_rescore_attempts = Counter(
            "scheduler_batch_rescore_attempts_total",
            _alpha("Counts of rescore attempts during opportunistic batching."),
            ["profile"],
            registry=reg,
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
        self._attempt_children: dict[tuple[str, str], Counter] = {}
        self._incoming_children: dict[tuple[str, str], Counter] = {}
        self._reason_children: dict[tuple[str, str], Gauge] = {}

    def _histogram(
        self, name: str, documentation: str, labels: list[str], bounds: Sequence[float]
    ) -> _Histogram:
        hist = _Histogram(name, documentation, labels, bounds)
        self.registry.register(hist)
        return hist

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
        child = self._attempt_children.get(key)
        if child is None:
            child = self._attempt_children[key] = self.schedule_attempts.labels(result, profile)
        child.inc()
        self.scheduling_attempt_duration.observe(key, seconds)

    def scheduling_algorithm(self, seconds: float) -> None:
        self.scheduling_algorithm_duration.observe((), seconds)

    def pod_scheduled(self, attempts: int, sli_seconds: float | None) -> None:
        self.pod_scheduling_attempts.observe((), attempts)
        if sli_seconds is not None:
            self.pod_scheduling_sli_duration.observe((attempts_label(attempts),), sli_seconds)

    def binding_goroutines(self, delta: int) -> None:
        self._binding_goroutines.inc(delta)

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
        child = self._incoming_children.get(key)
        if child is None:
            child = self._incoming_children[key] = self.queue_incoming_pods.labels(queue, event)
        child.inc()

    def pre_queueing_hint(self, plugin: str, result: str) -> None:
        self.pre_queueing_hint_evaluations.labels(plugin, result).inc()

    def unschedulable_reason(self, plugin: str, profile: str, delta: int) -> None:
        key = (plugin, profile)
        child = self._reason_children.get(key)
        if child is None:
            child = self._reason_children[key] = self.unschedulable_pods.labels(plugin, profile)
        child.inc(delta)

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
