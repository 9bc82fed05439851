"""Benchmark: the time of one preemption decision (DefaultPreemption.post_filter).

A cluster of N nodes, each full of low-priority pods; a high-priority pod that needs two of them
evicted on any node. The real Framework runs the filters (the default profile's plugins that are
available), so the figure includes cloning, PreFilter extensions and filter runs of the dry-run.

    python -m kopf_scheduler_workbench.bench.preemption [--nodes 1000] [--pods-per-node 8] [--repeat 20]
"""

from __future__ import annotations

import argparse
import importlib
import random
import statistics
import time
from typing import Any

from kopf_scheduler.api.objects import Pod, parse_node, parse_pod
from kopf_scheduler.api.policy import parse_pod_disruption_budget
from kopf_scheduler.framework.diagnosis import NodeToStatus
from kopf_scheduler.framework.interface import CycleState
from kopf_scheduler.framework.profiles import load_profile
from kopf_scheduler.framework.runtime import Framework
from kopf_scheduler.framework.snapshot import Snapshot
from kopf_scheduler.framework.types import NodeInfo
from kopf_scheduler.plugins.default_preemption import DefaultPreemption
from kopf_scheduler.queue.nominator import Nominator
from kopf_scheduler_workbench.testing.builders import node_dict, pod_dict

# In-tree default plugins that take part in Filter/PreFilter/PostFilter, in the default order.
_CANDIDATE_PLUGINS = [
    ("PrioritySort", "priority_sort"),
    ("NodeUnschedulable", "node_unschedulable"),
    ("NodeName", "node_name"),
    ("TaintToleration", "taint_toleration"),
    ("NodeAffinity", "node_affinity"),
    ("NodePorts", "node_ports"),
    ("NodeResourcesFit", "node_resources_fit"),
    ("PodTopologySpread", "pod_topology_spread"),
    ("InterPodAffinity", "inter_pod_affinity"),
    ("DefaultPreemption", "default_preemption"),
    ("DefaultBinder", "default_binder"),
]


def _available_plugins() -> list[str]:
    names = []
    for name, module in _CANDIDATE_PLUGINS:
        try:
            importlib.import_module(f"kopf_scheduler.plugins.{module}")
        except ImportError:
            continue
        names.append(name)
    return names


def build(
    num_nodes: int, pods_per_node: int, seed: int, percentage: int | None
) -> tuple[Framework, DefaultPreemption, Pod, list[str]]:
    rnd = random.Random(seed)
    infos = []
    for i in range(num_nodes):
        info = NodeInfo()
        info.set_node(parse_node(node_dict(f"node-{i:04d}", cpu="4", memory="16Gi", pods="110")))
        for j in range(pods_per_node):
            raw = pod_dict(
                f"low-{i}-{j}",
                cpu="500m",
                memory="2Gi",
                node_name=info.name,
                priority=rnd.randrange(10),
                labels={"app": f"app-{(i * pods_per_node + j) % 50}"},
            )
            raw["status"] = {"phase": "Running", "startTime": f"2025-01-01T{rnd.randrange(24):02d}:00:00Z"}
            info.add_pod(parse_pod(raw))
        infos.append(info)
    pdbs = {  # the views the PDB informer would store
        f"default/pdb-{k}": parse_pod_disruption_budget(
            {
                "metadata": {"name": f"pdb-{k}", "namespace": "default"},
                "spec": {"selector": {"matchLabels": {"app": f"app-{k}"}}},
                "status": {"disruptionsAllowed": k % 3},
            }
        )
        for k in range(50)
    }
    plugins = [{"name": n} for n in _available_plugins()]
    config: list[dict[str, Any]] = []
    if percentage is not None:
        config.append({"name": "DefaultPreemption", "args": {"minCandidateNodesPercentage": percentage}})
    profile = load_profile(
        {
            "schedulerName": "bench",
            "plugins": {"multiPoint": {"disabled": [{"name": "*"}], "enabled": plugins}},
            "pluginConfig": config,
        }
    )
    framework = Framework(
        profile, snapshot=Snapshot(infos), objects={"PodDisruptionBudget": pdbs}, nominator=Nominator()
    )
    plugin = next(p for p in framework.post_filter_plugins if isinstance(p, DefaultPreemption))
    preemptor = parse_pod(pod_dict("preemptor", cpu="1", memory="2Gi", priority=1000))
    return framework, plugin, preemptor, [p["name"] for p in plugins]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods-per-node", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--percentage",
        type=int,
        default=None,
        help="minCandidateNodesPercentage (default: the reference's 10)",
    )
    opts = parser.parse_args(argv)

    framework, plugin, preemptor, names = build(opts.nodes, opts.pods_per_node, opts.seed, opts.percentage)
    state = CycleState()
    framework.run_pre_filter_plugins(state, preemptor)
    statuses = NodeToStatus()
    for info in framework.snapshot.list():
        status = framework.run_filter_plugins(state, preemptor, info)
        assert status is not None, "the benchmark cluster must be full"
        statuses.set(info.name, status)

    plugin.rng = random.Random(opts.seed)
    times = []
    result = None
    for _ in range(opts.repeat):
        t0 = time.perf_counter()
        result, status = plugin.post_filter(state, preemptor, statuses)
        times.append(time.perf_counter() - t0)
        assert status is None and result is not None, status
    assert result is not None
    args = plugin.args
    num_candidates = plugin.calculate_num_candidates(opts.nodes)
    print(f"plugins: {', '.join(names)}")
    print(
        f"nodes={opts.nodes} pods/node={opts.pods_per_node} pdbs=50 "
        f"minCandidateNodesPercentage={args.min_candidate_nodes_percentage} "
        f"minCandidateNodesAbsolute={args.min_candidate_nodes_absolute} -> candidates={num_candidates}"
    )
    print(f"decision: node={result.nominated_node_name} victims={[v.name for v in result.victims]}")
    print(
        f"one preemption decision over {opts.repeat} runs: "
        f"median {statistics.median(times) * 1e3:.1f} ms, min {min(times) * 1e3:.1f} ms, "
        f"max {max(times) * 1e3:.1f} ms"
    )


if __name__ == "__main__":
    main()
