"""A bound pod keeps only what the edge reads of its object (cluster/runtime.py, issue 30)."""

from __future__ import annotations

import copy
from typing import Any

from kopf_scheduler.cluster import resource_metrics
from kopf_scheduler.cluster.connection import ConnectionInfo, Credentials
from kopf_scheduler.cluster.runtime import Options, SchedulerRuntime, bound_pod_raw, parse_listed_pod


def _pod(node: str = "n1") -> dict[str, Any]:
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u1",
            "resourceVersion": "7",
            "labels": {"app": "x"},
            "annotations": {"a": "b" * 200},
        },
        "spec": {
            "nodeName": node,
            "priority": 10,
            "schedulerName": "kopf-scheduler",
            "overhead": {"cpu": "10m"},
            "resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "2Gi"}},
            "initContainers": [
                {"name": "side", "image": "i", "restartPolicy": "Always",
                 "resources": {"requests": {"cpu": "50m"}, "limits": {"cpu": "100m"}}},
                {"name": "init", "image": "i", "resources": {"requests": {"cpu": "300m"}}},
            ],
            "containers": [
                {"name": "c", "image": "registry/app:1", "ports": [{"containerPort": 80}],
                 "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}, "limits": {"cpu": "1"}},
                 "terminationMessagePath": "/dev/termination-log"},
            ],
            "tolerations": [{"key": "k", "operator": "Exists"}],
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"},
            ],
        },
    }  # fmt: skip


def test_the_resource_metrics_of_a_bound_pod_are_those_of_its_whole_object() -> None:
    whole = _pod()
    cut = bound_pod_raw(copy.deepcopy(whole))
    assert resource_metrics.render([cut]) == resource_metrics.render([whole])
    assert b"kube_pod_resource_limit" in resource_metrics.render([cut])
    # What is not read is gone; the conditions the edge compares stay.
    assert "tolerations" not in cut["spec"] and "labels" not in cut["metadata"]
    assert "image" not in cut["spec"]["containers"][0] and "ports" not in cut["spec"]["containers"][0]
    assert [c["type"] for c in cut["status"]["conditions"]] == ["DisruptionTarget"]


def test_only_bound_pods_are_cut() -> None:
    pending = _pod(node="")
    assert parse_listed_pod(pending).raw is pending  # extenders are sent it, writes compare it
    bound = parse_listed_pod(_pod())
    assert bound.node_name == "n1" and "tolerations" not in bound.raw["spec"]
    assert bound.tolerations  # the parsed form is whole


async def test_with_an_extender_every_pod_keeps_its_object() -> None:
    """An extender's preemption verb is sent the victims (bound pods) whole."""
    from kopf_scheduler.config.kubescheduler import ExtenderConfig

    creds = Credentials(ConnectionInfo(server="http://127.0.0.1:9", token="t"))
    plain = SchedulerRuntime(Options(standalone=True, metrics_port=None), creds)
    assert plain.pods.handlers.parse is parse_listed_pod
    await plain.api.close()
    from kopf_scheduler.cluster.extender import HTTPExtender

    configured = HTTPExtender(ExtenderConfig("http://127.0.0.1:9", preempt_verb="preempt"))
    options = Options(standalone=True, metrics_port=None, extenders=(configured,))
    with_extender = SchedulerRuntime(options, creds)
    try:
        raw = _pod()
        assert with_extender.pods.handlers.parse(raw).raw is raw
    finally:
        await with_extender.api.close()
        for extender in (*with_extender.extenders, configured):
            await extender.close()
