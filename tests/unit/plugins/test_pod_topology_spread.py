"""PodTopologySpread: cases after the reference's podtopologyspread filtering_test.go / scoring_test.go."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError
from spread_affinity_helpers import (
    FakeHandle,
    build_snapshot,
    node,
    pod,
    run_filter,
    run_score,
    unresolvable,
    unschedulable,
)

from kopf_scheduler.api.apps import parse_replica_set, parse_stateful_set
from kopf_scheduler.api.core import Service, parse_replication_controller, parse_service
from kopf_scheduler.api.meta import OwnerReference
from kopf_scheduler.api.objects import Pod
from kopf_scheduler.api.types import LabelSelector, Taint
from kopf_scheduler.config.profile import adapter
from kopf_scheduler.framework.interface import ActionType, Code, CycleState, EventResource, QueueingHint
from kopf_scheduler.plugins.pod_topology_spread import (
    ERR_REASON_CONSTRAINTS_NOT_MATCH,
    ERR_REASON_NODE_LABEL_NOT_MATCH,
    PodTopologySpread,
    PodTopologySpreadArgs,
)
from kopf_scheduler.plugins.pod_topology_spread_common import default_selector

HOST = "kubernetes.io/hostname"
FOO = {"matchExpressions": [{"key": "foo", "operator": "Exists"}]}
NOT_MATCH = unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH)
MISSING = unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH)


def tsc(
    key: str, skew: int = 1, when: str = "DoNotSchedule", selector: Any = FOO, **extra: Any
) -> dict[str, Any]:
    c: dict[str, Any] = {"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": when, **extra}
    if selector is not None:
        c["labelSelector"] = selector
    return c


def four_nodes() -> list[Any]:
    return [
        node("node-a", zone="zone1"),
        node("node-b", zone="zone1"),
        node("node-x", zone="zone2"),
        node("node-y", zone="zone2"),
    ]


def existing(
    spec: dict[str, int], labels: dict[str, str] | None = None, namespace: str = "default"
) -> list[Any]:
    out = []
    for node_name, n in spec.items():
        for i in range(n):
            out.append(pod(f"p-{node_name}-{i}", node_name, namespace, labels or {"foo": ""}))
    return out


def plugin(snap: Any, args: PodTopologySpreadArgs | None = None, objects: Any = None) -> PodTopologySpread:
    return PodTopologySpread(
        args or PodTopologySpreadArgs(defaulting_type="List"), FakeHandle(snap, objects or {})
    )


OK = None

FILTER_CASES: list[tuple[str, list[Any], list[Any], Any, dict[str, Any]]] = [
    (
        "no existing pods",
        four_nodes(),
        [],
        pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc("zone")]),
        {"node-a": OK, "node-b": OK, "node-x": OK, "node-y": OK},
    ),
    (
        "no existing pods, incoming pod doesn't match itself",
        four_nodes(),
        [],
        pod(
            "p",
            labels={"foo": ""},
            topologySpreadConstraints=[tsc("zone", selector={"matchLabels": {"bar": ""}})],
        ),
        {"node-a": OK, "node-b": OK, "node-x": OK, "node-y": OK},
    ),
    (
        "existing pods in a different namespace do not count",
        four_nodes(),
        existing({"node-a": 1, "node-b": 1}, namespace="ns1") + existing({"node-x": 2}),
        pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc("zone")]),
        {"node-a": OK, "node-b": OK, "node-x": NOT_MATCH, "node-y": NOT_MATCH},
    ),
    (
        "pods spread across zones as 3/3, all nodes fit",
        four_nodes(),
        existing({"node-a": 2, "node-b": 1, "node-x": 2, "node-y": 1}),
        pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc("zone")]),
        {"node-a": OK, "node-b": OK, "node-x": OK, "node-y": OK},
    ),
    (
        "pods spread across zones as 1/2 due to absence of label 'zone' on node-b",
        [
            node("node-a", zone="zone1"),
            node("node-b", zon="zone1"),
            node("node-x", zone="zone2"),
            node("node-y", zone="zone2"),
        ],
        existing({"node-a": 1, "node-b": 1, "node-x": 1, "node-y": 1}),
        pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc("zone")]),
        {"node-a": OK, "node-b": MISSING, "node-x": NOT_MATCH, "node-y": NOT_MATCH},
    ),
    (
        "pod cannot be scheduled as all nodes don't have label 'rack'",
        four_nodes(),
        [],
        pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc("rack")]),
        {"node-a": MISSING, "node-b": MISSING, "node-x": MISSING, "node-y": MISSING},
    ),
    (
        "pods spread across nodes as 2/1/0/3, only node-x fits",
        four_nodes(),
        existing({"node-a": 2, "node-b": 1, "node-y": 3}),
        pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc(HOST)]),
        {"node-a": NOT_MATCH, "node-b": NOT_MATCH, "node-x": OK, "node-y": NOT_MATCH},
    ),
    (
        "pods spread across nodes as 2/1/0/3, maxSkew is 2, node-b and node-x fit",
        four_nodes(),
        existing({"node-a": 2, "node-b": 1, "node-y": 3}),
        pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc(HOST, 2)]),
        {"node-a": NOT_MATCH, "node-b": OK, "node-x": OK, "node-y": NOT_MATCH},
    ),
    (
        "incoming pod doesn't match itself: skew counts only existing pods",
        four_nodes(),
        existing({"node-a": 2, "node-b": 1, "node-y": 3}),
        pod("p", labels={"bar": ""}, topologySpreadConstraints=[tsc(HOST)]),
        {"node-a": NOT_MATCH, "node-b": OK, "node-x": OK, "node-y": NOT_MATCH},
    ),
    (
        "terminating pods are not counted",
        four_nodes(),
        [*existing({"node-a": 1, "node-x": 1}), pod("dying", "node-b", labels={"foo": ""})],
        pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc(HOST)]),
        {"node-a": NOT_MATCH, "node-b": OK, "node-x": NOT_MATCH, "node-y": OK},
    ),
    (
        "two constraints: zone and node; only node-x fits",
        four_nodes(),
        existing({"node-a": 2, "node-b": 1, "node-x": 1, "node-y": 2}),
        pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc("zone"), tsc(HOST)]),
        # zone1=3, zone2=3 -> zones fine; per node min=1 -> a(3) y(3) fail, b/x fit
        {"node-a": NOT_MATCH, "node-b": OK, "node-x": OK, "node-y": NOT_MATCH},
    ),
    (
        "two constraints: zone 3/1 puts the pod in zone2, hostname then picks the emptier node",
        four_nodes(),
        existing({"node-a": 2, "node-b": 1, "node-x": 1}),
        pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc("zone"), tsc(HOST)]),
        {"node-a": NOT_MATCH, "node-b": NOT_MATCH, "node-x": NOT_MATCH, "node-y": OK},
    ),
    (
        "minDomains greater than the number of domains makes the global minimum 0",
        four_nodes(),
        existing({"node-a": 1, "node-x": 1}),
        pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc("zone", minDomains=3)]),
        {"node-a": NOT_MATCH, "node-b": NOT_MATCH, "node-x": NOT_MATCH, "node-y": NOT_MATCH},
    ),
    (
        "minDomains met: the real global minimum is used",
        four_nodes(),
        existing({"node-a": 1, "node-x": 1}),
        pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc("zone", minDomains=2)]),
        {"node-a": OK, "node-b": OK, "node-x": OK, "node-y": OK},
    ),
    (
        "nodeAffinityPolicy Honor: nodes the pod cannot land on are not counted",
        [
            node("node-a", zone="zone1", foo="x"),
            node("node-b", zone="zone1", foo="x"),
            node("node-x", zone="zone2", foo="x"),
            node("node-y", zone="zone2"),
        ],
        existing({"node-a": 1, "node-y": 2}),
        pod("p", labels={"foo": ""}, nodeSelector={"foo": "x"}, topologySpreadConstraints=[tsc("zone")]),
        {"node-a": NOT_MATCH, "node-b": NOT_MATCH, "node-x": OK, "node-y": OK},
    ),
    (
        "nodeAffinityPolicy Ignore: every node with the key counts",
        [
            node("node-a", zone="zone1", foo="x"),
            node("node-b", zone="zone1", foo="x"),
            node("node-x", zone="zone2", foo="x"),
            node("node-y", zone="zone2"),
        ],
        existing({"node-a": 1, "node-y": 2}),
        pod(
            "p",
            labels={"foo": ""},
            nodeSelector={"foo": "x"},
            topologySpreadConstraints=[tsc("zone", nodeAffinityPolicy="Ignore")],
        ),
        {"node-a": OK, "node-b": OK, "node-x": NOT_MATCH, "node-y": NOT_MATCH},
    ),
    (
        "matchLabelKeys narrows the selector to the pod's own value",
        four_nodes(),
        existing({"node-a": 2}, labels={"foo": "", "rev": "old"})
        + existing({"node-x": 1}, labels={"foo": "", "rev": "new"}),
        pod(
            "p",
            labels={"foo": "", "rev": "new"},
            topologySpreadConstraints=[tsc("zone", matchLabelKeys=["rev"])],
        ),
        {"node-a": OK, "node-b": OK, "node-x": NOT_MATCH, "node-y": NOT_MATCH},
    ),
    (
        "without matchLabelKeys the other revision counts",
        four_nodes(),
        existing({"node-a": 2}, labels={"foo": "", "rev": "old"})
        + existing({"node-x": 1}, labels={"foo": "", "rev": "new"}),
        pod("p", labels={"foo": "", "rev": "new"}, topologySpreadConstraints=[tsc("zone")]),
        {"node-a": NOT_MATCH, "node-b": NOT_MATCH, "node-x": OK, "node-y": OK},
    ),
    (
        "an empty labelSelector counts no existing pod but matches the incoming one",
        four_nodes(),
        existing({"node-a": 3}),
        pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc(HOST, selector={})]),
        {"node-a": OK, "node-b": OK, "node-x": OK, "node-y": OK},
    ),
]


def _mark_terminating(pods: list[Any]) -> None:
    for p in pods:
        if p.name == "dying":
            p.deletion_timestamp = 1.0


@pytest.mark.parametrize(
    ("name", "nodes", "pods", "incoming", "want"), FILTER_CASES, ids=[c[0] for c in FILTER_CASES]
)
def test_filter(name: str, nodes: list[Any], pods: list[Any], incoming: Any, want: dict[str, Any]) -> None:
    _mark_terminating(pods)
    snap = build_snapshot(nodes, pods)
    pre, statuses = run_filter(plugin(snap), incoming, snap)
    assert pre is None
    assert statuses == want


def test_taints_policy_honor_excludes_untolerated_nodes() -> None:
    nodes = [
        node("node-a", zone="zone1"),
        node("node-x", zone="zone2"),
    ]
    tainted = node("node-t", zone="zone3")
    tainted.taints = (Taint("k", "v", "NoSchedule"),)
    nodes.append(tainted)
    pods = existing({"node-a": 1, "node-x": 1})
    incoming_honor = pod(
        "p", labels={"foo": ""}, topologySpreadConstraints=[tsc("zone", nodeTaintsPolicy="Honor")]
    )
    incoming_ignore = pod("q", labels={"foo": ""}, topologySpreadConstraints=[tsc("zone")])
    snap = build_snapshot(nodes, pods)
    # Honor: zone3 is not a domain, min is 1 -> zone1/zone2 fit (1+1-1 = 1).
    _, st = run_filter(plugin(snap), incoming_honor, snap)
    assert st == {"node-a": OK, "node-x": OK, "node-t": OK}
    # Ignore: zone3 counts with 0 pods -> zone1/zone2 fail.
    _, st = run_filter(plugin(snap), incoming_ignore, snap)
    assert st == {"node-a": NOT_MATCH, "node-x": NOT_MATCH, "node-t": OK}


def test_prefilter_skips_without_hard_constraints() -> None:
    snap = build_snapshot(four_nodes(), [])
    incoming = pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc("zone", when="ScheduleAnyway")])
    pre, _ = run_filter(plugin(snap), incoming, snap)
    assert pre is not None and pre.code == Code.SKIP


def test_filter_without_prefilter_state_is_an_error() -> None:
    snap = build_snapshot(four_nodes(), [])
    st = plugin(snap).filter(CycleState(), pod("p"), snap.node_infos[0])
    assert st is not None and st.code == Code.ERROR


def test_add_remove_pod_keep_counts_and_minimum_exact() -> None:
    nodes = four_nodes()
    pods = existing({"node-a": 1, "node-x": 1})
    snap = build_snapshot(nodes, pods)
    pl = plugin(snap)
    incoming = pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc("zone")])
    state = CycleState()
    pl.pre_filter(state, incoming, snap.list())
    a, x = snap.get("node-a"), snap.get("node-x")
    assert a is not None and x is not None
    assert pl.filter(state, incoming, a) is None
    # Removing the zone2 pod drops the global minimum to 0: zone1 (1 pod) now fails.
    clone = state.clone()
    assert pl.remove_pod(clone, incoming, pods[1], x) is None
    assert pl.filter(clone, incoming, a) == NOT_MATCH
    assert pl.filter(clone, incoming, x) is None
    # The original state is untouched by the clone's update.
    assert pl.filter(state, incoming, a) is None
    # Adding a matching pod to zone1 makes zone1 (2) - min (1) + 1 > 1.
    extra = pod("extra", "node-b", labels={"foo": ""})
    assert pl.add_pod(state, incoming, extra, snap.get("node-b")) is None  # type: ignore[arg-type]
    assert pl.filter(state, incoming, a) == NOT_MATCH
    assert pl.filter(state, incoming, x) is None
    # Pods of another namespace are ignored by the update.
    other = pod("other", "node-x", namespace="ns2", labels={"foo": ""})
    assert pl.add_pod(state, incoming, other, x) is None
    assert pl.filter(state, incoming, x) is None
    # The vector hook sees the updated state too.
    mask = pl.filter_vector(state, incoming, snap, np.arange(4))
    assert list(mask) == [False, False, True, True]  # type: ignore[arg-type]


# --- scoring ----------------------------------------------------------------------------------------

SCORE_CASES: list[tuple[str, list[Any], list[Any], Any, list[str] | None, dict[str, int]]] = [
    (
        "one constraint on node, no existing pods",
        [node("node-a"), node("node-b")],
        [],
        pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc(HOST, when="ScheduleAnyway")]),
        None,
        {"node-a": 100, "node-b": 100},
    ),
    (
        "one constraint on node, only one node is candidate",
        [node("node-a"), node("node-b")],
        existing({"node-a": 2, "node-b": 1}),
        pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc(HOST, when="ScheduleAnyway")]),
        ["node-a"],
        {"node-a": 100},
    ),
    (
        "one constraint on node, all 4 nodes are candidates",
        [node("node-a"), node("node-b"), node("node-c"), node("node-d")],
        existing({"node-a": 2, "node-b": 1, "node-d": 3}),
        pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc(HOST, when="ScheduleAnyway")]),
        None,
        # weight ln(6): raw 4, 2, 0, 5 -> 100*(5-raw)/5
        {"node-a": 20, "node-b": 60, "node-c": 100, "node-d": 0},
    ),
    (
        "one constraint on zone, nodes without the zone label are ignored",
        [
            node("node-a", zone="zone1"),
            node("node-b", zone="zone1"),
            node("node-x"),
            node("node-y", zone="zone2"),
        ],
        existing({"node-a": 1, "node-b": 1, "node-x": 3, "node-y": 1}),
        pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc("zone", when="ScheduleAnyway")]),
        None,
        # zones: zone1=2, zone2=1; weight ln(4)=1.386 -> raw 3, 3, -, 1
        {"node-a": 33, "node-b": 33, "node-x": 0, "node-y": 100},
    ),
    (
        "two soft constraints, zone and node",
        four_nodes(),
        existing({"node-a": 2, "node-b": 1, "node-y": 1}),
        pod(
            "p",
            labels={"foo": ""},
            topologySpreadConstraints=[tsc("zone", when="ScheduleAnyway"), tsc(HOST, when="ScheduleAnyway")],
        ),
        None,
        # zone weight ln(4)=1.386 (3 and 1 pods), node weight ln(6)=1.792
        # a: 3*1.386+2*1.792=7.74->8, b: 4.159+1.792=5.95->6, x: 1.386->1, y: 1.386+1.792=3.18->3
        {"node-a": 12, "node-b": 37, "node-x": 100, "node-y": 75},
    ),
    (
        "maxSkew waters the differences down",
        [node("node-a"), node("node-b")],
        existing({"node-a": 1}),
        pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc(HOST, 3, when="ScheduleAnyway")]),
        None,
        # weight ln(4)=1.386: raw a = 1.386+2 = 3.39->3, b = 2 -> 100*(3+2-raw)/3
        {"node-a": 66, "node-b": 100},
    ),
]


@pytest.mark.parametrize(
    ("name", "nodes", "pods", "incoming", "feasible", "want"), SCORE_CASES, ids=[c[0] for c in SCORE_CASES]
)
def test_score(
    name: str,
    nodes: list[Any],
    pods: list[Any],
    incoming: Any,
    feasible: list[str] | None,
    want: dict[str, int],
) -> None:
    snap = build_snapshot(nodes, pods)
    pre, scores = run_score(plugin(snap), incoming, snap, feasible)
    assert pre is None
    assert scores == want


def test_score_skips_without_soft_constraints() -> None:
    snap = build_snapshot(four_nodes(), [])
    pre, _ = run_score(plugin(snap), pod("p", topologySpreadConstraints=[tsc("zone")]), snap)
    assert pre is not None and pre.code == Code.SKIP


# --- default constraints ----------------------------------------------------------------------------


def _service(ns: str, name: str, selector: dict[str, str] | None) -> Service:
    spec: dict[str, Any] = {} if selector is None else {"selector": selector}
    return parse_service({"metadata": {"namespace": ns, "name": name}, "spec": spec})


def test_system_defaults_spread_service_pods_and_tolerate_missing_zone() -> None:
    nodes = [node("node-a", **{"topology.kubernetes.io/zone": "z1"}), node("node-b"), node("node-c")]
    pods = existing({"node-a": 2, "node-b": 1}, labels={"app": "web"})
    snap = build_snapshot(nodes, pods)
    objects = {"Service": {"default/web": _service("default", "web", {"app": "web"})}}
    pl = PodTopologySpread(PodTopologySpreadArgs(), FakeHandle(snap, objects))
    incoming = pod("p", labels={"app": "web"})
    # System defaults are soft only: no filtering.
    pre, _ = run_filter(pl, incoming, snap)
    assert pre is not None and pre.code == Code.SKIP
    _, scores = run_score(pl, incoming, snap)
    # hostname (maxSkew 3, weight ln 5): a=2*1.609+2=5.22, b=1.609+2=3.61, c=2.
    # zone (maxSkew 5): b and c are not ignored under system defaulting; they form the "" domain,
    # so there are 2 domains (weight ln 4): a += 2*1.386+4 -> a=11.99->12; b, c get no zone term.
    # normalised 100*(12+2-s)/12.
    assert scores == {"node-a": 16, "node-b": 83, "node-c": 100}


def test_defaults_need_a_selector_from_owners() -> None:
    snap = build_snapshot(four_nodes(), existing({"node-a": 2}, labels={"app": "web"}))
    pl = PodTopologySpread(PodTopologySpreadArgs(), FakeHandle(snap, {"Service": {}}))
    pre, _ = run_score(pl, pod("p", labels={"app": "web"}), snap)
    assert pre is not None and pre.code == Code.SKIP
    # A service with a nil selector selects nothing.
    objects = {"Service": {"default/web": _service("default", "web", None)}}
    pl = PodTopologySpread(PodTopologySpreadArgs(), FakeHandle(snap, objects))
    pre, _ = run_score(pl, pod("p", labels={"app": "web"}), snap)
    assert pre is not None and pre.code == Code.SKIP


def test_list_defaults_with_replicaset_owner_filter() -> None:
    args = adapter(PodTopologySpreadArgs).validate_python(
        {
            "defaultingType": "List",
            "defaultConstraints": [
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
            ],
        }
    )
    pods = existing({"node-a": 1, "node-b": 1}, labels={"app": "web"})
    snap = build_snapshot(four_nodes(), pods)
    objects = {
        "ReplicaSet": {
            "default/web-1": parse_replica_set(
                {"metadata": {"name": "web-1"}, "spec": {"selector": {"matchLabels": {"app": "web"}}}}
            )
        }
    }
    owner = [OwnerReference("apps/v1", "ReplicaSet", "web-1", "u", controller=True)]
    incoming = pod("p", labels={"app": "web"})
    incoming.owner_references = tuple(owner)
    pl = PodTopologySpread(args, FakeHandle(snap, objects))
    _, st = run_filter(pl, incoming, snap)
    assert st == {"node-a": NOT_MATCH, "node-b": NOT_MATCH, "node-x": OK, "node-y": OK}
    # A pod whose own constraints exist ignores the defaults.
    own = pod("q", labels={"app": "web"}, topologySpreadConstraints=[tsc(HOST, 5)])
    own.owner_references = tuple(owner)
    _, st = run_filter(pl, own, snap)
    assert st == {"node-a": OK, "node-b": OK, "node-x": OK, "node-y": OK}


def test_default_selector_from_services_and_each_controller_kind() -> None:
    """helper.DefaultSelector: the Services of the pod's namespace that select it, merged, then
    its controller's selector (an RC's label map merged in, a ReplicaSet's or StatefulSet's
    requirements added); a Service elsewhere or selecting other labels adds nothing."""

    def owned_by(api_version: str, kind: str) -> Pod:
        p = pod("p", labels={"app": "web", "tier": "fe", "rev": "2"})
        p.owner_references = (OwnerReference(api_version, kind, "ctl", "u", controller=True),)
        return p

    objects: dict[str, dict[str, Any]] = {
        "Service": {
            "default/web": _service("default", "web", {"app": "web"}),
            "default/other": _service("default", "other", {"app": "db"}),
            "elsewhere/web": _service("elsewhere", "web", {"tier": "fe"}),
        },
        "ReplicationController": {
            "default/ctl": parse_replication_controller(
                {"metadata": {"name": "ctl", "namespace": "default"}, "spec": {"selector": {"tier": "fe"}}}
            )
        },
        "StatefulSet": {
            "default/ctl": parse_stateful_set(
                {
                    "metadata": {"name": "ctl", "namespace": "default"},
                    "spec": {
                        "selector": {
                            "matchLabels": {"rev": "2"},
                            "matchExpressions": [{"key": "tier", "operator": "Exists"}],
                        }
                    },
                }
            )
        },
    }
    plain = pod("p", labels={"app": "web", "tier": "fe", "rev": "2"})
    assert default_selector(plain, objects) == LabelSelector((("app", "web"),))
    rc = default_selector(owned_by("v1", "ReplicationController"), objects)
    assert rc == LabelSelector((("app", "web"), ("tier", "fe")))
    ss = default_selector(owned_by("apps/v1", "StatefulSet"), objects)
    assert ss.match_labels == (("app", "web"),)
    assert {(r.key, r.operator, r.values) for r in ss.match_expressions} == {
        ("rev", "In", frozenset({"2"})),
        ("tier", "Exists", frozenset()),
    }
    # A controller the informers do not hold (a ReplicaSet here) leaves the Services' selector.
    assert default_selector(owned_by("apps/v1", "ReplicaSet"), objects) == LabelSelector((("app", "web"),))
    # The wrong group for the kind is not that controller.
    assert default_selector(owned_by("apps/v1", "ReplicationController"), objects) == LabelSelector(
        (("app", "web"),)
    )


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ({"defaultingType": "Other"}, "defaultingType"),
        (
            {
                "defaultingType": "System",
                "defaultConstraints": [
                    {"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule"}
                ],
            },
            "when .defaultConstraints are not empty",
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {"maxSkew": 0, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule"}
                ],
            },
            "not in valid range",
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [{"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "Maybe"}],
            },
            "whenUnsatisfiable",
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": "z",
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {},
                    }
                ],
            },
            "must not define a selector",
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule"},
                    {"maxSkew": 2, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule"},
                ],
            },
            "Duplicate value",
        ),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_args_validation(raw: dict[str, Any], error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        adapter(PodTopologySpreadArgs).validate_python(raw)


def test_args_defaults() -> None:
    args = PodTopologySpreadArgs()
    assert args.defaulting_type == "System" and args.default_constraints == []
    pl = PodTopologySpread(args, None)
    assert [(c.topology_key, c.max_skew) for c in pl.default_constraints] == [
        ("kubernetes.io/hostname", 3),
        ("topology.kubernetes.io/zone", 5),
    ]


# --- events -----------------------------------------------------------------------------------------


def test_events_and_hints() -> None:
    snap = build_snapshot(four_nodes(), [])
    pl = plugin(snap)
    events = list(pl.events_to_register())
    assert events[0].event.resource == EventResource.POD
    assert events[0].event.action & ActionType.UPDATE_POD_TOLERATIONS
    assert events[1].event.resource == EventResource.NODE
    assert events[1].event.action & ActionType.DELETE
    target = pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc("zone")])
    matching = pod("e", "node-a", labels={"foo": ""})
    other = pod("f", "node-a", labels={"bar": ""})
    unscheduled = pod("g", labels={"foo": ""})
    pod_hint, node_hint = events[0].hint, events[1].hint
    assert pod_hint is not None and node_hint is not None
    assert pod_hint(target, None, matching) == QueueingHint.QUEUE
    assert pod_hint(target, None, other) == QueueingHint.QUEUE_SKIP
    assert pod_hint(target, None, unscheduled) == QueueingHint.QUEUE_SKIP
    assert pod_hint(target, matching, None) == QueueingHint.QUEUE
    assert pod_hint(target, other, matching) == QueueingHint.QUEUE
    assert pod_hint(target, matching, matching) == QueueingHint.QUEUE_SKIP
    assert node_hint(target, None, node("n", zone="z")) == QueueingHint.QUEUE
    assert node_hint(target, None, node("n")) == QueueingHint.QUEUE_SKIP
    assert node_hint(target, node("n", zone="a"), node("n", zone="b")) == QueueingHint.QUEUE
    assert node_hint(target, node("n", zone="a"), node("n", zone="a", x="y")) == QueueingHint.QUEUE_SKIP
    assert node_hint(target, node("n", zone="a"), None) == QueueingHint.QUEUE
