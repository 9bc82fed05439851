"""Micro-benchmark of the scheduling decision (not a test): time per pod at 100/1,000/5,000 nodes.

Runs the default profile's scheduling cycle (PreFilter..Score, select host, assume, Reserve,
Permit) for simple pods against an in-memory cache; binding is excluded because it is I/O.
``python -m kopf_scheduler_workbench.bench.engine [--nodes 100 1000 5000] [--pods 300] [--profile]``;
``--cpu 64`` (more than a node's 32) times the failure path instead: diagnosis, FailedScheduling
message and the preemption attempt, as in the Unschedulable workload. ``--metrics`` records into
a Prometheus registry as the operator does (the default records nothing), to price the metrics.
``--batching`` schedules under scheduler_perf's batching profile (PodTopologySpread without default
constraints, so pods sign) with OpportunisticBatching on (``--no-batch`` off); ``--gen0 N`` sets
the GC's young-generation threshold (the operator's ``run`` uses 10,000; Python's default is 700).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import pstats
import random
import time

from kopf_scheduler.cache.cache import Cache
from kopf_scheduler.config.profile import SchedulerProfileSpec
from kopf_scheduler.engine import new_engine
from kopf_scheduler.framework.profiles import load_profile
from kopf_scheduler.memory_client import MemoryClusterClient
from kopf_scheduler.metrics.recorder import MetricsRecorder, NoopMetrics
from kopf_scheduler.scheduler.schedule_one import Scheduler
from kopf_scheduler_workbench.bench.workloads import NO_TOPOLOGY
from kopf_scheduler_workbench.testing.builders import make_node, make_pod

__all__ = ["bench", "main"]


class _NoBindClient(MemoryClusterClient):
    """Binds succeed instantly; the benchmark measures decisions, not the apiserver."""


def _profiles(disable: list[str], batching: bool = False) -> list[SchedulerProfileSpec]:
    if not disable and not batching:
        return []
    spec: dict[str, object] = {"schedulerName": "kopf-scheduler"}
    if disable:
        spec["plugins"] = {"multiPoint": {"disabled": [{"name": n} for n in disable]}}
    if batching:
        spec["pluginConfig"] = [NO_TOPOLOGY]
    return [load_profile(spec)]


def _recorder(metrics: bool) -> MetricsRecorder:
    if not metrics:
        return NoopMetrics()
    from prometheus_client import CollectorRegistry

    from kopf_scheduler.metrics.prometheus import PrometheusMetrics

    return PrometheusMetrics(CollectorRegistry(), rng=random.Random(0))


def _setup(
    num_nodes: int,
    seed: int,
    disable: list[str],
    metrics: bool = False,
    batching: bool = False,
    batch: bool = True,
) -> tuple[Scheduler, Cache]:
    engine = new_engine(
        _NoBindClient(),
        _profiles(disable, batching),
        rng=random.Random(seed),
        metrics=_recorder(metrics),
        opportunistic_batching=batch,
    )
    sched, cache = engine.scheduler, engine.cache
    for i in range(num_nodes):
        cache.add_node(make_node(f"node-{i:05d}", cpu="32", memory="128Gi", labels={"zone": f"z{i % 3}"}))
    return sched, cache


def bench(
    num_nodes: int,
    num_pods: int,
    seed: int = 1,
    profile: bool = False,
    disable: list[str] | None = None,
    cpu: str = "100m",
    metrics: bool = False,
    batching: bool = False,
    batch: bool = True,
) -> float:
    """Mean seconds per scheduling decision over ``num_pods`` simple pods."""
    sched, _ = _setup(num_nodes, seed, disable or [], metrics, batching, batch)
    pods = [make_pod(f"pod-{i}", cpu=cpu, memory="128Mi") for i in range(num_pods)]

    async def go() -> float:
        for p in pods[:20]:  # warm-up (imports, first snapshot)
            sched.queue.add(p)
        while await sched.schedule_one():
            pass
        await sched.wait_for_bindings()
        for p in pods[20:]:
            sched.queue.add(p)
        prof = cProfile.Profile() if profile else None
        start = time.perf_counter()
        if prof:
            prof.enable()
        n = 0
        while await sched.schedule_one():
            n += 1
        elapsed = time.perf_counter() - start
        if prof:
            prof.disable()
            pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
        await sched.wait_for_bindings()
        return elapsed / max(n, 1)

    return asyncio.run(go())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 1000, 5000])
    parser.add_argument("--pods", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", action="store_true", help="print a cProfile of the largest size")
    parser.add_argument("--disable", nargs="*", default=[], metavar="PLUGIN", help="plugins to leave out")
    parser.add_argument("--cpu", default="100m", help="each pod's cpu request (nodes have 32)")
    parser.add_argument("--metrics", action="store_true", help="record Prometheus metrics as the operator")
    parser.add_argument("--batching", action="store_true", help="scheduler_perf's batching profile")
    parser.add_argument("--no-batch", action="store_true", help="OpportunisticBatching off")
    parser.add_argument("--gen0", type=int, default=0, help="the GC's young-generation threshold")
    args = parser.parse_args(argv)
    if args.gen0:
        _, gen1, gen2 = gc.get_threshold()
        gc.set_threshold(args.gen0, gen1, gen2)
    print(f"{'nodes':>7}  {'ms/pod':>8}  {'pods/s':>8}")
    for i, n in enumerate(args.nodes):
        last = i == len(args.nodes) - 1
        per_pod = bench(
            n,
            args.pods,
            args.seed,
            profile=args.profile and last,
            disable=args.disable,
            cpu=args.cpu,
            metrics=args.metrics,
            batching=args.batching,
            batch=not args.no_batch,
        )
        print(f"{n:>7}  {per_pod * 1000:>8.3f}  {1 / per_pod:>8.0f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
