"""``kopf-scheduler run --config FILE`` on a real control plane, beside the reference started with the
same file (its profiles renamed), each on a pool of its own.

- Two non-default profiles: ``packer`` (NodeResourcesFit MostAllocated at weight 5, ImageLocality and
  BalancedAllocation's score off) and ``anywhere`` (TaintToleration's filter disabled, NodeResourcesFit
  at weight 3): a packer pod goes to the busy node, an anywhere pod to the big tainted one, for both
  schedulers; a SchedulerProfile named like a file profile replaces it while it exists.
- ``--feature-gates=GenericWorkload=true`` with a file that only names its profile: the default
  plugin set then holds GangScheduling, so a gang of 4 where 3 fit binds none, with the reference's
  PodGroup condition.
- An invalid file: the reference's message and exit 1 (test_config_reference.py has the rest).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kopf_scheduler_workbench.controlplane import ControlPlane

from .test_gang_cluster import bound_count, failed_messages, initially_scheduled, members, pod_group
from .test_operator_helpers import (
    ROOT,
    cli,
    create,
    deploy,
    free_port,
    fresh_namespace,
    get_json,
    node,
    pod,
    wait_for,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    p = ControlPlane(workloads=True)
    try:
        p.start()
        yield p
    finally:
        p.stop()


@pytest.fixture(scope="module")
def sa_kubeconfig(plane: ControlPlane) -> Path:
    return deploy(plane)


class Scheduler:
    """One scheduler process (ours or the reference) run with a KubeSchedulerConfiguration file."""

    def __init__(self, cmd: list[str], log: Path, port: int | None = None) -> None:
        self.port = port
        self.log_path = log
        self.log = log.open("wb")
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        env["POD_ID"] = f"{log.stem}-{os.getpid()}"  # the replica's identity in leader election
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"exited {self.proc.returncode}:\n{self.logs()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=5) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def metric(self, name: str) -> float | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as resp:
                text = resp.read().decode()
        except (urllib.error.URLError, OSError):
            return None
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split(" ")[1])
        return None

    def logs(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-6000:]

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(15)
        self.log.close()


def config_file(path: Path, kubeconfig: Path | str, profiles: list[dict[str, Any]], **extra: Any) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "clientConnection": {"kubeconfig": str(kubeconfig)},
                "leaderElection": {"leaderElect": False},
                "profiles": profiles,
                **extra,
            }
        )
    )
    return path


def ours(config: Path, log: Path, *extra: str, wait: bool = True) -> Scheduler:
    port = free_port()
    cmd = [sys.executable, "-m", "kopf_scheduler", "run", "--config", str(config)]
    cmd += ["--metrics-host", "127.0.0.1", "--metrics-port", str(port), *extra]
    s = Scheduler(cmd, log, port)
    if wait:
        wait_for(s.ready, 60, what=f"kopf-scheduler ready:\n{s.logs()}")
    return s


def reference(plane: ControlPlane, config: Path, log: Path, *extra: str) -> Scheduler:
    return Scheduler(
        [str(plane.bin_path), "kube-scheduler", f"--config={config}", "--secure-port=0", *extra], log
    )


PROFILES = [
    {
        "schedulerName": "packer",
        "plugins": {
            "multiPoint": {
                "enabled": [{"name": "NodeResourcesFit", "weight": 5}],
                "disabled": [{"name": "ImageLocality"}],
            },
            "score": {"disabled": [{"name": "NodeResourcesBalancedAllocation"}]},
        },
        "pluginConfig": [
            {
                "name": "NodeResourcesFit",
                "args": {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "NodeResourcesFitArgs",
                    "scoringStrategy": {"type": "MostAllocated"},
                },
            }
        ],
    },
    {
        "schedulerName": "anywhere",
        "plugins": {
            "filter": {"disabled": [{"name": "TaintToleration"}]},
            "multiPoint": {"enabled": [{"name": "NodeResourcesFit", "weight": 3}]},
        },
    },
]


def renamed(profiles: list[dict[str, Any]], suffix: str) -> list[dict[str, Any]]:
    return [{**p, "schedulerName": p["schedulerName"] + suffix} for p in profiles]


def pool_nodes(pool: str) -> list[dict[str, Any]]:
    busy = node(f"{pool}-busy", cpu="4", labels={"pool": pool})
    empty = node(f"{pool}-empty", cpu="4", labels={"pool": pool})
    tainted = node(f"{pool}-tainted", cpu="16", labels={"pool": pool})
    tainted["spec"] = {"taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]}
    return [busy, empty, tainted]


def test_a_files_profiles_schedule_as_the_references(
    plane: ControlPlane, sa_kubeconfig: Path, tmp_path: Path
) -> None:
    ns = fresh_namespace(plane, "config")
    pools = {"": "ours", "-ref": "ref"}
    for pool in pools.values():
        create(plane, *pool_nodes(pool)[:2])
        # The tainted node keeps its taint (create() clears the apiserver's not-ready one).
        tainted = pool_nodes(pool)[2]
        create(plane, tainted)
        plane.kubectl(
            "patch",
            "node",
            tainted["metadata"]["name"],
            "--type=merge",
            "-p",
            json.dumps({"spec": tainted["spec"]}),
        )
        assert get_json(plane, "node", tainted["metadata"]["name"])["spec"]["taints"][0]["key"] == "dedicated"
        create(plane, pod(f"{pool}-running", ns, cpu="2", node_name=f"{pool}-busy"))
    ours_cfg = config_file(tmp_path / "ours.yaml", sa_kubeconfig, PROFILES)
    ref_cfg = config_file(tmp_path / "ref.yaml", plane.kubeconfig, renamed(PROFILES, "-ref"))
    theirs = reference(plane, ref_cfg, tmp_path / "reference.log")
    mine = ours(ours_cfg, tmp_path / "ours.log")
    try:
        for suffix, pool in pools.items():
            create(
                plane,
                pod(f"{pool}-packed", ns, f"packer{suffix}", cpu="500m", node_selector={"pool": pool}),
                pod(f"{pool}-anywhere", ns, f"anywhere{suffix}", cpu="500m", node_selector={"pool": pool}),
            )

        def placements() -> dict[str, str] | None:
            out = {}
            for p in get_json(plane, "pods", "-n", ns)["items"]:
                out[p["metadata"]["name"]] = p["spec"].get("nodeName") or ""
            return out if all(out.values()) and len(out) == 6 else None

        got = wait_for(placements, 60, what=f"all pods bound:\n{mine.logs()}")
        # Pod by pod, pool-relative: the same node for both schedulers.
        assert got["ours-packed"] == "ours-busy" and got["ref-packed"] == "ref-busy", got  # MostAllocated
        # Only with TaintToleration's filter off may it land on the tainted node (the least allocated).
        assert got["ours-anywhere"] == "ours-tainted" and got["ref-anywhere"] == "ref-tainted", got

        # A SchedulerProfile named like a file profile replaces it while it exists.
        cr = {
            "apiVersion": "kopfscheduler.io/v1alpha1",
            "kind": "SchedulerProfile",
            "metadata": {"name": "packer-live"},
            "spec": {
                "schedulerName": "packer",
                "pluginConfig": [
                    {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "LeastAllocated"}}}
                ],
            },
        }
        plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(cr))
        wait_for(
            lambda: (get_json(plane, "schedulerprofile", "packer-live").get("status") or {}).get(
                "activeGeneration"
            ),
            30,
            what="the SchedulerProfile in force",
        )
        create(plane, pod("ours-spread", ns, "packer", cpu="500m", node_selector={"pool": "ours"}))
        wait_for(lambda: get_json(plane, "pod", "ours-spread", "-n", ns)["spec"].get("nodeName"), 30)
        assert get_json(plane, "pod", "ours-spread", "-n", ns)["spec"]["nodeName"] == "ours-empty"
        plane.kubectl("delete", "schedulerprofile", "packer-live")
        # Deleted: the file's MostAllocated profile is back (busy: 2.5 of 4 cpu, empty: 0.5).
        create(plane, pod("ours-packed-again", ns, "packer", cpu="500m", node_selector={"pool": "ours"}))
        wait_for(lambda: get_json(plane, "pod", "ours-packed-again", "-n", ns)["spec"].get("nodeName"), 30)
        assert get_json(plane, "pod", "ours-packed-again", "-n", ns)["spec"]["nodeName"] == "ours-busy"
        # explain with the same file reads the live cluster under the file's profiles.
        explained = json.loads(
            cli(plane, "explain", f"{ns}/ours-packed", "--config", str(ours_cfg), "-o", "json")
        )
        assert (explained["profile"], explained["chosen"]) == ("packer", "ours-busy")
    finally:
        mine.stop()
        theirs.stop()


def test_generic_workload_puts_gang_scheduling_in_the_default_profile(
    plane: ControlPlane, sa_kubeconfig: Path, tmp_path: Path
) -> None:
    """Default plugins only (the file names the profile, nothing else) and GenericWorkload on: a gang
    of 4 (minCount 4) on room for 3 binds none, and both PodGroups say the same."""
    ns = fresh_namespace(plane, "config-gang")
    gate = "--feature-gates=GenericWorkload=true"
    ours_cfg = config_file(tmp_path / "ours.yaml", sa_kubeconfig, [{"schedulerName": "kopf-scheduler"}])
    ref_cfg = config_file(tmp_path / "ref.yaml", plane.kubeconfig, [{"schedulerName": "default-scheduler"}])
    theirs = reference(plane, ref_cfg, tmp_path / "reference.log", gate)
    mine = ours(ours_cfg, tmp_path / "ours.log", gate)
    try:
        pools = {"kopf-scheduler": "gang-ours", "default-scheduler": "gang-ref"}
        for pool in pools.values():
            create(plane, *(node(f"{pool}-{i}", cpu="1", labels={"pool": pool}) for i in range(1, 4)))
        for scheduler, pool in pools.items():
            create(plane, *members(pool, ns, scheduler, pool, count=4))
        for pool in pools.values():
            create(plane, pod_group(pool, ns, 4))
        ours_failed = failed_messages(plane, ns, "gang-ours", 4)
        ref_failed = failed_messages(plane, ns, "gang-ref", 4)
        assert sorted(ours_failed.values()) == sorted(ref_failed.values()), (ours_failed, ref_failed)
        ours_cond = initially_scheduled(plane, ns, "gang-ours", "False")
        ref_cond = initially_scheduled(plane, ns, "gang-ref", "False")
        assert (ours_cond["reason"], ours_cond["message"]) == (ref_cond["reason"], ref_cond["message"])
        assert "minCount (4) cannot be satisfied" in ours_cond["message"]
        assert bound_count(plane, ns, "gang-ours") == 0 and bound_count(plane, ns, "gang-ref") == 0
    finally:
        mine.stop()
        theirs.stop()


def test_an_invalid_file_exits_1_with_the_references_message(tmp_path: Path, sa_kubeconfig: Path) -> None:
    bad = config_file(tmp_path / "bad.yaml", sa_kubeconfig, [{"schedulerName": "a"}, {"schedulerName": "a"}])
    proc = subprocess.run(
        [sys.executable, "-m", "kopf_scheduler", "run", "--config", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip() == "kopf-scheduler: profiles[1].schedulerName: Duplicate value: {}"


def test_config_export_from_the_cluster(plane: ControlPlane, sa_kubeconfig: Path, tmp_path: Path) -> None:
    """The cluster's SchedulerProfiles as one KubeSchedulerConfiguration, which the reference accepts."""
    cr = {
        "apiVersion": "kopfscheduler.io/v1alpha1",
        "kind": "SchedulerProfile",
        "metadata": {"name": "exported"},
        "spec": {
            "schedulerName": "exported",
            "percentageOfNodesToScore": 40,
            "pluginConfig": [
                {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}}
            ],
        },
    }
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(cr))
    try:
        doc = yaml.safe_load(cli(plane, "config", "export", "--from-cluster"))
        names = [p["schedulerName"] for p in doc["profiles"]]
        assert "exported" in names and "kopf-scheduler" in names
        exported = next(p for p in doc["profiles"] if p["schedulerName"] == "exported")
        assert exported["percentageOfNodesToScore"] == 40
        doc["clientConnection"] = {"kubeconfig": str(plane.kubeconfig)}
        path = tmp_path / "exported.yaml"
        path.write_text(yaml.safe_dump(doc))
        written = tmp_path / "written.yaml"
        proc = subprocess.run(
            [
                str(plane.bin_path),
                "kube-scheduler",
                f"--config={path}",
                "--secure-port=0",
                f"--write-config-to={written}",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
    finally:
        plane.kubectl("delete", "schedulerprofile", "exported")


def test_leader_election_and_delay_cache_until_active_from_the_file(
    plane: ControlPlane, sa_kubeconfig: Path, tmp_path: Path
) -> None:
    """Two replicas from one file (leaderElection on a named peering, short timings,
    delayCacheUntilActive): the standby lists nothing and is not ready until it leads."""
    ns = fresh_namespace(plane, "config-ha")
    config = config_file(
        tmp_path / "ha.yaml",
        sa_kubeconfig,
        [{"schedulerName": "ha"}],
        leaderElection={
            "leaderElect": True,
            "leaseDuration": "6s",
            "renewDeadline": "4s",
            "retryPeriod": "1s",
            "resourceName": "config-ha",
        },
        delayCacheUntilActive=True,
    )
    first = ours(config, tmp_path / "first.log")
    second = ours(config, tmp_path / "second.log", "--logging-format=json", "-v=2", wait=False)

    def until(check: Any, who: Scheduler, what: str) -> None:
        try:
            wait_for(lambda: check() or None, 30, what=what)
        except TimeoutError:
            raise AssertionError(f"{what}: {who.metric('kopf_scheduler_leader')}\n{who.logs()}") from None

    try:
        until(lambda: first.metric("kopf_scheduler_leader") == 1.0, first, "a leader")
        until(lambda: second.metric("kopf_scheduler_leader") == 0.0, second, "a standby")
        assert get_json(plane, "clusterkopfpeering", "config-ha")["metadata"]["name"] == "config-ha"
        # The standby keeps no cache: no listing, not ready.
        assert not second.ready()
        assert "Initial listing complete" not in second.logs() and "Initial listing complete" in first.logs()
        first.proc.kill()
        until(lambda: second.metric("kopf_scheduler_leader") == 1.0, second, "the takeover")
        until(second.ready, second, "the new leader ready")
        # component-base's JSON lines (--logging-format=json).
        second.logs()  # flushed
        text = second.log_path.read_text()
        lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
        assert any(line["msg"] == "Leading: starting the informers (delayCacheUntilActive)" for line in lines)
        create(plane, node("ha-node", cpu="2", labels={"pool": "ha"}))
        create(plane, pod("ha-pod", ns, "ha", node_selector={"pool": "ha"}))
        wait_for(lambda: get_json(plane, "pod", "ha-pod", "-n", ns)["spec"].get("nodeName"), 30)
    finally:
        first.stop()
        second.stop()
