"""Micro-benchmark of a DRA pod's scheduling cycle (not a test): CPU a pod, in process.

SchedulingWithResourceClaimTemplate/5000pods_500nodes (issue 30): 500 nodes with a 10-device
ResourceSlice each, claims allocated before the start, every measured pod with a claim of its own
made from a template. Ours' CPU a pod grew with the number of allocated claims. This builds the
workload's objects (``bench.workloads``' DRA helpers) with ``--allocated`` claims allocated up
front, then for each measured pod adds its claim (unallocated, owned by the pod, named in the pod's
status as the resourceclaim controller does) and the pod, and times one ``schedule_one``: PreFilter,
Filter, Score, Reserve, Permit for a pod with a fresh claim. The binding cycle (PreBind's claim
write into the in-memory store, as the watch would deliver it) runs after, untimed, so the next pod
sees one more allocated claim. ``python -m kopf_scheduler_workbench.bench.dra_cycle [--nodes 500]
[--allocated 0 1000 4000] [--pods 100] [--profile]``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import pstats
import time
from typing import Any

from kopf_scheduler.api import kinds
from kopf_scheduler.api.kinds import ObjectStore
from kopf_scheduler.api.objects import parse_node, parse_pod
from kopf_scheduler.engine import Engine, new_engine
from kopf_scheduler.framework.profiles import load_profile
from kopf_scheduler.memory_client import MemoryClusterClient
from kopf_scheduler_workbench.bench.workloads import (
    _dra_allocated_claims,
    _dra_claim,
    _dra_template_objects,
    _dra_template_pod,
    node,
)

__all__ = ["bench", "main"]

SCHEDULER = "dra-bench"


def _store(objects: ObjectStore, raw: dict[str, Any]) -> None:
    kind = kinds.by_name(raw["kind"])
    obj = kind.parse(raw)
    kinds.store_of(objects, kind)[kind.key_of(obj)] = obj


def _engine(nodes: int, allocated: int) -> tuple[Engine, ObjectStore, MemoryClusterClient]:
    objects: ObjectStore = {}
    client = MemoryClusterClient(objects=objects)  # PreBind's writes land in the plugins' store
    profile = load_profile({"schedulerName": SCHEDULER})
    engine = new_engine(client, [profile], objects=objects, with_default=False)
    for i in range(nodes):
        engine.handlers.add_node(parse_node(node(f"node-{i:05d}")))
    for raw in (*_dra_template_objects(nodes, 10), *_dra_allocated_claims(nodes, allocated)):
        raw["metadata"].setdefault("uid", f"uid-{raw['kind']}-{raw['metadata']['name']}")
        raw["metadata"].setdefault("resourceVersion", "1")
        _store(objects, raw)
    return engine, objects, client


def _add_pod(engine: Engine, objects: ObjectStore, i: int) -> None:
    name, claim_name = f"pod-{i}", f"pod-{i}-resource"
    body = _dra_template_pod(name)
    body["metadata"]["uid"] = f"uid-{name}"
    body["spec"]["schedulerName"] = SCHEDULER
    body["status"] = {"resourceClaimStatuses": [{"name": "resource", "resourceClaimName": claim_name}]}
    claim = _dra_claim(claim_name)
    owner = {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": f"uid-{name}", "controller": True}
    claim["metadata"].update(uid=f"uid-{claim_name}", resourceVersion="1", ownerReferences=[owner])
    _store(objects, claim)
    engine.handlers.add_pod(parse_pod(body))


def bench(nodes: int, allocated: int, pods: int, profile: bool = False) -> float:
    """CPU seconds of one pod's scheduling cycle with ``allocated`` claims allocated before."""
    engine, objects, client = _engine(nodes, allocated)
    scheduler = engine.scheduler

    async def run() -> float:
        spent = 0.0
        for i in range(pods):
            _add_pod(engine, objects, i)
            start = time.process_time()
            if not await scheduler.schedule_one():
                raise RuntimeError(f"pod-{i} was not queued: {engine.queue.pending_pods()}")
            spent += time.process_time() - start
            if prof is not None:
                prof.disable()
            await scheduler.wait_for_bindings()
            if prof is not None:
                prof.enable()
        return spent

    gc.collect()
    prof = cProfile.Profile() if profile else None
    if prof is not None:
        prof.enable()
    seconds = asyncio.run(run())
    if prof is not None:
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    if len(client.bindings) != pods:
        raise RuntimeError(f"bound {len(client.bindings)} of {pods}: {client.events[-3:]}")
    claims = kinds.objects_of(objects, kinds.RESOURCE_CLAIM)
    done = sum(1 for c in claims.values() if c.status.allocation is not None)
    if done != allocated + pods:
        raise RuntimeError(f"{done} claims allocated, expected {allocated + pods}")
    return seconds / pods


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kopf_scheduler_workbench.bench.dra_cycle", description=__doc__)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--allocated", type=int, nargs="+", default=[0, 1000, 4000], help="claims allocated")
    parser.add_argument("--pods", type=int, default=100, help="pods measured a run")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of the last size")
    args = parser.parse_args(argv)
    for i, allocated in enumerate(args.allocated):
        last = i == len(args.allocated) - 1
        per_pod = bench(args.nodes, allocated, args.pods, profile=args.profile and last)
        print(
            f"{args.nodes} nodes, {allocated} claims allocated: {per_pod * 1e6:.0f} us of CPU a pod's "
            "scheduling cycle"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
