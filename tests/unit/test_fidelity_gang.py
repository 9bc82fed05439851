"""The fidelity run's gang family offline: what the generator draws, how members are paired, and
how simulate's outcome for a gang member is recorded (the live part: ``kopf-scheduler fidelity
--features gang``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from kopf_scheduler.api import kinds
from kopf_scheduler.api.objects import parse_node, parse_pod
from kopf_scheduler.config import features
from kopf_scheduler.simulate import Inputs, simulate
from kopf_scheduler_workbench.fidelity.compare import (
    Decision,
    Outcome,
    judge,
    match_interchangeable,
    pair_gang_members,
)
from kopf_scheduler_workbench.fidelity.generator import GANG_API, LABEL, Features, generate
from kopf_scheduler_workbench.fidelity.runner import _simulated_outcome

GANG = Features.only(["gang"])


def _dump(obj: Any) -> str:
    return json.dumps(obj.__dict__, sort_keys=True)


def test_gangs_are_the_same_for_the_same_seed_and_index() -> None:
    for index in range(5):
        assert _dump(generate(4, index, GANG)) == _dump(generate(4, index, GANG))
    assert [_dump(generate(4, i, GANG)) for i in range(5)] != [_dump(generate(5, i, GANG)) for i in range(5)]
    assert any(generate(4, i, GANG).gangs for i in range(5))


def test_gangs_are_opt_in_and_leave_every_other_object_as_it_was() -> None:
    assert not Features().gang
    for index in range(20):
        plain, with_gangs = generate(9, index), generate(9, index, Features(gang=True))
        assert not plain.gangs
        for attr in ("namespaces", "cluster_objects", "namespaced_objects", "nodes", "running"):
            assert getattr(plain, attr) == getattr(with_gangs, attr), attr
        # The gang family's plain pods are inserted among the others, which keep their order.
        extra = [p for p in with_gangs.pending if p not in plain.pending]
        assert [p for p in with_gangs.pending if p not in extra] == plain.pending
        assert all(p["metadata"]["name"].startswith(f"{plain.prefix}-gp") for p in extra)


def test_gang_objects_are_valid_and_every_shape_shows_up() -> None:
    seen: set[str] = set()
    for index in range(40):
        sc = generate(6, index, GANG)
        names = [p["metadata"]["name"] for p in sc.pending]
        if len(sc.gangs) > 1:
            seen.add("competing")
        for gang in sc.gangs:
            group, members = gang["group"], gang["members"]
            assert group["apiVersion"] == GANG_API and group["kind"] == "PodGroup"
            assert group["metadata"]["labels"] == {LABEL: "1"}
            kinds.POD_GROUP.parse({**group, "metadata": {**group["metadata"], "uid": "u"}})
            min_count = group["spec"]["schedulingPolicy"]["gang"]["minCount"]
            assert isinstance(min_count, int) and min_count >= 2
            assert 0 <= gang["at"] <= len(sc.pending)
            # The group goes first only when the last member to arrive completes it.
            assert not gang["group_first"] or min_count >= len(members)
            specs = {json.dumps(m["spec"], sort_keys=True) for m in members}
            assert len(specs) == 1, "one template"
            for m in members:
                assert m["metadata"]["namespace"] == group["metadata"]["namespace"]
                assert m["spec"]["schedulingGroup"] == {"podGroupName": group["metadata"]["name"]}
                assert m["metadata"]["labels"][LABEL] == "1" and "nodeName" not in m["spec"]
                parse_pod({**m, "metadata": {**m["metadata"], "uid": "u"}})
                names.append(m["metadata"]["name"])
            seen.add(
                "short" if min_count > len(members) else "spare" if min_count < len(members) else "exact"
            )
            seen.add("group first" if gang["group_first"] else "group last")
            if [m["metadata"]["name"] for m in members] != sorted(m["metadata"]["name"] for m in members):
                seen.add("shuffled")
            spec = members[0]["spec"]
            seen |= {k for k in ("nodeSelector", "affinity") if k in spec}
        assert len(names) == len(set(names))
    expected = {"short", "spare", "exact", "group first", "group last", "shuffled", "competing"}
    assert expected | {"nodeSelector", "affinity"} <= seen, seen


def test_match_interchangeable_pairs_as_many_as_can_agree() -> None:
    # Two identical nodes tied for the first member: ref n0 then n1, ours n1 then n0.
    refs = [(Outcome(node="n0"), ["n0", "n1"]), (Outcome(node="n1"), ["n1"])]
    assert match_interchangeable(refs, [Outcome(node="n1"), Outcome(node="n0")], 2, live=True) == [1, 0]
    # The member that failed in its own words came first on one side, last on the other.
    own, group = "0/2 nodes are available: 2 Insufficient cpu.", "pod group is unschedulable"
    ref: list[tuple[Outcome, list[str]]] = [(Outcome(message=own), []), (Outcome(message=group), [])]
    ours = [Outcome(message=group), Outcome(message=own)]
    assert match_interchangeable(ref, ours, 2, live=False) == [1, 0]
    # What cannot agree stays paired in order, and disagrees.
    refs = [(Outcome(node="n0"), ["n0"]), (Outcome(node="n1"), ["n1"]), (Outcome(message=own), [])]
    order = match_interchangeable(
        refs, [Outcome(node="n7"), Outcome(node="n0"), Outcome(node="n1")], 9, live=True
    )
    assert order == [1, 2, 0]


def _node(name: str) -> dict[str, Any]:
    alloc = {"cpu": "1", "memory": "4Gi", "pods": "110"}
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": alloc, "capacity": alloc},
    }


def _member(name: str, group: str) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}"},
        "spec": {
            "schedulerName": "kopf-scheduler",
            "schedulingGroup": {"podGroupName": group},
            "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "600m"}}}],
        },
    }


def _group(name: str, min_count: int) -> Any:
    return kinds.POD_GROUP.parse(
        {
            "apiVersion": GANG_API,
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "ns", "uid": f"g-{name}"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
        }
    )


def test_simulated_gang_members_are_recorded_as_live_ones() -> None:
    """Under GenericWorkload: a gang of 3 on two 1-cpu nodes fails whole (each member with its
    FailedScheduling note); a gang short of minCount is never tried, which live shows as no event
    at all, so its recorded message is empty; a gang of 2 binds whole."""
    pods = [_member(f"big-{i}", "big") for i in range(3)]
    pods += [_member(f"short-{i}", "short") for i in range(2)]
    inputs = Inputs(
        nodes=[parse_node(_node("n0")), parse_node(_node("n1"))],
        pending=[parse_pod(p) for p in pods],
        objects={"PodGroup": {g.key: g for g in (_group("big", 3), _group("short", 3))}},
    )
    with features.using(features.FeatureGates.parse("GenericWorkload=true")):
        results = asyncio.run(simulate(inputs, seed=0))
    out = [_simulated_outcome(r) for r in results]
    assert all(o.failed and o.message for o in out[:3]), out
    assert any("minCount (3) cannot be satisfied" in o.message for o in out[:3]), out
    assert [(o.node, o.message, o.reason) for o in out[3:]] == [("", "", "")] * 2, out

    pair = [_member(f"pair-{i}", "pair") for i in range(2)]
    inputs = Inputs(
        nodes=[parse_node(_node("n0")), parse_node(_node("n1"))],
        pending=[parse_pod(p) for p in pair],
        objects={"PodGroup": {g.key: g for g in (_group("pair", 2),)}},
    )
    with features.using(features.FeatureGates.parse("GenericWorkload=true")):
        results = asyncio.run(simulate(inputs, seed=0))
    assert sorted(_simulated_outcome(r).node for r in results) == ["n0", "n1"]


def test_members_that_agree_as_they_are_keep_their_own_copies() -> None:
    same: list[tuple[Outcome, list[str]]] = [
        (Outcome(message="x"), []),
        (Outcome(message="x"), []),
        (Outcome(message="x"), []),
    ]
    assert match_interchangeable(same, [Outcome(message="x")] * 3, 1, live=False) == [0, 1, 2]
    refs = [(Outcome(node="n0"), ["n0", "n1"]), (Outcome(node="n1"), ["n1"]), (Outcome(node="n2"), ["n2"])]
    ours = [Outcome(node="n1"), Outcome(node="n0"), Outcome(node="n2")]
    assert match_interchangeable(refs, ours, 3, live=True) == [1, 0, 2]


def _gang(refs: list[Outcome], bests: list[list[str]], ours: list[Outcome]) -> list[Decision]:
    return [
        Decision(1, 0, f"ns/m{i}", 3, r, b, o, o, gang="ns/g")
        for i, (r, b, o) in enumerate(zip(refs, bests, ours, strict=True))
    ]


def test_gang_members_are_paired_for_placement_only() -> None:
    """Swapped tied placements agree; a member tried in another order (another member failed in
    its own words, or bound instead) stays a disagreement: the reference's order is compared."""
    own = "0/3 nodes are available: 3 Insufficient cpu."
    group = "minCount (2) cannot be satisfied: 0 scheduled, 1 remaining"
    ties = _gang(
        [Outcome(node="n0"), Outcome(node="n1"), Outcome(message=own)],
        [["n0", "n1"], ["n1"], []],
        [Outcome(node="n1", pod="ns/m0-o"), Outcome(node="n0", pod="ns/m1-o"), Outcome(message=own)],
    )
    pair_gang_members(ties)
    assert [d.ours.node for d in ties if d.ours is not None] == ["n0", "n1", ""]
    assert [d.repaired for d in ties] == [["live", "simulate"], ["live", "simulate"], []]
    assert all(all(judge(d.reference, d.ours, d.best, 3, live=True).values()) for d in ties if d.ours)

    order = _gang(
        [Outcome(message=own), Outcome(message=group), Outcome(node="n0")],
        [[], [], ["n0"]],
        [Outcome(message=group), Outcome(message=own), Outcome(node="n0")],
    )
    pair_gang_members(order)
    verdicts = [judge(d.reference, d.ours, d.best, 3, live=False) for d in order if d.ours is not None]
    assert [v.get("message") for v in verdicts] == [False, False, None]
    bound_instead = _gang(
        [Outcome(node="n0"), Outcome(message=own)], [["n0"], []], [Outcome(message=own), Outcome(node="n0")]
    )
    pair_gang_members(bound_instead)
    assert [
        judge(d.reference, d.ours, d.best, 3, live=True)["feasibility"] for d in bound_instead if d.ours
    ] == [
        False,
        False,
    ]


def test_a_replay_names_the_families_its_scenario_was_drawn_from() -> None:
    from kopf_scheduler_workbench.fidelity.runner import FidelityRun, _replay

    assert _replay(FidelityRun(seeds=[2]), 2, 3) == "kopf-scheduler fidelity --seed 2 --scenario 3"
    gangs = FidelityRun(seeds=[2], features=GANG)
    assert _replay(gangs, 2, 3) == "kopf-scheduler fidelity --features gang --seed 2 --scenario 3"
