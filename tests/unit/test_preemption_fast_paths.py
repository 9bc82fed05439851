"""Preemption's fast paths agree with the straightforward (slow) computations they replace."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from kopf_scheduler.api.objects import Pod, parse_node, parse_pod
from kopf_scheduler.api.policy import PodDisruptionBudget, parse_pod_disruption_budget
from kopf_scheduler.cache.snapshot import Snapshot
from kopf_scheduler.framework.diagnosis import NodeToStatus
from kopf_scheduler.framework.interface import Code, CycleState, Plugin, PreFilterResult, Status
from kopf_scheduler.framework.profiles import load_profile
from kopf_scheduler.framework.registry import default_registry
from kopf_scheduler.framework.runtime import Framework
from kopf_scheduler.framework.types import NodeInfo
from kopf_scheduler.plugins.default_preemption import PdbIndex, filter_pods_with_pdb_violation
from kopf_scheduler.queue.nominator import Nominator
from kopf_scheduler_workbench.bench.preemption import build
from kopf_scheduler_workbench.testing.builders import node_dict, pod_dict


def slow_pdb_violation(
    pods: Sequence[Pod], pdbs: Sequence[PodDisruptionBudget]
) -> tuple[list[str], list[str]]:
    """The definition: every PDB checked against every pod, budgets spent in pod order."""
    allowed = [pdb.disruptions_allowed for pdb in pdbs]
    violating: list[str] = []
    rest: list[str] = []
    for pod in pods:
        violated = False
        for i, pdb in enumerate(pdbs):
            if pdb.selector is None or pdb.selector.is_empty() or pdb.metadata.namespace != pod.namespace:
                continue
            if not pod.labels or not pdb.selector.matches(pod.labels):
                continue
            if pod.name in pdb.disrupted_pods:
                continue
            allowed[i] -= 1
            violated = violated or allowed[i] < 0
        (violating if violated else rest).append(pod.name)
    return violating, rest


def random_pdbs(rnd: random.Random) -> list[PodDisruptionBudget]:
    raw: dict[str, Any] = {}
    for k in range(rnd.randrange(0, 12)):
        kind = rnd.randrange(4)
        selector: dict[str, Any]
        if kind == 0:
            selector = {"matchLabels": {"app": f"a{rnd.randrange(4)}"}}
        elif kind == 1:
            selector = {"matchLabels": {"app": f"a{rnd.randrange(4)}", "tier": f"t{rnd.randrange(2)}"}}
        elif kind == 2:
            values = [f"a{rnd.randrange(4)}", f"a{rnd.randrange(4)}"]
            selector = {"matchExpressions": [{"key": "app", "operator": "In", "values": values}]}
        else:
            selector = {}
        raw[f"ns/pdb-{k}"] = {
            "metadata": {"name": f"pdb-{k}", "namespace": rnd.choice(["default", "other"])},
            "spec": {"selector": selector},
            "status": {
                "disruptionsAllowed": rnd.randrange(3),
                "disruptedPods": {f"p{rnd.randrange(10)}": "2025-01-01T00:00:00Z"},
            },
        }
    return [parse_pod_disruption_budget(raw[key]) for key in sorted(raw)]


def random_pods(rnd: random.Random) -> list[Pod]:
    pods = []
    for i in range(rnd.randrange(0, 10)):
        labels = {}
        if rnd.random() < 0.8:
            labels["app"] = f"a{rnd.randrange(4)}"
        if rnd.random() < 0.5:
            labels["tier"] = f"t{rnd.randrange(2)}"
        raw = pod_dict(f"p{i}", labels=labels)
        raw["metadata"]["namespace"] = rnd.choice(["default", "default", "other"])
        pods.append(parse_pod(raw))
    return pods


def test_indexed_pdb_split_agrees_with_the_definition() -> None:
    rnd = random.Random(7)
    for _ in range(300):
        pdbs = random_pdbs(rnd)
        index = PdbIndex(pdbs)
        for _ in range(3):  # one index serves many nodes, as in a dry run
            pods = random_pods(rnd)
            want = slow_pdb_violation(pods, pdbs)
            for got in (
                filter_pods_with_pdb_violation(pods, pdbs),
                filter_pods_with_pdb_violation(pods, pdbs, index),
            ):
                assert ([p.name for p in got[0]], [p.name for p in got[1]]) == want


def test_a_stale_pdb_index_is_not_used() -> None:
    rnd = random.Random(3)
    stale = PdbIndex(random_pdbs(rnd))
    for _ in range(50):
        pdbs, pods = random_pdbs(rnd), random_pods(rnd)
        got = filter_pods_with_pdb_violation(pods, pdbs, stale)
        assert ([p.name for p in got[0]], [p.name for p in got[1]]) == slow_pdb_violation(pods, pdbs)


def test_potential_nodes_from_node_to_status_and_a_plain_mapping_agree() -> None:
    _, plugin, preemptor, _ = build(60, 8, 1, None)  # full nodes: every try finds victims
    nodes = plugin.evaluator.handle.snapshot.list()
    rnd = random.Random(5)
    codes = [Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE, None]
    for absent in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE):
        fast = NodeToStatus()
        fast.set_absent_nodes_status(Status(absent))
        # A plain mapping has no absent status: it lists every node, the absent ones with fast's.
        slow: dict[str, Status] = {}
        for info in nodes:
            code = rnd.choice(codes)
            if code is not None:
                fast.set(info.name, Status(code, "x"))
                slow[info.name] = Status(code, "x")
            else:
                slow[info.name] = Status(absent)
        results = []
        for statuses in (fast, slow):
            state = CycleState()
            plugin.handle.run_pre_filter_plugins(state, preemptor)  # type: ignore[union-attr]
            plugin.rng = random.Random(11)
            got, failed, errors = plugin.evaluator.find_candidates(state, preemptor, nodes, statuses)
            results.append(([(c.name, [v.name for v in c.victims]) for c in got], failed, errors))
        assert results[0] == results[1]
        assert results[0][0]


def _framework(nominator: Nominator | None) -> Framework:
    infos = []
    for i in range(3):
        info = NodeInfo()
        info.set_node(parse_node(node_dict(f"n{i}", cpu="2", memory="4Gi", pods="10")))
        info.add_pod(parse_pod(pod_dict(f"low-{i}", cpu="1", memory="1Gi", node_name=f"n{i}", priority=1)))
        infos.append(info)
    profile = load_profile({"schedulerName": "t"})
    return Framework(profile, snapshot=Snapshot(infos), nominator=nominator)


def test_no_nominated_pods_skips_the_second_pass_with_the_same_result() -> None:
    pod = parse_pod(pod_dict("p", cpu="1500m", memory="1Gi", priority=10))
    small = parse_pod(pod_dict("s", cpu="500m", memory="1Gi", priority=10))
    for nominator in (None, Nominator()):
        fw = _framework(nominator)
        for p in (pod, small):
            state = CycleState()
            fw.run_pre_filter_plugins(state, p)
            for info in fw.snapshot.list():
                want = fw.run_filter_plugins(state, p, info)
                got = fw.run_filter_plugins_with_nominated_pods(state, p, info)
                assert (got is None) == (want is None)
                if got is not None and want is not None:
                    assert (got.code, got.reasons, got.plugin) == (want.code, want.reasons, want.plugin)
    # A nominated pod of higher priority still counts once the nominator is not empty.
    nominator = Nominator()
    fw = _framework(nominator)
    nominator.add_nominated_pod(parse_pod(pod_dict("hi", cpu="1", memory="1Gi", priority=100)), "n0")
    state = CycleState()
    fw.run_pre_filter_plugins(state, small)
    n0, n1 = fw.snapshot.list()[:2]
    got = fw.run_filter_plugins_with_nominated_pods(state, small, n0)
    assert got is not None and got.reasons == ["Insufficient cpu"]
    assert fw.run_filter_plugins_with_nominated_pods(state, small, n1) is None


EXT_CALLS: list[str] = []


class Ext(Plugin):
    """A PreFilter plugin with AddPod/RemovePod that records calls or fails."""

    name = "A"
    fail = False

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        return None, None

    def add_pod(self, state: CycleState, pod: Pod, other: Pod, info: NodeInfo) -> Status | None:
        EXT_CALLS.append(f"add:{self.name}")
        return Status(Code.ERROR, "boom") if self.fail else None

    def remove_pod(self, state: CycleState, pod: Pod, other: Pod, info: NodeInfo) -> Status | None:
        EXT_CALLS.append(f"remove:{self.name}")
        return Status(Code.ERROR, "boom") if self.fail else None


class FailingExt(Ext):
    name = "B"
    fail = True


class PreFilterOnly(Plugin):
    """A PreFilter plugin without the extensions: never asked for them."""

    name = "C"

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        return None, None


def test_pre_filter_extensions_are_those_resolved_when_the_framework_was_built() -> None:
    registry = default_registry()
    for cls in (Ext, FailingExt, PreFilterOnly):
        registry.register(cls.name, cls)
    enabled = [{"name": n} for n in ("PrioritySort", "DefaultBinder", "A", "C", "B")]
    plugins = {"multiPoint": {"enabled": enabled, "disabled": [{"name": "*"}]}}
    spec = {"schedulerName": "t", "plugins": plugins}
    fw = Framework(load_profile(spec, registry), registry, snapshot=_framework(None).snapshot)
    assert fw.capabilities["PreFilterExtensions"] == ["A", "B"]
    pod = parse_pod(pod_dict("p", priority=10))
    info = fw.snapshot.list()[0]
    state = CycleState()
    EXT_CALLS.clear()
    status = fw.run_pre_filter_extension_remove_pod(state, pod, pod, info)
    assert status is not None and status.message == 'running RemovePod on PreFilter plugin "B": boom'
    state.skip_filter_plugins = {"B"}
    assert fw.run_pre_filter_extension_add_pod(state, pod, pod, info) is None
    state.skip_filter_plugins = {"A"}
    status = fw.run_pre_filter_extension_add_pod(state, pod, pod, info)
    assert status is not None and status.message == 'running AddPod on PreFilter plugin "B": boom'
    assert EXT_CALLS == ["remove:A", "remove:B", "add:A", "add:B"]
