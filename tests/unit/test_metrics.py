"""Metrics: kube-scheduler v1.37.2's STABLE and BETA metrics, scraped after scheduling real pods.

Each test schedules pods through the real queue, cache, default profile and scheduler with a
``PrometheusMetrics`` on a fresh registry, then reads the registry the way a scrape would.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.engine import new_engine
from kopf_scheduler.framework.client import NotFound
from kopf_scheduler.framework.interface import Code, CycleState, Plugin, Status
from kopf_scheduler.framework.profiles import load_profile
from kopf_scheduler.framework.registry import Registry
from kopf_scheduler.framework.runtime import Framework
from kopf_scheduler.metrics.prometheus import PENDING_QUEUES, PrometheusMetrics, exponential_buckets
from kopf_scheduler.metrics.recorder import NoopMetrics, attempts_label
from kopf_scheduler.plugins.default_binder import DefaultBinder
from kopf_scheduler.plugins.priority_sort import PrioritySort
from kopf_scheduler_workbench.testing.builders import make_node, make_pod
from kopf_scheduler_workbench.testing.fake_client import FakeClusterClient

PROFILE = "kopf-scheduler"

STABLE = {
    "scheduler_schedule_attempts_total": ("counter", ["profile", "result"]),
    "scheduler_scheduling_attempt_duration_seconds": ("histogram", ["profile", "result"]),
    "scheduler_preemption_victims": ("histogram", []),
    "scheduler_preemption_attempts_total": ("counter", []),
    "scheduler_pending_pods": ("gauge", ["queue"]),
    "scheduler_pod_scheduling_attempts": ("histogram", []),
    "scheduler_framework_extension_point_duration_seconds": (
        "histogram",
        ["extension_point", "profile", "status"],
    ),
    "scheduler_queue_incoming_pods_total": ("counter", ["event", "queue"]),
}
BETA = {
    "scheduler_scheduling_algorithm_duration_seconds": ("histogram", []),
    "scheduler_goroutines": ("gauge", ["operation"]),
    "scheduler_pod_scheduling_sli_duration_seconds": ("histogram", ["attempts"]),
    "scheduler_plugin_execution_duration_seconds": ("histogram", ["extension_point", "plugin", "status"]),
    "scheduler_permit_wait_duration_seconds": ("histogram", ["result"]),
    "scheduler_unschedulable_pods": ("gauge", ["plugin", "profile"]),
    "scheduler_plugin_evaluation_total": ("counter", ["extension_point", "plugin", "profile"]),
}


class AlwaysSample(random.Random):
    """Samples every cycle for plugin durations, so counts are exact in the tests."""

    def random(self) -> float:
        return 0.0


class NeverSample(random.Random):
    def random(self) -> float:
        return 0.99


class Env:
    def __init__(self, rng: random.Random | None = None, clock: Any = None) -> None:
        self.registry = CollectorRegistry()
        # An unbounded plugin-duration budget: counts in these tests are exact.
        self.metrics = PrometheusMetrics(
            self.registry, rng=rng if rng is not None else AlwaysSample(), plugin_buffer=10**9
        )
        self.client = FakeClusterClient()
        engine = new_engine(
            self.client, rng=random.Random(1), metrics=self.metrics, **({"clock": clock} if clock else {})
        )
        self.cache, self.queue, self.sched = engine.cache, engine.queue, engine.scheduler
        self.metrics.watch_pending_pods(self.queue.pending_pods)

    def value(self, name: str, **labels: str) -> float:
        got = self.registry.get_sample_value(name, labels)
        return 0.0 if got is None else got

    def count(self, name: str, **labels: str) -> float:
        return self.value(name + "_count", **labels)

    async def drain(self) -> None:
        while await self.sched.schedule_one():
            pass
        await self.sched.wait_for_bindings()

    def run(self) -> None:
        asyncio.run(self.drain())


def families(registry: CollectorRegistry) -> dict[str, Any]:
    """What a scraper parses from the exposition text."""
    text = generate_latest(registry).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def bucket_bounds(env: Env, name: str) -> list[float]:
    fam = families(env.registry)[name]
    return sorted({float(s.labels["le"]) for s in fam.samples if s.name == name + "_bucket"})


def test_every_stable_and_beta_metric_with_its_type_labels_and_stability() -> None:
    env = Env()
    env.cache.add_node(make_node("n1"))
    env.cache.add_node(make_node("n2"))
    env.queue.add(make_pod("p", cpu="100m"))
    env.run()
    fams = families(env.registry)
    for table, level in ((STABLE, "[STABLE] "), (BETA, "[BETA] ")):
        for name, (kind, labels) in table.items():
            base = name.removesuffix("_total") if kind == "counter" else name
            assert base in fams, name
            fam = fams[base]
            assert fam.type == kind, name
            assert fam.documentation.startswith(level), name
            label_names = {k for s in fam.samples for k in s.labels if k not in ("le",)}
            if fam.samples:  # a labelled metric shows its labels once it has a series
                assert sorted(label_names) == labels, name


@pytest.mark.parametrize(
    ("name", "start", "factor", "count"),
    [
        ("scheduler_scheduling_attempt_duration_seconds", 0.001, 2, 15),
        ("scheduler_scheduling_algorithm_duration_seconds", 0.001, 2, 15),
        ("scheduler_framework_extension_point_duration_seconds", 0.0001, 2, 12),
        ("scheduler_plugin_execution_duration_seconds", 0.00001, 1.5, 20),
        ("scheduler_pod_scheduling_sli_duration_seconds", 0.01, 2, 20),
        ("scheduler_pod_scheduling_attempts", 1, 2, 5),
        ("scheduler_preemption_victims", 1, 2, 7),
    ],
)
def test_buckets_are_the_reference_exponential_layouts(
    name: str, start: float, factor: float, count: int
) -> None:
    env = Env()
    env.cache.add_node(make_node("n1"))
    env.cache.add_node(make_node("n2"))
    env.queue.add(make_pod("p", cpu="100m"))
    env.run()
    want = [start * factor**i for i in range(count)] + [float("inf")]
    assert bucket_bounds(env, name) == pytest.approx(want, rel=1e-12)
    assert exponential_buckets(0.00001, 1.5, 20)[-1] == pytest.approx(0.00001 * 1.5**19)


def test_scheduled_pods() -> None:
    env = Env()
    for i in range(2):
        env.cache.add_node(make_node(f"n{i}"))
    for i in range(3):
        env.queue.add(make_pod(f"p{i}", cpu="100m"))
    env.run()
    assert env.client.bindings and len(env.client.bindings) == 3

    assert env.value("scheduler_schedule_attempts_total", result="scheduled", profile=PROFILE) == 3
    assert env.value("scheduler_schedule_attempts_total", result="unschedulable", profile=PROFILE) == 0
    assert (
        env.count("scheduler_scheduling_attempt_duration_seconds", result="scheduled", profile=PROFILE) == 3
    )
    assert env.count("scheduler_scheduling_algorithm_duration_seconds") == 3
    # One attempt each: all in the first bucket; the SLI is labelled by attempts.
    assert env.value("scheduler_pod_scheduling_attempts_bucket", le="1.0") == 3
    assert env.value("scheduler_pod_scheduling_attempts_sum") == 3
    assert env.count("scheduler_pod_scheduling_sli_duration_seconds", attempts="1") == 3
    assert env.value("scheduler_queue_incoming_pods_total", queue="active", event="UnscheduledPodAdd") == 3
    assert env.value("scheduler_goroutines", operation="binding") == 0

    for point in ("PreEnqueue", "PreFilter", "Filter", "PreScore", "Score", "Reserve", "Permit"):
        assert (
            env.count(
                "scheduler_framework_extension_point_duration_seconds",
                extension_point=point,
                status="Success",
                profile=PROFILE,
            )
            == 3
        ), point
    for point in ("PreBind", "Bind", "PostBind"):
        assert (
            env.count(
                "scheduler_framework_extension_point_duration_seconds",
                extension_point=point,
                status="Success",
                profile=PROFILE,
            )
            == 3
        ), point
    # No Unreserve and no PostFilter on the happy path.
    assert (
        env.count(
            "scheduler_framework_extension_point_duration_seconds",
            extension_point="PostFilter",
            status="Unschedulable",
            profile=PROFILE,
        )
        == 0
    )

    # Filter and Score count one evaluation per node (3 pods x 2 nodes), PreFilter one per pod.
    evals = "scheduler_plugin_evaluation_total"
    assert env.value(evals, plugin="NodeResourcesFit", extension_point="Filter", profile=PROFILE) == 6
    assert env.value(evals, plugin="NodeResourcesFit", extension_point="PreFilter", profile=PROFILE) == 3
    assert env.value(evals, plugin="TaintToleration", extension_point="Score", profile=PROFILE) == 6
    assert (
        env.value(evals, plugin="NodeResourcesBalancedAllocation", extension_point="Score", profile=PROFILE)
        == 6
    )
    # Plugins that skip (no affinity terms) are not evaluated, as the reference's counters skip Skip.
    assert env.value(evals, plugin="InterPodAffinity", extension_point="PreFilter", profile=PROFILE) == 0

    dur = "scheduler_plugin_execution_duration_seconds"
    assert env.count(dur, plugin="NodeResourcesFit", extension_point="Filter", status="Success") == 6
    assert env.count(dur, plugin="NodeResourcesFit", extension_point="Score", status="Success") == 6
    assert env.count(dur, plugin="DefaultBinder", extension_point="Bind", status="Success") == 3
    assert env.count(dur, plugin="PrioritySort", extension_point="PreEnqueue", status="Success") == 0
    assert env.count(dur, plugin="SchedulingGates", extension_point="PreEnqueue", status="Success") == 3
    assert env.count(dur, plugin="InterPodAffinity", extension_point="PreFilter", status="Skip") == 3
    assert env.value("scheduler_pending_pods", queue="active") == 0


def test_plugin_durations_are_sampled_like_the_reference() -> None:
    env = Env(rng=NeverSample())
    env.cache.add_node(make_node("n1"))
    env.queue.add(make_pod("p", cpu="100m"))
    env.run()
    fams = families(env.registry)
    assert not [s for s in fams["scheduler_plugin_execution_duration_seconds"].samples]
    # Extension points and evaluations are recorded in every cycle all the same.
    assert (
        env.value(
            "scheduler_plugin_evaluation_total",
            plugin="NodeResourcesFit",
            extension_point="Filter",
            profile=PROFILE,
        )
        == 1
    )
    rate = PrometheusMetrics(CollectorRegistry(), rng=random.Random(7))
    sampled = sum(rate.sample_plugin_metrics() for _ in range(20000))
    assert 0.09 < sampled / 20000 < 0.11


def test_unschedulable_pod_then_deleted() -> None:
    env = Env()
    env.cache.add_node(make_node("n1", cpu="1"))
    env.cache.add_node(make_node("n2", cpu="1"))
    big = make_pod("big", cpu="4")
    env.queue.add(big)
    env.run()

    assert env.value("scheduler_schedule_attempts_total", result="unschedulable", profile=PROFILE) == 1
    assert (
        env.count("scheduler_scheduling_attempt_duration_seconds", result="unschedulable", profile=PROFILE)
        == 1
    )
    assert env.count("scheduler_scheduling_algorithm_duration_seconds") == 1
    # DefaultPreemption's PostFilter ran (and found nothing to preempt): one attempt, no victims.
    assert env.value("scheduler_preemption_attempts_total") == 1
    assert env.count("scheduler_preemption_victims") == 0
    assert (
        env.count(
            "scheduler_framework_extension_point_duration_seconds",
            extension_point="PostFilter",
            status="Unschedulable",
            profile=PROFILE,
        )
        == 1
    )
    assert (
        env.value(
            "scheduler_queue_incoming_pods_total", queue="unschedulable", event="ScheduleAttemptFailure"
        )
        == 1
    )
    assert env.value("scheduler_unschedulable_pods", plugin="NodeResourcesFit", profile=PROFILE) == 1
    assert env.value("scheduler_pending_pods", queue="unschedulable") == 1
    assert env.value("scheduler_pending_pods", queue="active") == 0
    for queue in PENDING_QUEUES:
        assert env.registry.get_sample_value("scheduler_pending_pods", {"queue": queue}) is not None
    # Both nodes rejected by the vector filter, labelled with the per-node method's code (a request
    # above the node's allocatable is unresolvable).
    dur = "scheduler_plugin_execution_duration_seconds"
    code = "UnschedulableAndUnresolvable"
    assert env.count(dur, plugin="NodeResourcesFit", extension_point="Filter", status=code) == 2
    assert env.count(dur, plugin="NodeResourcesFit", extension_point="Filter", status="Success") == 0
    assert (
        env.count(dur, plugin="DefaultPreemption", extension_point="PostFilter", status="Unschedulable") == 1
    )
    # No Score ran.
    assert (
        env.count(
            "scheduler_framework_extension_point_duration_seconds",
            extension_point="Score",
            status="Success",
            profile=PROFILE,
        )
        == 0
    )

    env.queue.delete(big)
    assert env.value("scheduler_unschedulable_pods", plugin="NodeResourcesFit", profile=PROFILE) == 0
    assert env.value("scheduler_pending_pods", queue="unschedulable") == 0


def test_requeued_pod_leaves_unschedulable_pods_when_popped_and_counts_its_attempts() -> None:
    env = Env()
    env.cache.add_node(make_node("n1", cpu="1"))
    env.queue.add(make_pod("big", cpu="2"))
    env.run()
    assert env.value("scheduler_unschedulable_pods", plugin="NodeResourcesFit", profile=PROFILE) == 1

    # A bigger node arrives: the pod goes back to a queue under the event's label and schedules.
    node = make_node("n2", cpu="8")
    env.cache.add_node(node)
    from kopf_scheduler.framework.events import EVENT_NODE_ADD

    env.queue.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, node)
    moved = env.value("scheduler_queue_incoming_pods_total", queue="backoff", event="NodeAdd") + env.value(
        "scheduler_queue_incoming_pods_total", queue="active", event="NodeAdd"
    )
    assert moved == 1
    env.run()  # pops from backoffQ when activeQ is empty (PopFromBackoffQ), as the reference
    assert env.value("scheduler_unschedulable_pods", plugin="NodeResourcesFit", profile=PROFILE) == 0
    assert env.value("scheduler_schedule_attempts_total", result="scheduled", profile=PROFILE) == 1
    assert env.value("scheduler_pod_scheduling_attempts_bucket", le="1.0") == 0
    assert env.value("scheduler_pod_scheduling_attempts_bucket", le="2.0") == 1
    assert env.count("scheduler_pod_scheduling_sli_duration_seconds", attempts="2") == 1


def test_preempting_pod_records_attempt_and_victims() -> None:
    env = Env()
    env.cache.add_node(make_node("n1", cpu="2"))
    env.cache.add_pod(make_pod("low-1", cpu="1", node_name="n1", priority=0))
    env.cache.add_pod(make_pod("low-2", cpu="1", node_name="n1", priority=0))
    env.queue.add(make_pod("high", cpu="2", priority=100))
    env.run()

    assert env.value("scheduler_preemption_attempts_total") == 1
    assert env.count("scheduler_preemption_victims") == 1
    assert env.value("scheduler_preemption_victims_sum") == 2
    assert env.value("scheduler_preemption_victims_bucket", le="1.0") == 0
    assert env.value("scheduler_preemption_victims_bucket", le="2.0") == 1
    assert env.value("scheduler_schedule_attempts_total", result="unschedulable", profile=PROFILE) == 1
    assert sorted(env.client.evicted) == ["default/low-1", "default/low-2"]


def test_bind_error_counts_as_error_attempt() -> None:
    env = Env()
    env.cache.add_node(make_node("n1"))
    pod = make_pod("gone", cpu="100m")
    env.client.fail_bind[pod.key] = NotFound('pods "gone" not found', 404)
    env.queue.add(pod)
    env.run()
    assert env.value("scheduler_schedule_attempts_total", result="error", profile=PROFILE) == 1
    assert env.value("scheduler_schedule_attempts_total", result="scheduled", profile=PROFILE) == 0
    assert (
        env.count(
            "scheduler_framework_extension_point_duration_seconds",
            extension_point="Bind",
            status="Error",
            profile=PROFILE,
        )
        == 1
    )
    assert (
        env.count(
            "scheduler_framework_extension_point_duration_seconds",
            extension_point="Unreserve",
            status="Success",
            profile=PROFILE,
        )
        == 1
    )


def test_gated_pod_is_counted_in_the_unschedulable_pool() -> None:
    env = Env()
    env.cache.add_node(make_node("n1"))
    env.queue.add(make_pod("gated", cpu="100m", schedulingGates=[{"name": "wait"}]))
    assert (
        env.value("scheduler_queue_incoming_pods_total", queue="unschedulable", event="UnscheduledPodAdd")
        == 1
    )
    assert env.value("scheduler_queue_incoming_pods_total", queue="active", event="UnscheduledPodAdd") == 0
    assert env.value("scheduler_unschedulable_pods", plugin="SchedulingGates", profile=PROFILE) == 1
    assert env.value("scheduler_pending_pods", queue="gated") == 1
    # The reference's PreEnqueue point is labelled Success even when a plugin gates the pod.
    assert (
        env.count(
            "scheduler_framework_extension_point_duration_seconds",
            extension_point="PreEnqueue",
            status="Success",
            profile=PROFILE,
        )
        == 1
    )
    dur = "scheduler_plugin_execution_duration_seconds"
    assert (
        env.count(
            dur, plugin="SchedulingGates", extension_point="PreEnqueue", status="UnschedulableAndUnresolvable"
        )
        == 1
    )


class Waiter(Plugin):
    name = "Waiter"

    def permit(self, state: CycleState, pod: Pod, node_name: str) -> tuple[Status | None, float]:
        return Status(Code.WAIT), 10.0


async def test_permit_wait_and_its_extension_point() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry, rng=AlwaysSample(), plugin_buffer=10**9)
    reg = Registry({"Waiter": Waiter, "PrioritySort": PrioritySort, "DefaultBinder": DefaultBinder})
    spec = {
        "schedulerName": "w",
        "plugins": {
            "multiPoint": {
                "enabled": [{"name": "PrioritySort"}, {"name": "Waiter"}, {"name": "DefaultBinder"}],
                "disabled": [{"name": "*"}],
            }
        },
    }
    fw = Framework(load_profile(spec, reg), reg, metrics=metrics)
    pod = make_pod("p")
    state = CycleState()
    state.record_plugin_metrics = True
    for outcome in ("allow", "reject"):
        assert fw.run_permit_plugins(state, pod, "n1") is not None
        waiting = asyncio.ensure_future(fw.wait_on_permit(pod))
        await asyncio.sleep(0)
        wp = fw.get_waiting_pod(pod.uid)
        assert wp is not None
        if outcome == "allow":
            wp.allow("Waiter")
        else:
            wp.reject("Waiter", "no")
        await waiting

    def value(name: str, **labels: str) -> float:
        return registry.get_sample_value(name, labels) or 0.0

    assert value("scheduler_permit_wait_duration_seconds_count", result="Success") == 1
    assert value("scheduler_permit_wait_duration_seconds_count", result="Unschedulable") == 1
    ep = "scheduler_framework_extension_point_duration_seconds_count"
    assert value(ep, extension_point="Permit", status="Wait", profile="w") == 2
    dur = "scheduler_plugin_execution_duration_seconds_count"
    assert value(dur, plugin="Waiter", extension_point="Permit", status="Wait") == 2


def test_attempts_label_is_capped() -> None:
    assert [attempts_label(n) for n in (1, 14, 15, 99)] == ["1", "14", "15+", "15+"]


def test_noop_recorder_is_the_default_and_samples_nothing() -> None:
    engine = new_engine(FakeClusterClient(), rng=random.Random(1))
    sched, cache, queue = engine.scheduler, engine.cache, engine.queue
    assert isinstance(sched.metrics, NoopMetrics) and isinstance(queue.metrics, NoopMetrics)
    assert not sched.metrics.sample_plugin_metrics()
    cache.add_node(make_node("n1"))
    queue.add(make_pod("p", cpu="100m"))

    async def go() -> None:
        assert await sched.schedule_one()
        await sched.wait_for_bindings()

    asyncio.run(go())
    assert sched.client.bindings  # type: ignore[attr-defined]


def test_queue_incoming_events_carry_the_reference_labels() -> None:
    from kopf_scheduler.eventhandlers import EventHandlers

    env = Env()
    handlers = EventHandlers(env.cache, env.queue, lambda pod: True)
    handlers.add_node(make_node("n1"))
    handlers.add_pod(make_pod("picky", cpu="100m", nodeSelector={"disk": "ssd"}))
    env.run()
    assert env.value("scheduler_unschedulable_pods", plugin="NodeAffinity", profile=PROFILE) == 1
    handlers.update_node(make_node("n1"), make_node("n1", labels={"disk": "ssd"}))
    moved = sum(
        env.value("scheduler_queue_incoming_pods_total", queue=q, event="NodeUpdateNodeLabel")
        for q in ("active", "backoff")
    )
    assert moved == 1


def test_gated_pod_retried_by_the_leftover_flush_is_not_counted_again() -> None:
    now = [1000.0]
    env = Env(clock=lambda: now[0])
    env.queue.add(make_pod("gated", cpu="100m", schedulingGates=[{"name": "wait"}]))
    now[0] += 301  # past the pool's 5 minutes
    env.queue.flush_unschedulable_left_over()
    assert env.value("scheduler_pending_pods", queue="gated") == 1
    # Still gated, it stays where it was: the reference counts no incoming pod for that.
    incoming = families(env.registry)["scheduler_queue_incoming_pods"].samples
    assert [(s.labels["queue"], s.labels["event"], s.value) for s in incoming] == [
        ("unschedulable", "UnscheduledPodAdd", 1.0)
    ]
    assert env.value("scheduler_unschedulable_pods", plugin="SchedulingGates", profile=PROFILE) == 1


def test_filter_evaluations_count_the_nodes_the_search_processed() -> None:
    # 300 nodes: the adaptive percentage asks for 144 feasible nodes (48%); all fit, so the search
    # stops after 144 even though the vector filters ran over the whole chunk at once.
    env = Env()
    for i in range(300):
        env.cache.add_node(make_node(f"n{i:03d}"))
    env.queue.add(make_pod("p", cpu="100m"))
    env.run()
    assert env.sched.next_start_node_index == 144
    evals = "scheduler_plugin_evaluation_total"
    for plugin in ("NodeUnschedulable", "TaintToleration", "NodeResourcesFit"):
        assert env.value(evals, plugin=plugin, extension_point="Filter", profile=PROFILE) == 144, plugin
    assert env.value(evals, plugin="NodeResourcesFit", extension_point="Score", profile=PROFILE) == 144
    # The sampled durations stand for the same calls (one per processed node).
    dur = "scheduler_plugin_execution_duration_seconds"
    assert env.count(dur, plugin="NodeResourcesFit", extension_point="Filter", status="Success") == 144


def test_plugin_durations_are_capped_per_second_like_the_reference_buffer() -> None:
    now = [0.0]
    m = PrometheusMetrics(CollectorRegistry(), rng=AlwaysSample(), clock=lambda: now[0])
    for _ in range(600):
        m.plugin_duration("A", "Filter", "Success", 1e-5)
    m.plugin_duration("A", "Filter", "Success", 1e-5, 600)  # a vector call: 400 of 600 fit
    assert m.sample_plugin_metrics() is False  # no room left: no cycle is timed for nothing
    m.plugin_duration("A", "Filter", "Success", 1e-5)
    registry = m.registry

    def count() -> float:
        labels = {"plugin": "A", "extension_point": "Filter", "status": "Success"}
        return registry.get_sample_value("scheduler_plugin_execution_duration_seconds_count", labels) or 0.0

    assert count() == 1000
    now[0] += 1.0  # the next interval: room again
    assert m.sample_plugin_metrics() is True
    m.plugin_duration("A", "Filter", "Success", 1e-5, 5)
    assert count() == 1005


def test_filter_evaluations_after_rejections_count_only_the_rows_that_reached_the_plugin() -> None:
    # Every other node is tainted: TaintToleration rejects it, so NodeResourcesFit (after it in the
    # Filter order) only sees the untainted ones. 144 feasible nodes are needed: the 144th is row 286.
    env = Env()
    taint = [{"key": "k", "value": "v", "effect": "NoSchedule"}]
    for i in range(300):
        env.cache.add_node(make_node(f"n{i:03d}", taints=taint if i % 2 else ()))
    env.queue.add(make_pod("p", cpu="100m"))
    env.run()
    assert env.sched.next_start_node_index == 287
    evals = "scheduler_plugin_evaluation_total"
    for plugin, want in (("NodeUnschedulable", 287), ("TaintToleration", 287), ("NodeResourcesFit", 144)):
        assert env.value(evals, plugin=plugin, extension_point="Filter", profile=PROFILE) == want, plugin
    dur = "scheduler_plugin_execution_duration_seconds"
    code = "UnschedulableAndUnresolvable"  # TaintToleration's rejection
    assert env.count(dur, plugin="TaintToleration", extension_point="Filter", status=code) == 143
    assert env.count(dur, plugin="TaintToleration", extension_point="Filter", status="Success") == 144
