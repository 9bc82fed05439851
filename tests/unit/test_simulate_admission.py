"""simulate reads objects as kube-apiserver v1.37.2 stores them, and refuses what it refuses."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from kopf_scheduler.simulate import SimulationError, load_documents, simulate
from kopf_scheduler.simulate_admission import Admission, AdmissionError

NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "node-a", "labels": {"kubernetes.io/hostname": "node-a"}},
    "status": {"allocatable": {"cpu": "1", "memory": "4Gi", "pods": "110"}},
}


def pclass(name: str, value: int, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        **extra,
    }


def pod(name: str, cpu: str = "100m", node: str = "", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}],
        **spec,
    }
    if node:
        body["nodeName"] = node
    else:
        body.setdefault("schedulerName", "kopf-scheduler")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"{name}-uid"},
        "spec": body,
    }


def load(tmp_path: Path, *docs: dict[str, Any]) -> Any:
    f = tmp_path / "in.yaml"
    f.write_text(yaml.safe_dump_all(docs))
    return load_documents([str(f)])


def refused(tmp_path: Path, *docs: dict[str, Any]) -> str:
    with pytest.raises(SimulationError) as exc:
        load(tmp_path, *docs)
    return str(exc.value)


# --- Priority admission --------------------------------------------------------------------------


def test_class_gives_priority_and_preemption_policy(tmp_path: Path) -> None:
    inputs = load(
        tmp_path, pclass("polite", 500, preemptionPolicy="Never"), pod("p", priorityClassName="polite")
    )
    (p,) = inputs.pending
    assert (p.priority, p.preemption_policy) == (500, "Never")
    stored = inputs.objects["PriorityClass"]["polite"]  # the view of what admission stored
    assert (stored.value, stored.preemption_policy) == (500, "Never")


def test_class_without_policy_defaults_to_preempt_lower_priority(tmp_path: Path) -> None:
    inputs = load(tmp_path, pclass("gold", 7), pod("p", priorityClassName="gold"))
    assert inputs.objects["PriorityClass"]["gold"].preemption_policy == "PreemptLowerPriority"
    assert inputs.pending[0].preemption_policy == "PreemptLowerPriority"


def test_no_class_no_default_is_priority_zero(tmp_path: Path) -> None:
    (p,) = load(tmp_path, pod("p")).pending
    assert (p.priority, p.preemption_policy) == (0, "PreemptLowerPriority")


def test_global_default_class_applies_to_pods_without_a_class(tmp_path: Path) -> None:
    inputs = load(
        tmp_path,
        pclass("base", 42, globalDefault=True, preemptionPolicy="Never"),
        pod("p"),
        pod("r", node="node-a"),
    )
    assert [(p.priority, p.preemption_policy) for p in inputs.pending + inputs.running] == [
        (42, "Never"),
        (42, "Never"),
    ]
    assert inputs.pending[0].raw["spec"]["priorityClassName"] == "base"


def test_system_classes_exist_without_being_given(tmp_path: Path) -> None:
    (p,) = load(tmp_path, pod("p", priorityClassName="system-node-critical")).pending
    assert p.priority == 2_000_001_000


@pytest.mark.parametrize(
    ("docs", "message"),
    [
        (
            [pod("web", priorityClassName="gold")],
            'pods "web" is forbidden: no PriorityClass with name gold was found',
        ),
        (
            [pclass("gold", 100), pod("web", priorityClassName="gold", priority=5)],
            'pods "web" is forbidden: the integer value of priority (5) must not be provided in pod spec; '
            "priority admission controller computed 100 from the given PriorityClass name",
        ),
        (
            [pod("web", priority=10)],
            'pods "web" is forbidden: the integer value of priority (10) must not be provided in pod spec; '
            "priority admission controller computed 0 from the given PriorityClass name",
        ),
        (
            [pclass("gold", 100), pod("web", priorityClassName="gold", preemptionPolicy="Never")],
            'pods "web" is forbidden: the string value of PreemptionPolicy (Never) must not be provided in '
            "pod spec; priority admission controller computed PreemptLowerPriority from the given "
            "PriorityClass name",
        ),
        (
            [pod("web", preemptionPolicy="Never")],
            'pods "web" is forbidden: the string value of PreemptionPolicy (Never) must not be provided in '
            "pod spec; priority admission controller computed PreemptLowerPriority from the given "
            "PriorityClass name",
        ),
    ],
    ids=[
        "unknown-class",
        "priority-beside-class",
        "priority-without-class",
        "policy-beside-class",
        "policy-without-class",
    ],
)
def test_pods_the_priority_admission_refuses(
    tmp_path: Path, docs: list[dict[str, Any]], message: str
) -> None:
    err = refused(tmp_path, *docs)
    assert err.endswith(f"(Pod web): {message}"), err


def test_matching_priority_and_policy_beside_the_class_are_accepted(tmp_path: Path) -> None:
    docs = [
        pclass("gold", 100, preemptionPolicy="Never"),
        pod("p", priorityClassName="gold", priority=100, preemptionPolicy="Never"),
    ]
    (p,) = load(tmp_path, *docs).pending
    assert (p.priority, p.preemption_policy) == (100, "Never")


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            pclass("huge", 1_000_000_001),
            'PriorityClass.scheduling.k8s.io "huge" is invalid: value: Forbidden: maximum allowed value of '
            "a user defined priority is 1000000000",
        ),
        (
            pclass("system-mine", 5),
            'PriorityClass.scheduling.k8s.io "system-mine" is invalid: metadata.name: Forbidden: priority '
            "class names with 'system-' prefix are reserved for system use only. error: system-mine is not "
            "a known system priority class",
        ),
        (
            pclass("odd", 5, preemptionPolicy="Sometimes"),
            'PriorityClass.scheduling.k8s.io "odd" is invalid: preemptionPolicy: Unsupported value: '
            '"Sometimes": supported values: "PreemptLowerPriority", "Never"',
        ),
    ],
)
def test_priority_classes_the_apiserver_refuses(tmp_path: Path, doc: dict[str, Any], message: str) -> None:
    assert refused(tmp_path, doc).endswith(message)


def test_only_one_global_default(tmp_path: Path) -> None:
    err = refused(tmp_path, pclass("a", 1, globalDefault=True), pclass("b", 2, globalDefault=True))
    assert err.endswith(
        'priorityclasses.scheduling.k8s.io "b" is forbidden: PriorityClass a is already marked as default. '
        "Only one default can exist"
    )


# --- the verdict changes: preemptionPolicy Never from the class ------------------------------------


def test_never_class_does_not_preempt_in_simulate(tmp_path: Path) -> None:
    docs = [
        NODE,
        pclass("low", 1),
        pclass("polite", 1000, preemptionPolicy="Never"),
        pod("filler", cpu="900m", node="node-a", priorityClassName="low"),
        pod("web", cpu="500m", priorityClassName="polite"),
    ]
    (web,) = asyncio.run(simulate(load(tmp_path, *docs), seed=0))
    assert (web.node, web.nominated_node, web.victims) == ("", "", [])
    assert web.message == (
        "0/1 nodes are available: 1 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never."
    )


def test_successful_preemption_message_is_reported_before_the_retry(tmp_path: Path) -> None:
    docs = [
        NODE,
        pclass("low", 1),
        pclass("high", 1000),
        pod("filler", cpu="900m", node="node-a", priorityClassName="low"),
        pod("web", cpu="500m", priorityClassName="high"),
    ]
    inputs = load(tmp_path, *docs)
    from kopf_scheduler_workbench.testing import fake_client

    seen: list[str] = []
    original = fake_client.FakeClusterClient.record_failed

    async def spy(self: Any, p: Any, reason: str, message: str, nominated_node: str | None = None) -> None:
        seen.append(message)
        await original(self, p, reason, message, nominated_node)

    fake_client.FakeClusterClient.record_failed = spy  # type: ignore[method-assign]
    try:
        (web,) = asyncio.run(simulate(inputs, seed=0))
    finally:
        fake_client.FakeClusterClient.record_failed = original  # type: ignore[method-assign]
    assert (web.node, web.nominated_node, web.victims) == ("node-a", "node-a", ["default/filler"])
    assert seen == [
        "0/1 nodes are available: 1 Insufficient cpu. "
        "preemption: found a potential placement for pod on node node-a, preempting 1 victims"
    ]


# --- the other defaulting and admission plugins -----------------------------------------------------


def test_default_toleration_seconds_added_unless_tolerated() -> None:
    adm = Admission()
    spec = adm.admit_pod(pod("p"))["spec"]
    assert spec["tolerations"] == [
        {
            "key": "node.kubernetes.io/not-ready",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        },
        {
            "key": "node.kubernetes.io/unreachable",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        },
    ]
    everything = [{"operator": "Exists"}]
    assert adm.admit_pod(pod("p", tolerations=everything))["spec"]["tolerations"] == everything


def test_host_network_ports_become_host_ports(tmp_path: Path) -> None:
    doc = pod("p", hostNetwork=True)
    doc["spec"]["containers"][0]["ports"] = [{"containerPort": 8080}]
    (p,) = load(tmp_path, doc).pending
    assert [(hp.protocol, hp.port) for hp in p.host_ports] == [("TCP", 8080)]


def test_default_storage_class_for_claims_without_one(tmp_path: Path) -> None:
    sc = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "provisioner": "x",
        "metadata": {"name": "std", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
    }
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    explicit = {
        **claim,
        "metadata": {"name": "e", "namespace": "default"},
        "spec": {**claim["spec"], "storageClassName": ""},
    }
    objects = load(tmp_path, sc, claim, explicit).objects["PersistentVolumeClaim"]
    assert objects["default/c"].class_name == "std"
    assert objects["default/e"].class_name == ""


def runtime_class(**extra: Any) -> dict[str, Any]:
    meta = {"name": "kata"}
    return {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": meta,
        "handler": "kata",
        **extra,
    }


def test_runtime_class_overhead_and_scheduling(tmp_path: Path) -> None:
    rc = runtime_class(
        overhead={"podFixed": {"cpu": "250m"}},
        scheduling={
            "nodeSelector": {"sandbox": "yes"},
            "tolerations": [{"key": "sandbox", "operator": "Exists"}],
        },
    )
    (p,) = load(tmp_path, rc, pod("p", runtimeClassName="kata")).pending
    assert p.raw["spec"]["overhead"] == {"cpu": "250m"}
    assert p.raw["spec"]["nodeSelector"] == {"sandbox": "yes"}
    assert {"key": "sandbox", "operator": "Exists"} in p.raw["spec"]["tolerations"]


@pytest.mark.parametrize(
    ("docs", "message"),
    [
        (
            [pod("web", runtimeClassName="gone")],
            'pods "web" is forbidden: pod rejected: RuntimeClass "gone" not found',
        ),
        (
            [
                runtime_class(overhead={"podFixed": {"cpu": "250m"}}),
                pod("web", runtimeClassName="kata", overhead={"cpu": "1"}),
            ],
            'pods "web" is forbidden: pod rejected: '
            "Pod's Overhead doesn't match RuntimeClass's defined Overhead",
        ),
        (
            [pod("web", overhead={"cpu": "1"})],
            'pods "web" is forbidden: pod rejected: Pod Overhead set without corresponding RuntimeClass '
            "defined Overhead",
        ),
        (
            [
                runtime_class(scheduling={"nodeSelector": {"zone": "a"}}),
                pod("web", runtimeClassName="kata", nodeSelector={"zone": "b"}),
            ],
            'pods "web" is forbidden: conflict: runtimeClass.scheduling.nodeSelector[zone] = a; '
            "pod.spec.nodeSelector[zone] = b",
        ),
    ],
    ids=["unknown", "overhead-mismatch", "overhead-without-class", "selector-conflict"],
)
def test_pods_the_runtime_class_admission_refuses(
    tmp_path: Path, docs: list[dict[str, Any]], message: str
) -> None:
    assert refused(tmp_path, *docs).endswith(message)


def test_same_overhead_in_other_units_is_accepted() -> None:
    adm = Admission()
    adm.add_runtime_class(runtime_class(overhead={"podFixed": {"cpu": "1"}}))
    spec = adm.admit_pod(pod("p", runtimeClassName="kata", overhead={"cpu": "1000m"}))["spec"]
    assert spec["overhead"] == {"cpu": "1"}
    with pytest.raises(AdmissionError):
        adm.admit_pod(pod("p", runtimeClassName="kata", overhead={"cpu": "1", "memory": "1"}))


def limit_range(namespace: str = "default", **item: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": "lr", "namespace": namespace},
        "spec": {"limits": [{"type": "Container", **item}]},
    }


def test_limit_range_defaults_fill_what_a_container_lacks(tmp_path: Path) -> None:
    lr = limit_range(default={"cpu": "1", "memory": "1Gi"}, defaultRequest={"cpu": "250m"})
    bare = pod("bare")
    bare["spec"]["containers"][0]["resources"] = {}
    own_limit = pod("own")
    own_limit["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "2"}}  # request := its limit
    elsewhere = {**pod("other"), "metadata": {"name": "other", "namespace": "other", "uid": "o"}}
    elsewhere["spec"]["containers"][0]["resources"] = {}
    inputs = load(tmp_path, lr, bare, own_limit, elsewhere)
    got = {p.name: p.raw["spec"]["containers"][0]["resources"] for p in inputs.pending}
    # memory's default request comes from its default limit (the LimitRange as stored)
    assert got["bare"] == {
        "limits": {"cpu": "1", "memory": "1Gi"},
        "requests": {"cpu": "250m", "memory": "1Gi"},
    }
    assert got["own"] == {"limits": {"cpu": "2", "memory": "1Gi"}, "requests": {"cpu": "2", "memory": "1Gi"}}
    assert got["other"] == {}
    assert [p.requests.milli_cpu for p in inputs.pending] == [250, 2000, 0]


def test_limit_range_is_stored_defaulted() -> None:
    stored = Admission().add_limit_range(limit_range(max={"cpu": "2"}, min={"memory": "64Mi"}))
    (item,) = stored["spec"]["limits"]
    assert item["default"] == {"cpu": "2"}
    assert item["defaultRequest"] == {"cpu": "2", "memory": "64Mi"}
