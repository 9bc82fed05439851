"""explain / simulate --from-cluster on the real control plane, against our live scheduler and the
reference kube-scheduler.

Nodes of other modules may share the control plane; every comparison here is between two views of
the same cluster (explain's listing and a scheduler's), so they agree whatever else is there.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kopf_scheduler.cluster.listing import list_cluster
from kopf_scheduler.explain.engine import explain
from kopf_scheduler.explain.reflog import parse_scores
from kopf_scheduler.simulate import documents_to_inputs
from kopf_scheduler_workbench.controlplane import ControlPlane

from .test_operator_helpers import (
    ROOT,
    Replica,
    cli,
    create,
    deploy,
    free_port,
    fresh_namespace,
    leading_replica,
    node,
    node_of,
    pod,
    reason_events,
    wait_for,
)

pytestmark = pytest.mark.integration

LABEL = "explain-test"


@pytest.fixture(scope="module")
def sa_kubeconfig(control_plane: ControlPlane) -> Path:
    return deploy(control_plane)


@pytest.fixture(scope="module")
def namespace(control_plane: ControlPlane) -> Iterator[str]:
    ns = fresh_namespace(control_plane, "explain")
    yield ns
    # No kubelet and no namespace controller here: remove what this module made by hand.
    control_plane.kubectl("delete", "pods", "--all", "-n", ns, "--grace-period=0", "--force", "--wait=false")
    control_plane.kubectl("delete", "nodes", "-l", LABEL, "--wait=false")


@pytest.fixture(scope="module")
def replica(
    control_plane: ControlPlane, sa_kubeconfig: Path, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replica]:
    log_dir = tmp_path_factory.mktemp("explain-replica")
    with leading_replica(
        sa_kubeconfig, f"explain-{namespace}", [namespace], f"explain-{namespace}", log_dir
    ) as r:
        yield r


def _node(name: str, cpu: str, **labels: str) -> dict[str, Any]:
    return node(name, cpu=cpu, labels={LABEL: "1", **labels})


def _taint(plane: ControlPlane, name: str, taint: str) -> None:
    plane.kubectl("taint", "node", name, taint)


def test_explain_matches_the_failed_scheduling_event(
    control_plane: ControlPlane, replica: Replica, namespace: str
) -> None:
    sfx = uuid.uuid4().hex[:5]
    small, busy, gpu = f"ex-small-{sfx}", f"ex-busy-{sfx}", f"ex-gpu-{sfx}"
    case = {"explain-case": sfx}  # other modules' nodes may have room: the pod is kept to these three
    create(control_plane, _node(small, "1", **case), _node(busy, "4", **case), _node(gpu, "16", **case))
    _taint(control_plane, gpu, "dedicated=gpu:NoSchedule")
    create(control_plane, pod(f"hog-{sfx}", namespace, cpu="2500m", node_name=busy))
    create(control_plane, pod(f"web-{sfx}", namespace, cpu="3", node_selector=case))
    event = wait_for(
        lambda: reason_events(control_plane, namespace, f"web-{sfx}", "FailedScheduling"),
        30,
        what="FailedScheduling",
    )[-1]

    doc = json.loads(cli(control_plane, "explain", f"{namespace}/web-{sfx}", "-o", "json"))
    assert doc["chosen"] is None
    assert doc["message"] == event["note"]  # the same counts, reasons and preemption verdict
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert nodes[small]["filters"]["NodeResourcesFit"] == "Insufficient cpu"
    assert nodes[busy]["filters"]["NodeResourcesFit"] == "Insufficient cpu"
    assert nodes[busy]["obstacles"] == ["needs 1.5 cpu more"]
    assert nodes[gpu]["rejectedBy"] == "TaintToleration"
    assert nodes[gpu]["filters"]["TaintToleration"] == "node(s) had untolerated taint(s)"
    assert nodes[gpu]["obstacles"] == ["taint dedicated=gpu:NoSchedule not tolerated"]
    table = cli(control_plane, "explain", f"{namespace}/web-{sfx}")
    print(table)
    assert "needs 1.5 cpu more" in table and "taint dedicated=gpu:NoSchedule not tolerated" in table


def _random_round(plane: ControlPlane, namespace: str, rng: random.Random, sfx: str) -> str:
    """Random nodes and bound pods, and one gated pod the replica leaves alone until ungated."""
    zones = ["z1", "z2"]
    names = []
    nodes = []
    for i in range(rng.randint(3, 6)):
        name = f"rnd-{sfx}-{i}"
        names.append(name)
        nodes.append(
            node(
                name,
                cpu=str(rng.choice([2, 4, 8])),
                memory=f"{rng.choice([4, 16])}Gi",
                labels={LABEL: "1", "round": sfx, "topology.kubernetes.io/zone": rng.choice(zones)},
            )
        )
    create(plane, *nodes)
    for name in names:
        if rng.random() < 0.3:
            _taint(plane, name, "soft=x:PreferNoSchedule")
    bound = [
        pod(f"b-{sfx}-{j}", namespace, cpu=f"{rng.choice([100, 700, 1500])}m", node_name=rng.choice(names))
        for j in range(rng.randint(1, 8))
    ]
    create(plane, *bound)
    gated = pod(f"g-{sfx}", namespace, cpu=f"{rng.choice([200, 1000])}m", node_selector={"round": sfx})
    gated["spec"]["schedulingGates"] = [{"name": "example.com/hold"}]
    create(plane, gated)
    return f"g-{sfx}"


def test_explain_picks_the_node_the_live_scheduler_binds(
    control_plane: ControlPlane, replica: Replica, namespace: str
) -> None:
    for seed in range(3):
        rng = random.Random(seed)
        sfx = f"{seed}{uuid.uuid4().hex[:4]}"
        name = _random_round(control_plane, namespace, rng, sfx)
        listing = asyncio.run(list_cluster(str(control_plane.kubeconfig)))
        e = explain(documents_to_inputs(listing.documents), f"{namespace}/{name}")
        assert e.chosen is not None, e.message
        time.sleep(0.5)  # the replica's watches have the round's nodes and pods
        control_plane.kubectl(
            "patch",
            "pod",
            name,
            "-n",
            namespace,
            "--type=json",
            "-p",
            '[{"op":"remove","path":"/spec/schedulingGates"}]',
        )
        placed = wait_for(lambda n=name: node_of(control_plane, namespace, n), 30, what=f"{name} bound")
        assert placed in e.tied, (placed, e.tied, [(n.name, n.total) for n in e.nodes if n.feasible])


def _reference_scheduler(
    plane: ControlPlane, log_path: Path, plugins: dict[str, Any]
) -> subprocess.Popen[bytes]:
    """The reference kube-scheduler at -v=10 with one profile (default-scheduler) using ``plugins``."""
    config = log_path.with_suffix(".yaml")
    config.write_text(
        json.dumps(
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "clientConnection": {"kubeconfig": str(plane.kubeconfig)},
                "leaderElection": {"leaderElect": False},
                "profiles": [{"schedulerName": "default-scheduler", "plugins": plugins}],
            }
        )
    )
    log = log_path.open("wb")
    cmd = [
        str(plane.bin_path),
        "kube-scheduler",
        f"--config={config}",
        f"--secure-port={free_port()}",
        "--bind-address=127.0.0.1",
        "-v=10",
    ]
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)


def _compare_with_reference(
    plane: ControlPlane, namespace: str, tmp_path: Path, plugins: dict[str, Any], profile: str
) -> None:
    """Schedule one pod with the reference at -v=10, then explain it with our ``profile``: the same
    nodes must be scored, with the same weighted score per plugin and the same totals."""
    sfx = uuid.uuid4().hex[:5]
    a, b, c = f"ref-a-{sfx}", f"ref-b-{sfx}", f"ref-c-{sfx}"
    create(plane, _node(a, "8"), _node(b, "4"), _node(c, "4"))
    _taint(plane, c, "soft=x:PreferNoSchedule")
    create(
        plane,
        pod(f"ra-{sfx}", namespace, cpu="3", memory="2Gi", node_name=a),
        pod(f"rb-{sfx}", namespace, cpu="500m", memory="6Gi", node_name=b),
    )
    target = pod(f"ref-{sfx}", namespace, scheduler="default-scheduler", cpu="700m", memory="1Gi")
    target["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": "ref"}},
        }
    ]
    target["metadata"]["labels"] = {"app": "ref"}
    log_path = tmp_path / "kube-scheduler.log"
    proc = _reference_scheduler(plane, log_path, plugins)
    try:
        create(plane, target)
        placed = wait_for(lambda: node_of(plane, namespace, f"ref-{sfx}"), 60, what="reference binds")
    finally:
        proc.terminate()
        proc.wait(15)
    scores = parse_scores(log_path.read_text(errors="replace").splitlines()).pods[f"{namespace}/ref-{sfx}"]
    assert {a, b, c} <= set(scores)

    # The pod is explained as it was before its binding (explain leaves a bound pod out).
    listing = asyncio.run(list_cluster(str(plane.kubeconfig)))
    e = explain(documents_to_inputs(listing.documents), f"{namespace}/ref-{sfx}", profile=profile)
    ours = {n.name: n for n in e.nodes if n.feasible}
    assert set(ours) == set(scores)  # the same feasible nodes were scored
    mismatches = {
        name: (
            {p: s.weighted for p, s in ours[name].scores.items()},
            ours[name].total,
            ref.plugins,
            ref.total,
        )
        for name, ref in scores.items()
        if ({p: s.weighted for p, s in ours[name].scores.items()}, ours[name].total)
        != (ref.plugins, ref.total)
    }
    assert not mismatches, {
        name: {p: (o.get(p), r.get(p)) for p in set(o) | set(r) if o.get(p) != r.get(p)} | {"total": (ot, rt)}
        for name, (o, ot, r, rt) in mismatches.items()
    }
    assert placed in e.tied


# Score plugins disabled on both sides in the test below, so that it compares a profile other than
# the default one (the test above compares the default profile, where these score too).
_DISABLED = ["NodeResourcesBalancedAllocation", "VolumeBinding"]


def test_default_profile_scores_agree_with_the_reference_v10_log(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    _compare_with_reference(control_plane, namespace, tmp_path, {}, "kopf-scheduler")


def test_scores_agree_with_the_reference_v10_log(
    control_plane: ControlPlane, sa_kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    """Both sides run one and the same profile: the default without the plugins listed above."""
    name = f"refcmp-{uuid.uuid4().hex[:5]}"
    disabled = [{"name": n} for n in _DISABLED]
    create(
        control_plane,
        {
            "apiVersion": "kopfscheduler.io/v1alpha1",
            "kind": "SchedulerProfile",
            "metadata": {"name": name},
            "spec": {"schedulerName": name, "plugins": {"score": {"disabled": disabled}}},
        },
    )
    try:
        _compare_with_reference(control_plane, namespace, tmp_path, {"score": {"disabled": disabled}}, name)
    finally:
        control_plane.kubectl("delete", "schedulerprofile", name, "--wait=false")


def test_simulate_from_cluster_shows_a_profile_change(
    control_plane: ControlPlane, sa_kubeconfig: Path, tmp_path: Path
) -> None:
    sfx = uuid.uuid4().hex[:5]
    ns = fresh_namespace(control_plane, "whatif")  # no scheduler serves it: its pods stay pending
    scheduler = f"whatif-{sfx}"
    empty, used = f"wi-empty-{sfx}", f"wi-used-{sfx}"
    create(control_plane, _node(empty, "8", whatif=sfx), _node(used, "8", whatif=sfx))

    def profile(strategy: str) -> dict[str, Any]:
        return {
            "apiVersion": "kopfscheduler.io/v1alpha1",
            "kind": "SchedulerProfile",
            "metadata": {"name": scheduler},
            "spec": {
                "schedulerName": scheduler,
                "plugins": {"score": {"disabled": [{"name": "NodeResourcesBalancedAllocation"}]}},
                "pluginConfig": [
                    {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": strategy}}}
                ],
            },
        }

    create(control_plane, profile("LeastAllocated"))
    create(
        control_plane,
        pod(f"r-{sfx}", ns, cpu="4", node_name=used),
        pod(f"p-{sfx}", ns, scheduler=scheduler, cpu="1", node_selector={"whatif": sfx}),
    )
    extra = tmp_path / "most-allocated.yaml"
    extra.write_text(json.dumps(profile("MostAllocated")))
    try:
        doc = json.loads(cli(control_plane, "simulate", "--from-cluster", str(extra), "-o", "json"))
        [row] = [p for p in doc["pods"] if p["namespace"] == ns and p["name"] == f"p-{sfx}"]
        assert (row["now"]["node"], row["whatIf"]["node"], row["changed"]) == (empty, used, True)
        table = cli(control_plane, "simulate", "--from-cluster", str(extra))
        print(table)
        assert f"{ns}/p-{sfx}" in table
        # Nothing was written: the pod is still pending and the profile unchanged.
        assert node_of(control_plane, ns, f"p-{sfx}") == ""
    finally:
        control_plane.kubectl("delete", "schedulerprofile", scheduler, "--wait=false")
        control_plane.kubectl(
            "delete", "pods", "--all", "-n", ns, "--grace-period=0", "--force", "--wait=false"
        )


def test_explain_annotation_summarizes_a_failed_attempt(control_plane: ControlPlane, tmp_path: Path) -> None:
    """Off by default; with ``--explain-annotation`` (and patch on pods: the admin here) a pod that
    fails scheduling carries a per-plugin summary whose counts are the FailedScheduling event's."""
    ns = fresh_namespace(control_plane, "annot")
    sfx = uuid.uuid4().hex[:5]
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    log = (tmp_path / "replica.log").open("wb")
    cmd = [sys.executable, "-m", "kopf_scheduler", "run", "--kubeconfig", str(control_plane.kubeconfig),
           "--standalone", "--namespace", ns, "--explain-annotation",
           "--metrics-host", "127.0.0.1", "--metrics-port", str(port)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    try:
        case = {"explain-case": sfx}  # other modules' nodes may be huge: only this one can be chosen
        create(control_plane, _node(f"an-small-{sfx}", "1", **case))
        create(control_plane, pod(f"big-{sfx}", ns, cpu="2", node_selector=case))
        try:
            event = wait_for(lambda: reason_events(control_plane, ns, f"big-{sfx}", "FailedScheduling"), 60)[
                -1
            ]
        except TimeoutError:
            log.flush()
            raise AssertionError((tmp_path / "replica.log").read_text(errors="replace")[-4000:]) from None

        def annotation() -> str:
            meta = json.loads(control_plane.kubectl("get", "pod", f"big-{sfx}", "-n", ns, "-o", "json"))[
                "metadata"
            ]
            return str((meta.get("annotations") or {}).get("kopfscheduler.io/scheduling-result") or "")

        doc = json.loads(wait_for(annotation, 30, what="annotation"))
        assert doc["filter"]["NodeResourcesFit"] == {"Insufficient cpu": 1}
        assert "1 Insufficient cpu" in event["note"]
        assert doc["nodes"] == int(event["note"].split("/", 1)[1].split(" ", 1)[0])
        others = sum(
            sum(reasons.values()) for plugin, reasons in doc["filter"].items() if plugin != "NodeResourcesFit"
        )
        assert others == doc["nodes"] - 1  # every other node is told apart by the selector (or a taint)
        assert event["note"].endswith(doc["postFilter"])
    finally:
        proc.terminate()
        proc.wait(15)
        log.close()
        control_plane.kubectl(
            "delete", "pods", "--all", "-n", ns, "--grace-period=0", "--force", "--wait=false"
        )
