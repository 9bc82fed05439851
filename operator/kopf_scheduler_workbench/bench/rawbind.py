"""The raw-bind baseline: binds every pending pod of one schedulerName round-robin, with no logic.

It is the ceiling this control plane allows a scheduler: the cost of watching pods and POSTing
bindings and nothing else (no cache, no filters, no events). With ``--events`` it also posts the
``Scheduled`` event kube-scheduler (and ours) posts for every bound pod, in the same shape: the
ceiling of a scheduler that writes what kube-scheduler writes (issue 30: the event is a second write
a pod for the apiserver and etcd, which the plain ceiling does not pay). Run as its own process by
the bench runner so its CPU is measured apart from the runner's: ``KOPF_SCHEDULER_BENCH_TOKEN=...
python -m kopf_scheduler_workbench.bench.rawbind --server URL --scheduler-name N [--events]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import os
import socket
import sys
import time

from kopf_scheduler.api import kinds
from kopf_scheduler.cluster.run import run_loop
from kopf_scheduler_workbench.rest import Api, object_path

__all__ = ["RawBinder", "main"]


class RawBinder:
    """Watch pending pods (field selector), bind each once to the next node in a fixed cycle."""

    def __init__(self, api: Api, scheduler_name: str, parallel: int = 64, *, events: bool = False) -> None:
        self.api = api
        self.scheduler_name = scheduler_name
        self.events = events
        self.nodes: list[str] = []
        self.next = 0
        self.done: set[str] = set()
        self.limit = asyncio.Semaphore(parallel)
        self.tasks: set[asyncio.Task[None]] = set()
        self.first_bind_at: float | None = None

    async def _bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        async with self.limit:
            with contextlib.suppress(RuntimeError):  # 409: bound meanwhile; 404: deleted
                await self.api.request("POST", object_path(kinds.POD, name, namespace, "binding"), body)
                if self.first_bind_at is None:
                    self.first_bind_at = time.monotonic()
                if self.events:
                    await self.api.request(
                        "POST", f"/apis/events.k8s.io/v1/namespaces/{namespace}/events",
                        scheduled_event(namespace, name, uid, node, self.scheduler_name),
                    )  # fmt: skip

    def _pending(self, obj: dict[str, object]) -> None:
        meta = obj.get("metadata") or {}
        assert isinstance(meta, dict)
        uid = str(meta.get("uid"))
        if uid in self.done or meta.get("deletionTimestamp") or not self.nodes:
            return
        self.done.add(uid)
        node = self.nodes[self.next % len(self.nodes)]
        self.next += 1
        task = asyncio.get_running_loop().create_task(
            self._bind(str(meta["namespace"]), str(meta["name"]), uid, node)
        )
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def run(self, deadline: float) -> None:
        listing = await self.api.listing(kinds.NODE)
        self.nodes = sorted(str(n["metadata"]["name"]) for n in listing.get("items") or [])
        selector = f"spec.schedulerName={self.scheduler_name},spec.nodeName="
        while time.monotonic() < deadline:
            pods = await self.api.listing(kinds.POD, fieldSelector=selector)
            for item in pods.get("items") or []:
                self._pending(item)
            params = {"fieldSelector": selector, "resourceVersion": str(pods["metadata"]["resourceVersion"])}
            with contextlib.suppress(Exception):
                async for event in self.api.watch_lines(
                    kinds.POD.path, params, min(300.0, deadline - time.monotonic())
                ):
                    if event.get("type") == "ERROR":
                        break
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self._pending(event["object"])


def scheduled_event(namespace: str, name: str, uid: str, node: str, controller: str) -> dict[str, object]:
    """The events.k8s.io/v1 ``Scheduled`` event as kube-scheduler posts it for a bound pod."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{time.time_ns():x}", "namespace": namespace},
        "eventTime": now,
        "reportingController": controller,
        "reportingInstance": f"{controller}-{socket.gethostname()}",
        "action": "Binding",
        "reason": "Scheduled",
        "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name, "uid": uid},
        "note": f"Successfully assigned {namespace}/{name} to {node}",
        "type": "Normal",
    }


async def _main(args: argparse.Namespace) -> int:
    api = Api(args.server, os.environ["KOPF_SCHEDULER_BENCH_TOKEN"], concurrency=args.parallel)
    binder = RawBinder(api, args.scheduler_name, args.parallel, events=args.events)
    try:
        await binder.run(time.monotonic() + args.max_seconds)
    finally:
        await api.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="kopf_scheduler_workbench.bench.rawbind", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--server", required=True, help="apiserver URL (loopback)")
    parser.add_argument("--scheduler-name", default="raw-bind")
    parser.add_argument("--parallel", type=int, default=64, help="concurrent binding POSTs")
    parser.add_argument("--events", action="store_true", help="post a Scheduled event after each bind")
    parser.add_argument("--max-seconds", type=float, default=3600.0, help="stop by itself after this long")
    # The same event loop as the scheduler (uvloop), so the ceiling is not lowered by the loop.
    return run_loop(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
