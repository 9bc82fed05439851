"""Sync time at scale: 5,000 nodes and 50,000 bound pods, from process start to the first bind.

Slow (it creates 55,000 objects), so it runs only with ``KOPF_SCHEDULER_SCALE=1`` (sizes via
``KOPF_SCHEDULER_SCALE_NODES`` / ``_PODS``), on a control plane of its own:

    KOPF_SCHEDULER_SCALE=1 pytest -m integration tests/integration/test_operator_scale.py -s

Creating the objects takes longer than the measurement; ``KOPF_SCHEDULER_SCALE_WORKDIR=/some/dir``
keeps the control plane's etcd there, so the first run populates it and later runs restart etcd and
kube-apiserver on it and go straight to the measurement.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kopf_scheduler.cluster.apiclient import ApiClient
from kopf_scheduler.cluster.connection import from_kubeconfig
from kopf_scheduler_workbench.controlplane import ControlPlane

from .test_operator_helpers import Replica, deploy, node, node_of, pod, wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(3600),  # creating 55,000 objects alone takes 5-9 minutes on a busy machine
    pytest.mark.skipif(not os.environ.get("KOPF_SCHEDULER_SCALE"), reason="set KOPF_SCHEDULER_SCALE=1"),
]

NODES = int(os.environ.get("KOPF_SCHEDULER_SCALE_NODES", 5000))
PODS = int(os.environ.get("KOPF_SCHEDULER_SCALE_PODS", 50000))
SYNC_LIMIT = float(os.environ.get("KOPF_SCHEDULER_SCALE_LIMIT", 120))
WORKDIR = os.environ.get("KOPF_SCHEDULER_SCALE_WORKDIR")
MEASURED: dict[str, float] = {}


@pytest.fixture(scope="module")
def big_plane() -> Iterator[ControlPlane]:
    workdir = Path(WORKDIR) if WORKDIR else None
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
    plane = ControlPlane(workdir=workdir)
    try:
        plane.start()
        # After a restart on a big etcd the watch cache fills first ("storage is (re)initializing").
        wait_for(lambda: plane.kubectl("get", "--raw", "/api/v1/pods?limit=1&resourceVersion=0"), 300, 1)
        yield plane
    finally:
        plane.stop()


def _populated_marker(plane: ControlPlane) -> Path:
    return plane.workdir / f"populated-{NODES}-{PODS}"


def _object_count(plane: ControlPlane, path: str) -> int:
    meta = json.loads(plane.kubectl("get", "--raw", f"{path}?limit=1"))["metadata"]
    return int(meta.get("remainingItemCount") or 0) + 1


async def _populate(kubeconfig: Path, namespace: str) -> float:
    api = ApiClient(from_kubeconfig(kubeconfig), max_in_flight=200)
    start = time.monotonic()
    try:
        await api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
        sem = asyncio.Semaphore(200)

        async def post(path: str, body: dict[str, object]) -> None:
            async with sem:
                await api.request("POST", path, body=body)

        await asyncio.gather(
            *(post("/api/v1/nodes", node(f"n{i:05d}", cpu="64", memory="256Gi")) for i in range(NODES))
        )
        await asyncio.gather(
            *(
                post(
                    f"/api/v1/namespaces/{namespace}/pods",
                    pod(f"r{i:06d}", namespace, scheduler="other", node_name=f"n{i % NODES:05d}"),
                )
                for i in range(PODS)
            )
        )
    finally:
        await api.close()
    return time.monotonic() - start


def test_sync_and_first_bind_at_scale(big_plane: ControlPlane, tmp_path: Path) -> None:
    sa = deploy(big_plane)
    ns = "scale"
    marker = _populated_marker(big_plane)
    if marker.exists():
        print(f"reusing {NODES} nodes and {PODS} bound pods in {big_plane.workdir}")
    else:
        created = asyncio.run(_populate(big_plane.kubeconfig, ns))
        marker.touch()
        print(f"created {NODES} nodes and {PODS} bound pods in {created:.1f}s")
    first = f"first-{int(time.time())}"  # a reused plane keeps the earlier runs' ones
    big_plane.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(pod(first, ns)))
    started = time.monotonic()
    replica = Replica(sa, "scale", [ns], "scale-0", tmp_path)
    try:
        bound = wait_for(
            lambda: node_of(big_plane, ns, first), SYNC_LIMIT + 60, interval=0.2, what="first bind"
        )
        first_bind = time.monotonic() - started
        match = wait_for(lambda: re.search(r"Initial listing complete in ([0-9.]+)s", replica.logs()), 10)
        sync = float(match.group(1))
        MEASURED["informer_sync"] = sync
        status = Path(f"/proc/{replica.proc.pid}/status").read_text()
        rss_kb = int(status.split("VmRSS:")[1].split()[0])
        print(
            f"scale: {NODES} nodes, {PODS} pods: initial sync {sync:.1f}s, start to first bind "
            f"{first_bind:.1f}s (bound to {bound}), RSS {rss_kb / 1024:.0f} MiB"
        )
        assert first_bind < SYNC_LIMIT
    finally:
        replica.kill()


KOPF_COUNTER = """
import os, time, kopf
TOTAL = int(os.environ["EXPECT"])
seen = set()
start = time.monotonic()

@kopf.on.startup()
def configure(settings, **_):
    settings.posting.enabled = False
    settings.scanning.disabled = True

@kopf.on.event("", "v1", "pods")
@kopf.on.event("", "v1", "nodes")
def count(body, **_):
    seen.add(body["metadata"]["uid"])
    if len(seen) == TOTAL:
        print(f"KOPF-SYNCED {time.monotonic() - start:.1f}", flush=True)
"""


def test_kopf_per_object_handlers_are_slower_for_pods(big_plane: ControlPlane, tmp_path: Path) -> None:
    """The measurement behind informer.py: Kopf's per-object machinery on the same 55,000 objects."""
    import subprocess
    import sys

    module = tmp_path / "kopf_counter.py"
    module.write_text(KOPF_COUNTER)
    total = _object_count(big_plane, "/api/v1/nodes") + _object_count(big_plane, "/api/v1/pods")
    env = {**os.environ, "EXPECT": str(total), "KUBECONFIG": str(big_plane.kubeconfig)}
    log = tmp_path / "kopf.log"
    started = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kopf", "run", "--standalone", "-A", "-q", str(module)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
        try:
            match = wait_for(lambda: re.search(r"KOPF-SYNCED ([0-9.]+)", log.read_text()), 600, interval=1)
            kopf_seconds = float(match.group(1))
        except TimeoutError:
            kopf_seconds = time.monotonic() - started
        finally:
            proc.terminate()
            proc.wait(30)
    print(f"kopf on.event saw all {total} objects after {kopf_seconds:.1f}s")
    if "informer_sync" not in MEASURED:
        pytest.skip("needs the informer's figure from test_sync_and_first_bind_at_scale")
    assert kopf_seconds > MEASURED["informer_sync"], MEASURED
