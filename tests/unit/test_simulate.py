"""``kopf-scheduler simulate`` on the example inputs, asserting the reference's messages."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from kopf_scheduler.cli import main
from kopf_scheduler.simulate import load_documents, simulate

EX = Path(__file__).resolve().parent.parent / "examples"
NO_PREEMPTION = str(EX / "no_preemption_profile.yaml")


def run_json(capsys: pytest.CaptureFixture[str], *files: str, seed: int = 0) -> dict[str, dict[str, Any]]:
    assert main(["simulate", *files, "-o", "json", "--seed", str(seed)]) == 0
    out = json.loads(capsys.readouterr().out)
    return {f"{p['namespace']}/{p['name']}": p for p in out["pods"]}


def test_insufficient_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    pods = run_json(capsys, str(EX / "insufficient_cpu.yaml"), NO_PREEMPTION)
    assert pods["default/big"] == {
        "namespace": "default",
        "name": "big",
        "node": "",
        "nominatedNode": "",
        "victims": [],
        "message": "0/3 nodes are available: 3 Insufficient cpu.",
    }
    assert pods["default/small"]["node"] in {"node-a", "node-b", "node-c"}
    assert pods["default/small"]["message"] == ""


def test_mixed_reasons_are_counted_and_sorted(capsys: pytest.CaptureFixture[str]) -> None:
    pods = run_json(capsys, str(EX / "mixed_reasons.yaml"), NO_PREEMPTION)
    assert pods["shop/web"]["message"] == (
        "0/3 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint(s), "
        "1 node(s) were unschedulable."
    )


def test_default_profile_appends_the_preemption_message(capsys: pytest.CaptureFixture[str]) -> None:
    from kopf_scheduler.config.profile import ProfileError
    from kopf_scheduler.framework.profiles import default_profile

    try:
        default_profile()
    except ProfileError as exc:
        pytest.skip(f"default profile not loadable yet: {exc}")
    pods = run_json(capsys, str(EX / "no_victims.yaml"))
    assert pods["default/pending"]["message"] == (
        "0/3 nodes are available: 3 Insufficient cpu. "
        "preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
    )
    # A request above every node's allocatable is UnschedulableAndUnresolvable: preemption cannot help.
    pods = run_json(capsys, str(EX / "insufficient_cpu.yaml"))
    assert pods["default/big"]["message"] == (
        "0/3 nodes are available: 3 Insufficient cpu. "
        "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    )


def test_same_seed_same_placement(capsys: pytest.CaptureFixture[str]) -> None:
    a = run_json(capsys, str(EX / "insufficient_cpu.yaml"), NO_PREEMPTION, seed=7)
    b = run_json(capsys, str(EX / "insufficient_cpu.yaml"), NO_PREEMPTION, seed=7)
    assert a == b


def test_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(EX / "insufficient_cpu.yaml"), NO_PREEMPTION]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["POD", "NODE", "MESSAGE"]
    big = next(line for line in lines if line.startswith("default/big"))
    assert big.split(None, 2)[1:] == ["<none>", "0/3 nodes are available: 3 Insufficient cpu."]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("bad_node.yaml", "bad_node.yaml: document 1 (Node broken): status.allocatable.cpu:"),
        (
            "bad_profile.yaml",
            "bad_profile.yaml: document 0 (SchedulerProfile bad): spec.plugins.score.enabled[0].name: "
            "unknown plugin 'NoSuchPlugin'",
        ),
    ],
)
def test_bad_files_name_document_and_field(
    capsys: pytest.CaptureFixture[str], name: str, expected: str
) -> None:
    assert main(["simulate", str(EX / name)]) == 2
    assert expected in capsys.readouterr().err


def test_unsupported_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "x.yaml"
    f.write_text("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n")
    assert main(["simulate", str(f)]) == 2
    assert "document 0 (Secret s): kind: unsupported kind 'Secret'" in capsys.readouterr().err


def test_wait_for_first_consumer_claim_is_provisioned_for_the_chosen_node(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pods = run_json(capsys, str(EX / "wait_for_first_consumer.yaml"), NO_PREEMPTION)
    assert pods["default/db"]["node"] in {"node-a", "node-b"}
    assert pods["default/db"]["message"] == ""
    # A StorageClass without volumeBindingMode is Immediate, so its unbound claim blocks the pod.
    assert pods["default/shipper"]["node"] == ""
    assert pods["default/shipper"]["message"] == (
        "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims. not found"
    )


def test_csi_driver_volume_attachment_and_csi_nodes_decide_node_volume_limits(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pods = run_json(capsys, str(EX / "csi_attach_limits.yaml"), NO_PREEMPTION)
    # node-a is full (a VolumeAttachment holds its one slot), node-c lacks the opted-in driver.
    assert pods["default/first"]["node"] == "node-b"
    assert pods["default/second"]["node"] == ""
    assert pods["default/second"]["message"] == (
        "0/3 nodes are available: 1 disk.csi.example.com CSI driver is not installed on the node, "
        "2 node(s) exceed max volume count."
    )


@pytest.mark.parametrize(
    ("dropped", "used", "unused"),
    [
        ("CSIDriver", "node-c", "node-a"),  # without the opt-in a missing driver is fine
        ("VolumeAttachment", "node-a", "node-c"),  # node-a has its slot back
    ],
)
def test_without_the_csi_driver_or_the_attachment_those_checks_pass(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, dropped: str, used: str, unused: str
) -> None:
    docs = (EX / "csi_attach_limits.yaml").read_text().split("\n---\n")
    kept = [d for d in docs if f"kind: {dropped}\n" not in d]
    assert len(kept) == len(docs) - 1
    f = tmp_path / "cluster.yaml"
    f.write_text("\n---\n".join(kept))
    pods = run_json(capsys, str(f), NO_PREEMPTION)
    placed = {pods[f"default/{p}"]["node"] for p in ("first", "second")}
    assert used in placed and unused not in placed and "" not in placed
    assert pods["default/first"]["message"] == pods["default/second"]["message"] == ""


def test_wait_for_first_consumer_claim_is_bound_in_the_objects() -> None:
    from kopf_scheduler.simulate import load_documents, simulate

    inputs = load_documents([str(EX / "wait_for_first_consumer.yaml"), NO_PREEMPTION])
    assert inputs.objects["StorageClass"]["default-mode"].volume_binding_mode == "Immediate"
    (db, _shipper) = asyncio.run(simulate(inputs, seed=0))
    pvc = inputs.objects["PersistentVolumeClaim"]["default/data"]
    annotations = pvc.metadata.annotations
    assert annotations["volume.kubernetes.io/selected-node"] == db.node
    assert annotations["pv.kubernetes.io/bind-completed"] == "yes"
    pv = inputs.objects["PersistentVolume"][pvc.volume_name]
    assert pv.claim_ref is not None and (pv.claim_ref.name, pv.claim_ref.uid) == ("data", "data-uid")


def test_preemption_nominates_evicts_and_retries(capsys: pytest.CaptureFixture[str]) -> None:
    from kopf_scheduler.config.profile import ProfileError
    from kopf_scheduler.framework.profiles import default_profile

    try:
        default_profile()
    except ProfileError as exc:
        pytest.skip(f"default profile not loadable yet: {exc}")
    pods = run_json(capsys, str(EX / "preemption.yaml"))
    assert pods["default/web"] == {
        "namespace": "default",
        "name": "web",
        "node": "node-a",
        "nominatedNode": "node-a",
        "victims": ["default/batch"],
        "message": "",
    }
    assert main(["simulate", str(EX / "preemption.yaml"), "--seed", "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["POD", "NODE", "NOMINATED", "VICTIMS", "MESSAGE"]
    assert lines[1].split() == ["default/web", "node-a", "node-a", "default/batch"]


def test_victims_are_split_by_the_attempt_that_preempted_them() -> None:
    from kopf_scheduler.simulate import _split

    # Attempt 1 started with none evicted and preempted two; attempt 2 started after them and
    # preempted one more; an attempt that preempted nothing adds no group.
    assert _split(["a", "b", "c"], [0, 2]) == [["a", "b"], ["c"]]
    assert _split(["a", "b"], [0, 2]) == [["a", "b"]]
    assert _split([], [0]) == []


def test_a_preemptor_outcome_carries_its_first_attempts_victims() -> None:
    inputs = load_documents([str(EX / "preemption.yaml")])
    outcomes = {o.name: o for o in asyncio.run(simulate(inputs, seed=0))}
    web = outcomes["web"]
    assert web.victims_by_attempt == [["default/batch"]] and web.victims == ["default/batch"]


def test_gang_binds_none_without_room_and_a_short_gang_waits(capsys: pytest.CaptureFixture[str]) -> None:
    pods = run_json(capsys, str(EX / "gang.yaml"))
    group = (
        "pod group is unschedulable, minCount (4) cannot be satisfied: 3 scheduled, 0 remaining, "
        "pod group preemption: No preemption victims found for incoming preemptor"
    )
    assert [pods[f"default/train-{i}"]["message"] for i in range(1, 5)] == [group] * 3 + [
        "0/3 nodes are available: 3 Insufficient cpu."
    ]
    assert all(pods[f"default/train-{i}"]["node"] == "" for i in range(1, 5))
    waiting = (
        "not attempted: GangScheduling: waiting for minCount pods from a gang to appear in scheduling queue"
    )
    assert pods["default/small-1"]["message"] == pods["default/small-2"]["message"] == waiting
