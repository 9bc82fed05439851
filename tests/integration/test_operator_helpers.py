"""Helpers (no tests) for the operator integration tests: deploy, run replicas as the ServiceAccount."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from kopf_scheduler_workbench.controlplane import ControlPlane

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(fn: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.2, what: str = "") -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    error: str | None = None
    while time.monotonic() < deadline:
        try:
            last = fn()
        except subprocess.CalledProcessError as exc:
            error, last = exc.stderr, None
        if last:
            return last
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what or fn}: last={last!r} error={error!r}")


def get_json(plane: ControlPlane, *args: str) -> Any:
    return json.loads(plane.kubectl("get", *args, "-o", "json"))


def deploy(plane: ControlPlane) -> Path:
    """Apply crds/ and manifests/ (as admin), wait for the CRDs, return the ServiceAccount's kubeconfig."""
    plane.kubectl("apply", "-f", str(ROOT / "crds"))
    plane.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/schedulerprofiles.kopfscheduler.io",
        "crd/clusterkopfpeerings.kopf.dev",
    )
    plane.kubectl("apply", "-f", str(ROOT / "manifests"))
    return plane.service_account_kubeconfig("kopf-scheduler", "kopf-scheduler")


class Replica:
    """One ``kopf-scheduler run`` process acting as the manifests' ServiceAccount."""

    def __init__(
        self, kubeconfig: Path, peering: str, namespaces: list[str], name: str, log_dir: Path
    ) -> None:
        self.name = name
        self.port = free_port()
        self.log_path = log_dir / f"{name}.log"
        args = [
            sys.executable,
            "-m",
            "kopf_scheduler",
            "run",
            "--kubeconfig",
            str(kubeconfig),
            "--peering",
            peering,
            "--metrics-host",
            "127.0.0.1",
            "--metrics-port",
            str(self.port),
        ]
        for ns in namespaces:
            args += ["--namespace", ns]
        env = {**os.environ, "POD_ID": name}
        env.pop("KUBECONFIG", None)
        self.log = self.log_path.open("wb")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)

    def http(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError as exc:
            return 0, str(exc)

    def metric(self, name: str, labels: str = "") -> float:
        _, text = self.http("/metrics")
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name) and (not labels or labels in line) and not line.startswith("#"):
                head = line.split(" ")[0]
                if head == name or head.startswith(name + "{"):
                    total += float(line.rsplit(" ", 1)[1])
        return total

    def leading(self) -> bool:
        return self.metric("kopf_scheduler_leader") == 1.0

    def ready(self) -> bool:
        return self.http("/readyz")[0] == 200

    def logs(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-6000:]

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


def cli(plane: ControlPlane, *args: str) -> str:
    """``python -m kopf_scheduler ARGS --kubeconfig <admin>``'s stdout (read-only commands)."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    out = subprocess.run(
        [sys.executable, "-m", "kopf_scheduler", *args, "--kubeconfig", str(plane.kubeconfig)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )
    return out.stdout


def node(
    name: str, cpu: str = "8", memory: str = "32Gi", labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "status": {
            "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
        },
    }


def pod(
    name: str,
    namespace: str,
    scheduler: str = "kopf-scheduler",
    cpu: str = "100m",
    memory: str = "128Mi",
    node_selector: dict[str, str] | None = None,
    node_name: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [
            {
                "name": "c",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": cpu, "memory": memory}},
            }
        ],
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def create(plane: ControlPlane, *objs: dict[str, Any]) -> None:
    """Create objects; nodes lose the not-ready taint the apiserver adds on create (no kubelet here)."""
    items = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)})
    plane.kubectl("create", "-f", "-", input=items)
    for obj in objs:
        if obj["kind"] == "Node":
            name = obj["metadata"]["name"]
            plane.kubectl("patch", "node", name, "--type=merge", "-p", '{"spec":{"taints":null}}')


def node_of(plane: ControlPlane, namespace: str, name: str) -> str:
    return str(get_json(plane, "pod", name, "-n", namespace)["spec"].get("nodeName") or "")


def events(plane: ControlPlane, namespace: str, name: str) -> list[dict[str, Any]]:
    items = get_json(plane, "events.v1.events.k8s.io", "-n", namespace)["items"]
    return [e for e in items if (e.get("regarding") or {}).get("name") == name]


def reason_events(plane: ControlPlane, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in events(plane, namespace, name) if e["reason"] == reason]


def fresh_namespace(plane: ControlPlane, prefix: str) -> str:
    """A new namespace with a random suffix, so modules sharing a control plane never collide."""
    ns = f"{prefix}-{uuid.uuid4().hex[:6]}"
    plane.kubectl("create", "namespace", ns)
    return ns


@contextlib.contextmanager
def leading_replica(
    kubeconfig: Path, peering: str, namespaces: list[str], name: str, log_dir: Path
) -> Iterator[Replica]:
    """A replica that is ready and leads its peering; killed on exit, even when the test fails."""
    r = Replica(kubeconfig, peering, namespaces, name, log_dir)
    try:
        wait_for(lambda: r.ready() and r.leading(), 60, what=f"replica ready and leading:\n{r.logs()}")
        yield r
    finally:
        r.kill()
