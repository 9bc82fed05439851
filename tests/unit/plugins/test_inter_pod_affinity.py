"""InterPodAffinity: cases after the reference's interpodaffinity filtering_test.go / scoring_test.go."""

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

from kopf_scheduler.api.core import parse_namespace
from kopf_scheduler.config.profile import adapter
from kopf_scheduler.framework.interface import ActionType, Code, CycleState, EventResource, QueueingHint
from kopf_scheduler.plugins.inter_pod_affinity import (
    ERR_REASON_AFFINITY_RULES_NOT_MATCH,
    ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH,
    ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH,
    InterPodAffinity,
    InterPodAffinityArgs,
)

HOST = "kubernetes.io/hostname"
OK = None
AFF = unresolvable(ERR_REASON_AFFINITY_RULES_NOT_MATCH)
ANTI = unschedulable(ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH)
EXISTING = unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH)


def sel_in(key: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}


def term(key: str, selector: Any, **extra: Any) -> dict[str, Any]:
    return {"labelSelector": selector, "topologyKey": key, **extra}


def affinity(
    req: list[Any] | None = None,
    anti: list[Any] | None = None,
    pref: list[tuple[int, Any]] | None = None,
    pref_anti: list[tuple[int, Any]] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    r, p = "requiredDuringSchedulingIgnoredDuringExecution", "preferredDuringSchedulingIgnoredDuringExecution"
    if req or pref:
        out["podAffinity"] = {r: req or [], p: [{"weight": w, "podAffinityTerm": t} for w, t in pref or []]}
    if anti or pref_anti:
        out["podAntiAffinity"] = {
            r: anti or [],
            p: [{"weight": w, "podAffinityTerm": t} for w, t in pref_anti or []],
        }
    return out


def nodes3() -> list[Any]:
    return [
        node("n1", region="r1", zone="z11"),
        node("n2", region="r1", zone="z12"),
        node("n3", region="r2", zone="z21"),
    ]


NAMESPACES = {
    name: parse_namespace({"metadata": {"name": name, "labels": {"team": team}}})
    for name, team in (("default", "core"), ("team-a", "a"), ("team-b", "b"))
}


def plugin(snap: Any, **args: Any) -> InterPodAffinity:
    validated = adapter(InterPodAffinityArgs).validate_python(args)
    return InterPodAffinity(validated, FakeHandle(snap, {"Namespace": NAMESPACES}))


SEC = {"service": "securityscan"}

FILTER_CASES: list[tuple[str, list[Any], list[Any], Any, dict[str, Any] | None]] = [
    (
        "required affinity In matches an existing pod: its whole region fits",
        nodes3(),
        [pod("e", "n1", labels=SEC)],
        pod("p", affinity=affinity(req=[term("region", sel_in("service", "securityscan"))])),
        {"n1": OK, "n2": OK, "n3": AFF},
    ),
    (
        "affinity does not match a pod of another namespace",
        nodes3(),
        [pod("e", "n1", "team-a", labels=SEC)],
        pod("p", affinity=affinity(req=[term("region", sel_in("service", "securityscan"))])),
        {"n1": AFF, "n2": AFF, "n3": AFF},
    ),
    (
        "affinity with explicit namespaces matches the pod there",
        nodes3(),
        [pod("e", "n1", "team-a", labels=SEC)],
        pod(
            "p",
            affinity=affinity(req=[term("region", sel_in("service", "securityscan"), namespaces=["team-a"])]),
        ),
        {"n1": OK, "n2": OK, "n3": AFF},
    ),
    (
        "affinity with a namespaceSelector unrolled from Namespace objects",
        nodes3(),
        [pod("e", "n3", "team-a", labels=SEC), pod("f", "n1", "team-b", labels=SEC)],
        pod(
            "p",
            affinity=affinity(
                req=[
                    term(
                        "region",
                        sel_in("service", "securityscan"),
                        namespaceSelector={"matchLabels": {"team": "a"}},
                    )
                ]
            ),
        ),
        {"n1": AFF, "n2": AFF, "n3": OK},
    ),
    (
        "an empty namespaceSelector selects every namespace",
        nodes3(),
        [pod("e", "n3", "team-b", labels=SEC)],
        pod(
            "p",
            affinity=affinity(req=[term("region", sel_in("service", "securityscan"), namespaceSelector={})]),
        ),
        {"n1": AFF, "n2": AFF, "n3": OK},
    ),
    (
        "unmatching labelSelector and the pod does not match itself",
        nodes3(),
        [pod("e", "n1", labels={"service": "other"})],
        pod("p", affinity=affinity(req=[term("region", sel_in("service", "securityscan"))])),
        {"n1": AFF, "n2": AFF, "n3": AFF},
    ),
    (
        "first pod of a group: nothing matches anywhere but the pod matches its own terms",
        [*nodes3(), node("n4")],
        [pod("e", "n1", labels={"service": "other"})],
        pod("p", labels=SEC, affinity=affinity(req=[term("region", sel_in("service", "securityscan"))])),
        {"n1": OK, "n2": OK, "n3": OK, "n4": AFF},
    ),
    (
        "no first-pod exception once a matching pod exists elsewhere",
        nodes3(),
        [pod("e", "n3", labels=SEC)],
        pod("p", labels=SEC, affinity=affinity(req=[term("region", sel_in("service", "securityscan"))])),
        {"n1": AFF, "n2": AFF, "n3": OK},
    ),
    (
        "all affinity terms must be satisfied by the same pod",
        nodes3(),
        [pod("e", "n1", labels=SEC), pod("f", "n1", labels={"app": "db"})],
        pod(
            "p",
            affinity=affinity(
                req=[term("region", sel_in("service", "securityscan")), term("region", sel_in("app", "db"))]
            ),
        ),
        {"n1": AFF, "n2": AFF, "n3": AFF},
    ),
    (
        "two terms matched by one pod",
        nodes3(),
        [pod("e", "n1", labels={**SEC, "app": "db"})],
        pod(
            "p",
            affinity=affinity(
                req=[term("region", sel_in("service", "securityscan")), term(HOST, sel_in("app", "db"))]
            ),
        ),
        {"n1": OK, "n2": AFF, "n3": AFF},
    ),
    (
        "required anti-affinity on hostname",
        nodes3(),
        [pod("e", "n1", labels=SEC)],
        pod("p", affinity=affinity(anti=[term(HOST, sel_in("service", "securityscan"))])),
        {"n1": ANTI, "n2": OK, "n3": OK},
    ),
    (
        "anti-affinity runs out of zones",
        nodes3(),
        [
            pod("e1", "n1", labels={"app": "web"}),
            pod("e2", "n2", labels={"app": "web"}),
            pod("e3", "n3", labels={"app": "web"}),
        ],
        pod("p", labels={"app": "web"}, affinity=affinity(anti=[term("zone", sel_in("app", "web"))])),
        {"n1": ANTI, "n2": ANTI, "n3": ANTI},
    ),
    (
        "anti-affinity topology key missing on a node does not block it",
        [*nodes3(), node("n4")],
        [pod("e", "n1", labels=SEC)],
        pod("p", affinity=affinity(anti=[term("region", sel_in("service", "securityscan"))])),
        {"n1": ANTI, "n2": ANTI, "n3": OK, "n4": OK},
    ),
    (
        "symmetry: an existing pod's anti-affinity blocks the incoming pod in its region",
        nodes3(),
        [
            pod(
                "e",
                "n1",
                labels={"app": "db"},
                affinity=affinity(anti=[term("region", sel_in("service", "securityscan"))]),
            )
        ],
        pod("p", labels=SEC),
        {"n1": EXISTING, "n2": EXISTING, "n3": OK},
    ),
    (
        "symmetry: existing anti-affinity with a namespaceSelector matching the incoming pod's namespace",
        nodes3(),
        [
            pod(
                "e",
                "n3",
                "team-a",
                affinity=affinity(
                    anti=[
                        term(
                            HOST,
                            sel_in("service", "securityscan"),
                            namespaceSelector={"matchLabels": {"team": "core"}},
                        )
                    ]
                ),
            )
        ],
        pod("p", labels=SEC),
        {"n1": OK, "n2": OK, "n3": EXISTING},
    ),
    (
        "symmetry: existing anti-affinity scoped to its own namespace ignores other namespaces",
        nodes3(),
        [pod("e", "n3", "team-a", affinity=affinity(anti=[term(HOST, sel_in("service", "securityscan"))]))],
        pod("p", labels=SEC),
        None,  # PreFilter skips: nothing to check
    ),
    (
        "affinity is checked before anti-affinity",
        nodes3(),
        [pod("e", "n1", labels={**SEC, "app": "web"})],
        pod(
            "p",
            affinity=affinity(
                req=[term("region", sel_in("service", "securityscan"))],
                anti=[term(HOST, sel_in("app", "web"))],
            ),
        ),
        {"n1": ANTI, "n2": OK, "n3": AFF},
    ),
    (
        "anti-affinity with matchLabelKeys only counts pods of the same revision",
        nodes3(),
        [
            pod("e1", "n1", labels={"app": "web", "rev": "1"}),
            pod("e2", "n3", labels={"app": "web", "rev": "2"}),
        ],
        pod(
            "p",
            labels={"app": "web", "rev": "2"},
            affinity=affinity(anti=[term(HOST, sel_in("app", "web"), matchLabelKeys=["rev"])]),
        ),
        {"n1": OK, "n2": OK, "n3": ANTI},
    ),
    (
        "affinity with mismatchLabelKeys only counts pods of other tenants",
        nodes3(),
        [
            pod("e1", "n1", labels={"app": "web", "tenant": "a"}),
            pod("e2", "n3", labels={"app": "web", "tenant": "b"}),
        ],
        pod(
            "p",
            labels={"tenant": "a"},
            affinity=affinity(req=[term("region", sel_in("app", "web"), mismatchLabelKeys=["tenant"])]),
        ),
        {"n1": AFF, "n2": AFF, "n3": OK},
    ),
    (
        "a nil labelSelector matches no pod",
        nodes3(),
        [pod("e", "n1", labels=SEC)],
        pod("p", labels=SEC, affinity=affinity(anti=[{"topologyKey": HOST}])),
        {"n1": OK, "n2": OK, "n3": OK},
    ),
]


@pytest.mark.parametrize(
    ("name", "nodes", "pods", "incoming", "want"), FILTER_CASES, ids=[c[0] for c in FILTER_CASES]
)
def test_filter(
    name: str, nodes: list[Any], pods: list[Any], incoming: Any, want: dict[str, Any] | None
) -> None:
    snap = build_snapshot(nodes, pods)
    pre, statuses = run_filter(plugin(snap), incoming, snap)
    if want is None:
        assert pre is not None and pre.code == Code.SKIP
    else:
        assert pre is None
        assert statuses == want


def test_prefilter_skips_without_terms_or_existing_anti_affinity() -> None:
    snap = build_snapshot(nodes3(), [pod("e", "n1", labels=SEC)])
    pre, _ = run_filter(plugin(snap), pod("p"), snap)
    assert pre is not None and pre.code == Code.SKIP


def test_filter_without_state_is_an_error() -> None:
    snap = build_snapshot(nodes3(), [])
    st = plugin(snap).filter(CycleState(), pod("p"), snap.node_infos[0])
    assert st is not None and st.code == Code.ERROR


def test_add_remove_pod_update_all_three_counts() -> None:
    snap = build_snapshot(nodes3(), [pod("e", "n1", labels=SEC)])
    pl = plugin(snap)
    incoming = pod(
        "p",
        labels={"app": "p"},
        affinity=affinity(
            req=[term("region", sel_in("service", "securityscan"))], anti=[term(HOST, sel_in("app", "web"))]
        ),
    )
    n1, n2, n3 = snap.node_infos
    state = CycleState()
    pl.pre_filter(state, incoming, snap.list())
    assert [pl.filter(state, incoming, n) for n in (n1, n2, n3)] == [OK, OK, AFF]
    # Preemption what-if: remove the only matching pod -> first-pod exception does not apply (pod
    # doesn't match itself), so every node fails affinity.
    what_if = state.clone()
    assert pl.remove_pod(what_if, incoming, n1.pods[0], n1) is None
    assert [pl.filter(what_if, incoming, n) for n in (n1, n2, n3)] == [AFF, AFF, AFF]
    assert [pl.filter(state, incoming, n) for n in (n1, n2, n3)] == [OK, OK, AFF]  # clone is independent
    # Adding a web pod to n2 triggers the incoming anti-affinity there.
    web = pod("w", "n2", labels={"app": "web"})
    assert pl.add_pod(state, incoming, web, n2) is None
    assert [pl.filter(state, incoming, n) for n in (n1, n2, n3)] == [OK, ANTI, AFF]
    # Adding a pod whose anti-affinity matches the incoming pod blocks its region (symmetry).
    hater = pod("h", "n3", affinity=affinity(anti=[term("region", sel_in("app", "p"))]))
    assert pl.add_pod(state, incoming, hater, n3) is None
    securityscan_r2 = pod("s", "n3", labels=SEC)
    assert pl.add_pod(state, incoming, securityscan_r2, n3) is None
    assert [pl.filter(state, incoming, n) for n in (n1, n2, n3)] == [OK, ANTI, EXISTING]
    mask = pl.filter_vector(state, incoming, snap, np.arange(3))
    assert list(mask) == [True, False, False]  # type: ignore[arg-type]
    assert pl.remove_pod(state, incoming, hater, n3) is None
    assert pl.filter(state, incoming, n3) is None


def test_counts_are_computed_once_per_node_generation() -> None:
    """A second cycle over unchanged nodes reuses per-node results; a changed node is recounted."""
    snap = build_snapshot(nodes3(), [pod("e", "n1", labels=SEC)])
    pl = plugin(snap)
    incoming = pod("p", affinity=affinity(anti=[term(HOST, sel_in("service", "securityscan"))]))
    _, st = run_filter(pl, incoming, snap)
    assert st == {"n1": ANTI, "n2": OK, "n3": OK}
    snap.node_infos[1].add_pod(pod("e2", "n2", labels=SEC))  # bumps n2's generation
    snap.node_infos[0].remove_pod(snap.node_infos[0].pods[0])
    _, st = run_filter(pl, incoming, snap)
    assert st == {"n1": OK, "n2": ANTI, "n3": OK}


# --- scoring ----------------------------------------------------------------------------------------

SCORE_CASES: list[tuple[str, list[Any], Any, dict[str, Any], dict[str, int] | None]] = [
    (
        "preferred affinity: the matching pod's region scores highest",
        [pod("e", "n1", labels=SEC)],
        pod("p", affinity=affinity(pref=[(5, term("region", sel_in("service", "securityscan")))])),
        {},
        {"n1": 100, "n2": 100, "n3": 0},
    ),
    (
        "preferred anti-affinity: the matching pod's region scores lowest",
        [pod("e", "n1", labels=SEC)],
        pod("p", affinity=affinity(pref_anti=[(5, term("region", sel_in("service", "securityscan")))])),
        {},
        {"n1": 0, "n2": 0, "n3": 100},
    ),
    (
        "affinity and anti-affinity weights add up per topology",
        [pod("e", "n1", labels=SEC), pod("f", "n3", labels={"app": "db"}), pod("g", "n2", labels=SEC)],
        pod(
            "p",
            affinity=affinity(
                pref=[
                    (8, term("region", sel_in("service", "securityscan"))),
                    (2, term(HOST, sel_in("app", "db"))),
                ],
                pref_anti=[(3, term("zone", sel_in("service", "securityscan")))],
            ),
        ),
        {},
        # raw: n1 = 16 - 3 = 13, n2 = 16 - 3 = 13, n3 = 2 -> min 2, max 13
        {"n1": 100, "n2": 100, "n3": 0},
    ),
    (
        "symmetry: an existing pod's preferred affinity pulls the incoming pod",
        [pod("e", "n3", affinity=affinity(pref=[(8, term("region", sel_in("service", "securityscan")))]))],
        pod("p", labels=SEC),
        {},
        {"n1": 0, "n2": 0, "n3": 100},
    ),
    (
        "symmetry: an existing pod's preferred anti-affinity pushes the incoming pod away",
        [pod("e", "n1", affinity=affinity(pref_anti=[(8, term(HOST, sel_in("service", "securityscan")))]))],
        pod("p", labels=SEC),
        {},
        {"n1": 0, "n2": 100, "n3": 100},
    ),
    (
        "symmetry: existing required affinity counts with hardPodAffinityWeight",
        [
            pod("e", "n1", affinity=affinity(req=[term("region", sel_in("service", "securityscan"))])),
            pod("f", "n3", affinity=affinity(pref=[(3, term("region", sel_in("service", "securityscan")))])),
        ],
        pod("p", labels=SEC),
        {"hardPodAffinityWeight": 5},
        # raw: r1 = 5, r2 = 3 -> (s-3)/(5-3)
        {"n1": 100, "n2": 100, "n3": 0},
    ),
    (
        "hardPodAffinityWeight 0 ignores existing required affinity",
        [
            pod("e", "n1", affinity=affinity(req=[term("region", sel_in("service", "securityscan"))])),
            pod("f", "n3", affinity=affinity(pref=[(3, term("region", sel_in("service", "securityscan")))])),
        ],
        pod("p", labels=SEC),
        {"hardPodAffinityWeight": 0},
        {"n1": 0, "n2": 0, "n3": 100},
    ),
    (
        "partial scores are scaled by max-min",
        [
            pod("e", "n1", labels=SEC),
            pod("f", "n1", labels=SEC),
            pod("g", "n3", labels=SEC),
            pod("h", "n2", labels={"x": "y"}),
        ],
        pod(
            "p",
            affinity=affinity(
                pref=[(1, term(HOST, sel_in("service", "securityscan")))],
                pref_anti=[(1, term(HOST, sel_in("x", "y")))],
            ),
        ),
        {},
        # raw: n1 = 2, n2 = -1, n3 = 1 -> 100*(s+1)/3
        {"n1": 100, "n2": 0, "n3": 66},
    ),
    (
        "no matching pods: PreScore skips",
        [pod("e", "n1", labels={"a": "b"})],
        pod("p", affinity=affinity(pref=[(5, term("region", sel_in("service", "securityscan")))])),
        {},
        None,
    ),
    (
        "ignorePreferredTermsOfExistingPods skips pods without preferred terms",
        [pod("e", "n3", affinity=affinity(pref=[(8, term("region", sel_in("service", "securityscan")))]))],
        pod("p", labels=SEC),
        {"ignorePreferredTermsOfExistingPods": True},
        None,
    ),
]


@pytest.mark.parametrize(
    ("name", "pods", "incoming", "args", "want"), SCORE_CASES, ids=[c[0] for c in SCORE_CASES]
)
def test_score(
    name: str, pods: list[Any], incoming: Any, args: dict[str, Any], want: dict[str, int] | None
) -> None:
    snap = build_snapshot(nodes3(), pods)
    pre, scores = run_score(plugin(snap, **args), incoming, snap)
    if want is None:
        assert pre is not None and pre.code == Code.SKIP
    else:
        assert pre is None
        assert scores == want


def test_score_on_feasible_subset_normalises_over_that_subset() -> None:
    snap = build_snapshot(nodes3(), [pod("e", "n1", labels=SEC)])
    incoming = pod("p", affinity=affinity(pref=[(5, term("region", sel_in("service", "securityscan")))]))
    _, scores = run_score(plugin(snap), incoming, snap, ["n3", "n1"])
    assert scores == {"n3": 0, "n1": 100}
    _, scores = run_score(plugin(snap), incoming, snap, ["n2", "n1"])
    assert scores == {"n2": 0, "n1": 0}  # equal raw scores -> all 0


@pytest.mark.parametrize("weight", [-1, 101])
def test_args_validation(weight: int) -> None:
    with pytest.raises(ValidationError, match=r"not in valid range \[0-100\]"):
        adapter(InterPodAffinityArgs).validate_python({"hardPodAffinityWeight": weight})
    with pytest.raises(ValidationError):
        adapter(InterPodAffinityArgs).validate_python({"unknown": 1})
    assert InterPodAffinityArgs().hard_pod_affinity_weight == 1


# --- events -----------------------------------------------------------------------------------------


def test_events_and_hints() -> None:
    snap = build_snapshot(nodes3(), [])
    pl = plugin(snap)
    pod_event, node_event = list(pl.events_to_register())
    assert pod_event.event.resource == EventResource.POD
    assert pod_event.event.action == ActionType.ADD | ActionType.UPDATE_POD_LABEL | ActionType.DELETE
    assert node_event.event.resource == EventResource.NODE
    assert node_event.event.action == ActionType.ADD | ActionType.UPDATE_NODE_LABEL
    ph, nh = pod_event.hint, node_event.hint
    assert ph is not None and nh is not None
    target = pod(
        "p",
        affinity=affinity(
            req=[term("region", sel_in("service", "securityscan"))], anti=[term(HOST, sel_in("app", "web"))]
        ),
    )
    sec = pod("s", "n1", labels=SEC)
    web = pod("w", "n1", labels={"app": "web"})
    plain = pod("x", "n1", labels={"app": "other"})
    assert ph(target, None, sec) == QueueingHint.QUEUE
    assert ph(target, None, plain) == QueueingHint.QUEUE_SKIP
    assert ph(target, None, pod("u", labels=SEC)) == QueueingHint.QUEUE_SKIP  # unscheduled
    assert ph(target, web, None) == QueueingHint.QUEUE
    assert ph(target, plain, None) == QueueingHint.QUEUE_SKIP
    assert ph(target, plain, sec) == QueueingHint.QUEUE
    assert ph(target, web, plain) == QueueingHint.QUEUE
    assert ph(target, sec, plain) == QueueingHint.QUEUE_SKIP
    assert nh(target, None, node("n9", region="r9")) == QueueingHint.QUEUE
    assert (
        nh(pod("q", affinity=affinity(req=[term("rack", sel_in("a", "b"))])), None, node("n9"))
        == QueueingHint.QUEUE_SKIP
    )


def test_pod_hints_v137() -> None:
    """isSchedulableAfterAssignedPodChange / TargetPodUpdateLabel of v1.37.2."""
    pl = plugin(build_snapshot(nodes3(), []))
    ph = next(iter(pl.events_to_register())).hint
    assert ph is not None
    target = pod(
        "p",
        labels={"app": "a"},
        affinity=affinity(anti=[term(HOST, sel_in("app", "web")), term(HOST, sel_in("tier", "db"))]),
    )
    relabelled = pod("p", labels={"app": "b"}, uid=target.uid)
    # The target pod's own label update always requeues.
    assert ph(target, target, relabelled) == QueueingHint.QUEUE
    # Anti-affinity: matching ANY term (not all) counts.
    web = pod("w", "n1", labels={"app": "web"})
    plain = pod("x", "n1", labels={"app": "other"})
    assert ph(target, web, None) == QueueingHint.QUEUE
    assert ph(target, web, plain) == QueueingHint.QUEUE
    # A deleted pod whose own anti-affinity matched the target frees it.
    guard = pod("g", "n1", labels={"x": "y"}, affinity=affinity(anti=[term(HOST, sel_in("app", "a"))]))
    assert ph(target, guard, None) == QueueingHint.QUEUE
    other_guard = pod("g2", "n1", affinity=affinity(anti=[term(HOST, sel_in("app", "zzz"))]))
    assert ph(target, other_guard, None) == QueueingHint.QUEUE_SKIP


def _zone_affinity_pod() -> Any:
    return pod("p", affinity=affinity(req=[term("zone", sel_in("service", "securityscan", "value2"))]))


def _zone_anti_pod() -> Any:
    return pod("p", affinity=affinity(anti=[term("zone", {"matchLabels": {"another": "label"}})]))


NODE_HINT_CASES = [
    (
        "add a new node with matched pod affinity topologyKey",
        _zone_affinity_pod,
        None,
        {"zone": "zone1"},
        True,
    ),
    (
        "add a new node without matched topologyKey",
        lambda: pod("p", affinity=affinity(req=[term("region", sel_in("service", "securityscan"))])),
        None,
        {"zone": "zone1"},
        False,
    ),
    ("update node label but not topologyKey", _zone_affinity_pod, {"aaa": "a"}, {"aaa": "b"}, False),
    (
        "update node label that isn't related to the pod affinity",
        _zone_affinity_pod,
        {"zone": "zone1"},
        {"zone": "zone1", "unrelated-label": "unrelated"},
        False,
    ),
    (
        "update node with different affinity topologyKey value",
        _zone_affinity_pod,
        {"zone": "zone1"},
        {"zone": "zone2"},
        True,
    ),
    (
        "update node to have the affinity topology label",
        _zone_affinity_pod,
        {"aaa": "a"},
        {"zone": "zone1"},
        True,
    ),
    (
        "add a new node with matched pod anti-affinity topologyKey",
        _zone_anti_pod,
        None,
        {"zone": "zone1"},
        True,
    ),
    ("add a new node without matched pod anti-affinity topologyKey", _zone_anti_pod, None, {}, True),
    (
        "update node label that isn't related to the pod anti-affinity",
        _zone_anti_pod,
        {"zone": "zone1"},
        {"zone": "zone1", "unrelated-label": "unrelated"},
        False,
    ),
    (
        "update node with different anti-affinity topologyKey value",
        _zone_anti_pod,
        {"zone": "zone1"},
        {"zone": "zone2"},
        True,
    ),
    (
        "update node to have the anti-affinity topology label",
        _zone_anti_pod,
        {"aaa": "a"},
        {"zone": "zone1"},
        False,
    ),
    (
        "update node label not to have anti-affinity topology label",
        _zone_anti_pod,
        {"zone": "zone1"},
        {"aaa": "a"},
        True,
    ),
]


@pytest.mark.parametrize(
    ("name", "make", "old", "new", "queue"), NODE_HINT_CASES, ids=[c[0] for c in NODE_HINT_CASES]
)
def test_node_hint(
    name: str, make: Any, old: dict[str, str] | None, new: dict[str, str], queue: bool
) -> None:
    pl = plugin(build_snapshot(nodes3(), []))
    nh = list(pl.events_to_register())[1].hint
    assert nh is not None
    want = QueueingHint.QUEUE if queue else QueueingHint.QUEUE_SKIP
    assert nh(make(), node("node-a", **old) if old is not None else None, node("node-a", **new)) == want
