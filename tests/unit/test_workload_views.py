"""The typed views of PodDisruptionBudget, Namespace, Service, ReplicationController, ReplicaSet,
StatefulSet, PriorityClass and PodGroup: what each parser reads, and a malformed field named."""

from __future__ import annotations

from typing import Any

import pytest

from kopf_scheduler import simulate
from kopf_scheduler.api import kinds
from kopf_scheduler.api.apps import parse_replica_set, parse_stateful_set
from kopf_scheduler.api.core import parse_namespace, parse_replication_controller, parse_service
from kopf_scheduler.api.meta import ObjectMeta, OwnerReference
from kopf_scheduler.api.objects import parse_pod
from kopf_scheduler.api.podgroup import PodGroup, parse_pod_group
from kopf_scheduler.api.policy import parse_pod_disruption_budget
from kopf_scheduler.api.scheduling import parse_priority_class
from kopf_scheduler.api.types import LabelSelectorRequirement, ObjectError


def test_pdb_reads_selector_budget_and_disrupted_pods() -> None:
    pdb = parse_pod_disruption_budget(
        {
            "metadata": {"name": "db"},  # no namespace: the apiserver's (and the key's) "default"
            "spec": {
                "selector": {
                    "matchLabels": {"app": "db"},
                    "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}],
                }
            },
            "status": {"disruptionsAllowed": 2, "disruptedPods": {"db-0": "2026-01-01T00:00:00Z"}},
        }
    )
    assert (pdb.metadata.namespace, pdb.metadata.name) == ("default", "db")
    assert kinds.POD_DISRUPTION_BUDGET.key_of(pdb) == "default/db"
    assert pdb.selector is not None
    assert pdb.selector.match_labels == (("app", "db"),)
    assert pdb.selector.match_expressions == (LabelSelectorRequirement("tier", "In", frozenset({"a", "b"})),)
    assert (pdb.disruptions_allowed, pdb.disrupted_pods) == (2, frozenset({"db-0"}))
    bare = parse_pod_disruption_budget({"metadata": {"name": "x", "namespace": "ns"}})
    assert (bare.selector, bare.disruptions_allowed, bare.disrupted_pods) == (None, 0, frozenset())
    empty = parse_pod_disruption_budget({"metadata": {"name": "x"}, "spec": {"selector": {}}})
    assert empty.selector is not None and empty.selector.is_empty()  # kept apart from nil


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"spec": {"selector": "app=db"}}, "spec.selector"),
        (
            {"spec": {"selector": {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}}},
            "spec.selector.matchExpressions[0].values",
        ),
        (
            {"spec": {"selector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}},
            "spec.selector.matchExpressions[0].operator",
        ),
        ({"status": {"disruptionsAllowed": "two"}}, "status.disruptionsAllowed"),
        ({"status": {"disruptedPods": ["db-0"]}}, "status.disruptedPods"),
        ({"metadata": {"name": "x", "labels": {"a": 1}}}, "metadata.labels.a"),
    ],
)
def test_pdb_malformed_names_the_field(raw: dict[str, Any], path: str) -> None:
    with pytest.raises(ObjectError) as exc:
        parse_pod_disruption_budget({"metadata": {"name": "x"}, **raw})
    assert exc.value.path == path


def test_namespace_service_and_replication_controller() -> None:
    ns = parse_namespace({"metadata": {"name": "team", "labels": {"env": "prod"}}})
    assert (kinds.NAMESPACE.key_of(ns), dict(ns.metadata.labels), ns.metadata.namespace) == (
        "team",
        {"env": "prod"},
        "",
    )
    svc = parse_service(
        {"metadata": {"name": "web", "namespace": "ns"}, "spec": {"selector": {"app": "web"}}}
    )
    assert (kinds.SERVICE.key_of(svc), svc.selector) == ("ns/web", {"app": "web"})
    # A nil selector (a headless Service for external endpoints) is not an empty one.
    assert parse_service({"metadata": {"name": "ext"}, "spec": {}}).selector is None
    assert parse_service({"metadata": {"name": "all"}, "spec": {"selector": {}}}).selector == {}
    rc = parse_replication_controller({"metadata": {"name": "rc"}, "spec": {"selector": {"app": "web"}}})
    assert (kinds.REPLICATION_CONTROLLER.key_of(rc), rc.selector) == ("default/rc", {"app": "web"})
    for parse in (parse_service, parse_replication_controller):
        with pytest.raises(ObjectError) as exc:
            parse({"metadata": {"name": "x"}, "spec": {"selector": {"app": 7}}})
        assert exc.value.path == "spec.selector.app"
        with pytest.raises(ObjectError) as exc:
            parse({"metadata": {"name": "x"}, "spec": ["selector"]})
        assert exc.value.path == "spec"


@pytest.mark.parametrize("parse", [parse_replica_set, parse_stateful_set])
def test_replica_set_and_stateful_set_selectors(parse: Any) -> None:
    view = parse(
        {
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}},
        }
    )
    assert view.metadata.name == "web" and view.selector is not None
    assert view.selector.match_expressions == (LabelSelectorRequirement("app", "Exists", frozenset()),)
    assert parse({"metadata": {"name": "none"}}).selector is None
    with pytest.raises(ObjectError) as exc:
        parse({"metadata": {"name": "x"}, "spec": {"selector": {"matchLabels": ["app"]}}})
    assert exc.value.path == "spec.selector.matchLabels"


def test_priority_class() -> None:
    pc = parse_priority_class({"metadata": {"name": "gold"}, "value": 1000, "globalDefault": True})
    assert (kinds.PRIORITY_CLASS.key_of(pc), pc.value, pc.global_default, pc.preemption_policy) == (
        "gold",
        1000,
        True,
        "PreemptLowerPriority",
    )
    never = parse_priority_class({"metadata": {"name": "n"}, "value": 5, "preemptionPolicy": "Never"})
    assert never.preemption_policy == "Never"
    for raw, path in (
        ({"value": "high"}, "value"),
        ({"globalDefault": "yes"}, "globalDefault"),
        ({"preemptionPolicy": 1}, "preemptionPolicy"),
    ):
        with pytest.raises(ObjectError) as exc:
            parse_priority_class({"metadata": {"name": "x"}, **raw})
        assert exc.value.path == path


def test_pod_group_view() -> None:
    group = parse_pod_group(
        {
            "metadata": {"name": "train", "uid": "u1", "generation": 3},
            "spec": {
                "schedulingPolicy": {"gang": {"minCount": 4}},
                "priority": 100,
                "preemptionPolicy": "Never",
                "disruptionMode": {"all": {}},
            },
            "status": {"conditions": [{"type": "PodGroupInitiallyScheduled", "status": "True"}]},
        }
    )
    assert (group.namespace, group.name, group.uid, group.generation, group.key) == (
        "default",
        "train",
        "u1",
        3,
        "default/train",
    )
    assert kinds.POD_GROUP.key_of(group) == group.key
    assert (group.gang_min_count, group.min_count, group.priority, group.preemption_policy) == (
        4,
        4,
        100,
        "Never",
    )
    assert group.disruption_all
    cond = group.condition("PodGroupInitiallyScheduled")
    assert cond is not None and cond["status"] == "True"
    basic = PodGroup(ObjectMeta("b", "ns"))
    assert (basic.gang_min_count, basic.min_count, basic.condition("X")) == (None, 1, None)


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        (
            {"spec": {"schedulingPolicy": {"gang": {"minCount": "many"}}}},
            "spec.schedulingPolicy.gang.minCount",
        ),
        ({"spec": {"schedulingPolicy": {"gang": 3}}}, "spec.schedulingPolicy.gang"),
        ({"spec": {"priority": 1.5}}, "spec.priority"),
        ({"status": {"conditions": ["Ready"]}}, "status.conditions[0]"),
        ({"metadata": {"name": "g", "generation": "x"}}, "metadata.generation"),
    ],
)
def test_pod_group_malformed_names_the_field(raw: dict[str, Any], path: str) -> None:
    with pytest.raises(ObjectError) as exc:
        parse_pod_group({"metadata": {"name": "g"}, **raw})
    assert exc.value.path == path


def test_simulate_stores_views_and_names_a_malformed_document() -> None:
    """simulate parses each object once into its view, as the informers do, and a malformed one is
    the input's error, with the document named."""
    docs: list[tuple[str, Any]] = [
        ("a.yaml", {"kind": "PriorityClass", "metadata": {"name": "gold"}, "value": 10}),
        ("a.yaml", {"kind": "Namespace", "metadata": {"name": "team", "labels": {"env": "prod"}}}),
        ("a.yaml", {"kind": "Service", "metadata": {"name": "web", "namespace": "team"}, "spec": {}}),
        ("a.yaml", {"kind": "PodGroup", "metadata": {"name": "g"}, "spec": {"priority": 5}}),
    ]
    inputs = simulate.documents_to_inputs(docs)
    assert (
        kinds.objects_of(inputs.objects, kinds.PRIORITY_CLASS)["gold"].preemption_policy
        == "PreemptLowerPriority"
    )
    assert kinds.objects_of(inputs.objects, kinds.NAMESPACE)["team"].metadata.labels == {"env": "prod"}
    assert kinds.objects_of(inputs.objects, kinds.SERVICE)["team/web"].selector is None
    assert kinds.objects_of(inputs.objects, kinds.POD_GROUP)["default/g"].priority == 5
    bad = (
        "b.yaml",
        {"kind": "PodDisruptionBudget", "metadata": {"name": "p"}, "status": {"disruptionsAllowed": []}},
    )
    with pytest.raises(
        simulate.SimulationError, match=r"^b\.yaml \(PodDisruptionBudget p\): status\.disruptionsAllowed"
    ):
        simulate.documents_to_inputs([bad])


def test_a_pods_owner_references_are_typed() -> None:
    """PodTopologySpread's default selector finds the pod's controller by a typed reference."""
    refs = [
        {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "n"},
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "r", "controller": True},
    ]
    pod = parse_pod({"metadata": {"name": "p", "ownerReferences": refs}, "spec": {"containers": []}})
    assert pod.owner_references == (
        OwnerReference("v1", "Node", "n1", "n"),
        OwnerReference("apps/v1", "ReplicaSet", "web-1", "r", controller=True),
    )
    with pytest.raises(ObjectError) as exc:
        parse_pod(
            {"metadata": {"name": "p", "ownerReferences": [refs[0], "web-1"]}, "spec": {"containers": []}}
        )
    assert exc.value.path == "metadata.ownerReferences[1]"
