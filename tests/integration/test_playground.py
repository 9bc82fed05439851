"""README command 1 works: the playground binds every demo pod on a real apiserver."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kopf_scheduler.cluster.controlplane import ControlPlane

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
    lines = [
        line.split()
        for line in result.stdout.splitlines()
        if line.startswith(("web-", "api-", "batch-", "gpu-"))
    ]
    assert len(lines) == 12
    assert all(row[2] == "Scheduled" and row[1].startswith("node-") for row in lines)
    # gpu pods tolerate the tainted node-0 and are pinned to zone-a (node-0, node-2);
    # no other pod may use node-0.
    assert all(row[1] in ("node-0", "node-2") for row in lines if row[0].startswith("gpu-"))
    assert all(row[1] != "node-0" for row in lines if not row[0].startswith("gpu-"))
