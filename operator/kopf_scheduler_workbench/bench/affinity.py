"""Micro-benchmark: decision time per pod for InterPodAffinity and PodTopologySpread.

One decision = PreFilter + Filter over all nodes + PreScore + Score + NormalizeScore of the plugin
under test, then the pod is bound to the best node (NodeInfo updated, snapshot row replaced) so the
next decision sees a changed cluster, as in a real scheduling loop. Clusters have N nodes in 10
zones with ``--pods-per-node`` pods already running on each; some existing pods carry required
anti-affinity of their own (so the symmetry check has work to do).

Scenarios:
  anti-affinity : incoming pods have required anti-affinity (hostname) + preferred affinity (zone)
  spread        : incoming pods have a DoNotSchedule zone constraint + a ScheduleAnyway hostname one

Reported: the first (cold) decision, then mean/p50/p95 over the following ones, for the vector path
(filter_vector / score_vector) and, for one decision, the per-node path (filter/score per node).

    python -m kopf_scheduler_workbench.bench.affinity [--nodes 1000 5000] [--pods-per-node 10] \
        [--decisions 30]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from kopf_scheduler.api.objects import Pod, parse_node, parse_pod
from kopf_scheduler.framework.interface import Code, CycleState, Status
from kopf_scheduler.framework.profiles import load_profile
from kopf_scheduler.framework.runtime import Framework
from kopf_scheduler.framework.snapshot import Snapshot
from kopf_scheduler.framework.types import NodeInfo
from kopf_scheduler_workbench.testing.builders import node_dict, pod_dict

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def _plugin(name: str, snap: Snapshot, args: dict[str, Any] | None = None) -> Any:
    """The plugin as a one-plugin framework builds it, so its handle is the framework's own."""
    # QueueSort and Bind are mandatory in a profile; neither takes part in the decision timed.
    enabled = [{"name": n} for n in ("PrioritySort", "DefaultBinder", name)]
    spec: dict[str, Any] = {
        "schedulerName": "bench",
        "plugins": {"multiPoint": {"disabled": [{"name": "*"}], "enabled": enabled}},
    }
    if args:
        spec["pluginConfig"] = [{"name": name, "args": args}]
    return Framework(load_profile(spec), snapshot=snap).plugins[name]


def _term(key: str, app: str) -> dict[str, Any]:
    return {"topologyKey": key, "labelSelector": {"matchLabels": {"app": app}}}


def _template(name: str, labels: dict[str, str], **spec: Any) -> Pod:
    return parse_pod(pod_dict(name, labels=labels, cpu="10m", **spec))


def build_cluster(n_nodes: int, pods_per_node: int) -> Snapshot:
    """N nodes over 10 zones; pods of 20 apps, one in ten with required anti-affinity to its own app."""
    plain = [_template(f"t{a}", {"app": f"app-{a}"}) for a in range(20)]
    anti = [
        _template(
            f"a{a}",
            {"app": f"app-{a}"},
            affinity={
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [_term(HOST, f"app-{a}")]
                }
            },
        )
        for a in range(20)
    ]
    infos = []
    k = 0
    for i in range(n_nodes):
        info = NodeInfo()
        info.set_node(
            parse_node(node_dict(f"node-{i}", labels={ZONE: f"zone-{i % 10}"}, cpu="64", pods="200"))
        )
        for j in range(pods_per_node):
            tmpl = (anti if j == 0 else plain)[(i + j) % 20]
            k += 1
            info.add_pod(dataclasses.replace(tmpl, uid=f"e{k}", name=f"e{k}", node_name=info.name))
        infos.append(info)
    return Snapshot(infos)


def incoming_anti(i: int) -> Pod:
    return _template(
        f"web-{i}",
        {"app": "web"},
        affinity={
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term(HOST, "web")]},
            "podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 10, "podAffinityTerm": _term(ZONE, "app-3")}
                ]
            },
        },
    )


def incoming_spread(i: int) -> Pod:
    sel = {"matchLabels": {"app": "app-5"}}
    return _template(
        f"spread-{i}",
        {"app": "app-5"},
        topologySpreadConstraints=[
            {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": sel},
            {"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": sel},
        ],
    )


def _skipped(status: Status | None) -> bool:
    return status is not None and status.code == Code.SKIP


def decide_vector(plugin: Any, pod: Pod, snap: Snapshot) -> int:
    """One decision with the vector hooks; returns the chosen snapshot row."""
    state = CycleState()
    nodes = snap.list()
    idx = np.arange(len(nodes))
    _, pre = plugin.pre_filter(state, pod, nodes)
    feasible = idx if _skipped(pre) else idx[plugin.filter_vector(state, pod, snap, idx)]
    if len(feasible) == 0:
        return -1
    feasible_nodes = [nodes[int(i)] for i in feasible]
    if _skipped(plugin.pre_score(state, pod, feasible_nodes)):
        return int(feasible[0])
    scores = plugin.score_vector(state, pod, snap, feasible)
    plugin.normalize_score(state, pod, scores)
    return int(feasible[int(np.argmax(scores))])


def decide_per_node(plugin: Any, pod: Pod, snap: Snapshot) -> int:
    """The same decision through the per-node Filter/Score methods (the reference's shape)."""
    state = CycleState()
    nodes = snap.list()
    _, pre = plugin.pre_filter(state, pod, nodes)
    feasible = [i for i, n in enumerate(nodes) if _skipped(pre) or plugin.filter(state, pod, n) is None]
    if not feasible:
        return -1
    feasible_nodes = [nodes[i] for i in feasible]
    if _skipped(plugin.pre_score(state, pod, feasible_nodes)):
        return feasible[0]
    scores = np.array([plugin.score(state, pod, n)[0] for n in feasible_nodes], dtype=np.int64)
    plugin.normalize_score(state, pod, scores)
    return feasible[int(np.argmax(scores))]


def _bind(snap: Snapshot, row: int, pod: Pod) -> None:
    info = snap.node_infos[row]
    info.add_pod(dataclasses.replace(pod, node_name=info.name))
    snap.replace(row, info)


def run(scenario: str, n_nodes: int, pods_per_node: int, decisions: int) -> dict[str, float]:
    snap = build_cluster(n_nodes, pods_per_node)
    plugin: Any
    make: Callable[[int], Pod]
    if scenario == "anti-affinity":
        plugin, make = _plugin("InterPodAffinity", snap), incoming_anti
    else:
        plugin, make = _plugin("PodTopologySpread", snap, {"defaultingType": "List"}), incoming_spread
    times = []
    for i in range(decisions):
        pod = make(i)
        t0 = time.perf_counter()
        row = decide_vector(plugin, pod, snap)
        times.append(time.perf_counter() - t0)
        if row < 0:
            raise RuntimeError(f"{scenario}: pod {i} found no node")
        _bind(snap, row, pod)
    # The per-node path, once with a fresh plugin (cold) and once warm, for comparison.
    pod = make(decisions)
    fresh = type(plugin)(plugin.args, plugin.handle)
    t0 = time.perf_counter()
    row_cold = decide_per_node(fresh, pod, snap)
    per_node_cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    row_warm = decide_per_node(plugin, pod, snap)
    per_node_warm = time.perf_counter() - t0
    assert row_cold == row_warm == decide_vector(plugin, pod, snap)
    steady = times[1:] or times
    return {
        "cold_ms": times[0] * 1e3,
        "mean_ms": statistics.fmean(steady) * 1e3,
        "p50_ms": statistics.median(steady) * 1e3,
        "p95_ms": sorted(steady)[max(0, int(len(steady) * 0.95) - 1)] * 1e3,
        "per_node_cold_ms": per_node_cold * 1e3,
        "per_node_warm_ms": per_node_warm * 1e3,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--pods-per-node", type=int, default=10)
    parser.add_argument("--decisions", type=int, default=30)
    parser.add_argument("--scenario", choices=["anti-affinity", "spread", "both"], default="both")
    args = parser.parse_args(argv)
    scenarios = ["anti-affinity", "spread"] if args.scenario == "both" else [args.scenario]
    print(
        f"{'scenario':<14}{'nodes':>6}{'pods':>7}  {'cold':>8}{'mean':>8}{'p50':>8}{'p95':>8}"
        f"  {'per-node cold':>14}{'per-node warm':>14}   (ms per pod decision)"
    )
    for scenario in scenarios:
        for n in args.nodes:
            r = run(scenario, n, args.pods_per_node, args.decisions)
            print(
                f"{scenario:<14}{n:>6}{n * args.pods_per_node:>7}  {r['cold_ms']:>8.2f}{r['mean_ms']:>8.2f}"
                f"{r['p50_ms']:>8.2f}{r['p95_ms']:>8.2f}"
                f"  {r['per_node_cold_ms']:>14.2f}{r['per_node_warm_ms']:>14.2f}"
            )


if __name__ == "__main__":
    main()
