"""In-process benchmark (not a test) of a cold start's own work: listing bytes to the first cycle.

What ``kopf-scheduler run`` does between "runtime started" and its first bind, without the network:
the Node and Pod listings as kube-apiserver sends them (StartUp/1000Nodes and StartUp/5000Nodes of
``workloads.perf_workloads``: scheduler_perf's node and pod templates, a running pod a node and the
pending measured pod, each object shaped as a listing returns it: ``startup_listing.json``, captured
once from the local control plane) are decoded (``orjson.loads``, as ``ApiClient.list_pages``) and
ingested by the runtime's own informers (trim, key, ``parse_node``/``parse_listed_pod``, store, the
engine's event handlers -> cache and queue); then the first scheduling cycle: the first
``update_snapshot`` (the snapshot built from nothing) and one ``schedule_one`` of the pending pod.

Each run is a fresh process (imports, memos and every lazy first use are cold, as in a start), and a
stage's figure is its best over the runs. ``--split`` times parse and handlers apart inside the
ingestion (with a timer around each call, a few percent more in total).

``python -m kopf_scheduler_workbench.bench.startup_listing [--nodes 1000 5000] [--runs 5] [--split]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["listing_bodies", "main", "measure"]

TEMPLATES = Path(__file__).with_name("startup_listing.json")
POD_PATH = "/api/v1/pods"
NODE_PATH = "/api/v1/nodes"


def _uid(kind: int, i: int) -> str:
    return f"{kind:08x}-{i >> 32:04x}-4{(i >> 16) & 0xFFF:03x}-8{i & 0xFFF:03x}-{i:012x}"


def listing_bodies(nodes: int, running_pods: int) -> tuple[bytes, bytes]:
    """The Node and Pod listings' bytes: ``nodes`` nodes, ``running_pods`` pods bound round-robin
    (as ``Workload.init_objects``), and the pending measured pod; uids, resourceVersions and names
    made unique as the apiserver would."""
    import orjson

    templates = json.loads(TEMPLATES.read_text())
    rv = 1000
    node_items = []
    for i in range(nodes):
        item = copy.deepcopy(templates["node"])
        name = f"node-{i:05d}"
        meta = item["metadata"]
        meta.update(name=name, uid=_uid(1, i), resourceVersion=str(rv := rv + 1))
        meta["labels"]["kubernetes.io/hostname"] = name
        node_items.append(item)
    node_list = {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": str(rv)}}
    pod_items = []
    for i in range(running_pods):
        item = copy.deepcopy(templates["bound_pod"])
        item["metadata"].update(name=f"init-{i:06d}", uid=_uid(2, i), resourceVersion=str(rv := rv + 1))
        item["spec"]["nodeName"] = f"node-{i % nodes:05d}"
        pod_items.append(item)
    pending = copy.deepcopy(templates["pending_pod"])
    pending["metadata"].update(uid=_uid(3, 0), resourceVersion=str(rv := rv + 1))
    pod_items.append(pending)
    pod_list = {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": str(rv)}}
    return (
        orjson.dumps({**node_list, "items": node_items}),
        orjson.dumps({**pod_list, "items": pod_items}),
    )


class _Pages:
    """What the informers read of an ``ApiClient``: ``list_pages`` yielding the decoded pages."""

    def __init__(self, pages: Mapping[str, tuple[list[dict[str, Any]], str]]) -> None:
        self.pages = pages

    async def list_pages(
        self, path: str, params: Mapping[str, str] | None = None, page_size: int = 500
    ) -> AsyncIterator[tuple[list[dict[str, Any]], str]]:
        items, version = self.pages[path]
        yield items, version


def _timed(fn: Callable[..., Any], acc: list[float]) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            acc[0] += time.perf_counter() - t0

    return call


async def _run(node_body: bytes, pod_body: bytes, split: bool) -> dict[str, float]:
    """One start's stages, in seconds."""
    t0 = time.perf_counter()
    import orjson

    from kopf_scheduler.api import kinds
    from kopf_scheduler.api.kinds import POD_FIELD_SELECTOR
    from kopf_scheduler.api.objects import parse_node
    from kopf_scheduler.cluster.apiclient import list_page
    from kopf_scheduler.cluster.informer import Informer, InformerHandlers, ResourceKind, _gc_paused
    from kopf_scheduler.cluster.runtime import parse_listed_pod
    from kopf_scheduler.engine import new_engine
    from kopf_scheduler.memory_client import MemoryClusterClient

    out: dict[str, float] = {"imports (not ours to count)": time.perf_counter() - t0}
    client = MemoryClusterClient()
    engine = new_engine(client)
    handlers = engine.handlers

    # The cyclic GC is paused while the listings are decoded and ingested, as the informers pause
    # it (ApiClient.list_pages decodes inside their pause), and comes back, the listed objects
    # frozen, before the first cycle.
    listing = contextlib.ExitStack()
    listing.enter_context(_gc_paused())
    t0 = time.perf_counter()
    node_page = list_page(orjson.loads(node_body))[:2]
    out["decode nodes"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    pod_page = list_page(orjson.loads(pod_body))[:2]
    out["decode pods"] = time.perf_counter() - t0
    api: Any = _Pages({NODE_PATH: node_page, POD_PATH: pod_page})

    async def ingest(
        label: str, kind: ResourceKind, parse: Callable[..., Any], *on: Callable[..., Any]
    ) -> None:
        """List one kind through a real Informer (``on``: its add, update and delete handlers); with
        --split, its parse and add apart."""
        add, update, delete = on
        parse_acc, add_acc = [0.0], [0.0]
        timed_parse, timed_add = (_timed(parse, parse_acc), _timed(add, add_acc)) if split else (parse, add)
        informer = Informer(api, kind, InformerHandlers(timed_parse, timed_add, update, delete))
        t0 = time.perf_counter()
        await informer.list()
        total = out[f"ingest {label}s"] = time.perf_counter() - t0
        if split:
            out[f"  {parse.__name__}"] = parse_acc[0]
            out[f"  add_{label} (handlers, cache, queue)"] = add_acc[0]
            out[f"  informer's own ({label}s)"] = total - parse_acc[0] - add_acc[0]

    node_kind = ResourceKind("Node", NODE_PATH)
    await ingest("node", node_kind, parse_node, handlers.add_node, handlers.update_node, handlers.delete_node)
    pod_kind = ResourceKind("Pod", POD_PATH, {"fieldSelector": POD_FIELD_SELECTOR})
    await ingest(
        "pod", pod_kind, parse_listed_pod, handlers.add_pod, handlers.update_pod, handlers.delete_pod
    )
    assert kinds.by_name("Pod").path == POD_PATH and kinds.by_name("Node").path == NODE_PATH

    listing.close()
    sched = engine.scheduler
    t0 = time.perf_counter()
    engine.cache.update_snapshot(sched.snapshot)
    out["first update_snapshot"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    if not await sched.schedule_one():
        raise RuntimeError("no pending pod was queued")
    out["first schedule_one (after the snapshot)"] = time.perf_counter() - t0
    await sched.wait_for_bindings()
    if len(client.bindings) != 1:
        raise RuntimeError(f"the pending pod was not bound: {client.bindings}")
    out["total (ours, imports left out)"] = sum(
        v for k, v in out.items() if not k.startswith(" ") and not k.startswith("imports")
    )
    return out


def measure(nodes: int, running_pods: int, split: bool) -> dict[str, float]:
    """One run in this process (call it in a fresh one: see the module's docstring)."""
    node_body, pod_body = listing_bodies(nodes, running_pods)
    return asyncio.run(_run(node_body, pod_body, split))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--running-pods", type=int, default=1000, help="StartUp's: 1,000 at both sizes")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--split", action="store_true", help="time parse and handlers apart")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.nodes[0], args.running_pods, args.split)))
        return 0
    for n in args.nodes:
        runs: list[dict[str, float]] = []
        for _ in range(args.runs):
            cmd = [sys.executable, "-m", __spec__.name if __spec__ else __name__, "--one", "--nodes", str(n)]
            cmd += ["--running-pods", str(args.running_pods)] + (["--split"] if args.split else [])
            done = subprocess.run(cmd, check=True, capture_output=True, text=True)
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        head = f"{n} nodes, {args.running_pods} running pods + 1 pending"
        print(f"{head}: best (median) of {args.runs} fresh processes, ms")
        for stage in runs[0]:
            values = sorted(r[stage] * 1000 for r in runs)
            print(f"  {stage:42s} {values[0]:8.1f} ({values[len(values) // 2]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
