"""``kopf-scheduler playground``: the whole job on a machine with no cluster.

Starts the local control plane (with kube-controller-manager), applies ``crds/``, creates a
handful of nodes (two zones, one of them tainted) and pods of several shapes, plus a GPU node pool
whose devices a (simulated) DRA driver publishes in ResourceSlices and trainer pods that each ask
for a GPU through a ResourceClaimTemplate; runs ``kopf-scheduler run`` against it as a separate
process (exactly what a user runs), and shows where each pod went and which GPU each trainer got.
Binds are real ``pods/binding`` calls against a real kube-apiserver; the table is read back from the
apiserver, not from us.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

from kopf_scheduler_workbench.controlplane import ControlPlane, find_module_dir

__all__ = ["add_arguments", "run"]

SCHEDULER_NAME = "kopf-scheduler"
NAMESPACE = "playground"
GPU_DRIVER = "gpu.playground.example.com"
GPUS_PER_NODE = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=4, help="number of nodes (default 4)")
    parser.add_argument("--pods", type=int, default=12, help="number of pods (default 12)")
    parser.add_argument("--gpu-nodes", type=int, default=2, help="GPU pool nodes, 2 GPUs each (default 2)")
    parser.add_argument("--gpu-pods", type=int, default=2, help="pods asking for a GPU by claim (default 2)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the binds")
    parser.add_argument("--keep", action="store_true", help="keep the control plane running until Ctrl-C")


def _node(i: int) -> dict[str, Any]:
    zone = "zone-a" if i % 2 == 0 else "zone-b"
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"node-{i}",
            "labels": {"kubernetes.io/hostname": f"node-{i}", "topology.kubernetes.io/zone": zone},
        },
        "spec": {},
        "status": {"capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
    }
    if i == 0:  # one tainted node: only tolerating pods land there
        node["spec"]["taints"] = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    return node


def _pod(i: int) -> dict[str, Any]:
    shape = i % 4
    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER_NAME,
        "containers": [
            {
                "name": "app",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": ["250m", "500m", "1", "100m"][shape], "memory": "256Mi"}},
            }
        ],
    }
    labels = {"app": ["web", "api", "batch", "gpu"][shape]}
    if shape == 0:  # web spreads over zones
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": labels},
            }
        ]
    if shape == 1:  # api replicas avoid each other's nodes
        spec["affinity"] = {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": labels},
                        },
                    }
                ]
            }
        }
    if shape == 3:  # gpu pods tolerate and prefer the tainted node
        spec["tolerations"] = [
            {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
        ]
        spec["nodeSelector"] = {"topology.kubernetes.io/zone": "zone-a"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{labels['app']}-{i}", "namespace": NAMESPACE, "labels": labels},
        "spec": spec,
    }


def _gpu_pool(nodes: int) -> list[dict[str, Any]]:
    """The GPU pool: nodes labelled pool=gpu, the DeviceClass, one ResourceSlice per node (what a DRA
    driver's kubelet plugin would publish), and the claim template trainers use."""
    out: list[dict[str, Any]] = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": GPU_DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{GPU_DRIVER}"'}}]},
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu", "namespace": NAMESPACE},
            "spec": {
                "spec": {
                    "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU_DRIVER}}]}
                }
            },
        },
    ]
    for i in range(nodes):
        name = f"gpu-node-{i}"
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "pool": "gpu"}},
                "status": {"capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
            }
        )
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{name}-gpus"},
                "spec": {
                    "driver": GPU_DRIVER,
                    "nodeName": name,
                    "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                    "devices": [
                        {
                            "name": f"gpu-{d}",
                            "attributes": {"model": {"string": "a100"}, "index": {"int": d}},
                            "capacity": {"memory": {"value": "80Gi"}},
                        }
                        for d in range(GPUS_PER_NODE)
                    ],
                },
            }
        )
    return out


def _trainer(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"trainer-{i}", "namespace": NAMESPACE, "labels": {"app": "trainer"}},
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "containers": [
                {
                    "name": "train",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "claims": [{"name": "gpu"}]},
                }
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
        },
    }


def _gpus(plane: ControlPlane) -> list[str]:
    """``pod  claim  driver/pool/device`` per allocated claim, read back from the apiserver."""
    claims = json.loads(plane.kubectl("get", "resourceclaims", "-n", NAMESPACE, "-o", "json"))["items"]
    rows = []
    for claim in sorted(claims, key=lambda c: c["metadata"]["name"]):
        status = claim.get("status") or {}
        pods = ",".join(r.get("name", "") for r in status.get("reservedFor") or []) or "-"
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        devices = ",".join(f"{r['driver']}/{r['pool']}/{r['device']}" for r in results) or "unallocated"
        rows.append(f"{pods}  {claim['metadata']['name']}  {devices}")
    return rows


def _items(items: list[dict[str, Any]]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def _pods(plane: ControlPlane) -> list[dict[str, Any]]:
    listing = json.loads(plane.kubectl("get", "pods", "-n", NAMESPACE, "-o", "json"))
    return list(listing["items"])


def _table(pods: list[dict[str, Any]]) -> str:
    rows = [("POD", "NODE", "STATUS")]
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        node = pod["spec"].get("nodeName") or "-"
        status = "Scheduled" if node != "-" else "Pending"
        for cond in pod.get("status", {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                status = f"{cond.get('reason')}: {cond.get('message')}"
        rows.append((pod["metadata"]["name"], node, status))
    widths = [max(len(r[i]) for r in rows) for i in range(2)]
    return "\n".join(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]}" for r in rows)


def run(args: argparse.Namespace) -> int:
    repo = find_module_dir().parent.parent
    print("starting the local control plane (etcd, kube-apiserver, kube-controller-manager)...", flush=True)
    with ControlPlane(controllers=True) as plane:
        print(f"control plane ready in {plane.start_seconds:.1f}s at {plane.server}", flush=True)
        plane.kubectl("apply", "-f", str(repo / "crds"))
        plane.kubectl("create", "namespace", NAMESPACE)
        plane.kubectl("apply", "-f", "-", input=_items([_node(i) for i in range(args.nodes)]))
        plane.kubectl("apply", "-f", "-", input=_items([_pod(i) for i in range(args.pods)]))
        if args.gpu_nodes:
            plane.kubectl("apply", "-f", "-", input=_items(_gpu_pool(args.gpu_nodes)))
            plane.kubectl("apply", "-f", "-", input=_items([_trainer(i) for i in range(args.gpu_pods)]))
        print(
            f"created {args.nodes} nodes, {args.gpu_nodes} GPU nodes and {args.pods + args.gpu_pods} pods;"
            " starting kopf-scheduler",
            flush=True,
        )
        log_path = plane.workdir / "kopf-scheduler.log"
        with open(log_path, "ab") as log:
            scheduler = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "kopf_scheduler",
                    "run",
                    "--kubeconfig",
                    str(plane.kubeconfig),
                    "--standalone",
                    "--metrics-port",
                    "0",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1", "KOPF_SCHEDULER_SECURE_PORT": "0"},
            )
        try:
            started = time.monotonic()
            bound = last_bound = 0
            pods: list[dict[str, Any]] = []
            while time.monotonic() - started < args.timeout:
                pods = _pods(plane)
                bound = sum(1 for p in pods if p["spec"].get("nodeName"))
                progress = f"  bound {bound}/{len(pods)} pods  ({time.monotonic() - started:4.1f}s)"
                if sys.stdout.isatty():
                    print(f"\r{progress}", end="", flush=True)
                elif bound != last_bound:
                    print(progress, flush=True)
                last_bound = bound
                if bound == len(pods) or scheduler.poll() is not None:
                    break
                time.sleep(0.5)
            print()
            print(_table(pods))
            if args.gpu_nodes:
                print("\nGPUs (ResourceClaims: pod, claim, device)")
                print("\n".join(_gpus(plane)))
            if scheduler.poll() is not None:
                tail = log_path.read_text()[-3000:]
                print(f"kopf-scheduler exited with {scheduler.returncode}; its log:\n{tail}")
                return 1
            if args.keep:
                print(f"\nexport KUBECONFIG={plane.kubeconfig}\nCtrl-C stops everything.", flush=True)
                try:
                    while scheduler.poll() is None:
                        time.sleep(1)
                except KeyboardInterrupt:
                    pass
            return 0 if bound == len(pods) else 1
        finally:
            if scheduler.poll() is None:
                scheduler.send_signal(signal.SIGTERM)
                try:
                    scheduler.wait(15)
                except subprocess.TimeoutExpired:
                    scheduler.kill()
