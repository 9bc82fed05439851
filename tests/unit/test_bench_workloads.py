"""The bench's perf scale: scheduler_perf's performance cases by their names and at their sizes."""

from __future__ import annotations

import argparse
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kopf_scheduler_workbench.bench import runner
from kopf_scheduler_workbench.bench.workloads import perf_workloads, workloads
from kopf_scheduler_workbench.controlplane import ControlPlane

GANG = "podgroup/gangscheduling/performance-config.yaml"
CASES = {  # name -> its config file under scheduler_perf/
    "SchedulingBasic/5000Nodes_10000Pods": "misc/performance-config.yaml",
    "SchedulingBasic/5000Nodes_50000Pods": "misc/performance-config.yaml",
    "SchedulingWithResourceClaimTemplate/5000pods_500nodes": "dra/performance-config.yaml",
    "GangScheduling/5000Nodes_3000Gangs_9000Pods": GANG,
    "GangScheduling/5000Nodes_9Gangs_9000Pods_1000PerGroup": GANG,
}


def _scheduler_perf() -> Path:
    """The reference release's scheduler_perf configs (the Go module cache); skip without them."""
    go = shutil.which("go")
    if go is None:
        pytest.skip("no Go toolchain: the reference's configs are not here")
    cache = subprocess.run([go, "env", "GOMODCACHE"], capture_output=True, text=True, check=True).stdout
    path = Path(cache.strip()) / "k8s.io/kubernetes@v1.37.2/test/integration/scheduler_perf"
    if not path.is_dir():
        pytest.skip(f"{path} is not in the module cache")
    return path


def _case(config: Path, name: str) -> dict[str, Any]:
    yaml = pytest.importorskip("yaml")
    test_case, _, workload = name.partition("/")
    for case in yaml.safe_load(config.read_text()):
        if case["name"] == test_case:
            for w in case["workloads"]:
                if w["name"] == workload:
                    return dict(w)
    raise AssertionError(f"{name} not in {config}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_perf_cases_have_the_sizes_of_scheduler_perfs_own_config(name: str) -> None:
    case = _case(_scheduler_perf() / CASES[name], name)
    assert "performance" in case["labels"]
    params = case["params"]
    w = perf_workloads()[name]
    if name.startswith("SchedulingBasic/"):
        assert (w.nodes, w.init_pods, w.measure_pods) == (
            params["initNodes"], params["initPods"], params["measurePods"],
        )  # fmt: skip
        assert w.threshold == case["threshold"]
    elif name.startswith("GangScheduling/"):
        assert w.nodes == params["initNodes"] and w.gang_size == params["podsPerGroup"]
        assert w.measure_pods == params["initPodGroups"] * params["podsPerGroup"]
        assert len(w.cluster_objects()) == params["initPodGroups"]
    else:
        assert w.nodes == params["nodesWithDRA"] and params["nodesWithoutDRA"] == 0
        assert w.measure_pods == params["measurePods"]
        assert len(w.allocated_objects()) == params["initClaims"]
        assert w.threshold == case["threshold"]["dra"]
        assert w.controllers  # the resourceclaim controller makes each pod's claim


def test_allocated_claims_leave_every_measured_pod_a_device() -> None:
    w = perf_workloads()["SchedulingWithResourceClaimTemplate/5000pods_500nodes"]
    devices = {
        (o["spec"]["pool"]["name"], d["name"])
        for o in w.cluster_objects()
        if o["kind"] == "ResourceSlice"
        for d in o["spec"]["devices"]
    }
    taken = [
        (r["pool"], r["device"])
        for o in w.allocated_objects()
        for r in o["status"]["allocation"]["devices"]["results"]
    ]
    assert len(set(taken)) == len(taken) and set(taken) <= devices  # real devices, none twice
    assert len(devices) - len(taken) == w.measure_pods  # room for exactly the measured pods
    per_node = Counter(pool for pool, _ in taken)
    assert set(per_node.values()) == {5}  # 5 of each node's 10 devices: every node has room
    claim = w.allocated_objects()[7]
    pool = claim["status"]["allocation"]["devices"]["results"][0]["pool"]
    selector = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]
    assert pool == "resourceslice-7" and selector["values"] == ["node-00007"]  # on the slice's node
    pod = w.measure_objects("kopf-scheduler")[0]
    assert pod["spec"]["resourceClaims"] == [
        {"name": "resource", "resourceClaimTemplateName": "test-claim-template"}
    ]


def test_perf_factor_shrinks_counts_but_keeps_each_cases_shape() -> None:
    full, small = perf_workloads(), perf_workloads(0.02)
    assert list(small) == list(full)  # the same cases, by the same names
    basic = small["SchedulingBasic/5000Nodes_50000Pods"]
    assert (basic.nodes, basic.init_pods, basic.measure_pods) == (100, 100, 1000)
    assert "smoke test" in basic.note and "smoke test" not in full[basic.name].note
    many = small["GangScheduling/5000Nodes_3000Gangs_9000Pods"]
    assert (many.gang_size, len(many.cluster_objects())) == (3, 60)  # gangs of 3, fewer of them
    big = small["GangScheduling/5000Nodes_9Gangs_9000Pods_1000PerGroup"]
    assert (big.gang_size, len(big.cluster_objects())) == (20, 9)  # 9 gangs, smaller
    dra = small["SchedulingWithResourceClaimTemplate/5000pods_500nodes"]
    assert (dra.nodes, dra.measure_pods, len(dra.allocated_objects())) == (10, 50, 50)
    startup = [w for w in full.values() if w.name.startswith("StartUp/")]
    assert [(w.nodes, w.init_pods, w.measure_pods) for w in startup] == [
        (1000, 1000, 1), (5000, 1000, 1), (5000, 50000, 1),
    ]  # fmt: skip
    with pytest.raises(ValueError):
        perf_workloads(0.0)
    assert workloads("perf", 0.5)["StartUp/1000Nodes"].nodes == 500


def test_runner_takes_perf_scale_factor_and_repeats() -> None:
    parser = argparse.ArgumentParser()
    runner.add_arguments(parser)
    args = parser.parse_args(["--scale", "perf", "--perf-factor", "0.02", "--repeats", "3"])
    assert (args.scale, args.perf_factor, args.repeat) == ("perf", 0.02, 3)


def test_the_claim_controller_is_not_throttled_where_a_workload_needs_it(tmp_path: Path) -> None:
    """scheduler_perf's claim controller is in-process and unthrottled: kube-controller-manager's
    client at its default QPS 20 made ~10 claims a second and paced every scheduler alike."""
    stock = ControlPlane(tmp_path / "kcp", tmp_path / "a").controller_manager_args(tmp_path / "c")
    assert not [a for a in stock if a.startswith("--kube-api-")]
    raised = ControlPlane(tmp_path / "kcp", tmp_path / "b", controller_qps=5000.0)
    args = raised.controller_manager_args(tmp_path / "c")
    assert "--kube-api-qps=5000" in args and "--kube-api-burst=5000" in args


def test_the_gang_arrival_micro_benchmark_binds_every_member() -> None:
    from kopf_scheduler_workbench.bench import gang_arrival

    assert gang_arrival.bench(nodes=20, gangs=2, size=10) > 0  # raises unless all 20 are bound
