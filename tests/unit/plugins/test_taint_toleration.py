"""TaintToleration: the reference's filter and score tables, hints, vector agreement."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from node_plugin_helpers import (
    all_rows,
    assert_filter_vector_agrees,
    assert_score_vector_agrees,
    make_snapshot,
)

from kopf_scheduler.framework.interface import Code, CycleState, QueueingHint
from kopf_scheduler.plugins.taint_toleration import TaintToleration
from kopf_scheduler_workbench.testing.builders import make_node, make_pod


def taint(key: str, value: str, effect: str) -> dict[str, str]:
    return {"key": key, "value": value, "effect": effect}


def tol(key: str, op: str, value: str = "", effect: str = "") -> dict[str, str]:
    out = {"key": key, "operator": op, "value": value}
    if effect:
        out["effect"] = effect
    return out


FILTER_CASES = [
    (
        "no tolerations, node with a NoSchedule taint",
        [],
        [taint("dedicated", "user1", "NoSchedule")],
        "node(s) had untolerated taint(s)",
    ),
    (
        "toleration matches the dedicated taint",
        [tol("dedicated", "Equal", "user1", "NoSchedule")],
        [taint("dedicated", "user1", "NoSchedule")],
        None,
    ),
    (
        "toleration for another user",
        [tol("dedicated", "Equal", "user2", "NoSchedule")],
        [taint("dedicated", "user1", "NoSchedule")],
        "node(s) had untolerated taint(s)",
    ),
    (
        "Exists tolerates any value",
        [tol("foo", "Exists", effect="NoSchedule")],
        [taint("foo", "bar", "NoSchedule")],
        None,
    ),
    (
        "all of several taints tolerated",
        [tol("dedicated", "Equal", "user2", "NoSchedule"), tol("foo", "Exists", effect="NoSchedule")],
        [taint("dedicated", "user2", "NoSchedule"), taint("foo", "", "NoSchedule")],
        None,
    ),
    (
        "key and value match but the non-empty effect differs",
        [tol("foo", "Equal", "bar", "PreferNoSchedule")],
        [taint("foo", "bar", "NoSchedule")],
        "node(s) had untolerated taint(s)",
    ),
    (
        "empty toleration effect matches every effect",
        [tol("foo", "Equal", "bar")],
        [taint("foo", "bar", "NoSchedule")],
        None,
    ),
    (
        "PreferNoSchedule taints never filter",
        [tol("dedicated", "Equal", "user2", "NoSchedule")],
        [taint("dedicated", "user1", "PreferNoSchedule")],
        None,
    ),
    ("no tolerations, PreferNoSchedule taint", [], [taint("dedicated", "user1", "PreferNoSchedule")], None),
    (
        "NoExecute taints filter too; the reason names no taint",
        [tol("a", "Exists")],
        [taint("a", "1", "NoExecute"), taint("b", "2", "NoExecute"), taint("c", "3", "NoSchedule")],
        "node(s) had untolerated taint(s)",
    ),
]


@pytest.mark.parametrize(("name", "tolerations", "taints", "reason"), FILTER_CASES)
def test_filter(
    name: str, tolerations: list[dict[str, Any]], taints: list[dict[str, str]], reason: str | None
) -> None:
    snapshot = make_snapshot([make_node("n1", taints=taints), make_node("n2")])
    pod = make_pod("p", tolerations=tolerations)
    pl = TaintToleration()
    status = pl.filter(CycleState(), pod, snapshot.list()[0])
    if reason is None:
        assert status is None
    else:
        assert status is not None
        assert status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert status.reasons == [reason]
    assert_filter_vector_agrees(pl, CycleState(), pod, snapshot)


PNS = "PreferNoSchedule"
SCORE_CASES = [
    (
        "tolerated taints score higher than intolerable ones",
        [tol("foo", "Equal", "bar", PNS)],
        [[taint("foo", "bar", PNS)], [taint("foo", "blah", PNS)]],
        [100, 0],
    ),
    (
        "all taints tolerated: same score however many",
        [tol("cpu-type", "Equal", "arm64", PNS), tol("disk-type", "Equal", "ssd", PNS)],
        [
            [],
            [taint("cpu-type", "arm64", PNS)],
            [taint("cpu-type", "arm64", PNS), taint("disk-type", "ssd", PNS)],
        ],
        [100, 100, 100],
    ),
    (
        "more intolerable taints, lower score",
        [tol("foo", "Equal", "bar", PNS)],
        [
            [],
            [taint("cpu-type", "arm64", PNS)],
            [taint("cpu-type", "arm64", PNS), taint("disk-type", "ssd", PNS)],
        ],
        [100, 50, 0],
    ),
    (
        "only PreferNoSchedule taints and tolerations count",
        [tol("cpu-type", "Equal", "arm64", "NoSchedule"), tol("disk-type", "Equal", "ssd", "NoSchedule")],
        [
            [],
            [taint("cpu-type", "arm64", "NoSchedule")],
            [taint("cpu-type", "arm64", PNS), taint("disk-type", "ssd", PNS)],
        ],
        [100, 100, 0],
    ),
    ("no taints and tolerations", [], [[], [taint("cpu-type", "arm64", PNS)]], [100, 0]),
    ("nothing intolerable anywhere", [], [[], []], [100, 100]),
]


@pytest.mark.parametrize(("name", "tolerations", "node_taints", "expected"), SCORE_CASES)
def test_score(
    name: str, tolerations: list[dict[str, Any]], node_taints: list[list[dict[str, str]]], expected: list[int]
) -> None:
    snapshot = make_snapshot([make_node(f"n{i}", taints=t) for i, t in enumerate(node_taints)])
    pod = make_pod("p", tolerations=tolerations)
    pl = TaintToleration()
    state = CycleState()
    assert pl.pre_score(state, pod, snapshot.list()) is None
    raw = assert_score_vector_agrees(pl, state, pod, snapshot)
    scores = np.array(raw, dtype=np.int64)
    assert pl.normalize_score(state, pod, scores) is None
    assert scores.tolist() == expected


def test_vector_agrees_on_random_cluster() -> None:
    rng = random.Random(11)
    effects = ["NoSchedule", "NoExecute", PNS]
    nodes = []
    for i in range(100):
        taints = [
            taint(rng.choice("abc"), rng.choice(["", "1", "2"]), rng.choice(effects))
            for _ in range(rng.choice([0, 0, 0, 1, 2]))
        ]
        nodes.append(make_node(f"n{i}", taints=taints))
    snapshot = make_snapshot(nodes)
    pl = TaintToleration()
    for _ in range(30):
        tolerations = [
            tol(
                rng.choice("abc"),
                rng.choice(["Equal", "Exists"]),
                rng.choice(["", "1"]),
                rng.choice(["", *effects]),
            )
            for _ in range(rng.choice([0, 1, 2]))
        ]
        pod = make_pod("p", tolerations=tolerations)
        state = CycleState()
        assert_filter_vector_agrees(pl, state, pod, snapshot)
        pl.pre_score(state, pod, snapshot.list())
        assert_score_vector_agrees(pl, state, pod, snapshot)
    empty = pl.filter_vector(CycleState(), make_pod("p"), snapshot, all_rows(snapshot)[:0])
    assert empty is not None and empty.shape == (0,)


def test_hints() -> None:
    pl = TaintToleration()
    pod = make_pod("p", tolerations=[tol("a", "Exists")])
    tainted = make_node("n", taints=[taint("b", "1", "NoSchedule")])
    ok = make_node("n", taints=[taint("a", "1", "NoSchedule")])
    assert pl.is_schedulable_after_node_change(pod, None, ok) == QueueingHint.QUEUE
    assert pl.is_schedulable_after_node_change(pod, None, tainted) == QueueingHint.QUEUE_SKIP
    assert pl.is_schedulable_after_node_change(pod, tainted, ok) == QueueingHint.QUEUE
    assert pl.is_schedulable_after_node_change(pod, ok, ok) == QueueingHint.QUEUE_SKIP
    assert pl.is_schedulable_after_pod_toleration_change(pod, pod, pod) == QueueingHint.QUEUE
    other = make_pod("q")
    assert pl.is_schedulable_after_pod_toleration_change(pod, other, other) == QueueingHint.QUEUE_SKIP


def test_filter_reason_is_the_same_for_different_taints() -> None:
    """1.37 names no taint in the reason, so FailedScheduling counts such nodes together."""
    snapshot = make_snapshot(
        [
            make_node("n1", taints=[taint("a", "1", "NoSchedule")]),
            make_node("n2", taints=[taint("b", "2", "NoExecute")]),
        ]
    )
    pod = make_pod("p")
    pl = TaintToleration()
    reasons = set()
    for info in snapshot.list():
        status = pl.filter(CycleState(), pod, info)
        assert status is not None
        reasons.update(status.reasons)
    assert reasons == {"node(s) had untolerated taint(s)"}
