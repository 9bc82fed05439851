"""Micro-benchmark of the API client (not a test): our CPU per small request, aiohttp against the lean pool.

Starts the local control plane, then POSTs Scheduled-like events (the scheduler's most frequent
request with the binding) at a fixed concurrency, through ``ApiClient`` with its lean HTTP/1.1 pool
and with it off (aiohttp), interleaved, and prints the process CPU per request and the rate.
``python -m kopf_scheduler.bench.http [--requests 3000] [--concurrency 32] [--rounds 2]``
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from kopf_scheduler.cluster.client import ApiClient
from kopf_scheduler.cluster.connection import load_credentials
from kopf_scheduler.cluster.controlplane import ControlPlane
from kopf_scheduler.cluster.run import run_loop

__all__ = ["main"]

EVENTS = "/apis/events.k8s.io/v1/namespaces/default/events"


def _event(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"bench-{i}.{time.time_ns():x}", "namespace": "default"},
        "eventTime": "2026-11-25T08:00:00.000000Z",
        "reportingController": "kopf-scheduler",
        "reportingInstance": "bench",
        "action": "Binding",
        "reason": "Scheduled",
        "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": "default", "name": f"p{i}"},
        "note": f"Successfully assigned default/p{i} to node-1",
        "type": "Normal",
    }


async def _measure(kubeconfig: str, requests: int, concurrency: int, rounds: int) -> None:
    creds = load_credentials(kubeconfig)
    clients = {"aiohttp": ApiClient(creds, lean_requests=False), "lean": ApiClient(creds)}
    limit = asyncio.Semaphore(concurrency)
    seq = 0

    async def post(api: ApiClient) -> None:
        nonlocal seq
        seq += 1
        async with limit:
            await api.request("POST", EVENTS, body=_event(seq))

    try:
        for _ in range(rounds):
            for name, api in clients.items():
                await asyncio.gather(*(post(api) for _ in range(concurrency * 4)))  # connections open
                cpu, wall = time.process_time(), time.perf_counter()
                await asyncio.gather(*(post(api) for _ in range(requests)))
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                per_request = cpu / requests * 1e6
                print(f"{name:>8}  {per_request:6.0f} us CPU/request  {requests / wall:6.0f} requests/s")
    finally:
        for api in clients.values():
            await api.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    plane = ControlPlane()
    plane.start()
    try:
        run_loop(_measure(str(plane.kubeconfig), args.requests, args.concurrency, args.rounds))
    finally:
        plane.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
