"""``run``'s flags and ``--config`` combined as kube-scheduler combines them (app/options)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kopf_scheduler.cluster import run as run_cmd
from kopf_scheduler.cluster.runconfig import RunConfigError, resolve

HEAD = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"


def args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    run_cmd.add_arguments(parser)
    return parser.parse_args(list(argv))


def config_file(tmp_path: Path, body: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(HEAD + body)
    return str(path)


def test_without_a_file_the_defaults_and_the_connection_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KOPF_SCHEDULER_KUBECONFIG", raising=False)
    plain = resolve(args())
    assert plain.profiles is None  # the built-in kopf-scheduler profile
    assert plain.options["kube_api_qps"] is None  # no client-side limit unless asked
    assert (
        plain.options["peering_lifetime"],
        plain.options["renew_deadline"],
        plain.options["retry_period"],
    ) == (
        15.0,
        10.0,
        2.0,
    )
    assert plain.options["standalone"] is False and plain.options["peering"] == "kopf-scheduler"
    flagged = resolve(args("--kubeconfig", "/k", "--kube-api-qps", "20", "--leader-elect=false"))
    assert flagged.kubeconfig == "/k"
    assert (flagged.options["kube_api_qps"], flagged.options["kube_api_burst"]) == (20.0, 100)
    assert flagged.options["standalone"] is True


def test_with_a_file_only_the_leader_election_flags_override_it(tmp_path: Path) -> None:
    path = config_file(
        tmp_path,
        """
clientConnection: {kubeconfig: /from/file, qps: 7, burst: 9}
leaderElection: {leaseDuration: 30s, renewDeadline: 20s, retryPeriod: 5s, resourceName: my-lock}
profiles:
- schedulerName: packer
  plugins:
    multiPoint:
      enabled: [{name: NodeResourcesFit, weight: 4}]
  pluginConfig:
  - name: NodeResourcesFit
    args: {scoringStrategy: {type: MostAllocated}}
""",
    )
    resolved = resolve(
        args(
            "--config",
            path,
            "--kubeconfig",
            "/from/flag",
            "--kube-api-qps",
            "1000",
            "--leader-elect-renew-deadline",
            "12s",
        )
    )
    # --kubeconfig and --kube-api-qps are ignored with --config (said), the LE flag wins.
    assert resolved.kubeconfig == "/from/file"
    assert (resolved.options["kube_api_qps"], resolved.options["kube_api_burst"]) == (7.0, 9)
    assert (resolved.options["peering_lifetime"], resolved.options["renew_deadline"]) == (30.0, 12.0)
    assert resolved.options["retry_period"] == 5.0
    assert resolved.options["peering"] == "my-lock"  # resourceName given: it names the peering
    assert any("--kubeconfig is ignored" in w for w in resolved.warnings)
    assert any("--kube-api-qps is ignored" in w for w in resolved.warnings)
    [profile] = resolved.profiles or []
    assert profile.scheduler_name == "packer"
    assert profile.resolved is not None and profile.resolved.weights["NodeResourcesFit"] == 4
    assert profile.resolved.args["NodeResourcesFit"].scoring_strategy.type == "MostAllocated"


def test_a_files_defaults_are_the_references(tmp_path: Path) -> None:
    resolved = resolve(args("--config", config_file(tmp_path, "")))
    assert [p.scheduler_name for p in resolved.profiles or []] == ["default-scheduler"]
    # qps 50 / burst 100 as kube-scheduler's defaulting; the default lock name does not rename our
    # peering (it would be the reference's own lock).
    assert (resolved.options["kube_api_qps"], resolved.options["kube_api_burst"]) == (50.0, 100)
    assert resolved.options["peering"] == "kopf-scheduler" and resolved.options["standalone"] is False


def test_leader_elect_false_in_the_file_is_standalone_and_a_flag_can_turn_it_back(tmp_path: Path) -> None:
    path = config_file(tmp_path, "leaderElection: {leaderElect: false}\n")
    assert resolve(args("--config", path)).options["standalone"] is True
    assert resolve(args("--config", path, "--leader-elect")).options["standalone"] is False


def test_an_invalid_combination_is_refused_with_the_references_words(tmp_path: Path) -> None:
    path = config_file(tmp_path, "leaderElection: {leaseDuration: 15s}\n")
    with pytest.raises(RunConfigError) as exc:
        resolve(args("--config", path, "--leader-elect-renew-deadline", "20s"))
    assert (
        str(exc.value)
        == 'leaderElection.leaseDuration: Invalid value: "20s": must be greater than `RenewDeadline`'
    )
    with pytest.raises(RunConfigError, match=r"^unrecognized feature gate: Nope$"):
        resolve(args("--feature-gates", "GenericWorkload=true,Nope=true"))


def test_feature_gates_reach_the_default_profile(tmp_path: Path) -> None:
    path = config_file(tmp_path, "")
    off = resolve(args("--config", path))
    on = resolve(args("--config", path, "--feature-gates", "GenericWorkload=true"))
    [p_off], [p_on] = off.profiles or [], on.profiles or []
    assert p_off.resolved is not None and "GangScheduling" not in p_off.resolved.names
    assert p_on.resolved is not None and "GangScheduling" in p_on.resolved.names
    assert on.options["feature_gates"] == "GenericWorkload=true"
    # The older flag is an alias of the gate.
    assert resolve(args("--no-opportunistic-batching")).options["opportunistic_batching"] is False
    assert resolve(args()).options["opportunistic_batching"] is True


def test_protobuf_is_accepted_and_said_to_be_json(tmp_path: Path) -> None:
    path = config_file(tmp_path, "clientConnection: {contentType: application/vnd.kubernetes.protobuf}\n")
    resolved = resolve(args("--config", path))
    assert any("talks JSON only" in w for w in resolved.warnings)
    assert not any("JSON" in w for w in resolve(args("--config", config_file(tmp_path, ""))).warnings)


def test_run_exits_1_with_the_message_and_writes_the_config(tmp_path: Path) -> None:
    bad = config_file(tmp_path, "parallelism: 0\npodMaxBackoffSeconds: 0\n")
    proc = subprocess.run(
        [sys.executable, "-m", "kopf_scheduler", "run", "--config", bad],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        "kopf-scheduler: [parallelism: Invalid value: 0: should be an integer value greater than zero, "
        "podMaxBackoffSeconds: Invalid value: 0: must be greater than or equal to PodInitialBackoffSeconds]"
    )
    out = tmp_path / "written.yaml"
    good = config_file(tmp_path, "profiles: [{schedulerName: a}, {schedulerName: b}]\n")
    proc = subprocess.run(
        [sys.executable, "-m", "kopf_scheduler", "run", "--config", good, "--write-config-to", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    written = yaml.safe_load(out.read_text())
    assert [p["schedulerName"] for p in written["profiles"]] == ["a", "b"]
    assert written["leaderElection"]["leaseDuration"] == "15s" and written["parallelism"] == 16


def test_json_log_lines_as_component_base_writes_them() -> None:
    import json
    import logging

    record = logging.LogRecord(
        "kopf_scheduler.x", logging.INFO, "/a/b/leader.py", 42, "lead %s", ("won",), None
    )
    line = json.loads(run_cmd.JsonFormatter().format(record))
    assert (line["msg"], line["caller"], line["v"]) == ("lead won", "leader.py:42", 0)
    assert isinstance(line["ts"], float)
    debug = logging.LogRecord("x", logging.DEBUG, "/m.py", 1, "d", (), None)
    assert json.loads(run_cmd.JsonFormatter().format(debug))["v"] == 4
