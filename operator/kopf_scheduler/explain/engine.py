"""One pod's scheduling cycle, taken apart per node and per plugin, on a given snapshot.

Nothing here re-implements a plugin. The cluster is loaded into the same ``Cache`` / queue /
``EventHandlers`` / ``Scheduler`` the operator runs, and the verdicts come from the scheduler's own
path: ``Scheduler.find_nodes_that_fit_pod`` decides which nodes are feasible and which status each
rejected node reports (the FailedScheduling message is built from exactly that), PreScore/Score run
through ``Framework.run_score_plugins`` (asked to also keep the raw scores), and preemption is the
profile's PostFilter, which only decides. Two views are added on top, through the framework's own
plugin instances: every Filter plugin's verdict on every node (the scheduler stops at the first
failure) and, for rejected nodes, what stands in their way (:mod:`.obstacles`).

Differences from a live cycle, on purpose: every node is evaluated (no percentageOfNodesToScore
sampling, which only applies from 100 nodes on) and ties are reported instead of drawn at random.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from kopf_scheduler.engine import new_engine
from kopf_scheduler.explain.obstacles import obstacles
from kopf_scheduler.framework.diagnosis import Diagnosis, FitError
from kopf_scheduler.framework.interface import Code, CycleState, Status, is_success
from kopf_scheduler.framework.runtime import FrameworkError
from kopf_scheduler.memory_client import MemoryClusterClient
from kopf_scheduler.simulate import Inputs

if TYPE_CHECKING:
    from kopf_scheduler.api.objects import Pod
    from kopf_scheduler.framework.runtime import Framework
    from kopf_scheduler.scheduler.schedule_one import Scheduler

__all__ = [
    "ExplainError",
    "Explanation",
    "NodeExplanation",
    "PreemptionExplanation",
    "ScoreDetail",
    "World",
    "explain",
]


class ExplainError(ValueError):
    """The pod or profile asked about does not exist in the snapshot."""


@dataclass(slots=True)
class ScoreDetail:
    raw: int  # what Score returned
    normalized: int  # after NormalizeScore (== raw for plugins without it)
    weighted: int  # normalized x the profile's weight: what the total adds


@dataclass(slots=True)
class NodeExplanation:
    name: str
    feasible: bool
    # Every Filter plugin that ran on this node: None passed, else its reason(s). Empty when the
    # node was never filtered (a PreFilter rejected the pod or narrowed the nodes to others).
    filters: dict[str, str | None] = field(default_factory=dict)
    rejected_by: str | None = None  # the plugin the scheduler reports for this node
    reason: str | None = None  # the status message the scheduler reports for this node
    scores: dict[str, ScoreDetail] = field(default_factory=dict)
    total: int | None = None
    obstacles: list[str] = field(default_factory=list)  # what would have to change (rejected nodes)
    distance: float = 0.0  # ordering key for "closest" rejected nodes; smaller is closer


@dataclass(slots=True)
class PreemptionExplanation:
    nominated_node: str  # "" when preemption found nothing
    victims: list[str]  # ns/name, in the order the plugin chose them
    message: str  # the PostFilter status message (the "preemption: ..." part of the event)


@dataclass(slots=True)
class Explanation:
    pod: str
    profile: str
    num_nodes: int
    nodes: list[NodeExplanation]
    chosen: str | None  # the node the scheduler would bind to (None: unschedulable)
    tied: list[str]  # every node sharing the best total (the scheduler picks one at random)
    message: str  # the FailedScheduling message ("" when the pod fits)
    reason: str = ""  # FailedScheduling reason: Unschedulable | SchedulerError | ""
    preemption: PreemptionExplanation | None = None
    notes: list[str] = field(default_factory=list)
    skipped_filters: list[str] = field(default_factory=list)  # PreFilter said Skip: not run anywhere

    def node(self, name: str) -> NodeExplanation | None:
        return next((n for n in self.nodes if n.name == name), None)

    def closest(self, limit: int = 3) -> list[NodeExplanation]:
        """Rejected nodes with the least in their way, closest first."""
        rejected = [n for n in self.nodes if not n.feasible]
        return sorted(rejected, key=lambda n: (n.distance, n.name))[:limit]


class World:
    """A snapshot loaded into the scheduler's own cache, queue, nominator and profiles.

    ``exclude`` leaves out pods (ns/name): a pod explained after it was bound is judged on the
    cluster as it was before its binding.
    """

    def __init__(self, inputs: Inputs, exclude: frozenset[str] = frozenset()) -> None:
        self.inputs = inputs
        # Never written to: nothing here binds, reports or evicts.
        client = MemoryClusterClient(objects=inputs.objects)
        engine = new_engine(
            client,
            inputs.profiles,
            objects=inputs.objects,
            rng=random.Random(0),
            with_default=inputs.serve_default,
        )
        self.cache = engine.cache
        self.queue = engine.queue
        self.profiles = engine.profiles
        self.scheduler: Scheduler = engine.scheduler
        handlers = engine.handlers
        for node in inputs.nodes:
            handlers.add_node(node)
        for pod in [*inputs.running, *inputs.pending]:
            if pod.key not in exclude:
                handlers.add_pod(pod)

    def find_pod(self, key: str) -> Pod:
        for pod in [*self.inputs.pending, *self.inputs.running]:
            if pod.key == key:
                return pod
        raise ExplainError(f"pod {key} not found")

    def framework(self, pod: Pod, profile: str | None) -> Framework:
        name = profile or pod.scheduler_name
        fw = self.profiles.get(name)
        if fw is None:
            served = ", ".join(sorted(self.profiles.names()))
            hint = "" if profile else " (choose one with --profile)"
            raise ExplainError(f"no profile for schedulerName {name!r}{hint}; profiles: {served}")
        # Evaluate every node: explain reports on all of them, not on a sample.
        fw.percentage_of_nodes_to_score = 100
        return fw


def explain(inputs: Inputs, pod_key: str, profile: str | None = None) -> Explanation:
    """Explain the scheduling of pod ``ns/name`` in ``inputs`` with ``profile`` (default: its own)."""
    target = next((p for p in [*inputs.pending, *inputs.running] if p.key == pod_key), None)
    if target is None:
        raise ExplainError(f"pod {pod_key} not found")
    world = World(inputs, exclude=frozenset({pod_key}) if target.node_name else frozenset())
    notes: list[str] = []
    if target.node_name:
        notes.append(f"bound to {target.node_name}: explained as if it were pending")
    if target.scheduling_gates:
        notes.append(f"scheduling gated ({', '.join(target.scheduling_gates)}): not attempted until ungated")
    fw = world.framework(target, profile)
    pod = dataclasses.replace(target, node_name="", nominated_node_name="")
    return _explain(world, fw, pod, target.nominated_node_name, notes)


def _explain(world: World, fw: Framework, pod: Pod, nominated: str, notes: list[str]) -> Explanation:
    sched = world.scheduler
    sched.cache.update_snapshot(sched.snapshot)
    snapshot = sched.snapshot
    infos = snapshot.node_infos
    num_nodes = len(snapshot)
    out = Explanation(pod.key, fw.profile_name, num_nodes, [], None, [], "", notes=notes)
    if num_nodes == 0:
        out.message, out.reason = "no nodes available to schedule pods", "Unschedulable"
        return out
    state = CycleState()
    # The world's engine is new (one per explanation): its search starts at the first node.
    try:
        feasible, diagnosis, _ = sched.find_nodes_that_fit_pod(fw, state, pod)
    except FrameworkError as exc:
        out.message, out.reason = exc.status.message, "SchedulerError"
        return out
    feasible_rows = [int(r) for r in feasible]
    nodes = {info.name: NodeExplanation(info.name, feasible=False) for info in infos}  # snapshot order
    for r in feasible_rows:
        nodes[infos[r].name].feasible = True

    if feasible_rows:
        try:
            _score(fw, state, pod, sched, np.array(feasible_rows, dtype=np.int64), nodes)
        except FrameworkError as exc:
            out.message, out.reason = exc.status.message, "SchedulerError"
        totals = {n.name: n.total for n in nodes.values() if n.feasible and n.total is not None}
        if nominated and nominated in nodes and nodes[nominated].feasible:
            out.chosen, out.tied = nominated, [nominated]
            notes.append(f"its nominated node {nominated} fits: the scheduler takes it without scoring")
        elif len(feasible_rows) == 1:
            only = infos[feasible_rows[0]].name
            out.chosen, out.tied = only, [only]
        elif totals:
            best = max(totals.values())
            out.tied = sorted(name for name, t in totals.items() if t == best)
            out.chosen = out.tied[0]
            if len(out.tied) > 1:
                notes.append(
                    f"{len(out.tied)} nodes tie for the best score: the scheduler picks one at random"
                )
    else:
        fit = FitError(pod, num_nodes, diagnosis)
        if fw.has_post_filter_plugins():
            pf_result, pf_status = fw.run_post_filter_plugins(state, pod, diagnosis.node_to_status)
            diagnosis.post_filter_msg = pf_status.message
            out.preemption = PreemptionExplanation(
                pf_result.nominated_node_name if pf_result is not None else "",
                [v.key for v in pf_result.victims] if pf_result is not None else [],
                pf_status.message,
            )
        out.message, out.reason = str(fit), "Unschedulable"

    _per_plugin_filters(fw, state, pod, diagnosis, nodes, sched)
    out.nodes = list(nodes.values())
    out.skipped_filters = [p.name for p in fw.filter_plugins if p.name in state.skip_filter_plugins]
    return out


def _score(
    fw: Framework,
    state: CycleState,
    pod: Pod,
    sched: Scheduler,
    rows: np.ndarray,
    nodes: dict[str, NodeExplanation],
) -> None:
    """The scheduler's prioritizeNodes, keeping each plugin's raw, normalized and weighted score."""
    infos = sched.snapshot.infos_at(rows)
    if not fw.has_score_plugins():
        for info in infos:
            nodes[info.name].total = 1  # as the reference: every node scores one
        return
    status = fw.run_pre_score_plugins(state, pod, infos)
    if not is_success(status):
        assert status is not None
        raise FrameworkError(status)
    raw: dict[str, np.ndarray] = {}
    totals, normalized = fw.run_score_plugins(state, pod, rows, infos, raw=raw)
    for j, info in enumerate(infos):
        n = nodes[info.name]
        n.total = int(totals[j])
        for name, scores in normalized.items():
            weight = fw.score_weights[name]
            n.scores[name] = ScoreDetail(int(raw[name][j]), int(scores[j]), int(scores[j]) * weight)


def _per_plugin_filters(
    fw: Framework,
    state: CycleState,
    pod: Pod,
    diagnosis: Diagnosis,
    nodes: dict[str, NodeExplanation],
    sched: Scheduler,
) -> None:
    """Every Filter plugin's verdict per node, and the status the scheduler reports for rejected ones."""
    statuses = diagnosis.node_to_status
    prefilter_rejected = bool(diagnosis.pre_filter_msg)
    for name, n in nodes.items():
        info = sched.snapshot.get(name)
        assert info is not None
        reported: Status | None = None if n.feasible else statuses.status_for(name)
        if reported is not None and reported.code == Code.SUCCESS:
            reported = None
        if reported is not None:
            n.rejected_by = reported.plugin or None
            n.reason = reported.message
        filtered = not prefilter_rejected and (n.feasible or name in statuses)
        if not filtered:  # ruled out before Filter: the PreFilter's message is all there is
            if n.reason:
                n.obstacles, n.distance = [n.reason], 100.0
            continue
        each = fw.run_filter_plugins_each(state, pod, info)
        n.filters = {plugin: (s.message if s is not None else None) for plugin, s in each.items()}
        if not n.feasible:
            n.obstacles, n.distance = obstacles(fw, pod, info, each)
