"""README command 1 works: the playground binds every demo pod on a real apiserver."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kopf_scheduler_workbench.controlplane import ControlPlane

pytestmark = pytest.mark.integration


def test_playground_binds_all_pods(control_plane: ControlPlane) -> None:
    # The fixture only guarantees the binary is built; the playground starts a control plane of its own.
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "kopf_scheduler",
            "playground",
            "--nodes",
            "4",
            "--pods",
            "12",
            "--timeout",
            "90",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    table, _, gpu_table = result.stdout.partition("GPUs (ResourceClaims")
    lines = [
        line.split()
        for line in table.splitlines()
        if line.startswith(("web-", "api-", "batch-", "gpu-", "trainer-"))
    ]
    assert len(lines) == 14  # 12 demo pods and 2 trainers
    assert all(row[2] == "Scheduled" and row[1].startswith(("node-", "gpu-node-")) for row in lines)
    # gpu pods tolerate the tainted node-0 and are pinned to zone-a (node-0, node-2);
    # no other pod may use node-0.
    assert all(row[1] in ("node-0", "node-2") for row in lines if row[0].startswith("gpu-"))
    assert all(row[1] != "node-0" for row in lines if not row[0].startswith("gpu-"))
    # Trainers got a GPU each through a claim made from the template: on the GPU pool's nodes,
    # two different devices, each claim reserved for its pod.
    trainers = {row[0]: row[1] for row in lines if row[0].startswith("trainer-")}
    assert all(node.startswith("gpu-node-") for node in trainers.values())
    gpus = [line.split() for line in gpu_table.splitlines() if line.startswith("trainer-")]
    assert sorted(g[0] for g in gpus) == sorted(trainers)
    devices = [g[2] for g in gpus]
    assert len(set(devices)) == 2 and all(
        d.startswith("gpu.playground.example.com/gpu-node-") for d in devices
    )
    for pod_name, _, device in gpus:
        assert device.split("/")[1] == trainers[pod_name]  # the device is on the pod's node
