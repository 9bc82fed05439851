"""NodeAffinity: the reference's filter/score tables, PreFilter narrowing, addedAffinity, hints."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from node_plugin_helpers import all_rows, assert_filter_vector_agrees, make_snapshot, scores
from pydantic import ValidationError

from kopf_scheduler.config.profile import adapter
from kopf_scheduler.framework.interface import Code, CycleState, PreFilterResult, QueueingHint
from kopf_scheduler.plugins.node_affinity import NodeAffinity, NodeAffinityArgs
from kopf_scheduler_workbench.testing.builders import make_node, make_pod

POD_REASON = "node(s) didn't match Pod's node affinity/selector"
REQ = "requiredDuringSchedulingIgnoredDuringExecution"
PREF = "preferredDuringSchedulingIgnoredDuringExecution"


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "operator": op}
    if values:
        out["values"] = list(values)
    return out


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {REQ: {"nodeSelectorTerms": list(terms)}}}


def plugin(added: dict[str, Any] | None = None) -> NodeAffinity:
    return NodeAffinity(adapter(NodeAffinityArgs).validate_python({"addedAffinity": added} if added else {}))


FILTER_CASES: list[tuple[str, dict[str, Any], dict[str, str], bool]] = [
    ("missing labels", {"nodeSelector": {"foo": "bar"}}, {}, False),
    ("same labels", {"nodeSelector": {"foo": "bar"}}, {"foo": "bar"}, True),
    ("node labels are superset", {"nodeSelector": {"foo": "bar"}}, {"foo": "bar", "baz": "blah"}, True),
    ("node labels are subset", {"nodeSelector": {"foo": "bar", "baz": "blah"}}, {"foo": "bar"}, False),
    (
        "In matches",
        {"affinity": required({"matchExpressions": [expr("foo", "In", "bar", "value2")]})},
        {"foo": "bar"},
        True,
    ),
    (
        "Gt compares integers",
        {"affinity": required({"matchExpressions": [expr("kernel-version", "Gt", "0204")]})},
        {"kernel-version": "0206"},
        True,
    ),
    (
        "Lt compares integers",
        {"affinity": required({"matchExpressions": [expr("kernel-version", "Lt", "0204")]})},
        {"kernel-version": "0206"},
        False,
    ),
    (
        "Gt with a non-integer label fails",
        {"affinity": required({"matchExpressions": [expr("kernel-version", "Gt", "1")]})},
        {"kernel-version": "x"},
        False,
    ),
    (
        "NotIn",
        {"affinity": required({"matchExpressions": [expr("mem-type", "NotIn", "DDR", "DDR2")]})},
        {"mem-type": "DDR3"},
        True,
    ),
    (
        "Exists",
        {"affinity": required({"matchExpressions": [expr("GPU", "Exists")]})},
        {"GPU": "NVIDIA-GRID-K1"},
        True,
    ),
    (
        "DoesNotExist",
        {"affinity": required({"matchExpressions": [expr("GPU", "DoesNotExist")]})},
        {"GPU": "NVIDIA-GRID-K1"},
        False,
    ),
    (
        "affinity that does not match",
        {"affinity": required({"matchExpressions": [expr("foo", "In", "value1", "value2")]})},
        {"foo": "bar"},
        False,
    ),
    (
        "empty MatchExpressions matches no objects",
        {"affinity": required({"matchExpressions": []})},
        {"foo": "bar"},
        False,
    ),
    ("no terms matches nothing", {"affinity": required()}, {"foo": "bar"}, False),
    ("no affinity", {}, {"foo": "bar"}, True),
    ("affinity with a nil NodeSelector", {"affinity": {"nodeAffinity": {}}}, {"foo": "bar"}, True),
    (
        "terms are ORed",
        {
            "affinity": required(
                {"matchExpressions": [expr("foo", "In", "x")]},
                {"matchExpressions": [expr("diffkey", "In", "wrong")]},
            )
        },
        {"diffkey": "wrong"},
        True,
    ),
    (
        "expressions in a term are ANDed",
        {"affinity": required({"matchExpressions": [expr("foo", "Exists"), expr("bar", "Exists")]})},
        {"foo": "1"},
        False,
    ),
    (
        "affinity and nodeSelector both satisfied",
        {"nodeSelector": {"foo": "bar"}, "affinity": required({"matchExpressions": [expr("foo", "Exists")]})},
        {"foo": "bar"},
        True,
    ),
    (
        "affinity satisfied but nodeSelector not",
        {"nodeSelector": {"foo": "baz"}, "affinity": required({"matchExpressions": [expr("foo", "Exists")]})},
        {"foo": "bar"},
        False,
    ),
    (
        "matchFields metadata.name",
        {"affinity": required({"matchFields": [expr("metadata.name", "In", "node1")]})},
        {},
        True,
    ),
    (
        "matchFields and matchExpressions are ANDed",
        {
            "affinity": required(
                {
                    "matchFields": [expr("metadata.name", "In", "node1")],
                    "matchExpressions": [expr("foo", "Exists")],
                }
            )
        },
        {},
        False,
    ),
]


@pytest.mark.parametrize(("name", "spec", "labels", "fits"), FILTER_CASES)
def test_filter(name: str, spec: dict[str, Any], labels: dict[str, str], fits: bool) -> None:
    node = make_node("node1", labels=labels)
    snapshot = make_snapshot([node])
    pod = make_pod("p", **spec)
    pl = plugin()
    state = CycleState()
    _, pre = pl.pre_filter(state, pod, snapshot.list())
    if pre is not None and pre.code == Code.SKIP:
        assert fits  # nothing to check
        return
    status = pl.filter(state, pod, snapshot.list()[0])
    if fits:
        assert status is None
    else:
        assert status is not None
        assert status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert status.reasons == [POD_REASON]
    # Without PreFilter the plugin computes the same answer.
    assert (pl.filter(CycleState(), pod, snapshot.list()[0]) is None) == fits


def _label_zoo() -> list[Any]:
    """One node per distinct label set of the filter cases, plus a bare node."""
    sets: list[dict[str, str]] = [{}]
    for _, _, labels, _ in FILTER_CASES:
        if labels not in sets:
            sets.append(labels)
    return [make_node(f"node{i}", labels=labels) for i, labels in enumerate(sets)]


@pytest.mark.parametrize(("name", "spec", "labels", "fits"), FILTER_CASES)
def test_filter_vector_agrees_with_filter(
    name: str, spec: dict[str, Any], labels: dict[str, str], fits: bool
) -> None:
    snapshot = make_snapshot(_label_zoo())
    pod = make_pod("p", **spec)
    pl = plugin()
    state = CycleState()
    _, pre = pl.pre_filter(state, pod, snapshot.list())
    if pre is not None and pre.code == Code.SKIP:
        return
    assert_filter_vector_agrees(pl, state, pod, snapshot)
    assert_filter_vector_agrees(pl, state, pod, snapshot)  # the memoised answer, too


def test_filter_vector_with_added_affinity_agrees() -> None:
    added = {REQ: {"nodeSelectorTerms": [{"matchExpressions": [expr("zone", "In", "foo")]}]}}
    pl = plugin(added)
    snapshot = make_snapshot(
        [
            make_node("n1", labels={"zone": "foo"}),
            make_node("n2", labels={"zone": "bar", "x": "y"}),
            make_node("n3", labels={"zone": "foo", "x": "y"}),
        ]
    )
    for pod in (make_pod("p", nodeSelector={"x": "y"}), make_pod("q")):
        state = CycleState()
        pl.pre_filter(state, pod, snapshot.list())
        assert_filter_vector_agrees(pl, state, pod, snapshot)


def test_filter_vector_memo_follows_node_changes() -> None:
    """A relabelled node, a pod bound to a node and a new row layout are all seen by the memo."""
    snapshot = make_snapshot([make_node(f"n{i}", labels={"zone": "a" if i % 2 else "b"}) for i in range(6)])
    pl = plugin()
    pod = make_pod("p", nodeSelector={"zone": "a"})
    state = CycleState()
    pl.pre_filter(state, pod, snapshot.list())
    rows = all_rows(snapshot)
    assert pl.filter_vector(state, pod, snapshot, rows).tolist() == [False, True] * 3
    snapshot.node_infos[0].set_node(make_node("n0", labels={"zone": "a"}))  # relabelled in place
    snapshot.node_infos[1].add_pod(make_pod("x", nodeName="n1"))  # a bind: still matches
    assert pl.filter_vector(state, pod, snapshot, rows).tolist() == [True, True, False, True, False, True]
    snapshot.rebuild(snapshot.node_infos[:2])  # nodes removed: a new layout
    assert pl.filter_vector(state, pod, snapshot, all_rows(snapshot)).tolist() == [True, True]


@pytest.mark.parametrize(
    ("terms", "result", "conflict"),
    [
        ([{"matchFields": [expr("metadata.name", "In", "node1")]}], {"node1"}, False),
        (
            [
                {"matchFields": [expr("metadata.name", "In", "node1")]},
                {"matchFields": [expr("metadata.name", "In", "node2")]},
            ],
            {"node1", "node2"},
            False,
        ),
        (
            [
                {
                    "matchFields": [
                        expr("metadata.name", "In", "node1", "node2"),
                        expr("metadata.name", "In", "node2"),
                    ]
                }
            ],
            {"node2"},
            False,
        ),
        # one term without a name field allows every node
        (
            [
                {"matchFields": [expr("metadata.name", "In", "node1")]},
                {"matchExpressions": [expr("a", "Exists")]},
            ],
            None,
            False,
        ),
        # NotIn does not narrow
        ([{"matchFields": [expr("metadata.name", "NotIn", "node1")]}], None, False),
        (
            [{"matchFields": [expr("metadata.name", "In", "node1"), expr("metadata.name", "In", "node2")]}],
            None,
            True,
        ),
    ],
)
def test_pre_filter_narrows_by_node_name(
    terms: list[dict[str, Any]], result: set[str] | None, conflict: bool
) -> None:
    pod = make_pod("p", affinity=required(*terms))
    res, status = plugin().pre_filter(CycleState(), pod, [])
    if conflict:
        assert status is not None
        assert status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert status.reasons == ["pod affinity terms conflict"]
        return
    assert status is None
    assert res == (PreFilterResult(result) if result is not None else None)


def test_pre_filter_skips_pods_without_constraints() -> None:
    _, status = plugin().pre_filter(CycleState(), make_pod("p"), [])
    assert status is not None and status.code == Code.SKIP
    # ... but not when the profile adds affinity
    added = {REQ: {"nodeSelectorTerms": [{"matchExpressions": [expr("zone", "In", "foo")]}]}}
    assert plugin(added).pre_filter(CycleState(), make_pod("p"), []) == (None, None)


def test_added_affinity_filter() -> None:
    added = {REQ: {"nodeSelectorTerms": [{"matchExpressions": [expr("zone", "In", "foo")]}]}}
    pl = plugin(added)
    snapshot = make_snapshot(
        [make_node("n1", labels={"zone": "foo"}), make_node("n2", labels={"zone": "bar", "x": "y"})]
    )
    n1, n2 = snapshot.list()
    pod = make_pod("p", nodeSelector={"x": "y"})
    state = CycleState()
    pl.pre_filter(state, pod, snapshot.list())
    status = pl.filter(state, pod, n2)
    assert status is not None and status.reasons == ["node(s) didn't match scheduler-enforced node affinity"]
    status = pl.filter(state, pod, n1)
    assert status is not None and status.reasons == [POD_REASON]


def preferred(*weighted: tuple[int, list[dict[str, Any]]]) -> dict[str, Any]:
    return {
        "nodeAffinity": {PREF: [{"weight": w, "preference": {"matchExpressions": e}} for w, e in weighted]}
    }


def test_score_table() -> None:
    nodes = [
        make_node("machine1", labels={"foo": "bar"}),
        make_node("machine5", labels={"foo": "bar", "key": "value", "az": "az1"}),
        make_node("machine2", labels={"key": "value"}),
    ]
    snapshot = make_snapshot(nodes)
    pod = make_pod(
        "p",
        affinity=preferred(
            (2, [expr("foo", "In", "bar")]),
            (4, [expr("key", "In", "value")]),
            (5, [expr("foo", "In", "bar"), expr("key", "In", "value"), expr("az", "In", "az1")]),
            (0, [expr("foo", "Exists")]),  # weight 0 counts nothing
        ),
    )
    pl = plugin()
    state = CycleState()
    assert pl.pre_score(state, pod, snapshot.list()) is None
    raw = scores(pl, state, pod, snapshot)
    assert raw == [2, 11, 4]
    out = np.array(raw, dtype=np.int64)
    pl.normalize_score(state, pod, out)
    assert out.tolist() == [18, 100, 36]


def test_score_single_term_and_nil() -> None:
    nodes = [
        make_node("machine1", labels={"foo": "bar"}),
        make_node("machine2", labels={"key": "value"}),
        make_node("machine3", labels={"az1": "bar"}),
    ]
    snapshot = make_snapshot(nodes)
    pl = plugin()
    status = pl.pre_score(CycleState(), make_pod("p"), snapshot.list())
    assert status is not None and status.code == Code.SKIP
    pod = make_pod("p", affinity=preferred((2, [expr("foo", "In", "bar")])))
    state = CycleState()
    pl.pre_score(state, pod, snapshot.list())
    out = np.array(scores(pl, state, pod, snapshot), dtype=np.int64)
    pl.normalize_score(state, pod, out)
    assert out.tolist() == [100, 0, 0]
    zeros = np.zeros(3, dtype=np.int64)
    pl.normalize_score(state, pod, zeros)
    assert zeros.tolist() == [0, 0, 0]


def test_added_preferred_terms_score_every_pod() -> None:
    added = {PREF: [{"weight": 3, "preference": {"matchExpressions": [expr("zone", "In", "foo")]}}]}
    pl = plugin(added)
    snapshot = make_snapshot(
        [
            make_node("n1", labels={"zone": "foo"}),
            make_node("n2", labels={"zone": "foo", "a": "b"}),
            make_node("n3"),
        ]
    )
    pod = make_pod("p", affinity=preferred((1, [expr("a", "Exists")])))
    state = CycleState()
    assert pl.pre_score(state, pod, snapshot.list()) is None
    assert scores(pl, state, pod, snapshot) == [3, 4, 0]
    state = CycleState()
    assert pl.pre_score(state, make_pod("q"), snapshot.list()) is None
    assert scores(pl, state, make_pod("q"), snapshot) == [3, 3, 0]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"addedAffinity": {REQ: {"nodeSelectorTerms": [{"matchExpressions": [expr("a", "Bad")]}]}}},
            "operator",
        ),
        (
            {"addedAffinity": {REQ: {"nodeSelectorTerms": [{"matchExpressions": [expr("a", "In")]}]}}},
            "must be specified",
        ),
        (
            {"addedAffinity": {REQ: {"nodeSelectorTerms": [{"matchExpressions": [expr("a", "Gt", "x")]}]}}},
            "must be an integer",
        ),
        (
            {
                "addedAffinity": {
                    REQ: {"nodeSelectorTerms": [{"matchFields": [expr("metadata.labels", "In", "x")]}]}
                }
            },
            "not a valid field selector key",
        ),
        (
            {
                "addedAffinity": {
                    PREF: [{"weight": 1, "preference": {"matchExpressions": [expr("a", "Exists", "v")]}}]
                }
            },
            "may not be specified",
        ),
        ({"other": 1}, "other"),
    ],
)
def test_args_validation(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as err:
        adapter(NodeAffinityArgs).validate_python(raw)
    assert message in str(err.value)


def test_hints() -> None:
    pl = plugin()
    pod = make_pod("p", nodeSelector={"foo": "bar"})
    match, nomatch = make_node("n", labels={"foo": "bar"}), make_node("n")
    assert pl.is_schedulable_after_node_change(pod, None, match) == QueueingHint.QUEUE
    assert pl.is_schedulable_after_node_change(pod, None, nomatch) == QueueingHint.QUEUE_SKIP
    assert pl.is_schedulable_after_node_change(pod, nomatch, match) == QueueingHint.QUEUE
    assert pl.is_schedulable_after_node_change(pod, match, match) == QueueingHint.QUEUE_SKIP
    added = {REQ: {"nodeSelectorTerms": [{"matchExpressions": [expr("zone", "In", "foo")]}]}}
    assert plugin(added).is_schedulable_after_node_change(pod, None, match) == QueueingHint.QUEUE_SKIP
