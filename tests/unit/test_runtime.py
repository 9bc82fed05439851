"""Framework runtime: extension-point semantics with small fake plugins (no in-tree plugin needed)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.cache.snapshot import Snapshot
from kopf_scheduler.framework.diagnosis import Diagnosis, FitError
from kopf_scheduler.framework.interface import Code, CycleState, Plugin, PreFilterResult, Status
from kopf_scheduler.framework.profiles import load_profile
from kopf_scheduler.framework.registry import Registry
from kopf_scheduler.framework.runtime import Framework, FrameworkError, go_duration
from kopf_scheduler.framework.types import NodeInfo
from kopf_scheduler.queue.nominator import Nominator
from kopf_scheduler_workbench.testing.builders import make_node, make_pod

CALLS: list[str] = []


class Sort(Plugin):
    name = "Sort"

    def less(self, a: Any, b: Any) -> bool:
        return bool(a.pod.priority > b.pod.priority)


class Binder(Plugin):
    name = "Binder"

    async def bind(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        CALLS.append(f"bind:{node_name}")
        return None


class SkipBinder(Plugin):
    name = "SkipBinder"

    async def bind(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        CALLS.append("skipbind")
        return Status(Code.SKIP)


class CpuFit(Plugin):
    """Filter/score on cpu, with vector hooks that must agree with the per-node methods."""

    name = "CpuFit"
    vector = True

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status | None:
        CALLS.append(f"cpu:{node_info.name}")
        if node_info.requested.milli_cpu + pod.requests.milli_cpu > node_info.allocatable.milli_cpu:
            return Status.unschedulable("Insufficient cpu")
        return None

    def filter_vector(self, state: CycleState, pod: Pod, snapshot: Snapshot, idx: np.ndarray) -> Any:
        if not self.vector:
            return None
        a = snapshot.arrays
        return a.requested[idx, 0] + pod.requests.milli_cpu <= a.allocatable[idx, 0]

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> tuple[int, Status | None]:
        free = node_info.allocatable.milli_cpu - node_info.requested.milli_cpu - pod.requests.milli_cpu
        return int(free * 100 // node_info.allocatable.milli_cpu), None

    def score_vector(self, state: CycleState, pod: Pod, snapshot: Snapshot, idx: np.ndarray) -> Any:
        if not self.vector:
            return None
        a = snapshot.arrays
        free = a.allocatable[idx, 0] - a.requested[idx, 0] - pod.requests.milli_cpu
        return free * 100 // a.allocatable[idx, 0]


class Selector(Plugin):
    """Per-node only filter."""

    name = "Selector"

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status | None:
        CALLS.append(f"sel:{node_info.name}")
        assert node_info.node is not None
        if any(node_info.node.labels.get(k) != v for k, v in pod.node_selector.items()):
            return Status.unresolvable("node(s) didn't match Pod's node affinity/selector")
        return None


class RowsSeen(Plugin):
    """A vector filter that passes every row and records the snapshot rows it was asked about."""

    name = "RowsSeen"

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status | None:
        return None

    def filter_vector(self, state: CycleState, pod: Pod, snapshot: Snapshot, idx: np.ndarray) -> Any:
        CALLS.append(f"rows:{idx.tolist()}")
        return np.ones(len(idx), dtype=bool)


class Narrow(Plugin):
    name = "Narrow"
    result: set[str] | None = None
    status: Status | None = None

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        CALLS.append("narrow")
        return PreFilterResult(type(self).result), type(self).status


class Narrow2(Narrow):
    name = "Narrow2"


class SkipFilter(Plugin):
    """PreFilter says Skip, so its Filter must not run."""

    name = "SkipFilter"

    def pre_filter(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Any:
        return None, Status(Code.SKIP)

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status | None:
        CALLS.append("skipfilter")
        return Status.unschedulable("should not run")


class Half(Plugin):
    """Score 0..10 normalized to 0..100."""

    name = "Half"

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> tuple[int, Status | None]:
        return int(node_info.name[-1]), None

    def normalize_score(self, state: CycleState, pod: Pod, scores: np.ndarray) -> Status | None:
        scores *= 10
        return None


class TooBig(Half):
    """Half whose NormalizeScore leaves the scores out of range."""

    name = "TooBig"

    def normalize_score(self, state: CycleState, pod: Pod, scores: np.ndarray) -> Status | None:
        scores *= 100
        return None


class Res(Plugin):
    name = "Res"

    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        CALLS.append("reserve:Res")
        return None

    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        CALLS.append("unreserve:Res")


class Res2(Res):
    name = "Res2"

    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        CALLS.append("reserve:Res2")
        return Status.unschedulable("no")

    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        CALLS.append("unreserve:Res2")


class Waiter(Plugin):
    name = "Waiter"
    timeout = 10.0

    def permit(self, state: CycleState, pod: Pod, node_name: str) -> tuple[Status | None, float]:
        return Status(Code.WAIT), type(self).timeout


REG = Registry(
    {
        c.name: c
        for c in (
            Sort,
            Binder,
            SkipBinder,
            CpuFit,
            Selector,
            RowsSeen,
            Narrow,
            Narrow2,
            SkipFilter,
            Half,
            TooBig,
            Res,
            Res2,
            Waiter,
        )
    }
)


def framework(*multi: str | tuple[str, int], nodes: Sequence[NodeInfo] = (), **kw: Any) -> Framework:
    enabled = [{"name": "Sort"}, {"name": "Binder"}] + [
        {"name": m} if isinstance(m, str) else {"name": m[0], "weight": m[1]} for m in multi
    ]
    spec = {
        "schedulerName": "t",
        "plugins": {"multiPoint": {"enabled": enabled, "disabled": [{"name": "*"}]}},
    }
    return Framework(load_profile(spec, REG), REG, snapshot=Snapshot(list(nodes)), **kw)


def infos(*specs: tuple[str, str, str]) -> list[NodeInfo]:
    """(name, allocatable cpu, requested cpu by an existing pod)."""
    out = []
    for name, cpu, used in specs:
        info = NodeInfo()
        info.set_node(make_node(name, cpu=cpu, labels={"zone": name[-1]}))
        if used != "0":
            info.add_pod(make_pod(f"p-{name}", cpu=used, node_name=name))
        out.append(info)
    return out


@pytest.fixture(autouse=True)
def _reset() -> None:
    CALLS.clear()
    CpuFit.vector = True
    Narrow.result = Narrow.status = None
    Narrow2.result = Narrow2.status = None


@pytest.mark.parametrize("vector", [True, False])
def test_filter_vector_and_per_node_agree_and_lazy_statuses(vector: bool) -> None:
    CpuFit.vector = vector
    fw = framework("CpuFit", nodes=infos(("n1", "1", "0"), ("n2", "2", "1500m"), ("n3", "4", "0")))
    pod = make_pod("p", cpu="1500m")
    state = CycleState()
    diag = Diagnosis()
    feasible, processed = fw.find_feasible_rows(state, pod, np.arange(3), 3, diag)
    assert feasible.tolist() == [2]
    assert processed == 3
    if vector:
        assert not [c for c in CALLS if c.startswith("cpu:")]  # no per-node calls until statuses are read
    assert str(FitError(pod, 3, diag)).startswith("0/3 nodes are available: 2 Insufficient cpu.")
    assert diag.unschedulable_plugins == {"CpuFit"}
    assert diag.node_to_status["n1"].plugin == "CpuFit"


def test_each_filter_sees_only_the_rows_the_ones_before_passed() -> None:
    """A vector filter's rejections and a per-node filter's both narrow what the next one is asked."""
    nodes = infos(("xa", "1", "0"), ("ya", "4", "0"), ("zb", "4", "0"), ("wa", "4", "0"))
    fw = framework("CpuFit", "Selector", "RowsSeen", nodes=nodes)
    assert [p.name for p in fw.filter_plugins] == ["CpuFit", "Selector", "RowsSeen"]
    pod = make_pod("p", cpu="1500m", nodeSelector={"zone": "a"})
    diag = Diagnosis()
    feasible, processed = fw.find_feasible_rows(CycleState(), pod, np.arange(4), 4, diag)
    assert feasible.tolist() == [1, 3] and processed == 4
    assert CALLS == ["sel:ya", "sel:zb", "sel:wa", "rows:[1, 3]"]
    assert {n: s.plugin for n, s in diag.node_to_status.items()} == {"xa": "CpuFit", "zb": "Selector"}


def test_filter_stops_at_first_failure_and_records_plugin() -> None:
    CpuFit.vector = False
    fw = framework("CpuFit", "Selector", nodes=infos(("n1", "1", "0"), ("n2", "4", "0")))
    pod = make_pod("p", cpu="2", nodeSelector={"zone": "9"})
    diag = Diagnosis()
    feasible, _ = fw.find_feasible_rows(CycleState(), pod, np.arange(2), 2, diag)
    assert feasible.tolist() == []
    assert "sel:n1" not in CALLS and "sel:n2" in CALLS
    msg = str(FitError(pod, 2, diag))
    assert (
        msg
        == "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match Pod's node affinity/selector."
    )


def test_num_to_find_stops_early_in_row_order() -> None:
    fw = framework("CpuFit", nodes=infos(*[(f"n{i}", "4", "0") for i in range(6)]))
    rows = np.array([3, 4, 5, 0, 1, 2])
    feasible, processed = fw.find_feasible_rows(CycleState(), make_pod("p", cpu="1"), rows, 2, Diagnosis())
    assert feasible.tolist() == [3, 4] and processed == 2


def test_prefilter_skip_disables_filter_and_merge_empty_is_unresolvable() -> None:
    fw = framework("SkipFilter", "Narrow", "Narrow2", nodes=infos(("n1", "4", "0")))
    state = CycleState()
    Narrow.result, Narrow2.result = {"n1"}, {"n2"}
    res, status, plugins = fw.run_pre_filter_plugins(state, make_pod("p"))
    assert "SkipFilter" in state.skip_filter_plugins
    assert status is not None and status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert status.message == "node(s) didn't satisfy plugin(s) [Narrow Narrow2] simultaneously"
    assert plugins == {"Narrow", "Narrow2"} and res is not None and res.node_names == set()
    assert fw.run_filter_plugins(state, make_pod("p"), fw.snapshot.node_infos[0]) is None
    assert "skipfilter" not in CALLS


def test_prefilter_unschedulable_runs_the_rest_unresolvable_stops() -> None:
    fw = framework("Narrow", "Narrow2", nodes=infos(("n1", "4", "0")))
    Narrow.status = Status.unschedulable("first")
    _, status, _ = fw.run_pre_filter_plugins(CycleState(), make_pod("p"))
    assert status is not None and status.plugin == "Narrow" and CALLS.count("narrow") == 2
    CALLS.clear()
    Narrow.status = Status.unresolvable("stop")
    _, status, _ = fw.run_pre_filter_plugins(CycleState(), make_pod("p"))
    assert status is not None and status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert CALLS.count("narrow") == 1


def test_nominated_higher_priority_pod_blocks_the_node() -> None:
    nominator = Nominator()
    fw = framework("CpuFit", nodes=infos(("n1", "2", "0")), nominator=nominator)
    big = make_pod("big", cpu="2", priority=100)
    nominator.add_nominated_pod(big, "n1")
    low = make_pod("low", cpu="1", priority=1)
    status = fw.run_filter_plugins_with_nominated_pods(CycleState(), low, fw.snapshot.node_infos[0])
    assert status is not None and status.reasons == ["Insufficient cpu"]
    high = make_pod("high", cpu="1", priority=1000)
    assert fw.run_filter_plugins_with_nominated_pods(CycleState(), high, fw.snapshot.node_infos[0]) is None
    diag = Diagnosis()
    feasible, _ = fw.find_feasible_rows(CycleState(), low, np.arange(1), 1, diag)
    assert feasible.tolist() == [] and diag.node_to_status["n1"].reasons == ["Insufficient cpu"]


@pytest.mark.parametrize("vector", [True, False])
def test_scores_are_normalized_and_weighted(vector: bool) -> None:
    CpuFit.vector = vector
    fw = framework(("CpuFit", 2), ("Half", 3), nodes=infos(("n1", "4", "0"), ("n2", "4", "2")))
    rows = np.arange(2)
    total, per = fw.run_score_plugins(CycleState(), make_pod("p", cpu="1"), rows, fw.snapshot.node_infos)
    assert per["CpuFit"].tolist() == [75, 25]
    assert per["Half"].tolist() == [10, 20]
    assert total.tolist() == [75 * 2 + 10 * 3, 25 * 2 + 20 * 3]


def test_invalid_score_is_an_error() -> None:
    fw = framework("TooBig", nodes=infos(("n9", "4", "0"), ("n11", "4", "0")))
    with pytest.raises(FrameworkError, match="invalid score 900"):
        fw.run_score_plugins(CycleState(), make_pod("p"), np.arange(2), fw.snapshot.node_infos)


def test_reserve_failure_and_unreserve_in_reverse_order() -> None:
    fw = framework("Res", "Res2")
    status = fw.run_reserve_plugins_reserve(CycleState(), make_pod("p"), "n1")
    assert status is not None and status.plugin == "Res2"
    fw.run_reserve_plugins_unreserve(CycleState(), make_pod("p"), "n1")
    assert CALLS == ["reserve:Res", "reserve:Res2", "unreserve:Res2", "unreserve:Res"]


async def test_permit_wait_allow_and_reject_and_timeout() -> None:
    fw = framework("Waiter")
    pod = make_pod("p")
    status = fw.run_permit_plugins(CycleState(), pod, "n1")
    assert status is not None and status.is_wait() and fw.will_wait_on_permit(pod)
    waiter = asyncio.ensure_future(fw.wait_on_permit(pod))
    await asyncio.sleep(0)
    wp = fw.get_waiting_pod(pod.uid)
    assert wp is not None and wp.pending_plugins == ["Waiter"]
    wp.allow("Waiter")
    assert await waiter is None and not fw.will_wait_on_permit(pod)

    fw.run_permit_plugins(CycleState(), pod, "n1")
    assert fw.reject_waiting_pod(pod.uid)
    rejected = await fw.wait_on_permit(pod)
    assert rejected is not None and rejected.code == Code.UNSCHEDULABLE and rejected.message == "removed"

    Waiter.timeout = 0.01
    fw.run_permit_plugins(CycleState(), pod, "n1")
    timed_out = await fw.wait_on_permit(pod)
    assert (
        timed_out is not None
        and timed_out.message == "rejected due to timeout after waiting 10ms at plugin Waiter"
    )
    assert timed_out.plugin == "Waiter"
    Waiter.timeout = 10.0


async def test_bind_skip_falls_through_to_next_binder() -> None:
    spec = {
        "schedulerName": "t",
        "plugins": {
            "multiPoint": {"enabled": [{"name": "Sort"}], "disabled": [{"name": "*"}]},
            "bind": {"enabled": [{"name": "SkipBinder"}, {"name": "Binder"}]},
        },
    }
    fw = Framework(load_profile(spec, REG), REG)
    assert await fw.run_bind_plugins(CycleState(), make_pod("p"), "n7") is None
    assert CALLS == ["skipbind", "bind:n7"]


def test_go_duration() -> None:
    assert [go_duration(s) for s in (0.01, 1, 10, 90, 900, 3600)] == [
        "10ms",
        "1s",
        "10s",
        "1m30s",
        "15m0s",
        "1h0m0s",
    ]
