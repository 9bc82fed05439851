"""Soak: ``kopf-scheduler run`` under a steady arrival rate with churn, for leaks and latency drift.

Not part of CI. Pods arrive at a fixed rate; once the population reaches its target, the oldest pods
are deleted (grace period 0: no kubelet here) as new ones arrive, so the scheduler sees a constant
stream of adds, binds and deletes. Sampled every 30 s: the scheduler's RSS and its asyncio task
count (``kopf_scheduler_asyncio_tasks``); the slopes of both over the last half of the run (least
squares, per hour) are what a leak would show. Also the create-to-bound latency (client-side create
time to the watch event that shows ``nodeName``), p50/p99 over the first and the last window. The
scheduler runs with leader election on (a peering of its own), as a Deployment runs it. The run
ends with the invariant checker.

    python -m kopf_scheduler_workbench.bench.soak --minutes 60 --rate 10 --json soak.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kopf_scheduler_workbench.processes import free_port

__all__ = ["SoakResult", "main", "soak"]


@dataclass
class SoakResult:
    minutes: float
    rate: float
    created: int = 0
    deleted: int = 0
    bound: int = 0
    rss_mb: list[tuple[float, float]] = field(default_factory=list)  # (seconds since start, MiB)
    tasks: list[tuple[float, float]] = field(default_factory=list)  # (seconds since start, tasks)
    # Over the last half of the run: least-squares slope per hour, and the range.
    rss_slope_mb_per_hour: float = float("nan")
    tasks_slope_per_hour: float = float("nan")
    rss_range_mb: tuple[float, float] = (float("nan"), float("nan"))
    tasks_range: tuple[float, float] = (float("nan"), float("nan"))
    latency_start: dict[str, float] = field(default_factory=dict)
    latency_end: dict[str, float] = field(default_factory=dict)
    checker: str = ""
    violations: int = 0


def _pct(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _window(samples: Sequence[tuple[float, float]], lo: float, hi: float) -> dict[str, float]:
    vals = [lat for t, lat in samples if lo <= t < hi]
    return {"n": float(len(vals)), "p50_ms": _pct(vals, 0.5) * 1000, "p99_ms": _pct(vals, 0.99) * 1000}


def slope_per_hour(samples: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of ``(seconds, value)`` samples, in value per hour."""
    n = len(samples)
    if n < 2:
        return float("nan")
    mt = sum(t for t, _ in samples) / n
    mv = sum(v for _, v in samples) / n
    var = sum((t - mt) ** 2 for t, _ in samples)
    if var == 0:
        return float("nan")
    return sum((t - mt) * (v - mv) for t, v in samples) / var * 3600


def _metric(port: int, name: str) -> float | None:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def soak(
    kubeconfig: str, kubectl: Any, minutes: float, rate: float, population: int, nodes: int
) -> SoakResult:
    """Run one soak against the cluster of ``kubeconfig``; ``kubectl(*args)`` applies the CRDs."""
    import kubernetes
    import psutil
    import urllib3

    urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)

    from kopf_scheduler_workbench.clusterstate import fetch_state
    from kopf_scheduler_workbench.testing.invariants import check

    result = SoakResult(minutes=minutes, rate=rate)
    core: Any = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(kubeconfig))
    ns = f"soak-{os.getpid()}"
    core.create_namespace({"metadata": {"name": ns}})
    for i in range(nodes):
        alloc = {"cpu": "16", "memory": "64Gi", "pods": "250"}
        core.create_node(
            {
                "metadata": {
                    "name": f"soak-{i}",
                    "labels": {"kubernetes.io/hostname": f"soak-{i}", "soak": ns},
                },
                "status": {"capacity": alloc, "allocatable": alloc},
            }
        )
    crds = Path(__file__).resolve().parents[3] / "crds"
    if crds.is_dir():
        kubectl("apply", "-f", str(crds))

    port = free_port()
    log = open(f"/tmp/{ns}-scheduler.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "kopf_scheduler", "run", "--kubeconfig", kubeconfig, "--peering", ns),
            *("--namespace", ns, "--metrics-host", "127.0.0.1", "--metrics-port", str(port)),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "KOPF_SCHEDULER_SECURE_PORT": "0"},  # the plain port above is what it reads
    )
    ps = psutil.Process(proc.pid)
    created_at: dict[str, float] = {}
    latencies: list[tuple[float, float]] = []  # (seconds since start, latency)
    stop = threading.Event()
    t0 = time.monotonic()

    def watch() -> None:
        w = kubernetes.watch.Watch()
        seen: set[str] = set()
        while not stop.is_set():
            try:
                for ev in w.stream(core.list_namespaced_pod, ns, timeout_seconds=5):
                    p = ev["object"]
                    name = p.metadata.name
                    if p.spec.node_name and name not in seen and name in created_at:
                        seen.add(name)
                        now = time.monotonic()
                        latencies.append((now - t0, now - created_at[name]))
                    if stop.is_set():
                        break
            except Exception:  # the stream ends on timeouts; keep watching until told to stop
                time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    try:
        import urllib.request

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            time.sleep(0.2)
        watcher.start()
        t0 = time.monotonic()
        live: deque[str] = deque()
        end = t0 + minutes * 60
        next_rss = t0
        i = 0
        while time.monotonic() < end:
            tick = time.monotonic()
            if tick >= next_rss:
                result.rss_mb.append((tick - t0, ps.memory_info().rss / 2**20))
                tasks = _metric(port, "kopf_scheduler_asyncio_tasks")
                if tasks is not None:
                    result.tasks.append((tick - t0, tasks))
                next_rss = tick + 30
            name = f"s-{i}"
            i += 1
            body = {
                "metadata": {"name": name, "labels": {"app": "soak"}},
                "spec": {
                    "schedulerName": "kopf-scheduler",
                    "nodeSelector": {"soak": ns},
                    "containers": [
                        {
                            "name": "c",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                        }
                    ],
                },
            }
            created_at[name] = time.monotonic()
            core.create_namespaced_pod(ns, body)
            result.created += 1
            live.append(name)
            if len(live) > population:
                old = live.popleft()
                core.delete_namespaced_pod(old, ns, grace_period_seconds=0)
                result.deleted += 1
            if proc.poll() is not None:
                raise RuntimeError(f"the scheduler exited with {proc.returncode}")
            time.sleep(max(0.0, 1.0 / rate - (time.monotonic() - tick)))
        time.sleep(5)
        result.rss_mb.append((time.monotonic() - t0, ps.memory_info().rss / 2**20))
        span = time.monotonic() - t0
        rss = [(t, v) for t, v in result.rss_mb if t >= span / 2]
        tasks_half = [(t, v) for t, v in result.tasks if t >= span / 2]
        result.rss_slope_mb_per_hour = slope_per_hour(rss)
        result.tasks_slope_per_hour = slope_per_hour(tasks_half)
        if rss:
            result.rss_range_mb = (min(v for _, v in rss), max(v for _, v in rss))
        if tasks_half:
            result.tasks_range = (min(v for _, v in tasks_half), max(v for _, v in tasks_half))
        window = min(120.0, span / 4)
        result.latency_start = _window(latencies, 0, window)
        result.latency_end = _window(latencies, span - window - 5, span)
        result.bound = len(latencies)
        report = check(fetch_state(kubeconfig), namespaces=[ns], check_stranded=True)
        result.checker = report.summary()
        result.violations = len(report.violations)
    finally:
        stop.set()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", help="an existing cluster (default: start a local control plane)")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=10.0, help="pod creations per second")
    parser.add_argument("--population", type=int, default=1000, help="live pods kept before deleting")
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--json", dest="json_path", help="write the result here too")
    args = parser.parse_args(argv)

    from kopf_scheduler_workbench.controlplane import ControlPlane

    plane: ControlPlane | None = None
    if args.kubeconfig:
        kubeconfig = args.kubeconfig

        def kubectl(*a: str) -> str:
            return subprocess.run(
                ["kubectl", f"--kubeconfig={kubeconfig}", *a], check=True, capture_output=True, text=True
            ).stdout
    else:
        plane = ControlPlane().start()
        kubeconfig = str(plane.kubeconfig)
        kubectl = plane.kubectl
    try:
        result = soak(kubeconfig, kubectl, args.minutes, args.rate, args.population, args.nodes)
    finally:
        if plane is not None:
            plane.stop()
    out = json.dumps(result.__dict__, indent=2, default=str)
    print(out)
    if args.json_path:
        Path(args.json_path).write_text(out)
    return 0 if result.violations == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
