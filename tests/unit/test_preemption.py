"""The generic preemption Evaluator (framework/preemption.py) with a scripted policy."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from kopf_scheduler.api.objects import Pod, parse_pod
from kopf_scheduler.api.policy import PodDisruptionBudget, parse_pod_disruption_budget
from kopf_scheduler.cache.snapshot import Snapshot
from kopf_scheduler.framework.diagnosis import NodeToStatus
from kopf_scheduler.framework.interface import Code, CycleState, Status
from kopf_scheduler.framework.preemption import (
    Candidate,
    Evaluator,
    earliest_start_time_of_highest_priority,
    pick_one_node_for_preemption,
    success_message,
    terminating_by_preemption,
)
from kopf_scheduler.framework.types import NodeInfo
from kopf_scheduler_workbench.testing.builders import make_node, pod_dict

U, UU, ERR = Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE, Code.ERROR


def pod(name: str, priority: int = 0, start: int | None = None) -> Pod:
    raw = pod_dict(name, priority=priority, uid=name)
    if start is not None:
        raw["status"]["startTime"] = f"2025-01-01T00:00:{start:02d}Z"
    return parse_pod(raw)


def cand(name: str, *victims: Pod, pdb: int = 0) -> Candidate:
    return Candidate(name, list(victims), pdb)


# --- pickOneNodeForPreemption ----------------------------------------------------------------------

PICK_CASES: list[tuple[str, list[Candidate], str]] = [
    (
        "fewest PDB violations first",
        [cand("a", pod("a1", 1), pdb=2), cand("b", pod("b1", 500), pdb=1), cand("c", pod("c1", 900), pdb=1)],
        "b",
    ),
    (
        "lowest highest-victim priority",
        [cand("a", pod("a1", 100), pod("a2", 0)), cand("b", pod("b1", 50))],
        "b",
    ),
    (
        "smallest sum of priorities",
        [cand("a", pod("a1", 100), pod("a2", 100)), cand("b", pod("b1", 100), pod("b2", 0))],
        "b",
    ),
    (
        "sum is of priorities shifted by 2^31: more negative victims is not cheaper",
        [
            cand("a", pod("a1", 100), pod("a2", -100), pod("a3", -100)),
            cand("b", pod("b1", 100), pod("b2", -100)),
        ],
        "b",
    ),
    (
        # the only way shifted sums tie across victim counts: a victim at the int32 minimum
        "fewest victims",
        [cand("a", pod("a1", 0), pod("a2", -(2**31))), cand("b", pod("b1", 0))],
        "b",
    ),
    (
        "latest earliest start time among highest-priority victims",
        [
            cand("a", pod("a1", 100, start=4), pod("a2", 100, start=2)),
            cand("b", pod("b1", 100, start=5), pod("b2", 100, start=1)),
            cand("c", pod("c1", 100, start=3), pod("c2", 100, start=6)),
        ],
        "c",
    ),
    (
        "start time of lower-priority victims is ignored",
        [
            cand("a", pod("a1", 100, start=2), pod("a2", 0, start=9)),
            cand("b", pod("b1", 100, start=6), pod("b2", 0, start=1)),
            cand("c", pod("c1", 100, start=5), pod("c2", 0, start=3)),
        ],
        "b",
    ),
    ("complete tie: the first", [cand("x", pod("x1", 1, start=1)), cand("y", pod("y1", 1, start=1))], "x"),
]


@pytest.mark.parametrize(("candidates", "want"), [c[1:] for c in PICK_CASES], ids=[c[0] for c in PICK_CASES])
def test_pick_one_node_for_preemption(candidates: list[Candidate], want: str) -> None:
    got = pick_one_node_for_preemption(candidates, now=1e12)
    assert got is not None and got.name == want
    got = pick_one_node_for_preemption(list(reversed(candidates)), now=1e12)
    if want not in ("x", "y"):  # order matters only for the final tie
        assert got is not None and got.name == want


def test_pick_one_node_custom_score_funcs_and_empty() -> None:
    assert pick_one_node_for_preemption([]) is None
    cands = [cand("a", pod("a1", 0)), cand("bb", pod("b1", 0)), cand("cc", pod("c1", 5))]
    funcs: list[Callable[[Candidate], int]] = [lambda c: len(c.name), lambda c: c.victims[0].priority]
    got = pick_one_node_for_preemption(cands, funcs)
    assert got is not None and got.name == "cc"


def test_pod_without_start_time_counts_as_started_now() -> None:
    victims = [pod("a", 5), pod("b", 5, start=3), pod("c", 1, start=1)]
    assert earliest_start_time_of_highest_priority(victims, now=1e12) == pod("x", start=3).start_time
    assert earliest_start_time_of_highest_priority([pod("a", 5)], now=123.0) == 123.0


# --- the evaluator with a scripted policy ---------------------------------------------------------


@dataclass
class ScriptedPolicy:
    """Returns per-node outcomes from a table; records the nodes tried, in order."""

    outcomes: Mapping[str, tuple[list[Pod], int, Status | None]]
    offset: int = 0
    num_candidates: int = 100
    eligible: tuple[bool, str] = (True, "")
    tried: list[str] = field(default_factory=list)
    seen_nominated_status: list[Status | None] = field(default_factory=list)
    seen_pdbs: list[Sequence[PodDisruptionBudget]] = field(default_factory=list)

    def get_offset_and_num_candidates(self, num_nodes: int) -> tuple[int, int]:
        return self.offset % num_nodes, min(self.num_candidates, num_nodes)

    def pod_eligible_to_preempt_others(
        self, p: Pod, nominated_node_status: Status | None
    ) -> tuple[bool, str]:
        self.seen_nominated_status.append(nominated_node_status)
        return self.eligible

    def select_victims_on_node(
        self, state: CycleState, p: Pod, info: NodeInfo, pdbs: Sequence[PodDisruptionBudget]
    ) -> tuple[list[Pod], int, Status | None]:
        self.tried.append(info.name)
        self.seen_pdbs.append(pdbs)
        info.remove_pod(info.pods[0]) if info.pods else None  # mutating the clone must be harmless
        return self.outcomes[info.name]

    def ordered_score_funcs(self, candidates: Sequence[Candidate]) -> list[Callable[[Candidate], int]] | None:
        return None


@dataclass
class MiniHandle:
    snapshot: Snapshot
    objects: dict[str, Any] = field(default_factory=dict)

    def run_filter_plugins_with_nominated_pods(
        self, state: CycleState, p: Pod, info: NodeInfo
    ) -> Status | None:
        raise AssertionError("the scripted policy does not filter")

    def run_pre_filter_extension_add_pod(self, *a: Any) -> Status | None:
        raise AssertionError("unused")

    def run_pre_filter_extension_remove_pod(self, *a: Any) -> Status | None:
        raise AssertionError("unused")


def snapshot(names: Sequence[str]) -> Snapshot:
    infos = []
    for n in names:
        info = NodeInfo()
        info.set_node(make_node(n))
        info.add_pod(parse_pod(pod_dict(f"{n}-pod", node_name=n, uid=f"{n}-pod")))
        infos.append(info)
    return Snapshot(infos)


def node_statuses(codes: Mapping[str, Code], absent: Code | None = None) -> NodeToStatus:
    m = NodeToStatus()
    for n, c in codes.items():
        m.set(n, Status(c))
    if absent is not None:
        m.set_absent_nodes_status(Status(absent))
    return m


def ok(*names: str, pdb: int = 0) -> tuple[list[Pod], int, Status | None]:
    return [pod(n) for n in names], pdb, None


def test_dry_run_rotates_from_offset_and_stops_at_enough_candidates() -> None:
    names = [f"n{i}" for i in range(6)]
    policy = ScriptedPolicy({n: ok(f"{n}-v") for n in names})
    ev = Evaluator("T", MiniHandle(snapshot(names)), policy)
    got, statuses, errors = ev.dry_run_preemption(
        CycleState(), pod("p", 10), ev.handle.snapshot.list(), [], 4, 3
    )
    assert policy.tried == ["n4", "n5", "n0"]
    assert [c.name for c in got] == ["n4", "n5", "n0"]
    assert statuses == {} and errors == []


def test_dry_run_keeps_looking_for_a_non_violating_candidate_and_caps_each_list() -> None:
    names = ["a", "b", "c", "d", "e"]
    outcomes = {
        "a": ok("a1", pdb=1),
        "b": ok("b1", pdb=2),
        "c": ok("c1", pdb=1),
        "d": ok("d1"),
        "e": ok("e1"),
    }
    policy = ScriptedPolicy(outcomes)
    ev = Evaluator("T", MiniHandle(snapshot(names)), policy)
    got, _, _ = ev.dry_run_preemption(CycleState(), pod("p", 10), ev.handle.snapshot.list(), [], 0, 2)
    assert policy.tried == ["a", "b", "c", "d"]
    # non-violating first; "c" was dropped because the violating list was full
    assert [(c.name, c.num_pdb_violations) for c in got] == [("d", 0), ("a", 1), ("b", 2)]


def test_dry_run_records_failures_and_errors() -> None:
    names = ["a", "b", "c", "d"]
    outcomes: dict[str, tuple[list[Pod], int, Status | None]] = {
        "a": ([], 0, Status(UU, "No preemption victims found for incoming pod")),
        "b": ([], 0, Status(ERR, "boom")),
        "c": ([], 0, None),  # success without victims is an error
        "d": ([], 0, Status(U, "Insufficient cpu")),
    }
    ev = Evaluator("T", MiniHandle(snapshot(names)), ScriptedPolicy(outcomes))
    got, statuses, errors = ev.dry_run_preemption(
        CycleState(), pod("p", 10), ev.handle.snapshot.list(), [], 0, 4
    )
    assert got == []
    assert {n: (s.code, s.message) for n, s in statuses.items()} == {
        "a": (UU, "No preemption victims found for incoming pod"),
        "b": (ERR, "boom"),
        "c": (ERR, 'expected at least one victim pod on node "c"'),
        "d": (U, "Insufficient cpu"),
    }
    assert errors == ["boom", 'expected at least one victim pod on node "c"']


def test_dry_run_does_not_touch_snapshot_node_infos() -> None:
    ev = Evaluator("T", MiniHandle(snapshot(["a"])), ScriptedPolicy({"a": ok("v")}))
    before = list(ev.handle.snapshot.list()[0].pods)
    ev.dry_run_preemption(CycleState(), pod("p", 10), ev.handle.snapshot.list(), [], 0, 1)
    assert ev.handle.snapshot.list()[0].pods == before


def test_preempt_only_tries_unschedulable_nodes_and_builds_the_fit_error() -> None:
    names = ["a", "b", "c", "d"]
    outcomes = {"a": ([], 0, Status(UU, "No preemption victims found for incoming pod")), "b": ok("x")}
    policy = ScriptedPolicy(outcomes)
    ev = Evaluator("T", MiniHandle(snapshot(names)), policy)
    result, status = ev.preempt(CycleState(), pod("p", 10), node_statuses({"a": U, "c": UU}))
    assert policy.tried == ["a"]
    assert result is not None and result.nominated_node_name == "" and result.victims == []
    assert status == Status(
        U,
        "0/4 nodes are available: 1 No preemption victims found for incoming pod, "
        "3 Preemption is not helpful for scheduling.",
    )


def test_preempt_with_no_potential_node_at_all() -> None:
    ev = Evaluator("T", MiniHandle(snapshot(["a", "b"])), ScriptedPolicy({}))
    result, status = ev.preempt(CycleState(), pod("p", 10), node_statuses({"a": UU}))
    assert result is not None and result.nominated_node_name == ""
    assert status == Status(U, "0/2 nodes are available: 2 Preemption is not helpful for scheduling.")


def test_preempt_considers_absent_nodes_when_their_status_is_unschedulable() -> None:
    policy = ScriptedPolicy({"a": ok("a1"), "b": ok("b1", "b2")})
    ev = Evaluator("T", MiniHandle(snapshot(["a", "b"])), policy)
    result, status = ev.preempt(CycleState(), pod("p", 10), node_statuses({}, absent=U))
    assert sorted(policy.tried) == ["a", "b"]
    assert status == Status(Code.SUCCESS, success_message("a", 1))
    assert status.message == "found a potential placement for pod on node a, preempting 1 victims"
    assert result is not None
    assert result.nominated_node_name == "a" and [v.name for v in result.victims] == ["a1"]


def test_preempt_success_returns_chosen_node_and_victims() -> None:
    policy = ScriptedPolicy({"a": ok("a1", pdb=1), "b": ok("b1", "b2")})
    ev = Evaluator("T", MiniHandle(snapshot(["a", "b"])), policy)
    result, status = ev.preempt(CycleState(), pod("p", 10), {"a": Status(U), "b": Status(U)})
    # the count is the chosen candidate's victims, worded "victims" whatever the number
    assert status == Status(Code.SUCCESS, success_message("b", 2))
    assert status.message == "found a potential placement for pod on node b, preempting 2 victims"
    assert status.code == Code.SUCCESS and result is not None
    assert result.nominated_node_name == "b" and [v.name for v in result.victims] == ["b1", "b2"]


@pytest.mark.parametrize(
    ("outcomes", "message"),
    [
        ({"a": ([], 0, Status(ERR, "boom"))}, "boom"),
        ({"a": ([], 0, Status(ERR, "boom")), "b": ([], 0, Status(ERR, "bang"))}, "[boom, bang]"),
    ],
)
def test_preempt_errors_without_candidates(outcomes: dict[str, Any], message: str) -> None:
    ev = Evaluator("T", MiniHandle(snapshot(list(outcomes))), ScriptedPolicy(outcomes))
    result, status = ev.preempt(CycleState(), pod("p", 10), {n: Status(U) for n in outcomes})
    assert result is None
    assert status is not None and status.code == ERR and status.message == message


def test_preempt_errors_are_ignored_when_a_candidate_exists() -> None:
    outcomes = {"a": ([], 0, Status(ERR, "boom")), "b": ok("b1")}
    ev = Evaluator("T", MiniHandle(snapshot(["a", "b"])), ScriptedPolicy(outcomes))
    result, status = ev.preempt(CycleState(), pod("p", 10), {"a": Status(U), "b": Status(U)})
    assert status is not None and status.code == Code.SUCCESS
    assert result is not None and result.nominated_node_name == "b"


def test_preempt_no_nodes() -> None:
    ev = Evaluator("T", MiniHandle(Snapshot()), ScriptedPolicy({}))
    result, status = ev.preempt(CycleState(), pod("p", 10), {})
    assert result is None and status == Status(ERR, "no nodes available") and status.code == ERR


def test_preempt_ineligible_keeps_nomination_and_passes_nominated_status() -> None:
    policy = ScriptedPolicy({}, eligible=(False, "nope"))
    ev = Evaluator("T", MiniHandle(snapshot(["a"])), policy)
    raw = pod_dict("p", priority=10, uid="p")
    raw["status"]["nominatedNodeName"] = "a"
    result, status = ev.preempt(CycleState(), parse_pod(raw), node_statuses({"a": U}))
    assert result is None and status == Status(U, "nope") and status.code == U
    assert policy.seen_nominated_status[0] == Status(U)
    # a nominated node absent from the statuses gets the absent status (unresolvable)
    raw["status"]["nominatedNodeName"] = "gone"
    ev.preempt(CycleState(), parse_pod(raw), node_statuses({"a": U}))
    assert policy.seen_nominated_status[1] is not None and policy.seen_nominated_status[1].code == UU


def test_preempt_reads_pdbs_from_handle_objects() -> None:
    """The evaluator hands the policy the PDB views of ``handle.objects``, in key order."""
    raw = {
        "default/z": {"metadata": {"name": "z", "namespace": "default"}, "spec": {"selector": {}}},
        "default/a": {
            "metadata": {"name": "a", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "x"}}},
            "status": {"disruptionsAllowed": 2, "disruptedPods": {"p1": "2025-01-01T00:00:00Z"}},
        },
    }
    pdbs = {key: parse_pod_disruption_budget(obj) for key, obj in raw.items()}
    policy = ScriptedPolicy({"a": ok("v")})
    ev = Evaluator("T", MiniHandle(snapshot(["a"]), {"PodDisruptionBudget": pdbs}), policy)
    ev.preempt(CycleState(), pod("p", 10), {"a": Status(U)})
    (seen,) = policy.seen_pdbs
    assert [(b.metadata.name, b.disruptions_allowed, b.disrupted_pods) for b in seen] == [
        ("a", 2, frozenset({"p1"})),
        ("z", 0, frozenset()),
    ]
    assert seen[0].selector is not None and seen[0].selector.matches({"app": "x"})
    assert seen[1].selector is not None and seen[1].selector.is_empty()


# --- terminating by preemption -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("deleting", "conditions", "want"),
    [
        (True, [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}], True),
        (False, [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}], False),
        (True, [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}], False),
        (True, [{"type": "DisruptionTarget", "status": "False", "reason": "PreemptionByScheduler"}], False),
        (True, [{"type": "Ready", "status": "True", "reason": "PreemptionByScheduler"}], False),
        (True, [], False),
    ],
)
def test_terminating_by_preemption_reads_the_parsed_conditions(
    deleting: bool, conditions: list[dict[str, str]], want: bool
) -> None:
    raw = pod_dict("victim", priority=0, uid="victim", node_name="n1")
    if deleting:
        raw["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:05Z"
    raw["status"]["conditions"] = conditions
    victim = parse_pod(raw)
    victim.raw = {}  # the parsed conditions are all it reads
    assert terminating_by_preemption(victim) is want
