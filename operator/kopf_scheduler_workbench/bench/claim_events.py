"""Micro-benchmark of ResourceClaim events against pending pods (not a test): CPU an event, in process.

In SchedulingWithResourceClaimTemplate every pod waits in the unschedulable pool (DynamicResources'
PreEnqueue: "ResourceClaim not created yet") until the resourceclaim controller has made its claim
and written the claim's name into the pod's status; meanwhile the claims of the pods before it are
made, allocated and reserved: several ResourceClaim events a pod, each of which the queue matches
against the pods waiting (issue 30). This builds ours' engine with the default profile, parks
``--pending`` such pods in the pool, then delivers ``--events`` claim events through the event
handlers (each claim added for one of the waiting pods, owned by it, then updated with a finalizer
and a status, as the controller and the scheduler do) and prints the CPU an event.
``python -m kopf_scheduler_workbench.bench.claim_events [--pending 100 1000 5000] [--events 300]
[--gate]`` (``--gate``: SchedulerPreQueueingHints on) ``[--profile]``.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import gc
import pstats
import time
from typing import Any

from kopf_scheduler.api.objects import Pod, parse_pod
from kopf_scheduler.api.resource import ResourceClaim, ResourceClaimStatus, parse_resource_claim
from kopf_scheduler.config import features
from kopf_scheduler.engine import Engine, new_engine
from kopf_scheduler.framework.profiles import load_profile
from kopf_scheduler.memory_client import MemoryClusterClient

__all__ = ["bench", "main"]

SCHEDULER = "claim-bench"


def _pod(i: int) -> Pod:
    return parse_pod(
        {
            "metadata": {"name": f"pod-{i}", "namespace": "default", "uid": f"uid-pod-{i}"},
            "spec": {
                "schedulerName": SCHEDULER,
                "containers": [{"name": "c"}],
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu-template"}],
            },
        }
    )


def _claim(i: int) -> ResourceClaim:
    owner = {"apiVersion": "v1", "kind": "Pod", "name": f"pod-{i}", "uid": f"uid-pod-{i}", "controller": True}
    raw: dict[str, Any] = {
        "metadata": {
            "name": f"pod-{i}-gpu",
            "namespace": "default",
            "uid": f"uid-claim-{i}",
            "resourceVersion": "1",
            "ownerReferences": [owner],
        },
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
    }
    return parse_resource_claim(raw)


def _engine(pending: int) -> tuple[Engine, list[Pod]]:
    profile = load_profile({"schedulerName": SCHEDULER})
    engine = new_engine(MemoryClusterClient(), [profile])
    pods = [_pod(i) for i in range(pending)]
    for pod in pods:
        engine.handlers.add_pod(pod)
    if engine.queue.pending_pods()["gated"] != pending:
        raise RuntimeError(f"expected {pending} gated pods, got {engine.queue.pending_pods()}")
    return engine, pods


def bench(pending: int, events: int, profile: bool = False) -> float:
    """CPU seconds a ResourceClaim event with ``pending`` pods waiting in the pool."""
    engine, _ = _engine(pending)
    handlers = engine.handlers
    claims = [_claim(i % pending) for i in range(events // 3 + 1)]
    reserved = ResourceClaimStatus()
    gc.collect()
    prof = cProfile.Profile() if profile else None
    if prof is not None:
        prof.enable()
    start = time.process_time()
    delivered = 0
    for claim in claims:
        handlers.add_object("ResourceClaim", claim)
        updated = dataclasses.replace(claim, status=reserved)
        handlers.update_object("ResourceClaim", claim, updated)
        handlers.delete_object("ResourceClaim", updated)
        delivered += 3
    seconds = time.process_time() - start
    if prof is not None:
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    if engine.queue.pending_pods()["gated"] != pending:
        raise RuntimeError(f"pods moved: {engine.queue.pending_pods()}")
    return seconds / delivered


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kopf_scheduler_workbench.bench.claim_events", description=__doc__)
    parser.add_argument("--pending", type=int, nargs="+", default=[100, 1000, 5000], help="pods waiting")
    parser.add_argument("--events", type=int, default=300, help="claim events a run")
    parser.add_argument("--gate", action="store_true", help="SchedulerPreQueueingHints=true")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of the last size")
    args = parser.parse_args(argv)
    gates = features.FeatureGates({"SchedulerPreQueueingHints": True}) if args.gate else features.current()
    with features.using(gates):
        for i, pending in enumerate(args.pending):
            per_event = bench(pending, args.events, profile=args.profile and i == len(args.pending) - 1)
            print(f"{pending} pods pending: {per_event * 1e6:.0f} us of CPU a ResourceClaim event")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
