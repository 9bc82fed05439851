"""A plugin that raises fails one pod's cycle with an Error status, at every extension point, and
the scheduling loop goes on (issue 26): as kube-scheduler reports an error a plugin returns, with
its FailedScheduling wording, the PodScheduled condition (reason SchedulerError) and a requeue
with backoff. Reservations are undone and the pod is never lost.

The engine is the real one (``new_engine``, ``Scheduler.run``), the plugin an ordinary registered
plugin; only the apiserver is the in-memory client."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.engine import Engine, new_engine
from kopf_scheduler.framework.events import WILDCARD_EVENT
from kopf_scheduler.framework.interface import Code, CycleState, Plugin, PreFilterResult, Status
from kopf_scheduler.framework.profiles import load_profile
from kopf_scheduler.framework.registry import IN_TREE, Registry
from kopf_scheduler.framework.types import NodeInfo
from kopf_scheduler.metrics.recorder import NoopMetrics
from kopf_scheduler_workbench.testing.builders import make_node, make_pod
from kopf_scheduler_workbench.testing.fake_client import FakeClusterClient

POISON = "poison"
ERROR = "RuntimeError: boom"


class Poison(Plugin):
    """Raises ``RuntimeError("boom")`` for the pod named "poison" while ``armed``; records what
    it unreserved. Subclasses implement one extension point each (a plugin is registered at the
    points whose methods it has)."""

    name = "Poison"
    armed = True
    unreserved: list[str] = []

    def hit(self, pod: Pod) -> None:
        if type(self).armed and pod.name == POISON:
            raise RuntimeError("boom")


class Reserving(Poison):
    """A Reserve plugin too, so that the test sees Unreserve run for the failed pod."""

    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        return None

    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        Poison.unreserved.append(pod.name)


class PreEnqueuePoison(Poison):
    def pre_enqueue(self, pod: Pod) -> Status | None:
        self.hit(pod)
        return None


class PreFilterPoison(Poison):
    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: list[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        self.hit(pod)
        return None, None


class AddPodPoison(Poison):
    """PreFilter's AddPod, run for nodes with a nominated pod of higher or equal priority."""

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: list[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        return None, None

    def add_pod(self, state: CycleState, pod: Pod, pod_to_add: Pod, node_info: NodeInfo) -> Status | None:
        self.hit(pod)
        return None

    def remove_pod(
        self, state: CycleState, pod: Pod, pod_to_remove: Pod, node_info: NodeInfo
    ) -> Status | None:
        return None


class RemovePodPoison(AddPodPoison):
    """PreFilter's RemovePod, run by preemption's dry run for each lower-priority pod."""

    def add_pod(self, state: CycleState, pod: Pod, pod_to_add: Pod, node_info: NodeInfo) -> Status | None:
        return None

    def remove_pod(
        self, state: CycleState, pod: Pod, pod_to_remove: Pod, node_info: NodeInfo
    ) -> Status | None:
        self.hit(pod)
        return None


class FilterPoison(Poison):
    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status | None:
        self.hit(pod)
        return None


class FilterVectorPoison(Poison):
    """Raises in the vector hook only: the per-node method is never asked."""

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status | None:
        return None

    def filter_vector(self, state: CycleState, pod: Pod, snapshot: Any, rows: np.ndarray) -> np.ndarray:
        self.hit(pod)
        return np.ones(len(rows), dtype=bool)


class PostFilterPoison(Poison):
    def post_filter(self, state: CycleState, pod: Pod, node_statuses: Any) -> tuple[Any, Status | None]:
        self.hit(pod)
        return None, Status(Code.UNSCHEDULABLE)


class PreScorePoison(Poison):
    def pre_score(self, state: CycleState, pod: Pod, nodes: list[NodeInfo]) -> Status | None:
        self.hit(pod)
        return None


class ScorePoison(Poison):
    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> tuple[int, Status | None]:
        self.hit(pod)
        return 0, None


class ScoreVectorPoison(Poison):
    """Raises in the vector hook only (a full pass scores several nodes with it)."""

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> tuple[int, Status | None]:
        return 0, None

    def score_vector(self, state: CycleState, pod: Pod, snapshot: Any, rows: np.ndarray) -> np.ndarray:
        self.hit(pod)
        return np.zeros(len(rows), dtype=np.int64)


class NormalizePoison(Poison):
    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> tuple[int, Status | None]:
        return 0, None

    def normalize_score(self, state: CycleState, pod: Pod, scores: np.ndarray) -> Status | None:
        self.hit(pod)
        return None


class ReservePoison(Reserving):
    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        self.hit(pod)
        return None


class PermitPoison(Reserving):
    def permit(self, state: CycleState, pod: Pod, node_name: str) -> tuple[Status | None, float]:
        self.hit(pod)
        return None, 0.0


class PreFlightPoison(Reserving):
    def pre_bind_pre_flight(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        self.hit(pod)
        return Status(Code.SKIP)

    async def pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        return None


class PreBindPoison(Reserving):
    async def pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        await asyncio.sleep(0)
        self.hit(pod)
        return None


async def _skip() -> Status | None:
    return Status(Code.SKIP)


class BindPoison(Reserving):
    """Raises before any coroutine exists (a plain ``def`` that returns one for other pods)."""

    def bind(self, state: CycleState, pod: Pod, node_name: str) -> Any:
        self.hit(pod)
        return _skip()


class PostBindPoison(Poison):
    async def post_bind(self, state: CycleState, pod: Pod, node_name: str) -> None:
        self.hit(pod)


class SignPoison(Poison):
    """OpportunisticBatching's Sign (asked of every Filter/Score plugin)."""

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status | None:
        return None

    def sign(self, pod: Pod) -> tuple[tuple[tuple[str, Any], ...], Status | None]:
        self.hit(pod)
        return (), None


# --- the harness -----------------------------------------------------------------------------


class Sampled(NoopMetrics):
    """Every cycle times its plugins (the reference samples 10%): the timed code paths."""

    def __init__(self) -> None:
        self.durations: list[tuple[str, str, str]] = []

    def sample_plugin_metrics(self) -> bool:
        return True

    def plugin_duration(self, plugin: str, point: str, status: str, seconds: float, count: int = 1) -> None:
        self.durations.append((plugin, point, status))


class Cluster:
    """A running engine: three 4-cpu nodes, the in-memory apiserver feeding binds back as the
    watch would, and ``Scheduler.run`` as a task."""

    def __init__(self, plugin: type[Poison], *, batching: bool = False, sampled: bool = False) -> None:
        registry = Registry(IN_TREE)
        registry.register("Poison", plugin)
        names = ["PrioritySort", "Poison", "NodeResourcesFit", "NodeResourcesBalancedAllocation"]
        names += ["DefaultPreemption", "DefaultBinder"]
        spec = load_profile(
            {
                "schedulerName": "kopf-scheduler",
                "plugins": {
                    "multiPoint": {"enabled": [{"name": n} for n in names], "disabled": [{"name": "*"}]}
                },
            },
            registry,
        )
        self.client = FakeClusterClient()
        self.metrics = Sampled() if sampled else NoopMetrics()
        self.engine: Engine = new_engine(
            self.client,
            [spec],
            registry=registry,
            rng=random.Random(1),
            opportunistic_batching=batching,
            metrics=self.metrics,
        )
        handlers = self.engine.handlers

        def bound(pod: Pod, node: str) -> None:  # the watch's update for a binding
            handlers.update_pod(
                dataclasses.replace(pod, node_name=""), dataclasses.replace(pod, node_name=node)
            )

        self.client.on_bind = bound
        for i in range(3):
            handlers.add_node(make_node(f"n{i}", cpu="4"))
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Cluster:
        self.task = asyncio.create_task(self.engine.scheduler.run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.engine.scheduler.stop()
        assert self.task is not None
        await asyncio.wait_for(self.task, 5)
        await asyncio.wait_for(self.engine.scheduler.wait_for_bindings(), 5)

    def add(self, name: str, **kwargs: Any) -> Pod:
        kwargs.setdefault("cpu", "100m")
        pod = make_pod(name, **kwargs)
        self.engine.handlers.add_pod(pod)
        return pod

    def failures(self, pod: Pod) -> list[str]:
        return [e.message for e in self.client.events if e.pod == pod.key and e.reason == "FailedScheduling"]

    async def until(self, what: Callable[[], bool], timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while not what():
            assert self.task is not None and not self.task.done(), "the scheduling loop ended"
            assert time.monotonic() < deadline, "timed out"
            await asyncio.sleep(0.01)

    def requested_milli_cpu(self) -> int:
        return sum(info.requested.milli_cpu for info in self.engine.cache.node_infos())


@pytest.fixture(autouse=True)
def armed() -> Iterator[None]:
    Poison.armed = True
    Poison.unreserved = []
    yield
    Poison.armed = True


# point -> (plugin, the reason and the message the poison pod fails with)
ERRORS: dict[str, tuple[type[Poison], str, str]] = {
    "PreFilter": (PreFilterPoison, "SchedulerError", f'running PreFilter plugin "Poison": {ERROR}'),
    "Filter": (FilterPoison, "SchedulerError", f'running "Poison" filter plugin: {ERROR}'),
    "FilterVector": (FilterVectorPoison, "SchedulerError", f'running "Poison" filter plugin: {ERROR}'),
    "PreScore": (PreScorePoison, "SchedulerError", f'running PreScore plugin "Poison": {ERROR}'),
    "Score": (
        ScorePoison,
        "SchedulerError",
        f'running Score plugins: plugin "Poison" failed with: {ERROR}',
    ),
    "ScoreVector": (
        ScoreVectorPoison,
        "SchedulerError",
        f'running Score plugins: plugin "Poison" failed with: {ERROR}',
    ),
    "NormalizeScore": (
        NormalizePoison,
        "SchedulerError",
        f'running Normalize on Score plugins: plugin "Poison" failed with: {ERROR}',
    ),
    "Reserve": (ReservePoison, "SchedulerError", f'running Reserve plugin "Poison": {ERROR}'),
    "Permit": (PermitPoison, "SchedulerError", f'running Permit plugin "Poison": {ERROR}'),
    "PreBindPreFlight": (PreFlightPoison, "SchedulerError", f'running PreBindPreFlight "Poison": {ERROR}'),
    "PreBind": (PreBindPoison, "SchedulerError", f'running PreBind plugin "Poison": {ERROR}'),
    "Bind": (BindPoison, "SchedulerError", f'running Bind plugin "Poison": {ERROR}'),
}


@pytest.mark.parametrize("sampled", [False, True], ids=["", "timed"])
@pytest.mark.parametrize("point", list(ERRORS))
async def test_a_raising_plugin_fails_that_pod_only_and_the_loop_goes_on(point: str, sampled: bool) -> None:
    plugin, reason, message = ERRORS[point]
    async with Cluster(plugin, sampled=sampled) as cluster:
        pods = [cluster.add("a"), cluster.add(POISON), cluster.add("b"), cluster.add("c")]
        poison = pods[1]
        others = [p for p in pods if p is not poison]
        await cluster.until(lambda: len(cluster.client.bindings) == 3 and bool(cluster.failures(poison)))
        assert cluster.failures(poison) == [message]
        assert cluster.client.conditions[poison.key] == (reason, message)
        assert sorted(cluster.client.bindings) == sorted(p.key for p in others)
        # Requeued with backoff (an Error has no rejecting plugin to wait for), nothing left held.
        engine = cluster.engine
        assert engine.queue.where(poison.uid) == "backoff"
        assert not engine.cache.is_assumed(poison.uid) and engine.cache.get_pod(poison.uid) is None
        assert cluster.requested_milli_cpu() == 300
        assert poison.uid not in engine.profiles.frameworks["kopf-scheduler"].waiting_pods
        if issubclass(plugin, Reserving):  # failed after Reserve: every Reserve plugin undone
            assert Poison.unreserved == [POISON]
        # Points whose raising call is timed (the per-node and vector loops are not, nor PreFlight).
        untimed = {"Filter", "FilterVector", "Score", "ScoreVector", "PreBindPreFlight"}
        timed_as = {"NormalizeScore": "ScoreExtensionNormalize"} | dict.fromkeys(untimed)
        label = timed_as.get(point, point)
        if isinstance(cluster.metrics, Sampled) and label is not None:  # the raising call timed as an Error
            assert ("Poison", label, "Error") in cluster.metrics.durations
        # The loop still schedules.
        late = cluster.add("late")
        await cluster.until(lambda: late.key in cluster.client.bindings)


async def test_a_healed_plugin_lets_the_pod_bind_after_its_backoff() -> None:
    async with Cluster(BindPoison) as cluster:
        poison = cluster.add(POISON)
        await cluster.until(lambda: bool(cluster.failures(poison)))
        failed_at = time.monotonic()
        Poison.armed = False
        await cluster.until(lambda: poison.key in cluster.client.bindings, timeout=10)
        assert time.monotonic() - failed_at >= 0.5  # retried after its backoff (1 s), not at once
        assert cluster.failures(poison) == [f'running Bind plugin "Poison": {ERROR}']


async def test_add_pod_extension_error_fails_the_pod() -> None:
    async with Cluster(AddPodPoison) as cluster:
        # A nominated pod of equal priority on n0: filtering n0 adds it first (AddPod).
        cluster.engine.queue.nominator.add_nominated_pod(make_pod("nominated", cpu="100m"), "n0")
        poison, other = cluster.add(POISON), cluster.add("a")
        await cluster.until(lambda: other.key in cluster.client.bindings and bool(cluster.failures(poison)))
        assert cluster.failures(poison) == [f'running AddPod on PreFilter plugin "Poison": {ERROR}']
        assert cluster.engine.queue.where(poison.uid) == "backoff"


async def test_remove_pod_extension_error_in_preemption_is_reported_with_the_fit_error() -> None:
    async with Cluster(RemovePodPoison) as cluster:
        # Fill n0..n2 with low-priority pods, then a high-priority pod that fits nowhere: the
        # preemption dry run removes the low ones (RemovePod) and the plugin raises there.
        fillers = [cluster.add(f"low-{i}", cpu="3") for i in range(3)]
        await cluster.until(lambda: len(cluster.client.bindings) == 3)
        poison = cluster.add(POISON, cpu="2", priority=1000)
        other = cluster.add("a")
        await cluster.until(lambda: other.key in cluster.client.bindings and bool(cluster.failures(poison)))
        (message,) = cluster.failures(poison)
        assert message.startswith("0/3 nodes are available: 3 Insufficient cpu.")
        assert f'running RemovePod on PreFilter plugin "Poison": {ERROR}' in message
        # The reference's PostFilter error leaves the pod Unschedulable: its FitError is the status.
        assert cluster.client.conditions[poison.key][0] == "Unschedulable"
        assert not cluster.client.evicted and all(f.key in cluster.client.bindings for f in fillers)


async def test_post_filter_error_names_the_plugin_after_the_fit_error() -> None:
    async with Cluster(PostFilterPoison) as cluster:
        poison = cluster.add(POISON, cpu="8")  # fits no 4-cpu node: PostFilter runs
        other = cluster.add("a")
        await cluster.until(lambda: other.key in cluster.client.bindings and bool(cluster.failures(poison)))
        (message,) = cluster.failures(poison)
        assert message == (
            f'0/3 nodes are available: 3 Insufficient cpu. running PostFilter plugin "Poison": {ERROR}'
        )
        assert cluster.client.conditions[poison.key] == ("Unschedulable", message)
        assert cluster.engine.queue.where(poison.uid) == "unschedulable"


async def test_pre_enqueue_error_gates_the_pod_as_the_reference_does(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The reference logs a PreEnqueue error and keeps the pod gated (no event: no cycle ran)."""
    async with Cluster(PreEnqueuePoison) as cluster:
        poison, other = cluster.add(POISON), cluster.add("a")
        await cluster.until(lambda: other.key in cluster.client.bindings)
        queue = cluster.engine.queue
        assert queue.where(poison.uid) == "unschedulable"
        info = queue.get(poison.uid)
        assert info is not None and info.gating_plugin == "Poison"
        assert not cluster.failures(poison) and poison.key not in cluster.client.bindings
    assert any("Poison" in r.getMessage() and ERROR in (r.exc_text or "") for r in caplog.records)


async def test_post_bind_error_leaves_the_pod_bound(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)
    async with Cluster(PostBindPoison) as cluster:
        poison, other = cluster.add(POISON), cluster.add("a")
        await cluster.until(lambda: {poison.key, other.key} <= set(cluster.client.bindings))
        await cluster.engine.scheduler.wait_for_bindings()
        assert not cluster.failures(poison)
        scheduled = [e.pod for e in cluster.client.events if e.reason == "Scheduled"]
        assert poison.key in scheduled
    assert any("PostBind of plugin Poison failed" in r.getMessage() for r in caplog.records)


async def test_sign_error_only_keeps_the_pod_out_of_batching(caplog: pytest.LogCaptureFixture) -> None:
    """As the reference's SignPod: the error is logged, the pod is not batched, and scheduled."""
    caplog.set_level(logging.ERROR)
    async with Cluster(SignPoison, batching=True) as cluster:
        pods = [cluster.add("a"), cluster.add(POISON), cluster.add("b")]
        await cluster.until(lambda: len(cluster.client.bindings) == 3)
        assert not any(cluster.failures(p) for p in pods)
    logged = [r for r in caplog.records if "Sign plugin Poison raised for default/poison" in r.getMessage()]
    assert logged and ERROR in (logged[0].exc_text or "")


async def test_score_error_while_batching_fails_the_pod_after_a_full_pass() -> None:
    """A hint's re-score hits the raising plugin first: the batch is flushed and the full pass
    reports the error, as without batching."""
    async with Cluster(ScorePoison, batching=True) as cluster:
        first = cluster.add("a")
        await cluster.until(lambda: first.key in cluster.client.bindings)
        poison, other = cluster.add(POISON), cluster.add("b")
        await cluster.until(lambda: other.key in cluster.client.bindings and bool(cluster.failures(poison)))
        assert cluster.failures(poison) == [f'running Score plugins: plugin "Poison" failed with: {ERROR}']


class EventsPoison(Poison):
    """EnqueueExtensions that raises when the profile is built."""

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status | None:
        return None

    def events_to_register(self) -> list[Any]:
        raise RuntimeError("boom")


async def test_events_to_register_error_makes_the_plugin_hear_every_event() -> None:
    """The profile still serves, and pods its plugin rejects are requeued on any event."""
    async with Cluster(EventsPoison) as cluster:
        hints = cluster.engine.profiles.frameworks["kopf-scheduler"].queueing_hints()
        assert [h.event for h in hints["Poison"]] == [WILDCARD_EVENT]
        pod = cluster.add("a")
        await cluster.until(lambda: pod.key in cluster.client.bindings)


class MalformedPreFilter(Poison):
    """Returns a string where a Status belongs: the engine's own code then raises, past the
    per-plugin guards (what the scheduling cycle's own guard is for)."""

    def pre_filter(self, state: CycleState, pod: Pod, nodes: list[NodeInfo]) -> Any:
        return None, ("not a status" if pod.name == POISON else None)


class MalformedPreBind(Reserving):
    """The same in the binding cycle: the pod must be unreserved, forgotten and requeued."""

    async def pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Any:
        return "not a status" if pod.name == POISON else None


@pytest.mark.parametrize("plugin", [MalformedPreFilter, MalformedPreBind])
async def test_an_error_past_the_plugin_guards_fails_only_that_pod(plugin: type[Poison]) -> None:
    async with Cluster(plugin) as cluster:
        pods = [cluster.add("a"), cluster.add(POISON), cluster.add("b")]
        poison = pods[1]
        await cluster.until(lambda: len(cluster.client.bindings) == 2 and bool(cluster.failures(poison)))
        (message,) = cluster.failures(poison)
        assert "'str' object has no attribute" in message
        assert cluster.client.conditions[poison.key][0] == "SchedulerError"
        engine = cluster.engine
        assert engine.queue.where(poison.uid) == "backoff"
        assert engine.cache.get_pod(poison.uid) is None and cluster.requested_milli_cpu() == 200
        if plugin is MalformedPreBind:
            assert Poison.unreserved == [POISON]
        late = cluster.add("late")
        await cluster.until(lambda: late.key in cluster.client.bindings)
