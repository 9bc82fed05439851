"""The raw-bind baseline: binds every pending pod of one schedulerName round-robin, with no logic.

It is the ceiling this control plane allows a scheduler: the cost of watching pods and POSTing
bindings and nothing else (no cache, no filters, no events). Run as its own process by the bench
runner so its CPU is measured apart from the runner's: ``KOPF_SCHEDULER_BENCH_TOKEN=...
python -m kopf_scheduler_workbench.bench.rawbind --server URL --scheduler-name N``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time

from kopf_scheduler.api import kinds
from kopf_scheduler.cluster.run import run_loop
from kopf_scheduler_workbench.rest import Api, object_path

__all__ = ["RawBinder", "main"]


class RawBinder:
    """Watch pending pods (field selector), bind each once to the next node in a fixed cycle."""

    def __init__(self, api: Api, scheduler_name: str, parallel: int = 64) -> None:
        self.api = api
        self.scheduler_name = scheduler_name
        self.nodes: list[str] = []
        self.next = 0
        self.done: set[str] = set()
        self.limit = asyncio.Semaphore(parallel)
        self.tasks: set[asyncio.Task[None]] = set()
        self.first_bind_at: float | None = None

    async def _bind(self, namespace: str, name: str, node: str) -> None:
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
            self._bind(str(meta["namespace"]), str(meta["name"]), node)
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


async def _main(args: argparse.Namespace) -> int:
    api = Api(args.server, os.environ["KOPF_SCHEDULER_BENCH_TOKEN"], concurrency=args.parallel)
    binder = RawBinder(api, args.scheduler_name, args.parallel)
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
    parser.add_argument("--max-seconds", type=float, default=3600.0, help="stop by itself after this long")
    # The same event loop as the scheduler (uvloop), so the ceiling is not lowered by the loop.
    return run_loop(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
