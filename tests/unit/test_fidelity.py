"""The fidelity runner's offline parts: judge, tally, generator (its log reader: test_explain_reflog)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kopf_scheduler_workbench.fidelity.compare import (
    Outcome,
    Tally,
    judge,
    message_parts,
    reason_diffs,
    signature,
)
from kopf_scheduler_workbench.fidelity.generator import EXTENDED, Features, generate

# -- judge ---------------------------------------------------------------------------------------

FAIL = "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint(s). preemption: x."


def failed(message: str = FAIL, **kw: Any) -> Outcome:
    return Outcome(message=message, reason="Unschedulable", condition_message=message, **kw)


def test_same_failure_agrees_everywhere_it_applies() -> None:
    verdicts = judge(failed(), failed(), [], 3, live=True)
    assert verdicts == {"feasibility": True, "message": True, "condition": True}


def test_simulate_is_not_judged_on_the_condition() -> None:
    assert "condition" not in judge(failed(), failed(), [], 3, live=False)


def test_placement_accepts_any_node_of_the_best_set_and_nothing_else() -> None:
    ref = Outcome(node="n1")
    assert judge(ref, Outcome(node="n2"), ["n1", "n2"], 3, live=True) == {
        "feasibility": True,
        "placement": True,
    }
    assert judge(ref, Outcome(node="n3"), ["n1", "n2"], 3, live=True)["placement"] is False
    # No scores logged (a single feasible node): only the reference's node is right.
    assert judge(ref, Outcome(node="n2"), [], 3, live=True)["placement"] is False


def test_placement_is_not_judged_above_100_nodes() -> None:
    assert judge(Outcome(node="n1"), Outcome(node="n7"), ["n1"], 120, live=True) == {"feasibility": True}


def test_feasibility_mismatch_also_fails_message_and_condition() -> None:
    verdicts = judge(Outcome(node="n1"), failed(), ["n1"], 3, live=True)
    assert verdicts == {"feasibility": False, "message": False, "condition": False}


def test_messages_must_match_exactly() -> None:
    other = failed(FAIL.replace("taint(s)", "taint {k: v}"))
    verdicts = judge(failed(), other, [], 3, live=True)
    assert verdicts["feasibility"] and not verdicts["message"] and not verdicts["condition"]


def test_nomination_compares_node_and_victims_as_sets() -> None:
    ref = failed(nominated="n1", victims=["a/x", "a/y"])
    assert judge(ref, failed(nominated="n1", victims=["a/y", "a/x"]), [], 3, live=True)["nomination"]
    assert not judge(ref, failed(nominated="n1", victims=["a/x"]), [], 3, live=True)["nomination"]
    assert not judge(ref, failed(nominated="n2", victims=["a/x", "a/y"]), [], 3, live=True)["nomination"]
    assert not judge(failed(), failed(nominated="n1"), [], 3, live=True)["nomination"]


def test_an_error_is_a_disagreement_and_a_reference_error_is_not_judged() -> None:
    assert judge(Outcome(node="n1"), Outcome(error="timeout"), ["n1"], 3, live=True)["feasibility"] is False
    assert judge(Outcome(error="timeout"), Outcome(node="n1"), ["n1"], 3, live=True) == {}


def test_message_parts_split_head_reasons_and_preemption() -> None:
    head, reasons, preemption = message_parts(FAIL)
    assert head == "0/3 nodes are available"
    assert reasons == ["1 Insufficient cpu", "2 node(s) had untolerated taint(s)"]
    assert preemption == "x."


def test_signature_names_the_reasons_that_differ_without_counts() -> None:
    other = failed(
        FAIL.replace("2 node(s) had untolerated taint(s)", "2 node(s) had untolerated taint {k: v}")
    )
    sig = signature("message", failed(), other)
    assert sig == (
        "message: reasons ref-only ['node(s) had untolerated taint(s)']"
        " ours-only ['node(s) had untolerated taint {...}']"
    )
    assert signature("message", failed(), failed(FAIL.replace("1 Insufficient", "2 Insufficient"))) == (
        "message: same reasons, different counts or order"
    )
    assert (
        signature("message", failed(), failed(FAIL.replace("x.", "y."))) == "message: preemption part differs"
    )
    assert (
        signature("feasibility", Outcome(node="n"), failed()) == "feasibility: ours failed, reference bound"
    )


def test_reason_diffs_give_one_key_per_differing_reason_and_preemption_shape() -> None:
    ref = (
        "0/3 nodes are available: 2 node(s) had untolerated taint(s), 1 X. "
        "preemption: found a potential placement for pod on node n1, preempting 2 victims"
    )
    ours = "0/3 nodes are available: 2 node(s) had untolerated taint {k: v}, 1 Y."
    assert reason_diffs(ref, ours) == [
        "reference only: X",
        "reference only: node(s) had untolerated taint(s)",
        "ours only: Y",
        "ours only: node(s) had untolerated taint {...}",
        "preemption part: reference 'found a potential placement for pod on node N, preempting # victims'"
        " / ours '(none)'",
    ]
    assert reason_diffs(FAIL, FAIL) == []
    assert reason_diffs(FAIL, FAIL.replace("1 Insufficient", "3 Insufficient")) == [
        "same reasons, different counts or order"
    ]


def test_tally_counts_per_mode_and_category() -> None:
    tally = Tally()
    tally.add("live", {"feasibility": True, "message": False})
    tally.add("live", {"feasibility": True})
    tally.add("simulate", {"feasibility": False})
    rates = tally.rates()
    assert rates["live"]["feasibility"] == {"agreed": 2, "total": 2, "rate": 1.0}
    assert rates["live"]["message"] == {"agreed": 0, "total": 1, "rate": 0.0}
    assert rates["live"]["placement"]["rate"] is None
    assert rates["simulate"]["feasibility"]["rate"] == 0.0
    table = tally.table()
    assert "100.0% (2/2)" in table and "0.0% (0/1)" in table and "n/a" in table


# -- generator -----------------------------------------------------------------------------------


def test_a_scenario_is_the_same_for_the_same_seed_and_index() -> None:
    a, b = generate(7, 3), generate(7, 3)
    assert json.dumps(a.__dict__, sort_keys=True) == json.dumps(b.__dict__, sort_keys=True)
    assert json.dumps(a.__dict__, sort_keys=True) != json.dumps(generate(8, 3).__dict__, sort_keys=True)


def test_names_are_unique_per_scenario_index() -> None:
    sc = generate(1, 4)
    names = [o["metadata"]["name"] for o in (*sc.nodes, *sc.running, *sc.pending, *sc.cluster_objects)]
    assert all(n.startswith("s1-k4-") for n in names)
    assert len(
        {
            (o["metadata"].get("namespace"), o.get("kind", ""), n)
            for o, n in zip((*sc.nodes, *sc.running, *sc.pending, *sc.cluster_objects), names, strict=True)
        }
    ) == len(names)


def test_running_pods_are_bound_and_pending_pods_are_not() -> None:
    for index in range(20):
        sc = generate(1, index)
        nodes = {n["metadata"]["name"] for n in sc.nodes}
        assert all(p["spec"]["nodeName"] in nodes for p in sc.running)
        assert sc.pending and all("nodeName" not in p["spec"] for p in sc.pending)


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod["spec"]["containers"], *pod["spec"].get("initContainers", ())]


def test_objects_are_what_the_apiserver_accepts() -> None:
    for index in range(60):
        sc = generate(5, index)
        for pod in (*sc.running, *sc.pending):
            for c in _containers(pod):
                res = c.get("resources") or {}
                if EXTENDED in res.get("requests", {}):
                    assert res["limits"][EXTENDED] == res["requests"][EXTENDED]
            na = ((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            )
            for term in (na or {}).get("nodeSelectorTerms", ()):
                for field in term.get("matchFields", ()):
                    assert len(field["values"]) == 1
            for c in pod["spec"].get("topologySpreadConstraints", ()):
                assert "minDomains" not in c or c["whenUnsatisfiable"] == "DoNotSchedule"


def test_every_feature_family_shows_up_across_a_few_dozen_scenarios() -> None:
    seen: set[str] = set()
    for index in range(60):
        sc = generate(11, index)
        seen |= {o["kind"] for o in (*sc.cluster_objects, *sc.namespaced_objects)}
        if sc.large:
            seen.add("large")
        for node in sc.nodes:
            if node["spec"].get("taints"):
                seen.add("taints")
            if node["spec"].get("unschedulable"):
                seen.add("unschedulable")
            if node["status"].get("images"):
                seen.add("images")
        for pod in (*sc.running, *sc.pending):
            spec = pod["spec"]
            seen |= {
                k
                for k in (
                    "initContainers",
                    "runtimeClassName",
                    "resources",
                    "tolerations",
                    "topologySpreadConstraints",
                    "priorityClassName",
                    "volumes",
                )
                if k in spec
            }
            seen |= set(spec.get("affinity") or {})
            if any(p.get("hostPort") for p in (spec["containers"][0].get("ports") or ())):
                seen.add("hostPort")
            if any(c.get("restartPolicy") == "Always" for c in spec.get("initContainers", ())):
                seen.add("sidecar")
            if pod["metadata"].get("ownerReferences"):
                seen.add("owner")
    expected = {
        "StorageClass",
        "PersistentVolume",
        "PersistentVolumeClaim",
        "CSINode",
        "PodDisruptionBudget",
        "ReplicaSet",
        "Service",
        "large",
        "taints",
        "unschedulable",
        "images",
        "initContainers",
        "runtimeClassName",
        "resources",
        "tolerations",
        "topologySpreadConstraints",
        "priorityClassName",
        "volumes",
        "nodeAffinity",
        "podAffinity",
        "podAntiAffinity",
        "hostPort",
        "sidecar",
        "owner",
    }
    assert expected <= seen, expected - seen


def test_features_only_narrows_what_is_drawn() -> None:
    features = Features.only(["resources"])
    for index in range(20):
        sc = generate(3, index, features)
        assert not sc.large and not sc.cluster_objects and not sc.namespaced_objects
        for pod in (*sc.running, *sc.pending):
            assert (
                not {"affinity", "tolerations", "topologySpreadConstraints", "volumes"} & pod["spec"].keys()
            )
    with pytest.raises(ValueError, match="unknown features"):
        Features.only(["resources", "bogus"])


# -- our scores, for the report ------------------------------------------------------------------


def test_scores_of_captures_our_weighted_plugin_scores_for_one_pod() -> None:
    import asyncio

    from kopf_scheduler.api.objects import parse_node, parse_pod
    from kopf_scheduler.framework.runtime import Framework
    from kopf_scheduler.simulate import Inputs, simulate
    from kopf_scheduler_workbench.fidelity.runner import _scores_of

    def node(name: str, cpu: str) -> dict[str, Any]:
        alloc = {"cpu": cpu, "memory": "4Gi", "pods": "110"}
        return {
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": alloc, "capacity": alloc},
        }

    pod = {
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "uid": "u1"},
        "spec": {
            "schedulerName": "kopf-scheduler",
            "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "500m"}}}],
        },
    }
    inputs = Inputs(nodes=[parse_node(node("a", "1")), parse_node(node("b", "4"))], pending=[parse_pod(pod)])
    original = Framework.run_score_plugins
    with _scores_of("p") as scores:
        (result,) = asyncio.run(simulate(inputs, seed=0))
    assert Framework.run_score_plugins is original
    assert set(scores) == {"a", "b"}
    for per_node in scores.values():
        plugins = {k: v for k, v in per_node.items() if k != "final"}
        assert per_node["final"] == sum(plugins.values())
        assert per_node["TaintToleration"] == 300  # weight 3 x 100: weighted, as the reference logs
    assert result.node == max(scores, key=lambda n: scores[n]["final"])
