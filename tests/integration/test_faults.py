"""Faults on the real control plane, each test ending with the invariant checker.

Every test runs ``kopf-scheduler run`` processes as the manifests' ServiceAccount against the session's
etcd + kube-apiserver, in its own namespace with its own labelled nodes (pods select them). Sizes
make the nodes full: 6 nodes x 4 cpu and pods of 200m give 120 slots, so a burst of 150 leaves 30
pods pending and the checker's ``stranded`` check catches any slot lost to a leaked assumption.

Network faults happen on a real socket: the scheduler talks to the apiserver through a TCP fault
proxy (``faultproxy.py``) that loses answers, holds them, or refuses connections, as a network does.
Run with ``-s`` to see the per-fault lines.
"""

from __future__ import annotations

import collections
import os
import re
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

from kopf_scheduler_workbench.clusterstate import fetch_state
from kopf_scheduler_workbench.controlplane import ControlPlane
from kopf_scheduler_workbench.testing.invariants import Report, check

from .faultproxy import FaultProxy
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
        args = [sys.executable, "-m", "kopf_scheduler", "run", "--kubeconfig", str(self.kubeconfig)]
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

    def metrics(self) -> str:
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=3) as resp:
                return str(resp.read().decode())
        except OSError:
            return ""

    def metric(self, name: str) -> float:
        text = self.metrics()
        if not text:
            return -1.0
        total = 0.0
        for line in text.splitlines():
            head = line.split(" ")[0]
            if head == name or head.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def slow_attempts(self, over: str = "0.256") -> float:
        """Scheduling attempts (cycle and bind) that took longer than ``over`` seconds (a bucket)."""
        name = "scheduler_scheduling_attempt_duration_seconds"
        total = within = 0.0
        for line in self.metrics().splitlines():
            head, _, value = line.rpartition(" ")
            if head.startswith(f"{name}_count"):
                total += float(value)
            elif head.startswith(f"{name}_bucket{{") and f'le="{over}"' in head:
                within += float(value)
        return total - within

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
    path = deploy(control_plane)
    # A CRD just established answers 429 "storage is (re)initializing" for a moment: Kopf would
    # list SchedulerProfiles again later, maybe into the faults a test arms after startup.
    wait_for(lambda: control_plane.kubectl("get", "schedulerprofiles.kopfscheduler.io", "-A") is not None)
    return path


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

    def trickle(self, prefix: str, count: int, interval: float) -> None:
        """Create pods one by one, ``interval`` apart."""
        for i in range(count):
            body = pod(f"{prefix}-{i}", self.ns, cpu=POD_CPU, memory="16Mi", node_selector={"t": self.tag})
            self.core.create_namespaced_pod(self.ns, body)
            time.sleep(interval)

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


_READ_BACK = re.compile(
    r"bind of (\S+) to (\S+): outcome unknown \((.*)\); read back: (bound|not bound|failed)"
)


def test_bind_answers_lost_held_and_refused_on_the_wire(
    world: World, sa_kubeconfig: Path, control_plane: ControlPlane
) -> None:
    """The scheduler's connection to the apiserver loses a fifth of the Bindings' answers after the
    apiserver applied them (RST, nothing relayed) and holds some for 2 s; then, while the last free
    slots fill, it refuses new connections for moments. Every lost answer must be resolved by
    reading the pod back as the ServiceAccount (never a second bind, never a slot leaked), and a
    refused Binding is retried (DefaultBinder). The 30 pods that cannot fit come last, without
    faults: a PodScheduled=False patch refused is not retried today (the reference's PatchPodStatus
    retries it as BindPod does), and the checker's ``no-reason`` would catch that, not this test's
    subject."""
    slots = NODES * SLOTS_PER_NODE
    with FaultProxy(control_plane.server, seed=26) as proxy:
        kubeconfig = proxy.kubeconfig(sa_kubeconfig, world.tmp / "sa-proxied.kubeconfig")
        s = world.scheduler(kubeconfig, "wire").start()
        s.wait_ready()
        # Kopf (the SchedulerProfile watch) starts once the first cycles are through (cluster/run.py),
        # here 1 s after the listing: a watch it asked for after arming would meet the faults.
        wait_for(lambda: "Kopf started the operator" in s.logs(tail=10**6), 30, what="Kopf started")
        time.sleep(1.0)  # its startup handlers are done; its watch is asked for within milliseconds
        # Armed once the informers' and Kopf's lists and watches are up: only requests sent from now on
        # (the small requests' keep-alive pool: binds, events, patches, GETs) meet faults (faultproxy.py).
        lossy = proxy.arm(lost=0.2, slow=0.05, slow_seconds=2.0)
        world.pods("a", 100)
        first = world.settle(lambda r: r.bound >= 100)
        # A window from the first Binding answer on, and again after each calm spell: 0.2 s, under
        # DefaultBinder's 310 ms of retries, so a refused Binding lands. Pods come one by one, so
        # that some meet a window: their attempt then lasts 10 + 50 + 250 ms of retries at least.
        wait_for(lambda: s.slow_attempts() >= lossy.injected["slow"], 10, what="held answers relayed")
        slow_before = s.slow_attempts()
        refusing = proxy.arm(refuse=1.0, refuse_seconds=0.2)
        world.trickle("b", slots - 100, interval=0.1)
        full = world.settle(lambda r: r.bound >= slots)
        proxy.disarm()
        waited = s.slow_attempts() - slow_before
        refused = s.logs(tail=10**7).count("connect: connection refused")
        world.pods("c", BURST - slots)
        report = world.settle(lambda r: r.pending >= BURST - slots)
        alive = s.alive()
        s.kill()  # before the proxy goes: its watches would fail, refused, into the log
    logs = s.logs(tail=10**7)
    read_backs = [m.groups() for m in _READ_BACK.finditer(logs)]
    outcomes = collections.Counter(outcome for *_, outcome in read_backs)
    lost_phase = [r for r in read_backs if r[0].startswith(f"{world.ns}/a-")]
    aimed = sorted({size for size, hit in lossy.answers + refusing.answers if hit})
    _print(
        "bind-wire",
        f"{lossy.injected['lost']} lost and {lossy.injected['slow']} held answers, then "
        f"{refusing.injected['refused']} refusal windows (answers' first records aimed at: {aimed} "
        f"bytes); read-backs {dict(outcomes)}; {refused} refused connects logged, "
        f"{waited:.0f} attempts over 256 ms while refusing",
        report,
    )
    assert (first.ok, first.bound, full.ok, full.bound) == (True, 100, True, slots), (first, full)
    assert lossy.injected["lost"] > 0 and lossy.injected["slow"] > 0, lossy.injected
    assert outcomes["failed"] == 0, [r for r in read_backs if r[3] == "failed"]
    # Every lost answer was a Binding's, resolved by one read-back that found the pod bound.
    assert [r for r in lost_phase if r[3] != "bound"] == [], lost_phase
    assert len(lost_phase) == lossy.injected["lost"], (lost_phase, lossy.injected)
    # Bindings met refused connects: their attempts took DefaultBinder's retries (> 256 ms; none
    # does without the windows). A window also closes idle connections (a FIN): a Binding written
    # on one just then never reached the apiserver, and its read-back rightly finds it not bound.
    assert refusing.injected["refused"] > 0 and waited > 0, (refusing.injected, waited)
    bound_to = {
        f"{p['metadata']['namespace']}/{p['metadata']['name']}": p["spec"].get("nodeName")
        for p in fetch_state(str(world.plane.kubeconfig)).pods
    }
    assert all(bound_to.get(pod) == host for pod, host, _, outcome in read_backs if outcome == "bound")
    assert alive, s.logs()
    assert report.ok, report.summary()
    assert (report.bound, report.pending) == (slots, BURST - slots)
