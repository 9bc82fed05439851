"""simulate and explain with a KubeSchedulerConfiguration beside the objects, and --feature-gates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kopf_scheduler.cli import main

CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled: [{name: NodeResourcesFit, weight: 5}]
  pluginConfig:
  - name: NodeResourcesFit
    args:
      apiVersion: kubescheduler.config.k8s.io/v1
      kind: NodeResourcesFitArgs
      scoringStrategy: {type: MostAllocated}
"""

CLUSTER = """
apiVersion: v1
kind: Node
metadata: {name: busy}
status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}
---
apiVersion: v1
kind: Node
metadata: {name: empty}
status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}
---
apiVersion: v1
kind: Pod
metadata: {name: running, namespace: default}
spec: {nodeName: busy, containers: [{name: c, image: x, resources: {requests: {cpu: "2"}}}]}
---
apiVersion: v1
kind: Pod
metadata: {name: new, namespace: default}
spec: {containers: [{name: c, image: x, resources: {requests: {cpu: "1"}}}]}
---
apiVersion: v1
kind: Pod
metadata: {name: mine, namespace: default}
spec: {schedulerName: kopf-scheduler, containers: [{name: c, image: x, resources: {requests: {cpu: "1"}}}]}
"""


def simulate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, *texts: str, flags: tuple[str, ...] = ()
) -> Any:
    files = []
    for i, text in enumerate(texts):
        path = tmp_path / f"in-{i}.yaml"
        path.write_text(text)
        files.append(str(path))
    assert main(["simulate", *files, "-o", "json", "--seed", "1", *flags]) == 0, capsys.readouterr().err
    return {f"{p['namespace']}/{p['name']}": p for p in json.loads(capsys.readouterr().out)["pods"]}


def test_the_files_profiles_are_what_is_served(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pods = simulate(capsys, tmp_path, CONFIG, CLUSTER)
    # A pod without schedulerName is default-scheduler's: the file's MostAllocated profile packs it.
    assert pods["default/new"]["node"] == "busy"
    # With a file, its profiles are all there is (as kube-scheduler): no built-in kopf-scheduler.
    assert pods["default/mine"]["message"] == "no profile for schedulerName 'kopf-scheduler'"
    # Without the file, LeastAllocated spreads it (and kopf-scheduler is served).
    plain = simulate(capsys, tmp_path, CLUSTER.replace("metadata: {name: new,", "metadata: {name: other,"))
    assert plain["default/mine"]["node"] == "empty"


def test_a_scheduler_profile_of_the_same_name_replaces_the_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cr = """
apiVersion: kopfscheduler.io/v1alpha1
kind: SchedulerProfile
metadata: {name: spread}
spec: {schedulerName: default-scheduler}
"""
    pods = simulate(capsys, tmp_path, CONFIG, CLUSTER, cr)
    assert pods["default/new"]["node"] == "empty"


def test_an_invalid_file_gets_the_references_message(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(CONFIG.replace("weight: 5", "weight: abc") + "---\n" + CLUSTER)
    assert main(["simulate", str(path)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {path}: document 0 (KubeSchedulerConfiguration): json: cannot unmarshal string into Go "
        "struct field Plugin.profiles.plugins.multiPoint.enabled.weight of type int32"
    )
    path.write_text(CONFIG.replace("MostAllocated", "Most") + "---\n" + CLUSTER)
    assert main(["simulate", str(path)]) == 2
    assert (
        "initializing profiles: creating profile for scheduler name default-scheduler: initializing plugin "
        '"NodeResourcesFit": scoringStrategy.type: Unsupported value: "Most": supported values: '
        '"LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"'
    ) in capsys.readouterr().err


def gang(count: int, room: int) -> str:
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"node-{i}"},
            "status": {"allocatable": {"cpu": "1", "memory": "4Gi", "pods": "110"}},
        }
        for i in range(1, room + 1)
    ]
    docs.append(
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "train", "namespace": "default"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": count}}},
        }
    )
    for i in range(1, count + 1):
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"train-{i}", "namespace": "default"},
                "spec": {
                    "schedulingGroup": {"podGroupName": "train"},
                    "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "800m"}}}],
                },
            }
        )
    return yaml.safe_dump_all(docs)


def test_generic_workload_gang_schedules_under_the_default_profile(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    empty_config = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
    # Gate off (v1.37.2's default): the default profile has no GangScheduling; three of four bind.
    off = simulate(capsys, tmp_path, empty_config, gang(4, 3))
    assert sum(bool(p["node"]) for p in off.values()) == 3
    # Gate on: GangScheduling is a default plugin; the gang of 4 on room for 3 binds none.
    on = simulate(
        capsys, tmp_path, empty_config, gang(4, 3), flags=("--feature-gates", "GenericWorkload=true")
    )
    assert not any(p["node"] for p in on.values())
    assert sum("minCount (4) cannot be satisfied" in p["message"] for p in on.values()) == 3
    with_room = simulate(
        capsys, tmp_path, empty_config, gang(4, 4), flags=("--feature-gates", "GenericWorkload=true")
    )
    assert all(p["node"] for p in with_room.values())


def test_simulate_refuses_gates_the_reference_refuses(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(CLUSTER)
    assert main(["simulate", str(path), "--feature-gates", "NodeDeclaredFeatures=false"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --feature-gates: cannot set feature gate NodeDeclaredFeatures to false, "
        "feature is locked to true"
    )


def test_explain_offline_with_the_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "all.yaml"
    path.write_text(CONFIG + "---\n" + CLUSTER)
    assert main(["simulate", str(path), "--explain", "default/new", "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["profile"] == "default-scheduler"
    assert out["chosen"] == "busy"
