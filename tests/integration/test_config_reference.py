"""The reference kube-scheduler v1.37.2 asked about the same KubeSchedulerConfiguration files as ours.

No control plane: kube-scheduler validates its file (and builds its profiles) before it talks to the
apiserver, so a kubeconfig pointing nowhere is enough. Every case of
tests/unit/data/kubescheduler_config_cases.yaml gets the message recorded there from both; and for
valid files, ours' ``--write-config-to`` output (the defaulted configuration) equals the reference's,
with and without GenericWorkload.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kopf_scheduler_workbench.controlplane import build

pytestmark = pytest.mark.integration

CASES = yaml.safe_load(
    (Path(__file__).parent.parent / "unit" / "data" / "kubescheduler_config_cases.yaml").read_text()
)

VALID = [
    "",
    """
parallelism: 8
percentageOfNodesToScore: 30
podInitialBackoffSeconds: 2
podMaxBackoffSeconds: 20
delayCacheUntilActive: true
leaderElection:
  leaderElect: false
  leaseDuration: 1m30s
  resourceName: my-sched
profiles:
- schedulerName: bin-packing
  percentageOfNodesToScore: 50
  plugins:
    multiPoint:
      enabled:
      - name: NodeResourcesFit
        weight: 5
      disabled:
      - name: ImageLocality
    score:
      disabled:
      - name: NodeResourcesBalancedAllocation
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
        resources:
        - name: cpu
        - name: memory
          weight: 3
  - name: PodTopologySpread
    args:
      apiVersion: kubescheduler.config.k8s.io/v1
      kind: PodTopologySpreadArgs
      defaultingType: List
      defaultConstraints:
      - maxSkew: 1
        topologyKey: topology.kubernetes.io/zone
        whenUnsatisfiable: ScheduleAnyway
- schedulerName: second
  plugins:
    filter:
      disabled: [{name: "*"}]
      enabled: [{name: NodeName}, {name: NodeResourcesFit}]
    score:
      enabled: [{name: ImageLocality, weight: 10}]
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: RequestedToCapacityRatio
        requestedToCapacityRatio:
          shape:
          - {utilization: 0, score: 10}
          - {utilization: 100, score: 0}
  - name: DefaultPreemption
    args:
      minCandidateNodesAbsolute: 0
  - name: DynamicResources
    args:
      filterTimeout: 5s
""",
]


@pytest.fixture(scope="module")
def kcp() -> Path:
    return build(verbose=False)


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cfg") / "nowhere.kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "x"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    return path


def head(kubeconfig: Path) -> str:
    return (
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        f"clientConnection:\n  kubeconfig: {kubeconfig}\n"
    )


def reference(kcp: Path, config: Path, *extra: str) -> str | None:
    """kube-scheduler's error for ``config`` (None when it got as far as writing its configuration)."""
    proc = subprocess.run(
        [str(kcp), "kube-scheduler", "--config", str(config), "--secure-port", "0", *extra],
        capture_output=True,
        text=True,
        timeout=60,
    )
    match = re.search(r'"command failed" err=(".*")\s*$', proc.stderr, re.M)
    if match:
        return str(json.loads(match.group(1)))
    match = re.search(r'"command failed" err=<\n(.*?)\n >', proc.stderr, re.S)
    if match:
        return "\n".join(line[1:] for line in match.group(1).splitlines())
    assert proc.returncode == 0, proc.stderr[-2000:]
    return None


def ours(config: Path, *extra: str) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "kopf_scheduler", "run", "--config", str(config), *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.returncode, proc.stderr


def test_every_recorded_case_is_still_the_references(kcp: Path, kubeconfig: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    differ: list[tuple[str, Any, Any]] = []
    for case in CASES:
        config.write_text(head(kubeconfig) + case["config"])
        got = reference(kcp, config, "--write-config-to", str(tmp_path / "out.yaml"))
        if got != case["message"]:
            differ.append((case["name"], case["message"], got))
    assert differ == []


@pytest.mark.parametrize("case", [c for c in CASES if c["message"]][:12], ids=lambda c: c["name"])
def test_ours_exits_1_with_the_message(case: dict[str, Any], kubeconfig: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(head(kubeconfig) + case["config"])
    code, stderr = ours(config)
    assert (code, stderr.strip()) == (1, f"kopf-scheduler: {case['message']}")


@pytest.mark.parametrize("gates", ["", "GenericWorkload=true"])
@pytest.mark.parametrize("body", VALID, ids=["empty", "two-profiles"])
def test_the_written_configuration_is_the_references(
    kcp: Path, kubeconfig: Path, tmp_path: Path, body: str, gates: str
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(head(kubeconfig) + body)
    extra = [f"--feature-gates={gates}"] if gates else []
    theirs, mine = tmp_path / "reference.yaml", tmp_path / "ours.yaml"
    assert reference(kcp, config, "--write-config-to", str(theirs), *extra) is None
    code, stderr = ours(config, "--write-config-to", str(mine), *extra)
    assert code == 0, stderr
    assert yaml.safe_load(mine.read_text()) == yaml.safe_load(theirs.read_text())
