"""Cache: node/pod accounting, assume/confirm/forget/expire, ghost nodes, snapshots, images."""

from __future__ import annotations

from typing import Any

import pytest

from kopf_scheduler.api.objects import Pod, parse_pod
from kopf_scheduler.api.types import Resource
from kopf_scheduler.cache import Cache, CacheError, Snapshot
from kopf_scheduler.cache.cache import NodeTree
from kopf_scheduler_workbench.testing.builders import make_node, make_pod, pod_dict

ZONE = "topology.kubernetes.io/zone"


def bound(pod: Pod, node: str) -> Pod:
    """The same pod (same uid) as the watch delivers it once bound to ``node``."""
    return parse_pod({**pod_dict(pod.name, uid=pod.uid, cpu="100m", node_name=node)})


def requested_cpu(cache: Cache, node: str) -> int:
    info = cache.get_node_info(node)
    assert info is not None
    return info.requested.milli_cpu


# --- nodes and pods -----------------------------------------------------------------------------


def test_add_pods_account_on_their_nodes() -> None:
    cache = Cache()
    cache.add_node(make_node("n1"))
    cache.add_pod(make_pod("a", cpu="500m", node_name="n1"))
    cache.add_pod(make_pod("b", cpu="250m", node_name="n1"))
    assert requested_cpu(cache, "n1") == 750
    assert cache.pod_count() == 2


def test_update_and_remove_pod() -> None:
    cache = Cache()
    cache.add_node(make_node("n1"))
    pod = make_pod("a", cpu="500m", node_name="n1")
    cache.add_pod(pod)
    bigger = parse_pod(pod_dict("a", uid=pod.uid, cpu="1", node_name="n1"))
    cache.update_pod(pod, bigger)
    assert requested_cpu(cache, "n1") == 1000
    cache.remove_pod(bigger)
    assert requested_cpu(cache, "n1") == 0 and cache.pod_count() == 0


def test_pod_before_node_then_node_arrives() -> None:
    cache = Cache()
    cache.add_pod(make_pod("a", cpu="1", node_name="late"))
    assert cache.node_count() == 0
    assert cache.snapshot().get("late") is None  # no node object yet: not schedulable
    cache.add_node(make_node("late"))
    info = cache.snapshot().get("late")
    assert info is not None and info.requested.milli_cpu == 1000


# --- assume / confirm / forget / expire ---------------------------------------------------------


def test_assume_then_confirm() -> None:
    cache = Cache()
    cache.add_node(make_node("n1"))
    pod = make_pod("a", cpu="100m")
    assumed = bound(pod, "n1")
    cache.assume_pod(assumed)
    assert cache.is_assumed(pod.uid) and requested_cpu(cache, "n1") == 100
    with pytest.raises(CacheError):
        cache.assume_pod(assumed)
    cache.finish_binding(assumed)
    cache.add_pod(bound(pod, "n1"))
    assert not cache.is_assumed(pod.uid)
    assert requested_cpu(cache, "n1") == 100  # counted once
    with pytest.raises(CacheError):
        cache.forget_pod(assumed)  # confirmed pods cannot be forgotten


def test_confirmation_on_another_node_moves_the_pod() -> None:
    cache = Cache()
    for name in ("n1", "n2"):
        cache.add_node(make_node(name))
    pod = make_pod("a")
    cache.assume_pod(bound(pod, "n1"))
    cache.add_pod(bound(pod, "n2"))
    assert (requested_cpu(cache, "n1"), requested_cpu(cache, "n2")) == (0, 100)
    assert not cache.is_assumed(pod.uid)


def test_forget_releases_resources() -> None:
    cache = Cache()
    cache.add_node(make_node("n1"))
    assumed = bound(make_pod("a"), "n1")
    cache.assume_pod(assumed)
    cache.forget_pod(assumed)
    assert requested_cpu(cache, "n1") == 0
    assert not cache.is_assumed(assumed.uid) and cache.pod_count() == 0


def test_removed_node_with_pods_stays_as_ghost_until_pods_go() -> None:
    cache = Cache()
    cache.add_node(make_node("n1"))
    cache.add_node(make_node("n2"))
    pod = make_pod("a", cpu="1", node_name="n1")
    cache.add_pod(pod)
    snap = cache.snapshot()
    cache.remove_node(make_node("n1"))
    ghost = cache.get_node_info("n1")
    assert ghost is not None and ghost.node is None and len(ghost.pods) == 1
    cache.update_snapshot(snap)
    assert [i.name for i in snap.list()] == ["n2"]  # ghosts are not schedulable
    # The node comes back: its pods are still accounted.
    cache.add_node(make_node("n1"))
    cache.update_snapshot(snap)
    info = snap.get("n1")
    assert info is not None and info.requested.milli_cpu == 1000
    cache.remove_node("n1")
    cache.remove_pod(pod)
    assert cache.get_node_info("n1") is None


def test_remove_unknown_node_raises() -> None:
    with pytest.raises(CacheError):
        Cache().remove_node("nope")


# --- snapshots ----------------------------------------------------------------------------------


def test_snapshot_copies_only_changed_nodes() -> None:
    cache = Cache()
    for i in range(10):
        cache.add_node(make_node(f"n{i}"))
    snap = Snapshot()
    assert cache.update_snapshot(snap) == 10
    before = list(snap.list())
    assert cache.update_snapshot(snap) == 0
    cache.assume_pod(bound(make_pod("a"), "n3"))
    assert cache.update_snapshot(snap) == 1
    after = snap.list()
    assert [i is j for i, j in zip(before, after, strict=True)] == [
        n != "n3" for n in (i.name for i in before)
    ]
    assert snap.get("n3") is not None and snap.get("n3").requested.milli_cpu == 100  # type: ignore[union-attr]
    assert snap.arrays.requested[snap.index["n3"], 0] == 100
    # The snapshot's copy is isolated from later cache changes.
    cache.add_pod(make_pod("b", cpu="1", node_name="n3"))
    assert snap.get("n3").requested.milli_cpu == 100  # type: ignore[union-attr]


def test_two_snapshots_are_independent() -> None:
    cache = Cache()
    cache.add_node(make_node("n1"))
    s1, s2 = cache.snapshot(), cache.snapshot()
    cache.add_pod(make_pod("a", cpu="1", node_name="n1"))
    cache.update_snapshot(s1)
    assert s1.get("n1").requested.milli_cpu == 1000  # type: ignore[union-attr]
    assert s2.get("n1").requested.milli_cpu == 0  # type: ignore[union-attr]
    cache.update_snapshot(s2)
    assert s2.get("n1").requested.milli_cpu == 1000  # type: ignore[union-attr]


def test_new_scalar_resource_triggers_rebuild() -> None:
    cache = Cache()
    cache.add_node(make_node("n1"))
    snap = cache.snapshot()
    cache.update_node(make_node("n1"), make_node("n1", extra={"example.com/gpu": "2"}))
    cache.update_snapshot(snap)
    assert snap.arrays.allocatable[0, snap.arrays.columns["example.com/gpu"]] == 2


def test_snapshot_order_interleaves_zones() -> None:
    cache = Cache()
    layout = [("a1", "a"), ("a2", "a"), ("a3", "a"), ("b1", "b"), ("c1", "c"), ("c2", "c")]
    for name, zone in layout:
        cache.add_node(make_node(name, labels={ZONE: zone}))
    assert [i.name for i in cache.snapshot().list()] == ["a1", "b1", "c1", "a2", "c2", "a3"]


def test_zone_change_reorders_snapshot() -> None:
    cache = Cache()
    for name, zone in [("a1", "a"), ("a2", "a"), ("b1", "b")]:
        cache.add_node(make_node(name, labels={ZONE: zone}))
    snap = cache.snapshot()
    assert [i.name for i in snap.list()] == ["a1", "b1", "a2"]
    cache.update_node(make_node("a1", labels={ZONE: "a"}), make_node("a1", labels={ZONE: "b"}))
    cache.update_snapshot(snap)
    assert [i.name for i in snap.list()] == ["a2", "b1", "a1"]


def test_node_tree_remove_keeps_order_and_drops_empty_zones() -> None:
    tree = NodeTree()
    for name, zone in [("a1", "a"), ("b1", "b"), ("a2", "a")]:
        tree.add(make_node(name, labels={ZONE: zone}))
    tree.remove("b1")
    assert tree.list() == ["a1", "a2"]
    tree.remove("a1")
    assert tree.list() == ["a2"] and len(tree) == 1


# --- images -------------------------------------------------------------------------------------


def test_image_states_count_nodes_having_each_image() -> None:
    cache = Cache()
    img = (["registry/app:1", "registry/app@sha256:abc"], 500)
    cache.add_node(make_node("n1", images=[img]))
    cache.add_node(make_node("n2", images=[img, (["other:1"], 10)]))
    state = cache.image_state("registry/app:1")
    assert state is not None and (state.size, state.num_nodes) == (500, 2)
    snap = cache.snapshot()
    n2 = snap.get("n2")
    assert n2 is not None and n2.image_states["registry/app:1"].num_nodes == 2
    assert n2.image_states["other:1"].num_nodes == 1
    cache.remove_node("n2")
    state = cache.image_state("registry/app:1")
    assert state is not None and state.num_nodes == 1
    assert cache.image_state("other:1") is None
    cache.update_node(make_node("n1", images=[img]), make_node("n1"))
    assert cache.image_state("registry/app:1") is None


# --- objects ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "meta", "key"),
    [
        ("PersistentVolumeClaim", {"name": "data", "namespace": "ns"}, "ns/data"),
        ("PodDisruptionBudget", {"name": "pdb", "namespace": "ns"}, "ns/pdb"),
        ("PersistentVolume", {"name": "pv1"}, "pv1"),
        ("StorageClass", {"name": "fast"}, "fast"),
        ("CSINode", {"name": "n1"}, "n1"),
        ("Namespace", {"name": "ns"}, "ns"),
    ],
)
def test_object_store_keys(kind: str, meta: dict[str, Any], key: str) -> None:
    cache = Cache()
    raw = {"metadata": meta}
    assert cache.add_object(kind, raw) == key
    assert cache.objects[kind][key] is raw
    cache.delete_object(kind, raw)
    assert cache.get_object(kind, key) is None


# --- speed --------------------------------------------------------------------------------------


def test_large_cluster_snapshot_copies_only_changed_nodes() -> None:
    # Speed is measured by the benchmarks; here the structural property behind it: after one assume,
    # the snapshot update copies exactly one NodeInfo out of 5,000.
    nodes = [make_node(f"n{i}", labels={ZONE: f"z{i % 3}"}) for i in range(5000)]
    pods = [
        Pod(
            uid=f"u{i}", namespace="default", name=f"p{i}", node_name=f"n{i % 5000}", requests=Resource(100)
        )
        for i in range(50_000)
    ]
    cache = Cache()
    for node in nodes:
        cache.add_node(node)
    for pod in pods:
        cache.add_pod(pod)
    snap = cache.snapshot()
    assert len(snap) == 5000
    assert sum(len(info.pods) for info in snap.list()) == 50_000
    cache.assume_pod(bound(make_pod("x"), "n42"))
    assert cache.update_snapshot(snap) == 1
    assert len(snap.get("n42").pods) == 11
