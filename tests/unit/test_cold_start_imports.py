"""What the way to the first bind imports (issue 30's cold start): in a fresh interpreter, the
command's modules, the default engine on the live client and a scheduling cycle of a pod without
claims load none of DRA's allocator machinery (allocator, pools, CEL and its library), nor the
resource.k8s.io views, nor PyYAML from the edge's own modules: each is imported when a pod with
claims, a DRA or storage object or a YAML file is first met; nor prometheus-client and the standard
library's HTTP server: the runtime imports them when it starts its servers, after the first
cycles."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Loaded when first needed, never before an ordinary cluster's first bind: DRA's ...
DRA = (
    "kopf_scheduler.dra.allocator",
    "kopf_scheduler.dra.pools",
    "kopf_scheduler.dra.cel",
    "kopf_scheduler.dra.state",
    "cel_expr_python",
    "kopf_scheduler.api.resource",
)
# ... and the storage kinds' views (the first PV, PVC, StorageClass, CSINode ... listed).
# ... and the servers' machinery, imported when the metrics server and the secure port start (the
# proxy lookup reads the environment itself: urllib.request would bring http.client and email).
SERVERS = (
    "prometheus_client",
    "http.server",
    "wsgiref",
    "urllib.request",
    "http.client",
    "email",
    "kopf_scheduler.cluster.httpd",
    "kopf_scheduler.metrics.exposition",
)
LAZY = (*DRA, "kopf_scheduler.api.storage", *SERVERS)

_CYCLE = """
import sys
import kopf_scheduler.cluster.run  # what `kopf-scheduler run` loads
import kopf_scheduler.cluster.serving  # run prepares the secure port before the runtime starts
import kopf_scheduler.cluster.runtime
from kopf_scheduler.api import kinds
from kopf_scheduler.api.objects import parse_node, parse_pod
from kopf_scheduler.cluster import metrics
from kopf_scheduler.cluster.apiclient import ApiClient
from kopf_scheduler.cluster.client import KubeClusterClient
from kopf_scheduler.cluster.connection import ConnectionInfo, Credentials
from kopf_scheduler.engine import new_engine
from kopf_scheduler.framework.interface import CycleState

# The live client, over an endpoint never contacted: building and scheduling send no request.
api = ApiClient(Credentials(ConnectionInfo(server="https://127.0.0.1:9")))
engine = new_engine(KubeClusterClient(api), metrics=metrics.SCHEDULER)
status = {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}
engine.handlers.add_node(parse_node({"metadata": {"name": "n1", "uid": "u1"}, "status": status}))
container = {"name": "c", "image": "i", "resources": {"requests": {"cpu": "1"}}}
spec = {"containers": [container]%(claims)s}
%(objects)s
pod = parse_pod({"metadata": {"name": "p", "namespace": "default", "uid": "u2"}, "spec": spec})
fw = engine.profiles.get("kopf-scheduler")
try:
    print("NODE", engine.scheduler.schedule_pod(fw, CycleState(), pod).suggested_host)
except Exception as exc:
    print("UNSCHEDULABLE", type(exc).__name__)
print("LOADED", sorted(m for m in sys.argv[1:] if m in sys.modules))
"""


def _cycle(claims: str = "", objects: str = "") -> str:
    out = subprocess.run(
        [sys.executable, "-c", _CYCLE % {"claims": claims, "objects": objects}, *LAZY],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_an_ordinary_first_cycle_loads_no_dra_machinery() -> None:
    out = _cycle()
    assert "NODE n1" in out, out
    assert "LOADED []" in out, out


# A DeviceClass and a claim for one of its devices, as the informers hand them to the engine.
_CLAIM = """
meta = {"namespace": "default", "uid": "u3"}
claim = {"metadata": {**meta, "name": "gpu-claim"}, "spec": {"devices": {"requests": [
    {"name": "gpu", "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1}}]}}}
gpu = {"metadata": {"name": "gpu", "uid": "u4"}}
engine.handlers.add_object("DeviceClass", kinds.DEVICE_CLASS.parse(gpu))
engine.handlers.add_object("ResourceClaim", kinds.RESOURCE_CLAIM.parse(claim))
"""


def test_a_pod_with_a_claim_to_allocate_does_load_it() -> None:
    """The check above can fail: with a claim to allocate (no device published: unschedulable),
    the same cycle loads the views and the allocator with its pools and CEL (no storage views)."""
    claims = ', "resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu-claim"}]'
    out = _cycle(claims, _CLAIM)
    assert "UNSCHEDULABLE FitError" in out, out
    assert f"LOADED {sorted(DRA)}" in out, out


def test_serving_imports_the_servers_machinery() -> None:
    """The check above can fail: exposing the metrics and serving them loads what it left out."""
    code = (
        "import sys; from kopf_scheduler.cluster import metrics; "
        "metrics.stop(metrics.serve(metrics.Health(), '127.0.0.1', 0)); "
        f"print(sorted(m for m in {SERVERS!r} if m not in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stderr[-3000:]


def test_the_edge_modules_do_not_import_yaml() -> None:
    """PyYAML (~7 ms) is the edge's only for writing YAML (the CRD, --write-config-to)."""
    code = "import sys, kopf_scheduler.cluster.crd, kopf_scheduler.cluster.run; print('yaml' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.stdout.strip() == "False", out.stderr[-3000:]


_THREADS_AFTER_NUMPY = (
    "import os, sys\n"
    "from kopf_scheduler import cli\n"
    "try:\n"
    "    cli.main(['simulate', '--help'])\n"
    "except SystemExit:\n"
    "    pass\n"
    "import numpy\n"
    "print(len(os.listdir('/proc/self/task')))\n"
)


def _threads_after_numpy(blas_threads: str | None) -> int:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if blas_threads is not None:
        env["OPENBLAS_NUM_THREADS"] = blas_threads
    out = subprocess.run(
        [sys.executable, "-c", _THREADS_AFTER_NUMPY],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return int(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="OpenBLAS starts no threads of its own on one core")
def test_the_command_keeps_numpys_blas_to_one_thread() -> None:
    """OpenBLAS's threads (one a core) spin at numpy's import, taking ~100 ms of CPU from the
    apiserver at every start; the command asks for one thread, unless the operator set a number."""
    assert _threads_after_numpy(None) == 1
    assert _threads_after_numpy("2") == 2
