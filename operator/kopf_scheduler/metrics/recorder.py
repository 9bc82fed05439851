"""The engine's metrics seam (the reference's ``pkg/scheduler/metrics``), without any exporter.

The scheduler, the framework runtime and the queue report through a ``MetricsRecorder`` given to
them at construction; ``NoopMetrics`` (the default) keeps ``simulate`` and the engine benchmarks
free of any exporter, and ``metrics.prometheus.PrometheusMetrics`` is what the operator serves.

Label values are the reference's: extension points (``PreFilter``, ``Filter``...), status codes
(``Success``, ``Unschedulable``...), results (``scheduled``, ``unschedulable``, ``error``) and
queue event labels (``UnscheduledPodAdd``, ``ScheduleAttemptFailure``, ``BackoffComplete``...).
"""

from __future__ import annotations

from typing import Protocol

__all__ = [
    "BIND",
    "CODE_LABELS",
    "ERROR_RESULT",
    "FILTER",
    "PERMIT",
    "PLUGIN_METRICS_SAMPLE_PERCENT",
    "POD_ATTEMPTS_LABEL_CAP",
    "POST_BIND",
    "POST_FILTER",
    "PRE_BIND",
    "PRE_ENQUEUE",
    "PRE_FILTER",
    "PRE_FILTER_EXTENSION_ADD_POD",
    "PRE_FILTER_EXTENSION_REMOVE_POD",
    "PRE_SCORE",
    "RESERVE",
    "SCHEDULED_RESULT",
    "SCORE",
    "SCORE_EXTENSION_NORMALIZE",
    "SUCCESS",
    "UNRESERVE",
    "UNSCHEDULABLE_RESULT",
    "MetricsRecorder",
    "NoopMetrics",
    "Tally",
    "attempts_label",
    "code_label",
]

# extension_point label values
PRE_ENQUEUE = "PreEnqueue"
PRE_FILTER = "PreFilter"
FILTER = "Filter"
PRE_FILTER_EXTENSION_ADD_POD = "PreFilterExtensionAddPod"
PRE_FILTER_EXTENSION_REMOVE_POD = "PreFilterExtensionRemovePod"
POST_FILTER = "PostFilter"
POD_GROUP_POST_FILTER = "PodGroupPostFilter"
PRE_SCORE = "PreScore"
SCORE = "Score"
SCORE_EXTENSION_NORMALIZE = "ScoreExtensionNormalize"
RESERVE = "Reserve"
UNRESERVE = "Unreserve"
PERMIT = "Permit"
PRE_BIND = "PreBind"
BIND = "Bind"
POST_BIND = "PostBind"

# schedule_attempts_total's result label values
SCHEDULED_RESULT = "scheduled"
UNSCHEDULABLE_RESULT = "unschedulable"
ERROR_RESULT = "error"
WAITING_ON_PREEMPTION_RESULT = "waiting_on_preemption"  # podgroup_schedule_attempts_total only

# Status codes as the reference prints them (``Code.String()``), indexed by ``Code``.
CODE_LABELS = ("Success", "Error", "Unschedulable", "UnschedulableAndUnresolvable", "Wait", "Skip", "Pending")
SUCCESS = CODE_LABELS[0]

# The reference times each plugin in only this share of scheduling cycles (and of PreEnqueue runs).
PLUGIN_METRICS_SAMPLE_PERCENT = 10
# pod_scheduling_sli_duration_seconds' attempts label stops at "15+" (bounded cardinality).
POD_ATTEMPTS_LABEL_CAP = 15


def code_label(code: int | None) -> str:
    """A status code's label; None (the engine's Success) is ``Success``."""
    return SUCCESS if code is None else CODE_LABELS[code]


def attempts_label(attempts: int) -> str:
    return f"{POD_ATTEMPTS_LABEL_CAP}+" if attempts >= POD_ATTEMPTS_LABEL_CAP else str(attempts)


class Tally:
    """A bare counter a hot loop bumps (``tally.n += k``); the exporter reads it when scraped.

    plugin_evaluation_total counts every Filter/Score call per node, preemption's dry runs
    included: a method call and a lock per node would cost more than many plugins' own work.
    """

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


class MetricsRecorder(Protocol):
    """What the engine reports. Durations are seconds; ``profile`` is the schedulerName."""

    def sample_plugin_metrics(self) -> bool:
        """Whether this cycle (or PreEnqueue run) times each plugin: ~10% of them, as the reference."""
        ...

    # -- scheduling cycle (schedule_one.go) --

    def schedule_attempt(self, result: str, profile: str, seconds: float) -> None:
        """schedule_attempts_total and scheduling_attempt_duration_seconds."""

    def scheduling_algorithm(self, seconds: float) -> None:
        """scheduling_algorithm_duration_seconds: the cycle's start to the end of PostFilter."""

    def pod_scheduled(self, attempts: int, sli_seconds: float | None) -> None:
        """pod_scheduling_attempts, and pod_scheduling_sli_duration_seconds when the pod has an
        initial attempt timestamp."""

    def binding_goroutines(self, delta: int) -> None:
        """goroutines{operation="binding"}: binding cycles running."""

    # -- framework (framework.go) --

    def extension_point(self, point: str, status: str, profile: str, seconds: float) -> None:
        """framework_extension_point_duration_seconds."""

    def plugin_duration(self, plugin: str, point: str, status: str, seconds: float, count: int = 1) -> None:
        """plugin_execution_duration_seconds; ``count`` calls of ``seconds`` each (a vector
        filter/score stands for one call per node)."""

    def plugin_evaluations(self, plugin: str, point: str, profile: str) -> Tally:
        """plugin_evaluation_total's counter for one series (the same object on every call)."""
        ...

    def permit_wait(self, status: str, seconds: float) -> None:
        """permit_wait_duration_seconds."""

    # -- preemption (default_preemption.go, executor.go) --

    def preemption_attempt(self) -> None:
        """preemption_attempts_total: every DefaultPreemption PostFilter call."""

    def preemption_victims(self, victims: int) -> None:
        """preemption_victims: the chosen candidate's victims."""

    def workload_preemption_attempt(self, code: str) -> None:
        """workload_preemption_attempts_total{result}: every PodGroupPostFilter of DefaultPreemption."""

    def workload_preemption_victims(self, victims: int, disruptions: int) -> None:
        """workload_preemption_victims, and preemption_workload_disruptions{preemptor="podgroup"}
        when a group is disrupted."""

    # -- queue (scheduling_queue.go) --

    def queue_incoming(self, queue: str, event: str) -> None:
        """queue_incoming_pods_total: a pod entered activeQ/backoffQ/the unschedulable pool."""

    def unschedulable_reason(self, plugin: str, profile: str, delta: int) -> None:
        """unschedulable_pods: queued pods a plugin rejected (up when queued, down when popped)."""

    def pre_queueing_hint(self, plugin: str, result: str) -> None:
        """pre_queueing_hint_evaluations_total: a PreQueueingHint asked (SchedulerPreQueueingHints
        on), ``result`` all_pods or narrowed."""

    # -- pod groups (schedule_one_podgroup.go; ALPHA there) --

    def pod_group_attempt(self, result: str, profile: str, seconds: float) -> None:
        """podgroup_schedule_attempts_total and podgroup_scheduling_attempt_duration_seconds."""

    def pod_group_algorithm(self, seconds: float) -> None:
        """podgroup_scheduling_algorithm_duration_seconds."""

    # -- opportunistic batching (framework/runtime/batch.go; ALPHA there) --

    def batch_attempt(self, profile: str, result: str) -> None:
        """batch_attempts_total: no_hint, hint_used or hint_not_used."""

    def batch_flushed(self, profile: str, reason: str) -> None:
        """batch_cache_flushed_total: why the cached results could not be used."""

    def batch_rescore(self, profile: str, seconds: float) -> None:
        """batch_rescore_attempts_total and batch_rescore_duration_seconds."""

    def node_hint_duration(self, hinted: str, profile: str, seconds: float) -> None:
        """get_node_hint_duration_seconds (``hinted``: hint or no_hint)."""

    def store_results_duration(self, profile: str, seconds: float) -> None:
        """store_schedule_results_duration_seconds."""


class NoopMetrics:
    """Records nothing and never samples plugin durations (offline engine, benchmarks)."""

    def sample_plugin_metrics(self) -> bool:
        return False

    def schedule_attempt(self, result: str, profile: str, seconds: float) -> None:
        pass

    def scheduling_algorithm(self, seconds: float) -> None:
        pass

    def pod_scheduled(self, attempts: int, sli_seconds: float | None) -> None:
        pass

    def binding_goroutines(self, delta: int) -> None:
        pass

    def extension_point(self, point: str, status: str, profile: str, seconds: float) -> None:
        pass

    def plugin_duration(self, plugin: str, point: str, status: str, seconds: float, count: int = 1) -> None:
        pass

    def plugin_evaluations(self, plugin: str, point: str, profile: str) -> Tally:
        return Tally()

    def permit_wait(self, status: str, seconds: float) -> None:
        pass

    def preemption_attempt(self) -> None:
        pass

    def preemption_victims(self, victims: int) -> None:
        pass

    def workload_preemption_attempt(self, code: str) -> None:
        pass

    def workload_preemption_victims(self, victims: int, disruptions: int) -> None:
        pass

    def queue_incoming(self, queue: str, event: str) -> None:
        pass

    def unschedulable_reason(self, plugin: str, profile: str, delta: int) -> None:
        pass

    def pre_queueing_hint(self, plugin: str, result: str) -> None:
        pass

    def pod_group_attempt(self, result: str, profile: str, seconds: float) -> None:
        pass

    def pod_group_algorithm(self, seconds: float) -> None:
        pass

    def batch_attempt(self, profile: str, result: str) -> None:
        pass

    def batch_flushed(self, profile: str, reason: str) -> None:
        pass

    def batch_rescore(self, profile: str, seconds: float) -> None:
        pass

    def node_hint_duration(self, hinted: str, profile: str, seconds: float) -> None:
        pass

    def store_results_duration(self, profile: str, seconds: float) -> None:
        pass
