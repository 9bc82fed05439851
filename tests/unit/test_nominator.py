"""Nominator: nominated pods per node, kept in step with pod updates."""

from __future__ import annotations

from typing import Any

from kopf_scheduler.api.objects import parse_pod
from kopf_scheduler.queue import Nominator
from kopf_scheduler_workbench.testing.builders import make_pod, pod_dict


def _nominated(name: str, node: str, uid: str | None = None) -> dict[str, Any]:
    raw = pod_dict(name, uid=uid)
    raw["status"]["nominatedNodeName"] = node
    return raw


def test_add_list_delete() -> None:
    nom = Nominator()
    a, b = make_pod("a"), make_pod("b")
    nom.add_nominated_pod(a, "n1")
    nom.add_nominated_pod(b, "n1")
    assert nom.nominated_pods_for_node("n1") == [a, b]
    nom.delete_nominated_pod_if_exists(a)
    assert nom.nominated_pods_for_node("n1") == [b]
    nom.delete_nominated_pod_if_exists(a)  # idempotent
    nom.delete_nominated_pod_if_exists(b)
    assert nom.nominated_pods_for_node("n1") == [] and len(nom) == 0


def test_renomination_moves_the_pod() -> None:
    nom = Nominator()
    a = make_pod("a")
    nom.add_nominated_pod(a, "n1")
    nom.add_nominated_pod(a, "n2")
    assert nom.nominated_pods_for_node("n1") == []
    assert nom.nominated_pods_for_node("n2") == [a]


def test_status_field_used_when_no_node_given_and_bound_pods_skipped() -> None:
    nom = Nominator()
    pod = parse_pod(_nominated("a", "n3"))
    nom.add_nominated_pod(pod)
    assert nom.nominated_pods_for_node("n3") == [pod]
    bound = make_pod("b", node_name="n3")
    nom.add_nominated_pod(bound, "n3")
    assert nom.nominated_pods_for_node("n3") == [pod]
    nom.add_nominated_pod(make_pod("c"))  # nothing to nominate to
    assert len(nom) == 1


def test_update_keeps_in_memory_nomination_until_status_says_otherwise() -> None:
    nom = Nominator()
    old = make_pod("a")
    nom.add_nominated_pod(old, "n1")
    relabelled = parse_pod(pod_dict("a", uid=old.uid, labels={"x": "y"}))
    nom.update_nominated_pod(old, relabelled)
    assert nom.nominated_pods_for_node("n1") == [relabelled]  # latest object, same node
    moved = parse_pod(_nominated("a", "n2", uid=old.uid))
    nom.update_nominated_pod(relabelled, moved)
    assert nom.nominated_pods_for_node("n1") == [] and nom.nominated_pods_for_node("n2") == [moved]
    cleared = parse_pod(pod_dict("a", uid=old.uid))
    nom.update_nominated_pod(moved, cleared)
    assert len(nom) == 0
    bound = make_pod("z", node_name="n1")
    nom.add_nominated_pod(make_pod("z2"), "n1")
    nom.update_nominated_pod(bound, bound)
    assert nom.nominated_node_of(bound.uid) == ""
