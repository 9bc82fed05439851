"""Micro-benchmark of the control plane (not a test): what one ``Scheduled`` event costs kube-apiserver
and etcd, by how it is asked for.

Issue 30's ceiling (raw-bind) writes a bind a pod; ours and the reference write a bind and an event.
This starts the local control plane and POSTs events.k8s.io Events shaped like the scheduler's at a
fixed concurrency, variant by variant, interleaved round by round, and prints the apiserver's and
etcd's CPU (``/proc``) per event and the rate: JSON as ours sends it, ``?fieldValidation=Ignore``
(no strict second decode), answers in protobuf (no JSON encoding of the created Event), and both.
``python -m kopf_scheduler_workbench.bench.eventcost [--events 3000] [--rounds 3] [--concurrency 32]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import time

import aiohttp

from kopf_scheduler_workbench.bench.rawbind import scheduled_event
from kopf_scheduler_workbench.controlplane import ControlPlane, running_control_plane

__all__ = ["VARIANTS", "main", "measure"]

PROTOBUF = "application/vnd.kubernetes.protobuf"
VARIANTS: dict[str, tuple[str, str]] = {  # name -> (query, Accept)
    "json": ("", "application/json"),
    "json, fieldValidation=Ignore": ("?fieldValidation=Ignore", "application/json"),
    "protobuf answers": ("", PROTOBUF),
    "both": ("?fieldValidation=Ignore", PROTOBUF),
}


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _post(
    session: aiohttp.ClientSession,
    url: str,
    headers: dict[str, str],
    count: int,
    concurrency: int,
    first: int,
) -> None:
    limit = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        body = scheduled_event("default", f"pod-{i}", f"uid-{i}", f"node-{i % 5000}", "default-scheduler")
        async with limit, session.post(url, data=json.dumps(body), headers=headers) as answer:
            await answer.read()
            if answer.status != 201:
                raise RuntimeError(f"event POST answered {answer.status}")

    await asyncio.gather(*(one(first + i) for i in range(count)))


async def measure(
    plane: ControlPlane, events: int, rounds: int, concurrency: int
) -> dict[str, list[tuple[float, float, float]]]:
    """Per variant, per round: (apiserver us, etcd us) an event and events a second."""
    context = ssl.create_default_context(cadata=plane.ca_pem.decode())
    apiserver, etcd = plane.processes["kube-apiserver"].pid, plane.processes["etcd"].pid
    base = {"Authorization": f"Bearer {plane.admin_token}", "Content-Type": "application/json"}
    url = plane.server + "/apis/events.k8s.io/v1/namespaces/default/events"
    out: dict[str, list[tuple[float, float, float]]] = {name: [] for name in VARIANTS}
    connector = aiohttp.TCPConnector(ssl=context, limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        await _post(session, url, {**base, "Accept": "application/json"}, 300, concurrency, 10**7)  # warm-up
        first = 0
        for _ in range(rounds):
            for name, (query, accept) in VARIANTS.items():
                a0, e0, t0 = _cpu_seconds(apiserver), _cpu_seconds(etcd), time.monotonic()
                await _post(session, url + query, {**base, "Accept": accept}, events, concurrency, first)
                elapsed = time.monotonic() - t0
                await asyncio.sleep(0.3)  # what the apiserver still does for the last ones
                a1, e1 = _cpu_seconds(apiserver), _cpu_seconds(etcd)
                out[name].append(((a1 - a0) / events * 1e6, (e1 - e0) / events * 1e6, events / elapsed))
                first += events
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kopf_scheduler_workbench.bench.eventcost", description=__doc__)
    parser.add_argument("--events", type=int, default=3000, help="events a variant a round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args(argv)
    with running_control_plane() as plane:
        results = asyncio.run(measure(plane, args.events, args.rounds, args.concurrency))
    for name, runs in results.items():
        each = ", ".join(f"{a:.0f}/{e:.0f} us, {rate:.0f}/s" for a, e, rate in runs)
        print(f"{name:30} apiserver/etcd CPU an event: {each}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
