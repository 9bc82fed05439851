"""Faults on the real control plane, each test ending with the invariant checker.

Every test runs ``kopf-scheduler run`` processes as the manifests' ServiceAccount against the session's
etcd + kube-apiserver, in its own namespace with its own labelled nodes (pods select them). Sizes
make the nodes full: 6 nodes x 4 cpu and pods of 200m give 120 slots, so a burst of 150 leaves 30
pods pending and the checker's ``stranded`` check catches any slot lost to a leaked assumption.

Binding faults are injected at the client edge without touching ``cluster/client.py``: the scheduler
runs through a small wrapper (``_WRAPPER``) that patches ``KubeClusterClient.bind`` when
``KOPF_SCHEDULER_TEST_BIND_FAULTS`` is set. Run with ``-s`` to see the per-fault lines.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from kopf_scheduler.cluster.controlplane import ControlPlane
from kopf_scheduler.cluster.listing import fetch_state
from kopf_scheduler.testing.invariants import Report, check

from .test_operator_helpers import ROOT, create, deploy, free_port, node, pod, wait_for

pytestmark = pytest.mark.integration

NODES = 6
NODE_CPU = "4"
POD_CPU = "200m"
SLOTS_PER_NODE = 20
BURST = 150
# Leader election faster than the 15/10/2 s defaults, within client-go's rules (lease > renew > 1.2 x retry).
FAST_ELECTION = (
    *("--leader-elect-lease-duration", "6", "--leader-elect-renew-deadline", "4"),
    *("--leader-elect-retry-period", "1"),
)

_WRAPPER = r"""
import asyncio, os, random, sys
rate = os.environ.get("KOPF_SCHEDULER_TEST_BIND_FAULTS")
if rate:
    from kopf_scheduler.cluster import client as _client
    from kopf_scheduler.framework.client import ApiError, TransientError
    rate_f = float(rate)
    log = open(os.environ["KOPF_SCHEDULER_TEST_FAULT_LOG"], "a", buffering=1)
    original = _client.KubeClusterClient.bind

    async def bind(self, pod, node_name):
        r = random.random()
        if r < rate_f / 4:
            log.write("refused\n")
            raise TransientError("injected: connection refused before the Binding was sent")
        if r < 2 * rate_f / 4:
            await original(self, pod, node_name)
            log.write("lost-response\n")
            raise ApiError("injected: timeout after the Binding was sent (response lost)")
        if r < 3 * rate_f / 4:
            await original(self, pod, node_name)
            log.write("500-after-bind\n")
            raise TransientError("Internal error occurred: injected after the Binding", 500, "InternalError")
        if r < rate_f:
            log.write("slow\n")
            await asyncio.sleep(2.0)
        await original(self, pod, node_name)

    _client.KubeClusterClient.bind = bind
from kopf_scheduler.cli import main
sys.exit(main(sys.argv[1:]))
"""


class Scheduler:
    """One ``kopf-scheduler run`` process (standalone or on a peering), killable and restartable."""

    def __init__(
        self,
        kubeconfig: Path,
        namespace: str,
        log_dir: Path,
        name: str,
        *,
        peering: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.log_dir = log_dir
        self.name = name
        self.peering = peering
        self.extra_env = env or {}
        self.starts = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    def start(self) -> Scheduler:
        self.starts += 1
        self.port = free_port()
        args = [sys.executable, "-c", _WRAPPER, "run", "--kubeconfig", str(self.kubeconfig)]
        args += [
            "--namespace",
            self.namespace,
            "--metrics-host",
            "127.0.0.1",
            "--metrics-port",
            str(self.port),
        ]
        args += ["--peering", self.peering, *FAST_ELECTION] if self.peering else ["--standalone"]
        env = {**os.environ, **self.extra_env, "POD_ID": f"{self.name}-{self.starts}"}
        env.pop("KUBECONFIG", None)
        log = (self.log_dir / f"{self.name}.log").open("ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        log.close()
        return self

    def http(self, path: str) -> int:
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=3) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except OSError:
            return 0

    def metric(self, name: str) -> float:
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=3) as resp:
                text = resp.read().decode()
        except OSError:
            return -1.0
        total = 0.0
        for line in text.splitlines():
            head = line.split(" ")[0]
            if head == name or head.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def ready(self) -> bool:
        return self.http("/readyz") == 200

    def leading(self) -> bool:
        return self.metric("kopf_scheduler_leader") == 1.0

    def wait_ready(self, timeout: float = 45.0) -> None:
        wait_for(
            lambda: self.ready() and self.leading(),
            timeout,
            interval=0.1,
            what=f"{self.name}:\n{self.logs()}",
        )

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def logs(self, tail: int = 4000) -> str:
        path = self.log_dir / f"{self.name}.log"
        return path.read_text(errors="replace")[-tail:] if path.exists() else ""


# --- fixtures and helpers -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sa_kubeconfig(control_plane: ControlPlane) -> Path:
    return deploy(control_plane)


@pytest.fixture
def world(control_plane: ControlPlane, tmp_path: Path) -> Iterator[World]:
    w = World(control_plane, tmp_path)
    try:
        yield w
    finally:
        for s in w.schedulers:
            s.kill()


class World:
    """One test's namespace, nodes and schedulers."""

    def __init__(self, plane: ControlPlane, tmp: Path) -> None:
        self.plane = plane
        self.tmp = tmp
        self.tag = uuid.uuid4().hex[:6]
        self.ns = f"fault-{self.tag}"
        self.schedulers: list[Scheduler] = []
        self.core = kubernetes.client.CoreV1Api(
            kubernetes.config.new_client_from_config(str(plane.kubeconfig))
        )
        plane.kubectl("create", "namespace", self.ns)
        self.node_names = [f"f{self.tag}-{i}" for i in range(NODES)]
        create(plane, *(node(n, cpu=NODE_CPU, labels={"t": self.tag}) for n in self.node_names))

    def scheduler(self, kubeconfig: Path, name: str, **kw: Any) -> Scheduler:
        s = Scheduler(kubeconfig, self.ns, self.tmp, f"{name}-{self.tag}", **kw)
        self.schedulers.append(s)
        return s

    def pods(self, prefix: str, count: int) -> list[str]:
        names = [f"{prefix}-{i}" for i in range(count)]
        create(
            self.plane,
            *(pod(n, self.ns, cpu=POD_CPU, memory="16Mi", node_selector={"t": self.tag}) for n in names),
        )
        return names

    def pods_async(self, prefix: str, count: int) -> threading.Thread:
        """Create pods from a thread, all at once."""
        thread = threading.Thread(target=self.pods, args=(prefix, count), daemon=True)
        thread.start()
        return thread

    def report(self) -> Report:
        return check(fetch_state(str(self.plane.kubeconfig)), namespaces=[self.ns], check_stranded=True)

    def bound_count(self) -> int:
        return self.created_and_bound()[1]

    def created_and_bound(self) -> tuple[int, int]:
        items = self.core.list_namespaced_pod(self.ns).items
        return len(items), sum(1 for p in items if p.spec and p.spec.node_name)

    def settle(self, done: Callable[[Report], bool], timeout: float = 40.0) -> Report:
        """Poll the checker until ``done`` and no pending pod of ours lacks a reason."""
        deadline = time.monotonic() + timeout
        report = self.report()
        while time.monotonic() < deadline:
            if done(report) and "no-reason" not in report.kinds() and "stranded" not in report.kinds():
                return report
            time.sleep(1.0)
            report = self.report()
        return report


def _print(fault: str, injected: str, report: Report) -> None:
    print(f"\nFAULT {fault}: injected {injected}; checker: {report.summary()}", flush=True)


def _bound_on_live_nodes(world: World) -> int:
    state = fetch_state(str(world.plane.kubeconfig))
    live = {n["metadata"]["name"] for n in state.nodes}
    return sum(
        1
        for p in state.pods
        if p["metadata"]["namespace"] == world.ns and (p["spec"].get("nodeName") or "") in live
    )


# --- the faults ---------------------------------------------------------------------------------------


def test_sigkill_during_bind_burst(world: World, sa_kubeconfig: Path) -> None:
    """SIGKILL the scheduler three times while pods arrive and bind; each restart must finish the job."""
    s = world.scheduler(sa_kubeconfig, "kill").start()
    s.wait_ready()
    batch = 40
    kills: list[tuple[int, int]] = []  # (created, bound) at each kill
    for k in range(3):
        # SIGKILL as soon as the scheduler is seen binding a batch that is still being created:
        # it dies mid-burst, with pods created, scheduled, or bound a moment ago. (A trickle at
        # 40/s and a kill at a random moment no longer caught it busy: it binds each pod within
        # milliseconds of its creation.) Counted once the batch is in, while nothing can bind.
        before = world.bound_count()
        creator = world.pods_async(f"p{k}", batch)
        wait_for(lambda b=before: world.bound_count() > b, 30, interval=0.02, what="binds of the batch")
        s.kill()
        creator.join(60)
        kills.append(world.created_and_bound())
        s.start()
        s.wait_ready()
    world.pods("p3", BURST - 3 * batch)
    report = world.settle(lambda r: r.bound >= NODES * SLOTS_PER_NODE)
    _print("sigkill-during-binds", f"{len(kills)} SIGKILLs at (created, bound) {kills}", report)
    assert any(bound < min(created, NODES * SLOTS_PER_NODE) for created, bound in kills), kills
    assert report.ok, report.summary()
    assert (report.bound, report.pending) == (NODES * SLOTS_PER_NODE, BURST - NODES * SLOTS_PER_NODE)


def test_apiserver_restart_mid_run(world: World, sa_kubeconfig: Path) -> None:
    """Restart kube-apiserver during a burst: watches resume, pods created after it still schedule."""
    s = world.scheduler(sa_kubeconfig, "apirestart").start()
    s.wait_ready()
    creator = world.pods_async("a", 75)
    wait_for(lambda: world.bound_count() > 0, 20, interval=0.1, what="first binds")
    creator.join(60)
    at_restart = world.bound_count()
    world.plane.restart_apiserver()
    world.pods("b", BURST - 75)
    report = world.settle(lambda r: r.bound >= NODES * SLOTS_PER_NODE, timeout=50)
    _print("apiserver-restart", f"1 restart at {at_restart} bound pods", report)
    assert s.alive(), s.logs()
    assert report.ok, report.summary()
    assert (report.bound, report.pending) == (NODES * SLOTS_PER_NODE, BURST - NODES * SLOTS_PER_NODE)


def test_delete_nodes_while_scheduling(world: World, sa_kubeconfig: Path) -> None:
    """Half the nodes go away mid-burst; later pods never land on them and the rest fill up."""
    s = world.scheduler(sa_kubeconfig, "nodedel").start()
    s.wait_ready()
    creator = world.pods_async("p", 100)
    wait_for(lambda: world.bound_count() > 0, 20, interval=0.05, what="first binds")
    gone = world.node_names[:3]
    world.plane.kubectl("delete", "node", *gone, "--wait=false")
    creator.join(60)
    time.sleep(1.0)
    late = world.pods("late", 50)
    live_slots = (NODES - len(gone)) * SLOTS_PER_NODE
    wait_for(lambda: _bound_on_live_nodes(world) >= live_slots, 40, interval=0.5, what="live nodes full")
    report = world.settle(lambda r: True)
    state = fetch_state(str(world.plane.kubeconfig))
    late_on_gone = [
        p["metadata"]["name"]
        for p in state.pods
        if p["metadata"]["namespace"] == world.ns
        and p["metadata"]["name"] in late
        and p["spec"].get("nodeName") in gone
    ]
    _print("delete-nodes", f"{len(gone)} node deletions mid-burst ({report.orphaned} pods orphaned)", report)
    assert report.ok, report.summary()
    assert late_on_gone == []
    assert _bound_on_live_nodes(world) == live_slots


def test_outside_binds_behind_the_schedulers_back(world: World, sa_kubeconfig: Path) -> None:
    """Another actor binds pending pods of ours to a spare node while the scheduler binds them too."""
    extra = f"f{world.tag}-outside"
    create(world.plane, node(extra, cpu="64", labels={"t": f"{world.tag}-x"}))
    s = world.scheduler(sa_kubeconfig, "outside").start()
    s.wait_ready()
    core = world.core
    outcomes = {"bound": 0, "conflict": 0}
    stop = threading.Event()

    def binder() -> None:
        deadline = time.monotonic() + 30
        while not stop.is_set() and time.monotonic() < deadline:
            pending = [p for p in core.list_namespaced_pod(world.ns).items if p.spec and not p.spec.node_name]
            for p in pending[::3]:
                body = kubernetes.client.V1Binding(
                    metadata=kubernetes.client.V1ObjectMeta(name=p.metadata.name if p.metadata else ""),
                    target=kubernetes.client.V1ObjectReference(api_version="v1", kind="Node", name=extra),
                )
                try:
                    core.create_namespaced_binding(world.ns, body, _preload_content=False)
                    outcomes["bound"] += 1
                except kubernetes.client.ApiException as exc:
                    if exc.status != 409:
                        raise
                    outcomes["conflict"] += 1
            time.sleep(0.05)

    thread = threading.Thread(target=binder, daemon=True)
    thread.start()
    world.pods("p", BURST)
    time.sleep(3)
    stop.set()
    thread.join(10)
    outside = outcomes["bound"]
    expected = min(BURST - outside, NODES * SLOTS_PER_NODE) + outside
    report = world.settle(lambda r: r.bound >= expected)
    conflicts = s.metric("scheduler_bind_errors_total")
    _print(
        "outside-binds",
        f"{outside} outside binds ({outcomes['conflict']} lost to the scheduler; "
        f"scheduler saw {conflicts:.0f} bind errors)",
        report,
    )
    assert outside > 0
    assert report.ok, report.summary()
    assert report.bound == expected


def test_leader_killed_standby_takes_over(world: World, sa_kubeconfig: Path) -> None:
    """Two replicas on one peering; SIGKILL the leader mid-burst; the standby finishes it."""
    peering = f"fault-{world.tag}"
    a = world.scheduler(sa_kubeconfig, "leader", peering=peering).start()
    a.wait_ready(60)
    b = world.scheduler(sa_kubeconfig, "standby", peering=peering).start()
    wait_for(b.ready, 60, what=f"standby synced:\n{b.logs()}")
    time.sleep(2)
    assert a.leading() and not b.leading()
    creator = world.pods_async("p", BURST)
    wait_for(lambda: world.bound_count() > 0, 20, interval=0.05, what="first binds")
    # Killed at the first binds: 0.3 s later the leader had once bound the whole burst already
    # (120 of 120 in a CI run), which left nothing for the standby to take over.
    at_kill = world.bound_count()
    a.kill()
    creator.join(60)
    report = world.settle(lambda r: r.bound >= NODES * SLOTS_PER_NODE, timeout=45)
    _print("leader-sigkill", f"1 SIGKILL of the leader at {at_kill} bound pods", report)
    assert b.leading()
    assert at_kill < NODES * SLOTS_PER_NODE, "the leader finished before it was killed"
    assert report.ok, report.summary()
    assert (report.bound, report.pending) == (NODES * SLOTS_PER_NODE, BURST - NODES * SLOTS_PER_NODE)


def test_binding_network_errors_and_timeouts(world: World, sa_kubeconfig: Path) -> None:
    """30% of Bindings fail: refused before sending (retried by DefaultBinder), response lost after
    the bind, a 500 after the bind (retried: the apiserver's 409 then the read-back make it a
    success, never a second bind), or 2 s slow."""
    log = world.tmp / "faults.log"
    env = {"KOPF_SCHEDULER_TEST_BIND_FAULTS": "0.3", "KOPF_SCHEDULER_TEST_FAULT_LOG": str(log)}
    s = world.scheduler(sa_kubeconfig, "binderr", env=env).start()
    s.wait_ready()
    world.pods("p", BURST)
    report = world.settle(lambda r: r.bound >= NODES * SLOTS_PER_NODE, timeout=50)
    injected = log.read_text().split() if log.exists() else []
    counts = {k: injected.count(k) for k in ("refused", "lost-response", "500-after-bind", "slow")}
    _print("bind-errors", f"{len(injected)} bind faults {counts}", report)
    assert all(counts.values()), counts
    assert report.ok, report.summary()
    assert (report.bound, report.pending) == (NODES * SLOTS_PER_NODE, BURST - NODES * SLOTS_PER_NODE)
