"""NodeDeclaredFeatures: inference from the pod spec, Filter against node.status.declaredFeatures,
hints; cases follow the reference's nodedeclaredfeatures_test.go tables with the real features."""

from __future__ import annotations

from typing import Any

import pytest
from node_plugin_helpers import make_snapshot

from kopf_scheduler.api.objects import parse_node
from kopf_scheduler.framework.events import node_scheduling_properties_change
from kopf_scheduler.framework.interface import ActionType, Code, CycleState, QueueingHint
from kopf_scheduler.plugins.node_declared_features import (
    ERR_REASON_UNSATISFIED,
    RESTART_ALL_CONTAINERS,
    USER_NAMESPACES_HOST_NETWORK,
    VOLUME_BIND_MOUNT_OPTIONS,
    NodeDeclaredFeatures,
    infer_pod_features,
    node_features,
)
from kopf_scheduler_workbench.testing.builders import make_pod, node_dict

RESTART_RULE = {"restartPolicyRules": [{"action": "RestartAllContainers", "exitCodes": {"operator": "In"}}]}
BIND_MOUNT = {"volumeMounts": [{"name": "v", "mountPath": "/v", "bindMountOptions": ["nosuid"]}]}


def node(name: str, features: list[str] | None = None) -> Any:
    raw = node_dict(name)
    if features is not None:
        raw["status"]["declaredFeatures"] = features
    return parse_node(raw)


def container(**extra: Any) -> dict[str, Any]:
    return {"name": "c", "image": "img", **extra}


INFER_CASES = [
    ("plain pod needs nothing", {}, set()),
    (
        "restart-all rule on a container",
        {"containers": [container(**RESTART_RULE)]},
        {RESTART_ALL_CONTAINERS},
    ),
    (
        "restart-all rule on an init container",
        {"containers": [container()], "initContainers": [container(name="i", **RESTART_RULE)]},
        {RESTART_ALL_CONTAINERS},
    ),
    (
        "another restart action needs nothing",
        {"containers": [container(restartPolicyRules=[{"action": "Restart"}])]},
        set(),
    ),
    (
        "hostNetwork with hostUsers false",
        {"hostNetwork": True, "hostUsers": False},
        {USER_NAMESPACES_HOST_NETWORK},
    ),
    ("hostNetwork with hostUsers unset", {"hostNetwork": True}, set()),
    ("hostUsers false without hostNetwork", {"hostUsers": False}, set()),
    ("bind mount options", {"containers": [container(**BIND_MOUNT)]}, {VOLUME_BIND_MOUNT_OPTIONS}),
    (
        "bind mount options on an ephemeral container",
        {"containers": [container()], "ephemeralContainers": [container(name="e", **BIND_MOUNT)]},
        {VOLUME_BIND_MOUNT_OPTIONS},
    ),
    (
        "several features",
        {"containers": [container(**RESTART_RULE, **BIND_MOUNT)], "hostNetwork": True, "hostUsers": False},
        {RESTART_ALL_CONTAINERS, USER_NAMESPACES_HOST_NETWORK, VOLUME_BIND_MOUNT_OPTIONS},
    ),
]


@pytest.mark.parametrize(("name", "spec", "want"), INFER_CASES)
def test_infer_pod_features(name: str, spec: dict[str, Any], want: set[str]) -> None:
    pod = make_pod("p", **spec)
    pod.raw = {}  # inferred from the parsed spec alone
    assert infer_pod_features(pod) == want
    status = NodeDeclaredFeatures().pre_filter(CycleState(), pod, [])[1]
    if want:
        assert status is None
    else:
        assert status is not None and status.code == Code.SKIP


FILTER_CASES = [
    ("node matches the requirement", {RESTART_ALL_CONTAINERS}, [RESTART_ALL_CONTAINERS], True),
    ("node lacks the requirement", {RESTART_ALL_CONTAINERS}, [VOLUME_BIND_MOUNT_OPTIONS], False),
    (
        "pod requires a subset of the node's features",
        {RESTART_ALL_CONTAINERS},
        sorted([RESTART_ALL_CONTAINERS, VOLUME_BIND_MOUNT_OPTIONS, "DRAOptionalNodeOperations"]),
        True,
    ),
    ("node declares nothing", {RESTART_ALL_CONTAINERS}, None, False),
    (
        "node has some but not all",
        {RESTART_ALL_CONTAINERS, VOLUME_BIND_MOUNT_OPTIONS},
        [RESTART_ALL_CONTAINERS],
        False,
    ),
    (
        "unknown declared features are ignored",
        {RESTART_ALL_CONTAINERS},
        ["AAA", RESTART_ALL_CONTAINERS, "zzz"],
        True,
    ),
]


@pytest.mark.parametrize(("name", "required", "declared", "fits"), FILTER_CASES)
def test_filter(name: str, required: set[str], declared: list[str] | None, fits: bool) -> None:
    spec: dict[str, Any] = {"containers": [container()]}
    if RESTART_ALL_CONTAINERS in required:
        spec["containers"] = [container(**RESTART_RULE)]
    if VOLUME_BIND_MOUNT_OPTIONS in required:
        spec["initContainers"] = [container(name="i", **BIND_MOUNT)]
    pod = make_pod("p", **spec)
    assert infer_pod_features(pod) == required
    pl = NodeDeclaredFeatures()
    state = CycleState()
    assert pl.pre_filter(state, pod, [])[1] is None
    info = make_snapshot([node("n1", declared)]).list()[0]
    status = pl.filter(state, pod, info)
    if fits:
        assert status is None
    else:
        assert status is not None
        assert status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert status.reasons == [ERR_REASON_UNSATISFIED]


def test_filter_without_prefilter_state_is_an_error() -> None:
    info = make_snapshot([node("n1", [RESTART_ALL_CONTAINERS])]).list()[0]
    status = NodeDeclaredFeatures().filter(CycleState(), make_pod("p"), info)
    assert status is not None and status.code == Code.ERROR


def test_node_features_walks_sorted_lists_like_the_reference() -> None:
    assert node_features([RESTART_ALL_CONTAINERS, VOLUME_BIND_MOUNT_OPTIONS]) == {
        RESTART_ALL_CONTAINERS,
        VOLUME_BIND_MOUNT_OPTIONS,
    }
    # Out of order: the merge walk passes RestartAll... before it meets it, as TryMap does.
    assert node_features([VOLUME_BIND_MOUNT_OPTIONS, RESTART_ALL_CONTAINERS]) == {VOLUME_BIND_MOUNT_OPTIONS}


def test_node_hint() -> None:
    pl = NodeDeclaredFeatures()
    pod = make_pod("p", containers=[container(**RESTART_RULE)])
    assert (
        pl.is_schedulable_after_node_change(pod, None, node("n", [RESTART_ALL_CONTAINERS]))
        == QueueingHint.QUEUE
    )
    added = pl.is_schedulable_after_node_change(pod, node("n", []), node("n", [RESTART_ALL_CONTAINERS]))
    assert added == QueueingHint.QUEUE
    same = pl.is_schedulable_after_node_change(
        pod, node("n", [RESTART_ALL_CONTAINERS]), node("n", [RESTART_ALL_CONTAINERS])
    )
    assert same == QueueingHint.QUEUE_SKIP


def test_pod_update_hint() -> None:
    pl = NodeDeclaredFeatures()
    plain = make_pod("p", uid="u1")
    needs = make_pod("p", uid="u1", containers=[container(**RESTART_RULE)])
    assert pl.is_schedulable_after_pod_update(plain, plain, needs) == QueueingHint.QUEUE
    assert pl.is_schedulable_after_pod_update(needs, needs, plain) == QueueingHint.QUEUE
    relabelled = make_pod("p", uid="u1", labels={"a": "b"})
    assert pl.is_schedulable_after_pod_update(plain, plain, relabelled) == QueueingHint.QUEUE_SKIP


def test_declared_feature_change_is_a_node_update_event() -> None:
    events = node_scheduling_properties_change(node("n", []), node("n", [RESTART_ALL_CONTAINERS]))
    assert [e.action for e in events] == [ActionType.UPDATE_NODE_DECLARED_FEATURE]
    assert node_scheduling_properties_change(node("n", ["A"]), node("n", ["A"])) == []
    assert ActionType.UPDATE_NODE_DECLARED_FEATURE in ActionType.UPDATE
