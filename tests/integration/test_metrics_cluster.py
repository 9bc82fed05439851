"""The running operator's /metrics on the real control plane: kube-scheduler's STABLE metrics.

One replica (the manifests' ServiceAccount) schedules two pods that fit and one no node can take;
the scrape must show each STABLE metric with the reference's name, type and labels, and values
that follow from those three pods.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kopf_scheduler_workbench.controlplane import ControlPlane

from .test_operator_helpers import (
    Replica,
    create,
    deploy,
    fresh_namespace,
    leading_replica,
    node,
    node_of,
    pod,
    reason_events,
    wait_for,
)

pytestmark = pytest.mark.integration

PROFILE = "kopf-scheduler"


@pytest.fixture(scope="module")
def namespace(control_plane: ControlPlane) -> str:
    return fresh_namespace(control_plane, "metrics")


@pytest.fixture(scope="module")
def replica(
    control_plane: ControlPlane, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replica]:
    kubeconfig: Path = deploy(control_plane)
    log_dir = tmp_path_factory.mktemp("metrics-replica")
    with leading_replica(kubeconfig, f"metrics-{namespace}", [namespace], f"m-{namespace}", log_dir) as r:
        yield r


def scrape(replica: Replica) -> dict[str, Any]:
    status, text = replica.http("/metrics")
    assert status == 200
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(fams: dict[str, Any], family: str, sample: str, **labels: str) -> float:
    total = 0.0
    for s in fams[family].samples:
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
            total += s.value
    return total


def test_stable_metrics_are_served_with_sensible_values(
    control_plane: ControlPlane, replica: Replica, namespace: str
) -> None:
    tag = uuid.uuid4().hex[:6]
    create(control_plane, node(f"m-a-{tag}", labels={"t": tag}), node(f"m-b-{tag}", labels={"t": tag}))
    fits = [f"fit{i}-{tag}" for i in range(2)]
    create(control_plane, *(pod(n, namespace, node_selector={"t": tag}) for n in fits))
    create(control_plane, pod(f"nowhere-{tag}", namespace, node_selector={"t": f"none-{tag}"}))
    for name in fits:
        wait_for(lambda name=name: node_of(control_plane, namespace, name), 30, what=f"{name} bound")
    wait_for(
        lambda: reason_events(control_plane, namespace, f"nowhere-{tag}", "FailedScheduling"),
        30,
        what="FailedScheduling",
    )
    # The binding cycle records its metrics after the bind returns: wait for them, not for the pod.
    wait_for(
        lambda: (
            value(
                scrape(replica),
                "scheduler_pod_scheduling_attempts",
                "scheduler_pod_scheduling_attempts_count",
            )
            >= 2
        ),
        15,
        what="pod_scheduling_attempts",
    )
    fams = scrape(replica)

    stable = {
        "scheduler_schedule_attempts": ("counter", {"result", "profile"}),
        "scheduler_scheduling_attempt_duration_seconds": ("histogram", {"result", "profile", "le"}),
        "scheduler_preemption_victims": ("histogram", {"le"}),
        "scheduler_preemption_attempts": ("counter", set()),
        "scheduler_pending_pods": ("gauge", {"queue"}),
        "scheduler_pod_scheduling_attempts": ("histogram", {"le"}),
        "scheduler_framework_extension_point_duration_seconds": (
            "histogram",
            {"extension_point", "status", "profile", "le"},
        ),
        "scheduler_queue_incoming_pods": ("counter", {"queue", "event"}),
    }
    for name, (kind, labels) in stable.items():
        assert name in fams, name
        assert fams[name].type == kind, name
        assert fams[name].documentation.startswith("[STABLE] "), name
        assert fams[name].samples, name
        for s in fams[name].samples:
            want = labels if s.name.endswith("_bucket") else labels - {"le"}
            assert set(s.labels) == want, (name, s)
    assert not [n for n in fams if n.endswith("_created")]

    attempts = "scheduler_schedule_attempts"
    assert value(fams, attempts, attempts + "_total", result="scheduled", profile=PROFILE) == 2
    assert value(fams, attempts, attempts + "_total", result="unschedulable", profile=PROFILE) >= 1
    assert value(fams, attempts, attempts + "_total", result="error", profile=PROFILE) == 0
    latency = "scheduler_scheduling_attempt_duration_seconds"
    assert value(fams, latency, latency + "_count", result="scheduled", profile=PROFILE) == 2
    assert 0 < value(fams, latency, latency + "_sum", result="scheduled", profile=PROFILE) < 30
    tries = "scheduler_pod_scheduling_attempts"
    assert value(fams, tries, tries + "_bucket", le="1.0") == 2
    incoming = "scheduler_queue_incoming_pods"
    assert value(fams, incoming, incoming + "_total", queue="active", event="UnscheduledPodAdd") == 3
    assert (
        value(fams, incoming, incoming + "_total", queue="unschedulable", event="ScheduleAttemptFailure") >= 1
    )
    # The pod nothing fits waits in the queue (the pool, or backoffQ if some node event moved it).
    pending = sum(
        value(fams, "scheduler_pending_pods", "scheduler_pending_pods", queue=q)
        for q in ("active", "backoff", "unschedulable")
    )
    assert pending == 1
    assert value(fams, "scheduler_pending_pods", "scheduler_pending_pods", queue="gated") == 0
    # DefaultPreemption ran for the pod nothing fits (it found no candidate: no victims observed).
    assert value(fams, "scheduler_preemption_attempts", "scheduler_preemption_attempts_total") >= 1
    assert value(fams, "scheduler_preemption_victims", "scheduler_preemption_victims_count") == 0
    ep = "scheduler_framework_extension_point_duration_seconds"
    for point in ("PreScore", "Score", "Reserve", "Permit", "PreBind", "Bind", "PostBind"):
        got = value(fams, ep, ep + "_count", extension_point=point, status="Success", profile=PROFILE)
        assert got == 2, point
    # PreFilter and Filter succeed for the pod nothing fits too: rejecting every node is no error.
    for point in ("PreFilter", "Filter"):
        got = value(fams, ep, ep + "_count", extension_point=point, status="Success", profile=PROFILE)
        assert got >= 3, point
    assert (
        value(fams, ep, ep + "_count", extension_point="PostFilter", status="Unschedulable", profile=PROFILE)
        >= 1
    )
    assert (
        value(fams, ep, ep + "_count", extension_point="PreEnqueue", status="Success", profile=PROFILE) >= 3
    )

    # BETA ones that these pods must have touched.
    assert (
        value(fams, "scheduler_unschedulable_pods", "scheduler_unschedulable_pods", plugin="NodeAffinity")
        == 1
    )
    sli = "scheduler_pod_scheduling_sli_duration_seconds"
    assert value(fams, sli, sli + "_count", attempts="1") == 2
    evals = "scheduler_plugin_evaluation"
    assert value(fams, evals, evals + "_total", plugin="NodeAffinity", extension_point="PreFilter") >= 3
    assert value(fams, "scheduler_goroutines", "scheduler_goroutines", operation="binding") == 0
