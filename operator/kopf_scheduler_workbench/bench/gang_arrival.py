"""Micro-benchmark of gangs arriving member by member (not a test): CPU a pod, in process.

In a cluster a gang's members arrive one at a time, each an ``UnscheduledPodAdd`` event while the
members before it wait at PreEnqueue; the bench's GangScheduling workloads showed ours' CPU a pod
growing with the gang's size (issue 30). This drives ours' engine (GangScheduling in the profile,
an in-memory client) the same way: every member added through the event handlers, one scheduling
attempt after each arrival, then the queue drained. ``python -m
kopf_scheduler_workbench.bench.gang_arrival [--nodes 5000] [--gangs 1] [--size 1000] [--profile]``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import pstats
import time

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.api.podgroup import parse_pod_group
from kopf_scheduler.engine import Engine, new_engine
from kopf_scheduler.framework.profiles import load_profile
from kopf_scheduler.memory_client import MemoryClusterClient
from kopf_scheduler_workbench.testing.builders import make_node, make_pod

__all__ = ["bench", "main"]

SCHEDULER = "gang-bench"


def _engine(nodes: int, gangs: int, size: int) -> tuple[Engine, MemoryClusterClient, list[Pod]]:
    profile = load_profile(
        {"schedulerName": SCHEDULER, "plugins": {"multiPoint": {"enabled": [{"name": "GangScheduling"}]}}}
    )
    client = MemoryClusterClient()
    engine = new_engine(client, [profile])
    for i in range(nodes):
        engine.handlers.add_node(make_node(f"node-{i}", cpu="32", memory="256Gi"))
    members: list[Pod] = []
    for g in range(gangs):
        group = parse_pod_group(
            {
                "apiVersion": "scheduling.k8s.io/v1beta1",
                "kind": "PodGroup",
                "metadata": {"name": f"pg-{g}", "namespace": "default", "uid": f"pg-{g}", "generation": 1},
                "spec": {"schedulingPolicy": {"gang": {"minCount": size}}, "priority": 0},
            }
        )
        engine.handlers.add_object("PodGroup", group)
        members += [
            make_pod(
                f"pg-{g}-{i}",
                cpu="100m",
                memory="100Mi",
                scheduler_name=SCHEDULER,
                schedulingGroup={"podGroupName": f"pg-{g}"},
            )
            for i in range(size)
        ]
    return engine, client, members


def bench(nodes: int, gangs: int, size: int, profile: bool = False) -> float:
    """CPU seconds a pod, from the first member's arrival to the last bind."""
    engine, client, members = _engine(nodes, gangs, size)

    async def arrive() -> float:
        start = time.process_time()
        for pod in members:
            engine.handlers.add_pod(pod)
            await engine.scheduler.schedule_one()
        while await engine.scheduler.schedule_one():
            pass
        await engine.scheduler.wait_for_bindings()
        return time.process_time() - start

    gc.collect()
    prof = cProfile.Profile() if profile else None
    if prof is not None:
        prof.enable()
    seconds = asyncio.run(arrive())
    if prof is not None:
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(30)
    if len(client.bindings) != len(members):
        raise RuntimeError(f"bound {len(client.bindings)} of {len(members)}")
    return seconds / len(members)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kopf_scheduler_workbench.bench.gang_arrival", description=__doc__)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--gangs", type=int, default=1)
    parser.add_argument("--size", type=int, nargs="+", default=[3, 300, 1000], help="members a gang")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of the last size")
    args = parser.parse_args(argv)
    for i, size in enumerate(args.size):
        gangs = max(args.gangs, 300 // size) if size < 300 else args.gangs
        per_pod = bench(args.nodes, gangs, size, profile=args.profile and i == len(args.size) - 1)
        print(f"{args.nodes} nodes, {gangs} gang(s) of {size}: {per_pod * 1e6:.0f} us of CPU a pod")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
