"""Failover on a control plane of its own: two ``kopf-scheduler run`` replicas as the manifests'
ServiceAccount, faults injected where they happen (SIGSTOP, SIGTERM, kube-apiserver stopped, the
apiserver refusing one replica's keep-alives by admission policy).

What every test holds to: never two replicas leading at any sampled moment (the ``kopf_scheduler_leader``
gauge is computed from the fence at each scrape, so it cannot lag the truth), the renew deadline
respected by the Scheduled events' own timestamps, and the invariant checker clean after the burst.
Run with ``-s`` to see the timelines.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kopf_scheduler_workbench.clusterstate import fetch_state
from kopf_scheduler_workbench.controlplane import ControlPlane
from kopf_scheduler_workbench.testing.invariants import check

from .test_operator_helpers import Replica, create, deploy, get_json, node, pod, wait_for

pytestmark = pytest.mark.integration

LEASE = 15.0
RENEW_DEADLINE = 10.0
RETRY = 2.0


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    """Its own etcd and kube-apiserver: these tests stop and block the apiserver."""
    cp = ControlPlane()
    try:
        cp.start()
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="module")
def sa_kubeconfig(plane: ControlPlane) -> Path:
    return deploy(plane)


class Pair:
    """Two replicas on one peering, the first started (and leading) before the second."""

    def __init__(self, plane: ControlPlane, kubeconfig: Path, tmp: Path) -> None:
        self.plane = plane
        self.ns = f"fo-{uuid.uuid4().hex[:6]}"
        plane.kubectl("create", "namespace", self.ns)
        peering = f"peering-{self.ns}"
        self.a = Replica(kubeconfig, peering, [self.ns], f"{self.ns}-a", tmp)
        wait_for(lambda: self.a.ready() and self.a.leading(), 60, what=f"a leading:\n{self.a.logs()}")
        self.b = Replica(kubeconfig, peering, [self.ns], f"{self.ns}-b", tmp)
        wait_for(self.b.ready, 60, what=f"b ready:\n{self.b.logs()}")
        self.samples: list[tuple[float, bool, bool]] = []

    @property
    def replicas(self) -> tuple[Replica, Replica]:
        return self.a, self.b

    def sample(self) -> tuple[bool, bool]:
        """Both gauges now; two leaders at any sample fails the test at once."""
        a, b = _leading(self.a), _leading(self.b)
        self.samples.append((time.monotonic(), a, b))
        assert not (a and b), f"two leaders at once:\n--- a\n{self.a.logs()}\n--- b\n{self.b.logs()}"
        return a, b

    def watch(self, seconds: float, until: Callable[[tuple[bool, bool]], bool] | None = None) -> float:
        """Sample for ``seconds`` (or until ``until`` holds); the seconds it took."""
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            state = self.sample()
            if until is not None and until(state):
                break
            time.sleep(0.1)
        return time.monotonic() - start

    def kill(self) -> None:
        for r in self.replicas:
            if r.proc.poll() is None:
                with_signal(r, signal.SIGCONT)
            r.kill()


def _leading(replica: Replica) -> bool:
    """The leader gauge, with a short timeout: a stopped replica does not answer (= not leading)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{replica.port}/metrics", timeout=1) as resp:
            text = resp.read().decode()
    except OSError:
        return False
    return any(line == "kopf_scheduler_leader 1.0" for line in text.splitlines())


def with_signal(replica: Replica, sig: int) -> None:
    os.kill(replica.proc.pid, sig)


@pytest.fixture
def pair(plane: ControlPlane, sa_kubeconfig: Path, tmp_path: Path) -> Iterator[Pair]:
    p = Pair(plane, sa_kubeconfig, tmp_path)
    try:
        yield p
    finally:
        p.kill()


def _full_node_burst(pair: Pair, count: int = 12) -> tuple[int, int]:
    """A 4-cpu node and ``count`` one-cpu pods for it: (bound, pending) once settled, checker clean."""
    tag = uuid.uuid4().hex[:6]
    create(pair.plane, node(f"{pair.ns}-{tag}", cpu="4", labels={"fo": tag}))
    names = [f"one-cpu-{tag}-{i}" for i in range(count)]
    create(pair.plane, *(pod(n, pair.ns, cpu="1", node_selector={"fo": tag}) for n in names))

    def bound() -> int:
        items = get_json(pair.plane, "pods", "-n", pair.ns)["items"]
        return sum(1 for p in items if p["metadata"]["name"] in names and p["spec"].get("nodeName"))

    wait_for(lambda: bound() >= 4, 90, what="4 pods bound")
    pair.watch(5)  # anything more would be an overcommit: give it the time to happen
    report = check(fetch_state(str(pair.plane.kubeconfig)), namespaces=[pair.ns])
    assert report.ok, report.summary()
    return bound(), count - bound()


def _scheduled_events(plane: ControlPlane, ns: str) -> list[tuple[float, str, str]]:
    """``(eventTime, reportingInstance, pod)`` of every Scheduled event in ``ns``, oldest first."""
    items = get_json(plane, "events.v1.events.k8s.io", "-n", ns)["items"]
    out = []
    for e in items:
        if e.get("reason") != "Scheduled":
            continue
        at = dt.datetime.fromisoformat(str(e["eventTime"]).replace("Z", "+00:00")).timestamp()
        out.append((at, str(e.get("reportingInstance")), str(e["regarding"]["name"])))
    return sorted(out)


def test_paused_leader_never_leads_beside_the_new_one(pair: Pair) -> None:
    """SIGSTOP past the lease: the standby leads during the pause; after SIGCONT never two leaders,
    exactly one from 10 s on; then a full node takes exactly its 4 pods."""
    with_signal(pair.a, signal.SIGSTOP)
    stopped = time.monotonic()
    took = pair.watch(LEASE + 3 * RETRY + 5, until=lambda s: s[1])
    assert pair.b.leading(), f"the standby did not take over during the pause:\n{pair.b.logs()}"
    print(f"standby leads {took:.1f}s after SIGSTOP of the leader")
    time.sleep(max(0.0, 25 - (time.monotonic() - stopped)))
    with_signal(pair.a, signal.SIGCONT)
    resumed = time.monotonic()
    pair.watch(15)
    late = [(t - resumed, a, b) for t, a, b in pair.samples if t - resumed >= 10]
    assert late and all(a != b for _, a, b in late), late
    assert all(b for _, _, b in late), "the lead moved back to the resumed replica"
    assert _full_node_burst(pair) == (4, 8)


def test_apiserver_outage_ends_no_process_and_one_leader_returns(pair: Pair) -> None:
    """kube-apiserver down 75 s: nobody leads once the renew deadline passed, nobody exits, and
    exactly one leads within 45 s of its return; then a full node takes exactly its 4 pods."""
    plane = pair.plane
    plane.stop_process("kube-apiserver")
    down = time.monotonic()
    pair.watch(RENEW_DEADLINE + 1)
    outage = pair.watch(75 - (time.monotonic() - down))
    late = [(a, b) for t, a, b in pair.samples if t - down > RENEW_DEADLINE + 1]
    assert late and not any(a or b for a, b in late), "a replica led without reaching the apiserver"
    assert outage > 60
    plane.start_apiserver()
    back = time.monotonic()
    plane.wait_ready()
    assert all(r.proc.poll() is None for r in pair.replicas), [r.logs() for r in pair.replicas]
    pair.watch(45 - (time.monotonic() - back), until=lambda s: s[0] != s[1])
    assert sum(pair.sample()) == 1, [r.logs() for r in pair.replicas]
    print(f"one leader {time.monotonic() - back:.1f}s after kube-apiserver was started again")
    assert all(r.ready() for r in pair.replicas)
    assert _full_node_burst(pair) == (4, 8)


def _deny_keepalives_of(plane: ControlPlane, identity: str) -> str:
    """A ValidatingAdmissionPolicy refusing any change to ``identity``'s peering entry: the
    replica's keep-alives fail at the apiserver while everything else it writes succeeds."""
    name = f"deny-{identity}"
    key = json.dumps(identity)
    entry = f"object.status[{key}]"
    old = f"oldObject.status[{key}]"
    expression = (
        f"!has(object.status) || !({key} in object.status) || "
        f"(has(oldObject.status) && {key} in oldObject.status && {entry} == {old})"
    )
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["kopf.dev"],
                        "apiVersions": ["v1"],
                        "operations": ["UPDATE"],
                        "resources": ["clusterkopfpeerings", "clusterkopfpeerings/status"],
                    }
                ]
            },
            "validations": [{"expression": expression, "message": f"keep-alives of {identity} refused"}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    items = {"apiVersion": "v1", "kind": "List", "items": [policy, binding]}
    plane.kubectl("apply", "-f", "-", input=json.dumps(items))
    return name


def test_leader_whose_keepalives_fail_stops_within_the_renew_deadline(pair: Pair) -> None:
    """The apiserver refuses the leader's keep-alives while its binds succeed: its last Scheduled
    event is within the renew deadline of the refusal, then the standby takes over."""
    plane, ns = pair.plane, pair.ns
    tag = uuid.uuid4().hex[:6]
    create(plane, node(f"{ns}-big-{tag}", cpu="64", labels={"fo": tag}))
    stop = threading.Event()

    def stream() -> None:
        i = 0
        while not stop.is_set():
            create(plane, pod(f"s-{tag}-{i}", ns, node_selector={"fo": tag}))
            i += 1
            time.sleep(0.4)

    creator = threading.Thread(target=stream, daemon=True)
    creator.start()
    try:
        wait_for(lambda: len(_scheduled_events(plane, ns)) >= 3, 30, what="binds by the leader")
        policy = _deny_keepalives_of(plane, pair.a.name)
        peering = f"peering-{ns}"

        def refused() -> bool:
            patch = json.dumps({"status": {pair.a.name: {"probe": uuid.uuid4().hex}}})
            try:
                plane.kubectl(
                    "patch", "clusterkopfpeering", peering, "--type=merge", "--dry-run=server", "-p", patch
                )
            except Exception as exc:  # refused by the policy: it is in force
                return "refused" in str(getattr(exc, "stderr", "") or exc)
            return False

        wait_for(refused, 30, interval=0.1, what="the admission policy in force")
        in_force = time.time()
        pair.watch(LEASE + 3 * RETRY + 5, until=lambda s: s[1])
        assert pair.b.leading(), f"the standby did not take over:\n{pair.b.logs()}"
        wait_for(
            lambda: any(inst.endswith(pair.b.name) for _, inst, _ in _scheduled_events(plane, ns)),
            20,
            what="a bind by the new leader",
        )
    finally:
        stop.set()
        creator.join(10)
    events = _scheduled_events(plane, ns)
    old = [at for at, inst, _ in events if inst.endswith(pair.a.name)]
    new = [at for at, inst, _ in events if inst.endswith(pair.b.name)]
    print(
        f"old leader's last Scheduled event {max(old) - in_force:+.1f}s after the policy was seen in force; "
        f"new leader's first {min(new) - in_force:+.1f}s"
    )
    assert max(old) < in_force + RENEW_DEADLINE, (max(old) - in_force, pair.a.logs())
    assert max(old) < min(new)
    assert "renew deadline" in pair.a.logs() or "renewing the lead failed" in pair.a.logs()
    plane.kubectl("delete", "validatingadmissionpolicybinding", policy)
    plane.kubectl("delete", "validatingadmissionpolicy", policy)
    report = check(fetch_state(str(plane.kubeconfig)), namespaces=[ns])
    assert report.ok, report.summary()


def test_sigterm_mid_burst_hands_over_without_overlap(pair: Pair) -> None:
    """SIGTERM of the leader while binding: it drains and then releases; no Scheduled event of the
    old replica after the new one's first; the new one binds the rest at its next try."""
    plane, ns = pair.plane, pair.ns
    tag = uuid.uuid4().hex[:6]
    create(plane, *(node(f"{ns}-t{i}-{tag}", cpu="4", labels={"fo": tag}) for i in range(3)))
    names = [f"b-{tag}-{i}" for i in range(100)]
    # The burst's head is bound under way when the rest starts to arrive and the signal goes: the
    # rest (one kubectl create of 80) lands during the drain and after, so the new leader has pods
    # to bind whatever the machine's pace. (As one create of all 100, a loaded machine saw the 5th
    # event only after the old leader had bound every pod.)
    pods = [pod(n, ns, node_selector={"fo": tag}) for n in names]
    create(plane, *pods[:20])
    burst = threading.Thread(target=lambda: create(plane, *pods[20:]), daemon=True)
    wait_for(lambda: len(_scheduled_events(plane, ns)) >= 5, 30, interval=0.05, what="first binds")
    burst.start()
    pair.a.proc.send_signal(signal.SIGTERM)
    terminated = time.monotonic()
    burst.join(60)
    exit_code = pair.a.proc.wait(30)
    pair.watch(1)

    def all_bound() -> bool:
        items = get_json(plane, "pods", "-n", ns)["items"]
        return sum(1 for p in items if p["metadata"]["name"] in names and p["spec"].get("nodeName")) == 100

    wait_for(all_bound, 60, what=f"all bound by the new leader:\n{pair.b.logs()}")
    print(f"handover: all 100 bound {time.monotonic() - terminated:.1f}s after SIGTERM")
    events = [e for e in _scheduled_events(plane, ns) if e[2] in names]
    old = [at for at, inst, _ in events if inst.endswith(pair.a.name)]
    new = [at for at, inst, _ in events if inst.endswith(pair.b.name)]
    assert old and new, (len(old), len(new))
    assert max(old) < min(new), (max(old), min(new))
    assert exit_code == 0, pair.a.logs()
    report = check(fetch_state(str(plane.kubeconfig)), namespaces=[ns])
    assert report.ok, report.summary()


def test_sigterm_of_the_standby_exits_at_once_and_leaves_the_leader_alone(pair: Pair) -> None:
    """A standby has nothing to drain: it exits 0 within a few seconds; the leader keeps leading."""
    started = time.monotonic()
    pair.b.proc.send_signal(signal.SIGTERM)
    code = pair.b.proc.wait(30)
    took = time.monotonic() - started
    print(f"standby exited {code} {took:.1f}s after SIGTERM")
    assert code == 0 and took < 6, (code, took, pair.b.logs())
    pair.watch(3)
    assert _leading(pair.a)
