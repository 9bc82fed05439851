"""``kopf-scheduler config import`` / ``export``: a KubeSchedulerConfiguration to SchedulerProfiles, back."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from kopf_scheduler.cli import main
from kopf_scheduler.config import kubescheduler as ks
from kopf_scheduler.configtool import ConfigToolError, export_config, import_profiles
from kopf_scheduler.framework.profiles import load_profile, profiles_from_config

CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
percentageOfNodesToScore: 30
podInitialBackoffSeconds: 2
podMaxBackoffSeconds: 20
leaderElection: {leaderElect: false}
profiles:
- schedulerName: Bin_Packing
  plugins:
    multiPoint:
      enabled: [{name: NodeResourcesFit, weight: 5}]
      disabled: [{name: ImageLocality}]
  pluginConfig:
  - name: NodeResourcesFit
    args:
      apiVersion: kubescheduler.config.k8s.io/v1
      kind: NodeResourcesFitArgs
      scoringStrategy:
        type: RequestedToCapacityRatio
        requestedToCapacityRatio:
          shape: [{utilization: 0, score: 0}, {utilization: 100, score: 10}]
- schedulerName: spread
  percentageOfNodesToScore: 70
  plugins:
    filter:
      disabled: [{name: TaintToleration}]
"""


def resolved(profiles: list[Any]) -> dict[str, Any]:
    out = {}
    for p in profiles:
        r = p.resolved
        out[p.scheduler_name] = (
            r.points,
            {n: r.weights[n] for n in r.points["score"]},
            {n: dataclasses.asdict(a) if a is not None else None for n, a in r.args.items()},
            p.percentage_of_nodes_to_score,
            p.pod_initial_backoff_seconds,
            p.pod_max_backoff_seconds,
        )
    return out


def test_import_makes_valid_resources_that_schedule_as_the_file() -> None:
    resources, notes = import_profiles(CONFIG)
    assert [r["metadata"]["name"] for r in resources] == ["bin-packing", "spread"]
    specs = [r["spec"] for r in resources]
    assert [s["schedulerName"] for s in specs] == ["Bin_Packing", "spread"]
    # The global settings go into every profile, as the engine applies them.
    assert [s.get("percentageOfNodesToScore") for s in specs] == [30, 70]
    assert {(s["podInitialBackoffSeconds"], s["podMaxBackoffSeconds"]) for s in specs} == {(2, 20)}
    assert notes == ["leaderElection is not part of a SchedulerProfile: run's --leader-elect* flags take it"]
    from_file = resolved(profiles_from_config(ks.load(CONFIG)))
    from_resources = resolved([load_profile(s) for s in specs])
    assert from_resources == from_file


def test_export_goes_back_to_an_equivalent_file() -> None:
    resources, _ = import_profiles(CONFIG)
    doc, notes = export_config(resources)
    assert notes == ["added the built-in 'kopf-scheduler' profile (no resource replaces it)"]
    assert (doc["podInitialBackoffSeconds"], doc["podMaxBackoffSeconds"]) == (2, 20)
    assert [p["schedulerName"] for p in doc["profiles"]] == ["kopf-scheduler", "Bin_Packing", "spread"]
    again = resolved(profiles_from_config(ks.load_document(doc)))
    original = resolved(profiles_from_config(ks.load(CONFIG)))
    assert {k: v for k, v in again.items() if k != "kopf-scheduler"} == original


def test_export_refuses_what_one_file_cannot_hold() -> None:
    def cr(name: str, **spec: Any) -> dict[str, Any]:
        return {
            "kind": "SchedulerProfile",
            "metadata": {"name": name},
            "spec": {"schedulerName": name, **spec},
        }

    with pytest.raises(ConfigToolError, match=r"the profiles' backoffs differ.*1s/10s: a; 2s/10s: b"):
        export_config([cr("a"), cr("b", podInitialBackoffSeconds=2)])
    with pytest.raises(ConfigToolError, match=r"SchedulerProfile bad: spec\.pluginConfig\[0\]"):
        export_config([cr("bad", pluginConfig=[{"name": "NodeResourcesFit", "args": {"nope": 1}}])])
    # Queue sort must be the same for all profiles (the reference's validation, at export).
    with pytest.raises(ConfigToolError, match=r"must be the same for all profiles"):
        export_config(
            [
                cr(
                    "kopf-scheduler",
                    plugins={
                        "queueSort": {"enabled": [{"name": "PrioritySort"}], "disabled": [{"name": "*"}]},
                        "multiPoint": {"disabled": [{"name": "PrioritySort"}]},
                    },
                ),
                cr("b"),
            ]
        )


def test_the_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    out = tmp_path / "crs"
    assert main(["config", "import", str(config), "--output-dir", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["bin-packing.yaml", "spread.yaml"]
    capsys.readouterr()
    assert main(["config", "export", *(str(p) for p in sorted(out.iterdir()))]) == 0
    exported = yaml.safe_load(capsys.readouterr().out)
    assert exported["kind"] == "KubeSchedulerConfiguration"
    bad = tmp_path / "bad.yaml"
    bad.write_text(CONFIG.replace("podMaxBackoffSeconds: 20", "podMaxBackoffSeconds: 1"))
    assert main(["config", "import", str(bad)]) == 1
    assert capsys.readouterr().err.strip() == (
        "kopf-scheduler: podMaxBackoffSeconds: Invalid value: 1: must be greater than or equal to "
        "PodInitialBackoffSeconds"
    )
