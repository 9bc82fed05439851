"""The invariant checker on hand-made states: each violation is found, and clean states pass.

A checker that passes everything would make every fault test meaningless, so each check has a
violating case next to its clean twin.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from kopf_scheduler_workbench.testing.builders import node_dict, pod_dict
from kopf_scheduler_workbench.testing.invariants import ClusterState, check


def bound(name: str, node: str, **kw: Any) -> dict[str, Any]:
    return pod_dict(name, node_name=node, uid=f"uid-{name}", **kw)


def pending(name: str, *, condition: bool = False, **kw: Any) -> dict[str, Any]:
    raw = pod_dict(name, uid=f"uid-{name}", **kw)
    if condition:
        raw["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/1 nodes"}
        ]
    return raw


def event(pod: Mapping[str, Any], reason: str, note: str, count: int | None = None) -> dict[str, Any]:
    meta = pod["metadata"]
    ev: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}.x", "namespace": meta["namespace"]},
        "reason": reason,
        "note": note,
        "regarding": {
            "kind": "Pod",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta["uid"],
        },
    }
    if count is not None:
        ev["series"] = {"count": count}
    return ev


def scheduled(pod: Mapping[str, Any], node: str, count: int | None = None) -> dict[str, Any]:
    key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
    return event(pod, "Scheduled", f"Successfully assigned {key} to {node}", count)


def kinds(state: ClusterState, **kw: Any) -> dict[str, int]:
    return check(state, **kw).kinds()


# --- bound exactly once / pending with a reason -----------------------------------------------------


def test_clean_state_has_no_violations() -> None:
    a = bound("a", "n1", cpu="1")
    b = pending("b", condition=True, cpu="100")
    c = pending("c", cpu="100")
    state = ClusterState(
        pods=[a, b, c],
        nodes=[node_dict("n1", cpu="2")],
        events=[scheduled(a, "n1"), event(c, "FailedScheduling", "0/1 nodes are available")],
    )
    report = check(state)
    assert report.ok, report.summary()
    assert (report.ours, report.bound, report.pending) == (3, 1, 2)


def test_pending_pod_without_reason_is_lost() -> None:
    state = ClusterState(pods=[pending("lost")], nodes=[node_dict("n1")])
    report = check(state)
    assert report.kinds() == {"no-reason": 1}
    assert report.violations[0].subject == "default/lost"


def test_other_schedulers_pods_are_not_judged() -> None:
    state = ClusterState(
        pods=[pending("theirs", scheduler_name="default-scheduler")], nodes=[node_dict("n1")]
    )
    assert check(state).ok
    assert check(state).ours == 0


def test_namespaces_limit_which_pods_are_judged() -> None:
    state = ClusterState(pods=[pending("lost", namespace="other")], nodes=[node_dict("n1")])
    assert check(state, namespaces=["mine"]).ok
    assert not check(state, namespaces=["other"]).ok


def test_two_scheduled_events_mean_bound_twice() -> None:
    a = bound("a", "n1")
    state = ClusterState(pods=[a], nodes=[node_dict("n1"), node_dict("n2")], events=[scheduled(a, "n1")] * 2)
    assert kinds(state) == {"bound-twice": 1}


def test_event_series_count_counts_as_repeated_binds() -> None:
    a = bound("a", "n1")
    state = ClusterState(pods=[a], nodes=[node_dict("n1")], events=[scheduled(a, "n1", count=2)])
    assert kinds(state) == {"bound-twice": 1}
    state.events = [scheduled(a, "n1", count=1)]
    assert check(state).ok


def test_scheduled_event_naming_another_node() -> None:
    a = bound("a", "n1")
    state = ClusterState(pods=[a], nodes=[node_dict("n1"), node_dict("n2")], events=[scheduled(a, "n2")])
    assert kinds(state) == {"bound-twice": 1}


def test_scheduled_event_for_a_pending_pod() -> None:
    b = pending("b", condition=True)
    state = ClusterState(pods=[b], nodes=[node_dict("n1")], events=[scheduled(b, "n1")])
    assert kinds(state) == {"bound-twice": 1}


def test_events_of_a_recreated_pod_do_not_count() -> None:
    old = bound("a", "n1")
    new = bound("a", "n2")
    new["metadata"]["uid"] = "uid-a-2"
    state = ClusterState(pods=[new], nodes=[node_dict("n1"), node_dict("n2")], events=[scheduled(old, "n1")])
    assert check(state).ok


def test_bound_without_event_is_fine() -> None:
    """A scheduler killed between bind and event leaves this; the pod is bound exactly once."""
    state = ClusterState(pods=[bound("a", "n1")], nodes=[node_dict("n1")])
    assert check(state).ok


# --- resources ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pods", "node", "violating"),
    [
        ([bound("a", "n1", cpu="1500m"), bound("b", "n1", cpu="600m")], node_dict("n1", cpu="2"), "cpu"),
        ([bound("a", "n1", cpu="1"), bound("b", "n1", cpu="1")], node_dict("n1", cpu="2"), None),
        (
            [bound("a", "n1", memory="3Gi"), bound("b", "n1", memory="2Gi")],
            node_dict("n1", memory="4Gi"),
            "memory",
        ),
        ([bound("a", "n1"), bound("b", "n1"), bound("c", "n1")], node_dict("n1", pods="2"), "pods"),
        (
            [bound("a", "n1", resources={"example.com/gpu": "2"})],
            node_dict("n1", extra={"example.com/gpu": "1"}),
            "example.com/gpu",
        ),
        ([bound("a", "n1", resources={"example.com/gpu": "1"})], node_dict("n1"), "example.com/gpu"),
        (
            [bound("a", "n1", resources={"ephemeral-storage": "2Gi"})],
            node_dict("n1", extra={"ephemeral-storage": "1Gi"}),
            "ephemeral-storage",
        ),
    ],
)
def test_overcommit(pods: list[dict[str, Any]], node: dict[str, Any], violating: str | None) -> None:
    report = check(ClusterState(pods=pods, nodes=[node]))
    if violating is None:
        assert report.ok, report.summary()
    else:
        assert report.kinds() == {"overcommit": 1}, report.summary()
        assert report.violations[0].detail.startswith(f"{violating}:")


def test_overcommit_uses_the_engines_request_rules() -> None:
    """Init containers take the max, sidecars add up, overhead adds: the engine's PodRequests."""
    init = {"name": "i", "image": "x", "resources": {"requests": {"cpu": "1500m"}}}
    main = {"name": "c", "image": "x", "resources": {"requests": {"cpu": "500m"}}}
    a = bound("a", "n1", containers=[main], initContainers=[init])  # 1500m, not 2000m
    b = bound("b", "n1", cpu="500m")
    assert check(ClusterState(pods=[a, b], nodes=[node_dict("n1", cpu="2")])).ok
    sidecar = {**init, "restartPolicy": "Always"}
    a2 = bound("a", "n1", containers=[main], initContainers=[sidecar])  # 2000m
    assert check(ClusterState(pods=[a2, b], nodes=[node_dict("n1", cpu="2")])).kinds() == {"overcommit": 1}
    a3 = bound("a", "n1", cpu="1500m", overhead={"cpu": "1"})
    assert check(ClusterState(pods=[a3], nodes=[node_dict("n1", cpu="2")])).kinds() == {"overcommit": 1}


def test_terminal_pods_hold_nothing() -> None:
    done = bound("done", "n1", cpu="2")
    done["status"]["phase"] = "Succeeded"
    state = ClusterState(pods=[done, bound("b", "n1", cpu="2")], nodes=[node_dict("n1", cpu="2")])
    assert check(state).ok


def test_pods_on_missing_nodes_are_orphans_not_violations() -> None:
    report = check(ClusterState(pods=[bound("a", "gone", cpu="100")], nodes=[node_dict("n1", cpu="1")]))
    assert report.ok
    assert report.orphaned == 1


# --- host ports --------------------------------------------------------------------------------------


def _with_port(name: str, node: str, port: int, ip: str = "", protocol: str = "TCP") -> dict[str, Any]:
    entry: dict[str, Any] = {"containerPort": 80, "hostPort": port, "protocol": protocol}
    if ip:
        entry["hostIP"] = ip
    return bound(name, node, containers=[{"name": "c", "image": "x", "ports": [entry]}])


@pytest.mark.parametrize(
    ("a", "b", "conflict"),
    [
        ((8080, "", "TCP"), (8080, "", "TCP"), True),
        ((8080, "", "TCP"), (8081, "", "TCP"), False),
        ((8080, "", "TCP"), (8080, "", "UDP"), False),
        ((8080, "10.0.0.1", "TCP"), (8080, "10.0.0.2", "TCP"), False),
        ((8080, "10.0.0.1", "TCP"), (8080, "0.0.0.0", "TCP"), True),
        ((8080, "10.0.0.1", "TCP"), (8080, "", "TCP"), True),
    ],
)
def test_host_ports(a: tuple[int, str, str], b: tuple[int, str, str], conflict: bool) -> None:
    pods = [_with_port("a", "n1", a[0], a[1], a[2]), _with_port("b", "n1", b[0], b[1], b[2])]
    assert check(ClusterState(pods=pods, nodes=[node_dict("n1")])).kinds() == (
        {"host-port": 1} if conflict else {}
    )


def test_same_port_on_different_nodes_is_fine() -> None:
    pods = [_with_port("a", "n1", 8080), _with_port("b", "n2", 8080)]
    assert check(ClusterState(pods=pods, nodes=[node_dict("n1"), node_dict("n2")])).ok


# --- anti-affinity -----------------------------------------------------------------------------------


def _anti(key: str = "kubernetes.io/hostname", **term: Any) -> dict[str, Any]:
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": key, **term}
            ]
        }
    }


def _zoned(name: str, zone: str) -> dict[str, Any]:
    return node_dict(name, labels={"zone": zone})


def test_anti_affinity_violation_on_one_host() -> None:
    pods = [
        bound("a", "n1", labels={"app": "web"}, affinity=_anti()),
        bound("b", "n1", labels={"app": "web"}, affinity=_anti()),
    ]
    report = check(ClusterState(pods=pods, nodes=[node_dict("n1")]))
    assert report.kinds() == {"anti-affinity": 2}  # each pod's term is broken


def test_anti_affinity_clean_across_hosts() -> None:
    pods = [
        bound("a", "n1", labels={"app": "web"}, affinity=_anti()),
        bound("b", "n2", labels={"app": "web"}, affinity=_anti()),
    ]
    assert check(ClusterState(pods=pods, nodes=[node_dict("n1"), node_dict("n2")])).ok


def test_anti_affinity_by_zone_is_one_directional() -> None:
    """Only the owner of the term is constrained; the other pod matches the selector."""
    pods = [bound("a", "n1", affinity=_anti("zone")), bound("b", "n2", labels={"app": "web"})]
    nodes = [_zoned("n1", "z1"), _zoned("n2", "z1")]
    assert check(ClusterState(pods=pods, nodes=nodes)).kinds() == {"anti-affinity": 1}
    nodes = [_zoned("n1", "z1"), _zoned("n2", "z2")]
    assert check(ClusterState(pods=pods, nodes=nodes)).ok


def test_anti_affinity_namespaces() -> None:
    pods = [bound("a", "n1", affinity=_anti()), bound("b", "n1", namespace="other", labels={"app": "web"})]
    assert check(ClusterState(pods=pods, nodes=[node_dict("n1")])).ok  # default: own namespace only
    pods[0] = bound("a", "n1", affinity=_anti(namespaces=["other"]))
    assert check(ClusterState(pods=pods, nodes=[node_dict("n1")])).kinds() == {"anti-affinity": 1}
    pods[0] = bound("a", "n1", affinity=_anti(namespaceSelector={}))
    assert check(ClusterState(pods=pods, nodes=[node_dict("n1")])).kinds() == {"anti-affinity": 1}


def test_anti_affinity_match_label_keys() -> None:
    term = _anti(matchLabelKeys=["rev"])
    pods = [
        bound("a", "n1", labels={"rev": "1"}, affinity=term),
        bound("b", "n1", labels={"app": "web", "rev": "2"}),
    ]
    assert check(ClusterState(pods=pods, nodes=[node_dict("n1")])).ok
    pods[1] = bound("b", "n1", labels={"app": "web", "rev": "1"})
    assert check(ClusterState(pods=pods, nodes=[node_dict("n1")])).kinds() == {"anti-affinity": 1}


def test_anti_affinity_between_foreign_pods_is_not_ours() -> None:
    pods = [
        bound("a", "n1", labels={"app": "web"}, affinity=_anti(), scheduler_name="other"),
        bound("b", "n1", labels={"app": "web"}, scheduler_name="other"),
    ]
    assert check(ClusterState(pods=pods, nodes=[node_dict("n1")])).ok


# --- topology spread ---------------------------------------------------------------------------------


def _spread(max_skew: int = 1, **extra: Any) -> list[dict[str, Any]]:
    return [
        {
            "maxSkew": max_skew,
            "topologyKey": "zone",
            "whenUnsatisfiable": extra.pop("when", "DoNotSchedule"),
            "labelSelector": {"matchLabels": {"app": "s"}},
            **extra,
        }
    ]


def _spread_pod(name: str, node: str, **extra: Any) -> dict[str, Any]:
    return bound(name, node, labels={"app": "s"}, topologySpreadConstraints=_spread(**extra))


def test_spread_violation_and_clean() -> None:
    nodes = [_zoned("n1", "z1"), _zoned("n2", "z2")]
    skewed = [_spread_pod("a", "n1"), _spread_pod("b", "n1")]
    report = check(ClusterState(pods=skewed, nodes=nodes))
    assert report.kinds() == {"spread": 1}
    assert "skew 2 > 1" in report.violations[0].detail
    even = [_spread_pod("a", "n1"), _spread_pod("b", "n2"), _spread_pod("c", "n1")]
    assert check(ClusterState(pods=even, nodes=nodes)).ok


def test_spread_max_skew_and_schedule_anyway() -> None:
    nodes = [_zoned("n1", "z1"), _zoned("n2", "z2")]
    pods = [_spread_pod("a", "n1", max_skew=2), _spread_pod("b", "n1", max_skew=2)]
    assert check(ClusterState(pods=pods, nodes=nodes)).ok
    pods = [_spread_pod("a", "n1", when="ScheduleAnyway"), _spread_pod("b", "n1", when="ScheduleAnyway")]
    assert check(ClusterState(pods=pods, nodes=nodes)).ok


def test_spread_ignores_domains_the_pod_cannot_use() -> None:
    """nodeAffinityPolicy=Honor: a zone excluded by the pod's nodeSelector is not a domain."""
    nodes = [_zoned("n1", "z1"), _zoned("n2", "z2"), node_dict("n3", labels={"zone": "z3", "pool": "x"})]
    for n in nodes[:2]:
        n["metadata"]["labels"]["pool"] = "y"
    pods = [
        bound(
            f"p{i}",
            node,
            labels={"app": "s"},
            nodeSelector={"pool": "y"},
            topologySpreadConstraints=_spread(),
        )
        for i, node in enumerate(["n1", "n2"])
    ]
    assert check(ClusterState(pods=pods, nodes=nodes)).ok
    ignore = [{**_spread()[0], "nodeAffinityPolicy": "Ignore"}]
    for p in pods:
        p["spec"]["topologySpreadConstraints"] = ignore
    pods.append(
        bound("p2", "n1", labels={"app": "s"}, nodeSelector={"pool": "y"}, topologySpreadConstraints=ignore)
    )
    assert check(ClusterState(pods=pods, nodes=nodes)).kinds() == {"spread": 1}


def test_spread_min_domains() -> None:
    nodes = [_zoned("n1", "z1"), _zoned("n2", "z2")]
    pods = [_spread_pod("a", "n1", minDomains=3), _spread_pod("b", "n2", minDomains=3)]
    assert check(ClusterState(pods=pods, nodes=nodes)).ok  # 1 - 0 <= 1
    pods.append(_spread_pod("c", "n1", minDomains=3))
    assert check(ClusterState(pods=pods, nodes=nodes)).kinds() == {"spread": 1}  # 2 - 0 > 1


# --- stranded ----------------------------------------------------------------------------------------


def test_stranded_pending_pod_that_fits() -> None:
    nodes = [node_dict("n1", cpu="2")]
    pods = [bound("a", "n1", cpu="1"), pending("b", condition=True, cpu="500m")]
    assert check(ClusterState(pods=pods, nodes=nodes)).ok  # off by default
    assert check(ClusterState(pods=pods, nodes=nodes), check_stranded=True).kinds() == {"stranded": 1}
    pods = [bound("a", "n1", cpu="1600m"), pending("b", condition=True, cpu="500m")]
    assert check(ClusterState(pods=pods, nodes=nodes), check_stranded=True).ok


def test_stranded_respects_node_selector_and_taints() -> None:
    tainted = node_dict("n1", taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}])
    pods = [pending("b", condition=True, cpu="100m")]
    assert check(ClusterState(pods=pods, nodes=[tainted]), check_stranded=True).ok
    pods = [pending("b", condition=True, cpu="100m", nodeSelector={"pool": "x"})]
    assert check(ClusterState(pods=pods, nodes=[node_dict("n1")]), check_stranded=True).ok


def test_malformed_node_is_reported() -> None:
    bad = node_dict("n1", cpu="lots")
    report = check(ClusterState(pods=[], nodes=[bad]))
    assert report.kinds() == {"malformed": 1}
    assert "status.allocatable.cpu" in report.violations[0].detail


def test_extended_resource_met_by_dra_is_no_overcommit() -> None:
    """DRAExtendedResource: `example.com/gpu` on a node without it as allocatable is met by devices
    when a DeviceClass stands for it; with a device plugin's allocatable it is counted as ever."""
    gpu = {"example.com/gpu": "1"}
    cls = {"metadata": {"name": "gpu"}, "spec": {"extendedResourceName": "example.com/gpu"}}
    pods = [bound("a", "n1", resources=gpu)]
    assert check(ClusterState(pods=pods, nodes=[node_dict("n1")], device_classes=[cls])).ok
    assert check(ClusterState(pods=pods, nodes=[node_dict("n1")])).kinds() == {"overcommit": 1}
    two = [bound("a", "n1", resources=gpu), bound("b", "n1", resources=gpu)]
    offered = node_dict("n1", extra={"example.com/gpu": "1"})
    report = check(ClusterState(pods=two, nodes=[offered], device_classes=[cls]))
    assert report.kinds() == {"overcommit": 1}, report.summary()


def test_a_device_allocated_to_two_claims_is_a_violation() -> None:
    def claim(name: str, device: str, **extra: Any) -> dict[str, Any]:
        result = {"request": "gpu", "driver": "d", "pool": "p", "device": device, **extra}
        return {
            "metadata": {"name": name, "namespace": "ns"},
            "status": {"allocation": {"devices": {"results": [result]}}},
        }

    fine = [claim("a", "gpu-0"), claim("b", "gpu-1"), claim("c", "gpu-0", adminAccess=True)]
    assert check(ClusterState(resource_claims=fine)).ok
    shares = [claim("a", "nic", shareID="1"), claim("b", "nic", shareID="2")]
    assert check(ClusterState(resource_claims=shares)).ok
    twice = check(ClusterState(resource_claims=[claim("a", "gpu-0"), claim("b", "gpu-0")]))
    assert twice.kinds() == {"device-shared": 1}
    assert twice.violations[0].subject == "d/p/gpu-0"
    assert twice.violations[0].detail == "allocated to ['ns/a', 'ns/b']"


# --- no partial gang --------------------------------------------------------------------------------


def _gang(name: str, min_count: int | None) -> dict[str, Any]:
    policy: dict[str, Any] = {"gang": {"minCount": min_count}} if min_count is not None else {"basic": {}}
    return {"metadata": {"name": name, "namespace": "default"}, "spec": {"schedulingPolicy": policy}}


@pytest.mark.parametrize(
    ("bound_members", "min_count", "partial"),
    [(0, 3, False), (3, 3, False), (4, 3, False), (2, 3, True), (1, 3, True), (1, None, False)],
)
def test_partial_gang(bound_members: int, min_count: int | None, partial: bool) -> None:
    group = {"schedulingGroup": {"podGroupName": "g"}}
    pods = [bound(f"g-{i}", f"n{i}", cpu="1", **group) for i in range(bound_members)]
    pods += [pending(f"w-{i}", condition=True, cpu="1", **group) for i in range(4 - bound_members)]
    state = ClusterState(
        pods=pods,
        nodes=[node_dict(f"n{i}", cpu="2") for i in range(4)],
        events=[scheduled(p, p["spec"]["nodeName"]) for p in pods if p["spec"].get("nodeName")],
        pod_groups=[_gang("g", min_count)],
    )
    report = check(state, check_stranded=True)
    assert report.kinds() == ({"partial-gang": 1} if partial else {}), report.summary()
