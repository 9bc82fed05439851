"""explain: per-node, per-plugin verdicts from the scheduler's own path, checked against a real cycle."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest

from kopf_scheduler.api.objects import parse_node, parse_pod
from kopf_scheduler.explain.engine import ExplainError, explain
from kopf_scheduler.explain.obstacles import format_cpu, format_memory
from kopf_scheduler.explain.render import to_json, to_table
from kopf_scheduler.explain.whatif import what_if
from kopf_scheduler.framework.profiles import load_profile
from kopf_scheduler.simulate import Inputs, load_documents, simulate
from kopf_scheduler_workbench.testing.builders import make_node, make_pod, node_dict, pod_dict

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
GPU_TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


def _cpu_and_taint() -> Inputs:
    return Inputs(
        nodes=[
            make_node("small-a", cpu="1"),
            make_node("small-b", cpu="4"),
            make_node("gpu", cpu="16", taints=[GPU_TAINT]),
        ],
        running=[make_pod("busy", cpu="2500m", node_name="small-b")],
        pending=[make_pod("web", cpu="3")],
    )


def _simulated(inputs: Inputs, seed: int = 0) -> dict[str, Any]:
    return {f"{o.namespace}/{o.name}": o for o in asyncio.run(simulate(inputs, seed))}


def test_cpu_and_taint_reasons_per_node_match_the_failed_scheduling_message() -> None:
    inputs = _cpu_and_taint()
    e = explain(inputs, "default/web")
    assert e.chosen is None and e.reason == "Unschedulable"
    # The very message the scheduler posts for this pod (simulate runs the real Scheduler).
    assert e.message == _simulated(inputs)["default/web"].message
    assert e.message.startswith("0/3 nodes are available: 1 node(s) had untolerated taint(s), ")
    by_name = {n.name: n for n in e.nodes}
    assert by_name["small-a"].filters["NodeResourcesFit"] == "Insufficient cpu"
    assert by_name["small-a"].rejected_by == "NodeResourcesFit"
    assert by_name["small-a"].obstacles == ["requests 3 cpu, more than the node's allocatable 1 cpu"]
    assert by_name["small-b"].obstacles == ["needs 1.5 cpu more"]
    assert by_name["gpu"].rejected_by == "TaintToleration"
    assert by_name["gpu"].filters["TaintToleration"] == "node(s) had untolerated taint(s)"
    assert (
        by_name["gpu"].filters["NodeResourcesFit"] is None
    )  # every plugin's own verdict, not just the first
    assert by_name["gpu"].obstacles == ["taint dedicated=gpu:NoSchedule not tolerated"]
    # Closest first: a 1.5-cpu shortfall is nearer than a taint or a node too small for the pod.
    assert [n.name for n in e.closest()] == ["small-b", "gpu", "small-a"]
    assert e.preemption is not None and e.preemption.nominated_node == ""
    assert e.message.endswith(e.preemption.message)


def test_prefilter_rejection_reports_every_node_without_running_filters() -> None:
    pod = make_pod("pinned", cpu="1", nodeSelector={"zone": "nowhere"})
    raw = pod_dict("aff", cpu="1")
    raw["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["ghost"]}]}
                ]
            }
        }
    }
    inputs = Inputs(nodes=[make_node("a"), make_node("b")], pending=[pod, parse_pod(raw)])
    e = explain(inputs, "default/aff")
    assert e.message == _simulated(inputs)["default/aff"].message
    # PreFilter narrowed the nodes to none that exist: no Filter ran anywhere.
    assert all(not n.feasible and n.filters == {} for n in e.nodes)
    assert {n.reason for n in e.nodes} == {"node(s) didn't satisfy plugin(s) [NodeAffinity]"}
    assert e.nodes[0].obstacles == ["node(s) didn't satisfy plugin(s) [NodeAffinity]"]
    e2 = explain(inputs, "default/pinned")
    assert e2.message == _simulated(inputs)["default/pinned"].message
    assert {n.filters.get("NodeAffinity") for n in e2.nodes} == {
        "node(s) didn't match Pod's node affinity/selector"
    }
    assert e2.nodes[0].obstacles == ["node lacks label(s) zone=nowhere (nodeSelector)"]


def test_scores_are_raw_normalized_weighted_and_sum_to_the_total() -> None:
    inputs = Inputs(
        nodes=[
            make_node("a", cpu="8"),
            make_node("b", cpu="4"),
            make_node("c", cpu="4", taints=[{"key": "soft", "value": "x", "effect": "PreferNoSchedule"}]),
        ],
        running=[make_pod("r", cpu="2", node_name="a")],
        pending=[make_pod("p", cpu="1", memory="1Gi")],
    )
    e = explain(inputs, "default/p")
    weights = {
        "TaintToleration": 3,
        "NodeResourcesFit": 1,
        "NodeResourcesBalancedAllocation": 1,
        "ImageLocality": 1,
        "VolumeBinding": 1,  # scores (0 here) since StorageCapacityScoring is on by default in 1.37
        "DynamicResources": 2,  # no PreScore to skip it in the reference: 0 for a pod without claims
    }
    for n in e.nodes:
        assert n.feasible
        assert set(n.scores) == set(weights)
        for plugin, s in n.scores.items():
            assert s.weighted == s.normalized * weights[plugin]
        assert n.total == sum(s.weighted for s in n.scores.values())
    c = e.node("c")
    assert c is not None
    # TaintToleration's raw score counts intolerable PreferNoSchedule taints; normalizing reverses it.
    assert (c.scores["TaintToleration"].raw, c.scores["TaintToleration"].normalized) == (1, 0)
    assert e.chosen == _simulated(inputs)["default/p"].node


def _random_inputs(rng: random.Random) -> Inputs:
    zones = ["z1", "z2", "z3"]
    nodes = []
    for i in range(rng.randint(2, 9)):
        taints = [GPU_TAINT] if rng.random() < 0.2 else []
        if rng.random() < 0.2:
            taints.append({"key": "soft", "value": "y", "effect": "PreferNoSchedule"})
        nodes.append(
            node_dict(
                f"n{i}",
                cpu=str(rng.choice([2, 4, 8, 16])),
                memory=f"{rng.choice([4, 8, 32])}Gi",
                labels={"topology.kubernetes.io/zone": rng.choice(zones)},
                taints=taints,
                images=[(["img:big"], 500_000_000)] if rng.random() < 0.3 else [],
            )
        )
    running = []
    for j in range(rng.randint(0, 12)):
        node = rng.choice(nodes)["metadata"]["name"]
        running.append(
            pod_dict(
                f"r{j}",
                cpu=f"{rng.choice([100, 500, 1500])}m",
                memory=f"{rng.choice([128, 1024])}Mi",
                node_name=node,
                labels={"app": rng.choice(["x", "y"])},
            )
        )
    spec: dict[str, Any] = {}
    if rng.random() < 0.3:
        spec["nodeSelector"] = {"topology.kubernetes.io/zone": rng.choice(zones)}
    if rng.random() < 0.3:
        spec["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
    if rng.random() < 0.3:
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app": "x"}},
            }
        ]
    containers = [
        {
            "name": "c",
            "image": rng.choice(["img:big", "img:small"]),
            "resources": {"requests": {"cpu": f"{rng.choice([200, 1000, 3000])}m", "memory": "512Mi"}},
        }
    ]
    pending = pod_dict("p", labels={"app": "x"}, containers=containers, **spec)
    return Inputs(
        nodes=[parse_node(n) for n in nodes],
        running=[parse_pod(p) for p in running],
        pending=[parse_pod(pending)],
    )


@pytest.mark.parametrize("seed", range(40))
def test_explain_and_the_scheduler_agree_on_random_clusters(seed: int) -> None:
    inputs = _random_inputs(random.Random(seed))
    e = explain(inputs, "default/p")
    outcome = _simulated(inputs, seed)["default/p"]
    if outcome.node:
        assert outcome.node in e.tied and e.chosen in e.tied
        assert not e.message
    else:
        assert e.chosen is None
        assert e.message == outcome.message
    for n in e.nodes:
        failed = [p for p, r in n.filters.items() if r is not None]
        assert n.feasible == (not failed and n.reason is None)
        if failed:  # the plugin the scheduler reports is the first one (in profile order) that fails
            assert n.rejected_by == failed[0]
            assert n.reason == n.filters[failed[0]]


def test_preemption_names_the_nominee_and_victims() -> None:
    inputs = load_documents([str(EXAMPLES / "preemption.yaml")])
    e = explain(inputs, "default/web")
    assert e.chosen is None
    assert e.preemption is not None
    assert (e.preemption.nominated_node, e.preemption.victims) == ("node-a", ["default/batch"])
    outcome = _simulated(inputs)["default/web"]
    assert (outcome.nominated_node, outcome.victims) == ("node-a", ["default/batch"])
    assert "Preemption: would nominate node-a, evicting default/batch" in to_table(e)


def test_a_bound_pod_is_explained_on_the_cluster_without_it() -> None:
    inputs = Inputs(
        nodes=[make_node("a", cpu="2")],
        running=[make_pod("big", cpu="2", node_name="a")],
    )
    e = explain(inputs, "default/big")
    assert e.chosen == "a"
    assert any("explained as if it were pending" in note for note in e.notes)


def test_a_fitting_nominated_node_is_taken_without_scoring() -> None:
    raw = pod_dict("nom", cpu="1")
    raw["status"]["nominatedNodeName"] = "b"
    inputs = Inputs(nodes=[make_node("a", cpu="8"), make_node("b", cpu="2")], pending=[parse_pod(raw)])
    e = explain(inputs, "default/nom")
    assert e.chosen == "b"
    assert e.chosen == _simulated(inputs)["default/nom"].node


def test_unknown_pod_and_profile_are_errors() -> None:
    inputs = _cpu_and_taint()
    with pytest.raises(ExplainError, match="not found"):
        explain(inputs, "default/nope")
    with pytest.raises(ExplainError, match="no profile for schedulerName 'other'"):
        explain(inputs, "default/web", profile="other")


def test_large_clusters_group_identical_rejections_and_cut_at_top() -> None:
    nodes = [make_node(f"tiny-{i:02d}", cpu="1") for i in range(30)]
    nodes += [make_node(f"big-{i:02d}", cpu="8") for i in range(20)]
    inputs = Inputs(nodes=nodes, pending=[make_pod("p", cpu="2")])
    e = explain(inputs, "default/p")
    table = to_table(e, top=3)
    assert "30 nodes: tiny-00, tiny-01, tiny-02, tiny-03, tiny-04, ... (+25)" in table
    assert "... 17 more feasible nodes (--top)" in table
    doc = to_json(e, top=3)
    assert len([n for n in doc["nodes"] if n["feasible"]]) == 3
    assert to_json(e)["numNodes"] == 50 and len(to_json(e)["nodes"]) == 50
    one = to_json(e, node="tiny-07")
    assert [n["name"] for n in one["nodes"]] == ["tiny-07"]
    assert "Node tiny-07: rejected" in to_table(e, node="tiny-07")


def test_json_schema_fields() -> None:
    doc = to_json(explain(_cpu_and_taint(), "default/web"))
    json.dumps(doc)  # plain JSON
    assert set(doc) == {
        "schema", "pod", "profile", "numNodes", "chosen", "tied", "reason", "message",
        "skippedFilters", "nodes", "closest", "preemption", "notes",
    }  # fmt: skip
    assert set(doc["nodes"][0]) == {
        "name", "feasible", "filters", "rejectedBy", "reason", "scores", "total", "obstacles"
    }  # fmt: skip
    assert set(doc["preemption"]) == {"nominatedNode", "victims", "message"}


def test_what_if_reports_placements_a_profile_change_moves() -> None:
    base = Inputs(
        nodes=[make_node("empty", cpu="8"), make_node("used", cpu="8")],
        running=[make_pod("r", cpu="4", node_name="used")],
        pending=[make_pod("p", cpu="1")],
    )
    most = load_profile(
        {
            "schedulerName": "kopf-scheduler",
            "plugins": {"score": {"disabled": [{"name": "NodeResourcesBalancedAllocation"}]}},
            "pluginConfig": [
                {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}}
            ],
        }
    )
    placements = asyncio.run(what_if(base, Inputs(profiles=[most])))
    [p] = placements
    assert (p.now.node, p.what_if.node, p.changed) == ("empty", "used", True)
    unchanged = asyncio.run(what_if(base, Inputs()))
    assert [q.changed for q in unchanged] == [False]
    # New pods in the overlay are the workload of both runs; a new node changes where they go.
    extra = Inputs(nodes=[make_node("huge", cpu="64")], pending=[make_pod("q", cpu="6")])
    by_name = {q.name: q for q in asyncio.run(what_if(base, extra))}
    assert by_name["q"].now.node in {"empty", "used", ""}
    assert by_name["q"].what_if.node == "huge"


def test_formatting_helpers() -> None:
    assert format_cpu(1500) == "1.5" and format_cpu(250) == "0.25" and format_cpu(2000) == "2"
    assert format_memory(1536 * 1024**2) == "1.5Gi" and format_memory(300 * 1024**2) == "300Mi"


def test_serving_profiles_oldest_valid_wins() -> None:
    pytest.importorskip("kopf")
    from kopf_scheduler.cluster.listing import serving_profiles

    def cr(name: str, created: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "kopfscheduler.io/v1alpha1",
            "kind": "SchedulerProfile",
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": spec,
        }

    items = [
        cr("newer", "2026-01-02T00:00:00Z", {"schedulerName": "s"}),
        cr("older", "2026-01-01T00:00:00Z", {"schedulerName": "s"}),
        cr(
            "bad",
            "2025-01-01T00:00:00Z",
            {"schedulerName": "t", "plugins": {"score": {"enabled": [{"name": "Nope"}]}}},
        ),
    ]
    served, notes = serving_profiles(items)
    assert [i["metadata"]["name"] for i in served] == ["older"]
    assert any("newer left out" in n for n in notes) and any("bad is invalid" in n for n in notes)


def test_cli_simulate_explain_offline(capsys: pytest.CaptureFixture[str]) -> None:
    from kopf_scheduler.cli import main

    example = str(EXAMPLES / "preemption.yaml")
    assert main(["simulate", example, "--explain", "default/web", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["pod"] == "default/web" and doc["preemption"]["victims"] == ["default/batch"]
    assert main(["simulate", example, "--explain", "web", "--node", "node-a"]) == 0  # namespace defaults
    assert "Node node-a: rejected" in capsys.readouterr().out
    assert main(["simulate", example, "--explain", "default/nope"]) == 1
    assert "pod default/nope not found" in capsys.readouterr().err
    assert main(["simulate"]) == 2


def test_room_held_for_a_nominated_pod_counts_like_in_the_scheduler() -> None:
    nominated = pod_dict("vip", cpu="3", priority=100)
    nominated["status"]["nominatedNodeName"] = "a"
    inputs = Inputs(
        nodes=[make_node("a", cpu="4"), make_node("b", cpu="1")],
        pending=[parse_pod(nominated), make_pod("low", cpu="2", priority=1)],
    )
    e = explain(inputs, "default/low")
    a = e.node("a")
    assert a is not None and not a.feasible
    assert a.filters["NodeResourcesFit"] == "Insufficient cpu"  # the vip's 3 cpu are held on a
    assert a.obstacles == ["room held for nominated pod(s) default/vip"]
    assert e.chosen is None
    # Without the nomination the pod fits on a: the room held for the vip is what stands in the way.
    outcome = _simulated(Inputs(nodes=inputs.nodes, pending=[inputs.pending[1]]), 0)
    assert outcome["default/low"].node == "a"
    higher = explain(inputs, "default/vip")
    assert higher.chosen == "a"


def test_a_cordoned_node_says_so() -> None:
    inputs = Inputs(nodes=[make_node("a", unschedulable=True)], pending=[make_pod("p", cpu="1")])
    e = explain(inputs, "default/p")
    assert e.message == _simulated(inputs)["default/p"].message
    assert e.nodes[0].rejected_by == "NodeUnschedulable"
    assert e.nodes[0].obstacles == ["node is cordoned (spec.unschedulable)"]
