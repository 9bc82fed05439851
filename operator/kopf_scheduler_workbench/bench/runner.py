"""``kopf-scheduler bench``: our scheduler, the reference kube-scheduler and a raw-bind ceiling, side by side.

For each workload and each scheduler, a fresh control plane (same ``kcp`` build) is started, the nodes
and already-running pods are created bound, ONE scheduler is started, and the measured pods are
created with that scheduler's name while a watch records when each is bound. Fresh per scheduler,
because a previous run's pods would otherwise occupy the nodes the next one schedules onto.

Figures per run (one JSON file each, plus ``summary.json``, a table and a PNG chart):
- throughput in pods/s over 1-second windows from the first measured bind (average, p50, p90, p99,
  like scheduler_perf's SchedulingThroughput), and ``overall`` = pods / (last bind - first POST);
- create-to-bound latency p50/p99: from the runner's own ``time.monotonic()`` just before each
  pod's POST (creationTimestamp has 1-second resolution) to the moment the runner's watch shows
  ``spec.nodeName``;
- the time from the scheduler process's start to its first bind (a warm-up pod pending before
  it starts): the start-up figure, and the gate before the measured pods are created;
- CPU seconds (user+system, psutil) of the scheduler, kube-apiserver, etcd and the runner, during
  the measured phase; the scheduler's total CPU and peak RSS over its whole life.
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import contextlib
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

import kopf_scheduler
from kopf_scheduler.api import kinds
from kopf_scheduler_workbench.bench import report
from kopf_scheduler_workbench.bench.measure import PodTracker, ProcessSampler, percentile, throughput_windows
from kopf_scheduler_workbench.bench.workloads import NAMESPACE, SCALES, TRACK_LABEL, Workload, workloads
from kopf_scheduler_workbench.controlplane import ControlPlane, build, pinned_versions
from kopf_scheduler_workbench.processes import die_with_parent, free_port, stop_group
from kopf_scheduler_workbench.rest import Api

__all__ = [
    "ROOT",
    "SCHEDULERS",
    "SchedulerSpec",
    "add_arguments",
    "bench",
    "run",
    "run_one",
    "scheduler_command",
]

ROOT = Path(__file__).resolve().parents[3]
CONTROLLER_QPS = 5000.0  # kube-controller-manager's client, where a workload needs it (as --reference-qps)
_SHRUNK = "--perf-factor {:g}: every count shrunk; a smoke test of the code path, not scheduler_perf's sizes"


@dataclass(frozen=True)
class SchedulerSpec:
    """How to start one scheduler under test and which schedulerName its pods carry."""

    key: str  # "ours" | "reference" | "raw-bind" | ...
    scheduler_name: str
    posts_events: bool = True  # a Scheduled event per bound pod (raw-bind posts none)


SCHEDULERS: dict[str, SchedulerSpec] = {
    "ours": SchedulerSpec("ours", "kopf-scheduler"),
    # Ours with OpportunisticBatching off: the before of batching's CPU saving, in the same run.
    "ours-unbatched": SchedulerSpec("ours-unbatched", "kopf-scheduler"),
    # Ours as it was at --baseline-rev (a git worktree of that commit): a before of any change.
    "ours-baseline": SchedulerSpec("ours-baseline", "kopf-scheduler"),
    "reference": SchedulerSpec("reference", "default-scheduler"),
    "raw-bind": SchedulerSpec("raw-bind", "raw-bind", posts_events=False),
    # raw-bind posting the Scheduled event too: the ceiling of a scheduler that writes what
    # kube-scheduler writes (asked for by name; not in the default set).
    "raw-bind-events": SchedulerSpec("raw-bind-events", "raw-bind-events"),
}
DEFAULT_SCHEDULERS = tuple(key for key in SCHEDULERS if key != "raw-bind-events")


def _reference_config(plane: ControlPlane, qps: float, workload: Workload | None) -> Path:
    """The default profile (with the workload's pluginConfig); the client's rate limit raised as
    scheduler_perf does (``qps`` 0: the plain defaults, QPS 50 / burst 100)."""
    path = plane.workdir / "kube-scheduler.yaml"
    config: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(plane.kubeconfig)},
        "leaderElection": {"leaderElect": False},
    }
    if qps > 0:
        config["clientConnection"].update({"qps": qps, "burst": int(qps)})
    if workload is not None and workload.plugin_config:
        profile = {"schedulerName": "default-scheduler", "pluginConfig": list(workload.plugin_config)}
        config["profiles"] = [profile]
    path.write_text(json.dumps(config))
    return path


def _our_profile(workload: Workload) -> dict[str, Any] | None:
    """The SchedulerProfile ours serves the workload with, None for the built-in default."""
    spec: dict[str, Any] = {"schedulerName": "kopf-scheduler"}
    if workload.plugin_config:
        spec["pluginConfig"] = list(workload.plugin_config)
    if workload.workloads_api:  # the reference's GenericWorkload gate adds GangScheduling to its profile
        spec["plugins"] = {"multiPoint": {"enabled": [{"name": "GangScheduling"}]}}
    if len(spec) == 1:
        return None
    return {"apiVersion": "kopfscheduler.io/v1alpha1", "kind": "SchedulerProfile",
            "metadata": {"name": "bench"}, "spec": spec}  # fmt: skip


def scheduler_command(
    spec: SchedulerSpec,
    plane: ControlPlane,
    args: argparse.Namespace,
    slug: str,
    workload: Workload | None = None,
) -> tuple[list[str], dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    if spec.key in ("ours", "ours-unbatched", "ours-baseline"):
        env["KOPF_SCHEDULER_SECURE_PORT"] = "0"  # not 10259: runs side by side must not collide
        if spec.key == "ours-baseline":
            env["PYTHONPATH"] = str(args.baseline_src)  # before the installed (current) package
        cmd = [sys.executable, "-m", "kopf_scheduler", "run", "--kubeconfig", str(plane.kubeconfig)]
        cmd += ["--standalone", "--metrics-host", "127.0.0.1", "--metrics-port", str(free_port())]
        if spec.key == "ours-unbatched":
            cmd.append("--no-opportunistic-batching")
        if args.profile_ours:
            args.profile_ours.mkdir(parents=True, exist_ok=True)
            output = args.profile_ours / f"{slug}.folded"
            cmd = [
                args.py_spy,
                "record",
                "--rate",
                str(args.profile_rate),
                "--format",
                "raw",
                "--output",
                str(output),
                "--",
                *cmd,
            ]
        return cmd, env
    if spec.key == "reference":
        cmd = [
            str(plane.bin_path),
            "kube-scheduler",
            f"--secure-port={free_port()}",
            "--bind-address=127.0.0.1",
        ]
        cmd.append(f"--config={_reference_config(plane, args.reference_qps, workload)}")
        if plane.workloads:
            cmd.append(f"--feature-gates={plane.feature_gates()}")
        return cmd, env
    env["KOPF_SCHEDULER_BENCH_TOKEN"] = plane.admin_token
    cmd = [sys.executable, "-m", "kopf_scheduler_workbench.bench.rawbind", "--server", plane.server,
           "--scheduler-name", spec.scheduler_name, "--max-seconds", "3600"]  # fmt: skip
    if spec.posts_events:  # raw-bind-events
        cmd.append("--events")
    return cmd, env


def _profiled_child(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> int:
    """The scheduler under py-spy: measure it, not py-spy's own sampling."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(psutil.Error):
            children = psutil.Process(proc.pid).children()
            if children:
                return int(children[0].pid)
        time.sleep(0.05)
    return proc.pid


def _machine_busy() -> float:
    """CPU seconds all processes spent so far (user, system, irq...), idle and iowait excluded."""
    t = psutil.cpu_times()
    return float(sum(t) - t.idle - getattr(t, "iowait", 0.0))


def _object_path(body: Mapping[str, Any]) -> str:
    """Where to create ``body`` (api/kinds.py knows where each kind is served)."""
    return kinds.by_name(str(body["kind"])).collection(body["metadata"].get("namespace", ""))


def _pods_path(body: Mapping[str, Any]) -> str:
    return f"/api/v1/namespaces/{body['metadata']['namespace']}/pods"


async def _create_with_status(api: Api, bodies: Sequence[Mapping[str, Any]], workers: int = 32) -> float:
    """POST each object, then PUT its ``status`` onto the object the POST returned (a create drops
    the status); returns the wall seconds. ResourceClaims allocated before the scheduler starts."""
    started = time.monotonic()
    it = iter(bodies)

    async def worker() -> None:
        for body in it:  # the shared iterator hands each body to exactly one worker
            path = _object_path(body)
            name = body["metadata"]["name"]
            created = await api.request("POST", path, {k: v for k, v in body.items() if k != "status"})
            if not created:  # a retried POST whose first try landed (409): read what is stored
                created = await api.request("GET", f"{path}/{name}")
            await api.request("PUT", f"{path}/{name}/status", {**created, "status": body["status"]})

    await asyncio.gather(*(worker() for _ in range(workers)))
    return time.monotonic() - started


async def _setup(api: Api, plane: ControlPlane, workload: Workload) -> dict[str, float]:
    """Namespace, priority classes, nodes, running pods; seconds per step."""
    times: dict[str, float] = {}
    started = time.monotonic()
    await api.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                     "metadata": {"name": NAMESPACE}})  # fmt: skip
    for name, value in workload.priority_classes.items():
        body = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }
        await api.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", body)
    times["nodes"] = await api.create_all(lambda _: "/api/v1/nodes", workload.node_objects())
    extra = workload.cluster_objects()
    if extra:
        times["cluster_objects"] = await api.create_all(_object_path, extra)
    allocated = workload.allocated_objects()
    if allocated:
        times["allocated_objects"] = await _create_with_status(api, allocated)
    times["init_pods"] = await api.create_all(_pods_path, workload.init_objects())
    times["total"] = time.monotonic() - started
    return times


async def _count_bound(api: Api, prefix: str) -> tuple[int, int]:
    """(pods named ``prefix*`` still present, how many of them are bound), paging through the list."""
    present = bound = 0
    cont = ""
    for _ in range(10_000):  # bounded paging
        page = await api.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods?limit=2000&continue={cont}")
        for item in page.get("items") or []:
            if str(item["metadata"]["name"]).startswith(prefix):
                present += 1
                bound += bool((item.get("spec") or {}).get("nodeName"))
        cont = str((page.get("metadata") or {}).get("continue") or "")
        if not cont:
            break
    return present, bound


async def _measure(
    plane: ControlPlane, workload: Workload, spec: SchedulerSpec, args: argparse.Namespace, log_path: Path
) -> dict[str, Any]:
    api = Api(plane.server, plane.admin_token, concurrency=args.concurrency)
    result: dict[str, Any] = {}
    proc: subprocess.Popen[bytes] | None = None
    sampler: ProcessSampler | None = None
    tracker = PodTracker(api, NAMESPACE, f"{TRACK_LABEL}=1")
    try:
        deadline = time.monotonic() + args.startup_timeout + workload.timeout + 120
        await tracker.start(deadline)
        await api.request(
            "POST", f"/api/v1/namespaces/{NAMESPACE}/pods", workload.warmup_object(spec.scheduler_name)
        )
        unschedulable = workload.unschedulable_objects(spec.scheduler_name)
        bodies = workload.measure_objects(spec.scheduler_name)
        names = [b["metadata"]["name"] for b in bodies]
        posted_at: dict[str, float] = {}
        if args.backlog:  # all pending before the scheduler starts: it drains a queue, creation is out
            await api.create_all(_pods_path, unschedulable)
            create_seconds = await api.create_all(_pods_path, bodies)

        profile = _our_profile(workload) if spec.key.startswith("ours") else None
        if profile is not None:  # read by ours before its first cycle (resync_profiles)
            await api.request("POST", "/apis/kopfscheduler.io/v1alpha1/schedulerprofiles", profile)
        cmd, env = scheduler_command(spec, plane, args, log_path.stem, workload)
        with log_path.open("wb") as log:
            spawned = time.monotonic()
            proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT, preexec_fn=die_with_parent
            )
        sampler = ProcessSampler(
            _profiled_child(proc) if spec.key == "ours" and args.profile_ours else proc.pid
        )
        sampler.start()
        apiserver = ProcessSampler(plane.processes["kube-apiserver"].pid)
        etcd = ProcessSampler(plane.processes["etcd"].pid)
        runner = psutil.Process()

        if not await tracker.wait_bound(["warmup"], args.startup_timeout):
            raise RuntimeError(f"{spec.key} bound nothing within {args.startup_timeout}s (log: {log_path})")
        result["startup_seconds"] = tracker.bound_at["warmup"] - spawned

        await api.warm()
        requests0 = await api.request_counts()
        pprof: asyncio.Future[bytes] | None = None
        if args.profile_apiserver is not None:  # Go's CPU profile of kube-apiserver, measured phase
            seconds = max(1, int(args.profile_apiserver_seconds))
            pprof = asyncio.ensure_future(api.fetch(f"/debug/pprof/profile?seconds={seconds}", seconds + 60))
        cpu0 = (
            sampler.cpu_seconds(),
            apiserver.cpu_seconds(),
            etcd.cpu_seconds(),
            sum(runner.cpu_times()[:2]),
            _machine_busy(),
        )
        wait0 = sampler.runqueue_wait_seconds()
        load0 = os.getloadavg()[0]
        measure_start = time.monotonic()
        if args.backlog:
            all_bound = await tracker.wait_bound(names, workload.timeout)
        else:
            await api.create_all(_pods_path, unschedulable)
            create = asyncio.ensure_future(api.create_all(_pods_path, bodies, posted_at=posted_at))
            all_bound = await tracker.wait_bound(names, workload.timeout)
            create_seconds = await create
        measure_end = time.monotonic()
        cpu1 = (
            sampler.cpu_seconds(),
            apiserver.cpu_seconds(),
            etcd.cpu_seconds(),
            sum(runner.cpu_times()[:2]),
            _machine_busy(),
        )
        wait1 = sampler.runqueue_wait_seconds()
        result["memory"] = _memory_snapshot(plane)
        requests1 = await api.request_counts()
        events_posted = requests1.get("POST events", 0.0) - requests0.get("POST events", 0.0)
        # Events are informational and may be posted after the binds (ours does so on purpose);
        # how long after the last bind they took is part of the cost, so it is reported.
        events_wait = time.monotonic()
        events_done = events_posted
        expected_events = len(names) if spec.posts_events else 0
        while events_done < expected_events and time.monotonic() - events_wait < 30:
            await asyncio.sleep(0.1)
            counts = await api.request_counts()
            events_done = counts.get("POST events", 0.0) - requests0.get("POST events", 0.0)
        events_after = time.monotonic() - measure_end
        if pprof is not None:
            profile_path = args.profile_apiserver / f"{log_path.stem}.apiserver.pprof"
            profile_path.parent.mkdir(parents=True, exist_ok=True)
            profile_path.write_bytes(await pprof)
            result["apiserver_profile"] = str(profile_path)

        bound_times = [tracker.bound_at[n] for n in names if n in tracker.bound_at]
        latencies = [
            tracker.bound_at[n] - posted_at[n] for n in names if n in tracker.bound_at and n in posted_at
        ]
        first_bind = min(bound_times) if bound_times else measure_start
        last_bind = max(bound_times) if bound_times else measure_end
        windows = throughput_windows(bound_times, first_bind, last_bind)
        first_post = min(posted_at.values()) if posted_at else measure_start
        result["measured"] = {
            "count": len(names),
            "bound": len(bound_times),
            "all_bound": all_bound,
            "create_seconds": create_seconds,
            "created_per_second": len(names) / create_seconds if create_seconds > 0 else None,
            "throughput": {
                "average": sum(windows) / len(windows) if windows else None,
                "p50": percentile(windows, 50),
                "p90": percentile(windows, 90),
                "p99": percentile(windows, 99),
                "overall": len(bound_times) / (last_bind - first_post) if last_bind > first_post else None,
                "windows": windows,
            },
            "latency": {
                "p50": percentile(latencies, 50),
                "p90": percentile(latencies, 90),
                "p99": percentile(latencies, 99),
                "max": max(latencies) if latencies else None,
                "from": "n/a (backlog)" if args.backlog else "runner time.monotonic() before each pod's POST",
                "to": "runner watch event showing spec.nodeName",
            },
            "seconds": measure_end - measure_start,
        }
        if workload.unschedulable_pods:
            present, bound = await _count_bound(api, "unsched-")
            result["unschedulable"] = {"count": len(unschedulable), "present": present, "bound": bound}
        if workload.priority_classes:
            present, bound = await _count_bound(api, "init-")
            result["preemption"] = {"init_pods": workload.init_pods, "init_pods_left": present}
        result["cpu"] = {
            "scheduler_measured": cpu1[0] - cpu0[0],
            "apiserver_measured": cpu1[1] - cpu0[1],
            "etcd_measured": cpu1[2] - cpu0[2],
            "runner_measured": cpu1[3] - cpu0[3],
            # Whatever else ran on the machine meanwhile (other work sharing these 2 cores).
            "others_measured": (cpu1[4] - cpu0[4])
            - sum(b - a for a, b in zip(cpu0[:4], cpu1[:4], strict=True)),
            "machine_capacity_measured": (measure_end - measure_start) * (os.cpu_count() or 1),
            # Runnable but not running: the scheduler waiting for a CPU the others held.
            "scheduler_runqueue_wait_measured": (
                wait1 - wait0 if wait0 is not None and wait1 is not None else None
            ),
        }
        # What the measured phase asked of the apiserver (the runner's own POSTs and watch included).
        result["events"] = {
            "posted_in_measured_phase": events_posted,
            "posted_by_end": events_done,
            "seconds_after_last_bind": (
                events_after if spec.posts_events and events_done >= len(names) else None
            ),
        }
        result["apiserver_requests"] = {
            k: v - requests0.get(k, 0.0) for k, v in sorted(requests1.items()) if v - requests0.get(k, 0.0)
        }
        result["load_average"] = {"before": load0, "after": os.getloadavg()[0]}
        return result
    finally:
        if sampler is not None:
            sampler.stop()
            result.setdefault("cpu", {})["scheduler_total"] = sampler.cpu_seconds()
            result.setdefault("memory", {})["scheduler_peak_rss_mb"] = sampler.peak_rss / 2**20
        if proc is not None:
            stop_group(
                proc, signal.SIGINT if spec.key == "ours" and args.profile_ours else signal.SIGTERM, 10.0
            )
            result["exit_code"] = proc.returncode
        await tracker.stop()
        await api.close()


def _memory_snapshot(plane: ControlPlane) -> dict[str, float]:
    """The control plane's RSS and the machine's available memory at the end of the measured phase:
    whether a size fits this machine shows here (swapping would show as everything slowing)."""
    out = {"machine_available_mb": psutil.virtual_memory().available / 2**20}
    for name in ("kube-apiserver", "etcd"):
        with contextlib.suppress(psutil.Error, KeyError):
            out[f"{name.replace('-', '_')}_rss_mb"] = (
                psutil.Process(plane.processes[name].pid).memory_info().rss / 2**20
            )
    return out


def prepare(binary: Path, workload: Workload, workdir: Path) -> dict[str, float]:
    """Set the workload's cluster up once, then stop: each scheduler starts from a copy of this etcd.

    Copying etcd's data directory takes a second; re-creating 50,000 pods takes minutes. It also
    makes the starting state of the three runs identical, object for object.
    """
    plane = ControlPlane(binary, workdir, workloads=workload.workloads_api)
    try:
        plane.start()
        plane.kubectl("apply", "-f", str(ROOT / "crds"))  # ours serves SchedulerProfiles; same state for all
        plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")

        async def setup() -> dict[str, float]:
            api = Api(plane.server, plane.admin_token, concurrency=64)
            try:
                return await _setup(api, plane, workload)
            finally:
                await api.close()

        return asyncio.run(setup())
    finally:
        plane.stop()  # keeps workdir: it was given


def run_one(
    binary: Path,
    workload: Workload,
    spec: SchedulerSpec,
    args: argparse.Namespace,
    prepared: Path,
    setup_seconds: Mapping[str, float] | None = None,
    repeat: int | None = None,
) -> dict[str, Any]:
    """One workload with one scheduler on a copy of the prepared control plane, always stopped."""
    out: Path = args.out
    slug = f"{workload.name.replace('/', '-')}--{spec.key}" + (f"--r{repeat}" if repeat else "")
    log_path = out / "logs" / f"{slug}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "workload": workload.name,
        "scheduler": spec.key,
        "scheduler_name": spec.scheduler_name,
        "scale": args.scale,
        "params": {
            "nodes": workload.nodes,
            "init_pods": workload.init_pods,
            "measure_pods": workload.measure_pods,
            "unschedulable_pods": workload.unschedulable_pods,
            "gang_size": workload.gang_size,
            "threshold": workload.threshold,
            "source": workload.source,
            "perf_factor": args.perf_factor if args.scale == "perf" else None,
            "note": workload.note,
        },
        "repeat": repeat,
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "log": str(log_path),
        "setup_seconds": dict(setup_seconds or {}),
    }
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="kopf-scheduler-bench-"))
    shutil.rmtree(workdir)
    shutil.copytree(prepared, workdir)
    # scheduler_perf's claim controller runs in its process, unthrottled; kube-controller-manager's
    # client would make claims at ~10 pods/s (QPS 20: a claim and a pod status write a pod) and set
    # the pace for every scheduler alike.
    plane = ControlPlane(
        binary,
        workdir,
        workloads=workload.workloads_api,
        controllers=workload.controllers,
        controller_qps=CONTROLLER_QPS if workload.controllers else None,
    )
    try:
        plane.start()
        result["control_plane_start_seconds"] = plane.start_seconds
        result.update(asyncio.run(_measure(plane, workload, spec, args, log_path)))
    except Exception as exc:  # one failed run must not lose the others' results
        result["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        stopping = time.monotonic()
        plane.stop()
        result["control_plane_stop_seconds"] = time.monotonic() - stopping
        with contextlib.suppress(OSError):
            for name in ("kube-apiserver", "etcd"):
                shutil.copy(workdir / f"{name}.log", out / "logs" / f"{slug}.{name}.log")
        shutil.rmtree(workdir, ignore_errors=True)
        result["run_seconds"] = time.monotonic() - started
    report.write_json(out / f"{slug}.json", result)
    return result


def _versions(binary: Path) -> dict[str, str]:
    from importlib.metadata import version

    versions = dict(pinned_versions())
    versions["python"] = platform.python_version()
    for dist in ("kopf", "kopf-scheduler", "aiohttp", "numpy"):
        with contextlib.suppress(Exception):
            versions[dist] = version(dist)
    versions["kcp"] = str(binary)
    return versions


def _machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "cpu_model": next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            platform.processor(),
        ),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "platform": platform.platform(),
    }


def baseline_source(rev: str | None, out: Path) -> Path:
    """The ``operator/`` directory of a worktree of ``rev`` (made once under ``out``)."""
    if not rev:
        raise SystemExit("ours-baseline needs --baseline-rev (a commit of this repository)")
    sha = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", f"{rev}^{{commit}}"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    tree = (out / f"baseline-{sha[:12]}").resolve()
    if not (tree / "operator" / "kopf_scheduler").is_dir():
        add = ["git", "-C", str(ROOT), "worktree", "add", "--force", "--detach", str(tree), sha]
        subprocess.run(add, check=True)
    compileall.compile_dir(tree / "operator" / "kopf_scheduler", quiet=1)
    return tree / "operator"


def bench(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every chosen workload x scheduler; writes the JSON files, the chart; returns the results."""
    try:
        return _bench(args)
    finally:
        baseline: Path | None = args.baseline_src
        if baseline is not None:  # the worktree ours-baseline ran from is not needed any more
            tree = str(baseline.parent)
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", tree], check=False)


def _bench(args: argparse.Namespace) -> list[dict[str, Any]]:
    # Byte-compile our package as `pip install .` (the image) does: an editable install under
    # PYTHONDONTWRITEBYTECODE would otherwise compile every module at each start (~0.25 s of
    # the first-bind figure; the reference is a compiled binary).
    compileall.compile_dir(Path(kopf_scheduler.__file__).parent, quiet=1)
    available = workloads(args.scale, args.perf_factor)
    chosen = args.workloads or list(available)
    unknown = [w for w in chosen if w not in available]
    if unknown:
        raise SystemExit(f"unknown workloads {unknown}; choose from {list(available)}")
    binary = args.kcp or build()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.scale == "perf" and args.perf_factor < 1.0:
        print(f"[bench] {_SHRUNK.format(args.perf_factor)}", file=sys.stderr, flush=True)
    if "ours-baseline" in args.schedulers:
        args.baseline_src = baseline_source(args.baseline_rev, args.out)
    results: list[dict[str, Any]] = []
    for name in chosen:
        workload = available[name]
        if args.timeout:
            workload.timeout = args.timeout
        prepared = Path(tempfile.mkdtemp(prefix="kopf-scheduler-bench-base-"))
        try:
            print(f"[bench] {name}: setting up ...", file=sys.stderr, flush=True)
            setup = prepare(binary, workload, prepared)
            print(f"[bench]   {setup}", file=sys.stderr, flush=True)
            # Repeats interleave the schedulers (ours, reference, ceiling, ours, ...), so a drift
            # in what else the machine does lands on all of them alike.
            for repeat in range(1, args.repeat + 1) if args.repeat > 1 else [None]:
                for key in args.schedulers:
                    started = time.monotonic()
                    run_name = f"{name} #{repeat}" if repeat else name
                    print(f"[bench] {run_name} with {key} ...", file=sys.stderr, flush=True)
                    result = run_one(binary, workload, SCHEDULERS[key], args, prepared, setup, repeat)
                    m = result.get("measured") or {}
                    print(
                        f"[bench]   {result.get('error') or 'ok'}: bound {m.get('bound')}/{m.get('count')}, "
                        f"avg {(m.get('throughput') or {}).get('average')} pods/s, "
                        f"first bind {result.get('startup_seconds')}s ({time.monotonic() - started:.0f}s)",
                        file=sys.stderr,
                        flush=True,
                    )
                    results.append(result)
        finally:
            shutil.rmtree(prepared, ignore_errors=True)
    summary = {
        "command": " ".join(["kopf-scheduler", *sys.argv[1:]]) if sys.argv else "",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": _machine(),
        "versions": _versions(binary),
        "reference_qps": args.reference_qps,
        "backlog": args.backlog,
        "perf_factor": args.perf_factor if args.scale == "perf" else None,
        "results": results,
    }
    report.write_json(args.out / "summary.json", summary)
    report.chart(results, args.out / "throughput.png")
    return results


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workloads", nargs="+", metavar="NAME", help="default: all (see --list)")
    parser.add_argument(
        "--scale",
        choices=SCALES,
        default="small",
        help="tiny is the CI smoke size; perf: scheduler_perf's performance cases at their own sizes",
    )
    parser.add_argument(
        "--perf-factor",
        type=float,
        default=1.0,
        help="with --scale perf: shrink every count by this factor (a smoke test; not a measurement)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("bench-results"), help="directory for JSON, PNG, logs"
    )
    parser.add_argument("--schedulers", nargs="+", choices=list(SCHEDULERS), default=list(DEFAULT_SCHEDULERS))
    parser.add_argument(
        "--timeout", type=float, default=0.0, help="seconds to wait for measured pods (0: per workload)"
    )
    parser.add_argument(
        "--startup-timeout", type=float, default=300.0, help="seconds to wait for the first bind"
    )
    parser.add_argument("--concurrency", type=int, default=32, help="concurrent POSTs of the runner")
    parser.add_argument(
        "--reference-qps",
        type=float,
        default=5000.0,
        help="kube-scheduler client QPS/burst (scheduler_perf uses 5000; 0: the defaults 50/100)",
    )
    parser.add_argument(
        "--profile-ours",
        type=Path,
        default=None,
        help="py-spy record ours: one folded-stacks file per run in this directory",
    )
    parser.add_argument(
        "--profile-apiserver",
        type=Path,
        default=None,
        help="save a Go CPU profile of kube-apiserver during each measured phase here (go tool pprof)",
    )
    parser.add_argument(
        "--profile-rate", type=int, default=50, help="py-spy samples a second (with --profile-ours)"
    )
    parser.add_argument("--profile-apiserver-seconds", type=float, default=8.0, help="length of that profile")
    parser.add_argument("--py-spy", default="py-spy", help=argparse.SUPPRESS)
    parser.add_argument(
        "--kcp", type=Path, default=None, help="a kcp binary (default: build or reuse the cached one)"
    )
    parser.add_argument(
        "--baseline-rev", default=None, help="the commit ours-baseline runs (a git worktree under --out)"
    )
    parser.set_defaults(baseline_src=None)  # that worktree's operator/ while the bench runs
    parser.add_argument(
        "--backlog",
        action="store_true",
        help="create the measured pods before the scheduler starts (drain rate; no creation in the way)",
    )
    parser.add_argument(
        "--repeat",
        "--repeats",
        type=int,
        default=1,
        help="run each workload N times (schedulers interleaved); medians",
    )
    parser.add_argument("--list", action="store_true", help="list the workloads at --scale and exit")


def run(args: argparse.Namespace) -> int:
    if args.list:
        for w in workloads(args.scale, args.perf_factor).values():
            extra = f", {w.unschedulable_pods} unschedulable" if w.unschedulable_pods else ""
            extra += f", threshold {w.threshold:g} pods/s" if w.threshold else ""
            print(
                f"{w.name}: {w.nodes} nodes, {w.init_pods} running, "
                f"{w.measure_pods} measured{extra} ({w.note})"
            )
        return 0
    results = bench(args)
    print(report.results_table(results))
    print()
    print(report.ratio_table(results))
    print()
    print(report.median_table(results))
    if args.repeat > 1:
        print()
        print(report.repeat_table(results))
    batching = report.batching_table(results)
    if batching:
        print()
        print(batching)
    if args.scale == "perf" and args.perf_factor < 1.0:
        print(f"\n{_SHRUNK.format(args.perf_factor)}")
    print(f"\nJSON, chart and logs in {args.out}")
    return 1 if any(r.get("error") for r in results) else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kopf-scheduler bench")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
