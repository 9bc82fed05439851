"""A snapshot built from nothing (the first cycle's: ``Cache._build_snapshot``, ``NodeArrays.set_rows``)
equals one brought up to date node by node, row for row and number for number; and parse_node's
shortcuts for absent lists keep what it makes and the first error it reports."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from kopf_scheduler.api.objects import parse_node
from kopf_scheduler.api.types import ObjectError
from kopf_scheduler.cache.cache import Cache
from kopf_scheduler.cache.snapshot import Snapshot
from kopf_scheduler.framework.snapshot import NodeArrays
from kopf_scheduler.framework.types import NodeInfo
from kopf_scheduler_workbench.testing.builders import make_node, make_pod

ZONE = "topology.kubernetes.io/zone"
TAINTS = (
    (),
    ({"key": "a", "effect": "NoSchedule"},),
    ({"key": "b", "effect": "PreferNoSchedule"}, {"key": "c", "effect": "PreferNoSchedule"}),
    ({"key": "d", "effect": "NoExecute"}, {"key": "e", "effect": "PreferNoSchedule"}),
)


def _cache(rng: random.Random, nodes: int) -> Cache:
    cache = Cache()
    for i in range(nodes):
        gpus = {"example.com/gpu": str(rng.randrange(1, 4))} if rng.random() < 0.3 else None
        cache.add_node(
            make_node(
                f"n{i:03d}",
                cpu=str(rng.randrange(1, 64)),
                labels={ZONE: f"z{rng.randrange(3)}"},
                taints=rng.choice(TAINTS),
                unschedulable=rng.random() < 0.2,
                extra=gpus,
                images=[((f"img{rng.randrange(5)}",), 1000)] if rng.random() < 0.5 else (),
            )
        )
    for j in range(nodes * 2):
        node = f"n{rng.randrange(nodes):03d}"
        extra: dict[str, Any] = {}
        if rng.random() < 0.2:
            extra["containers"] = [
                {
                    "name": "c",
                    "resources": {
                        "requests": {"cpu": "100m", "example.com/gpu": "1", "example.com/fpga": "1"}
                    },
                }
            ]
        cache.add_pod(make_pod(f"p{j}", node_name=node, **extra))
    cache.add_pod(make_pod("ghost-pod", node_name="gone"))  # a NodeInfo without a node: no row
    return cache


def _arrays(snap: Snapshot) -> dict[str, Any]:
    a = snap.arrays
    return {
        "columns": a.columns,
        "allocatable": a.allocatable,
        "requested": a.requested,
        "non_zero_requested": a.non_zero_requested,
        "unschedulable": a.unschedulable,
        "has_hard_taints": a.has_hard_taints,
        "prefer_no_schedule_taints": a.prefer_no_schedule_taints,
        "row_generation": snap.row_generation,
    }


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_first_build_equals_building_node_by_node(seed: int) -> None:
    cache = _cache(random.Random(seed), 40)
    first = Snapshot()
    copied = cache.update_snapshot(first)
    assert copied == 40

    # The general path: a snapshot that already has a row takes the others as changes.
    stepwise = Snapshot()
    names = cache.node_names()
    partial = Cache()
    head = cache.get_node_info(names[0])
    assert head is not None and head.node is not None
    partial.add_node(head.node)
    partial.update_snapshot(stepwise)
    stepwise.generation = 0  # every node of ``cache`` is newer: all copied, laid out anew
    assert cache.update_snapshot(stepwise) == 40

    assert [i.name for i in first.list()] == [i.name for i in stepwise.list()] == names
    assert first.generation == stepwise.generation
    assert first.index == stepwise.index
    for (name, got), want in zip(_arrays(first).items(), _arrays(stepwise).values(), strict=True):
        if isinstance(got, np.ndarray):
            assert got.dtype == want.dtype and np.array_equal(got, want), name
        else:
            assert got == want, name
    truth = NodeArrays(len(first), first.arrays.columns)  # cell by cell, as a changed row is set
    for row, info in enumerate(first.list()):
        truth.set_row(row, info)
    for name in ("allocatable", "requested", "non_zero_requested", "unschedulable", "has_hard_taints"):
        assert np.array_equal(getattr(first.arrays, name), getattr(truth, name)), name
    assert np.array_equal(first.arrays.prefer_no_schedule_taints, truth.prefer_no_schedule_taints)
    for a, b in zip(first.list(), stepwise.list(), strict=True):
        assert a is not b and a is not cache.get_node_info(a.name)  # copies, each its own
        assert (a.node, a.pods, a.requested, a.image_states) == (b.node, b.pods, b.requested, b.image_states)
    # The rows are tracked: a NodeInfo edited in place moves its row's generation.
    info = first.list()[3]
    info.add_pod(make_pod("late", node_name=info.name))
    assert first.row_generation[3] == info.generation


def test_set_rows_equals_set_row_each() -> None:
    cache = _cache(random.Random(7), 30)
    infos: list[NodeInfo] = [i.clone() for i in cache.node_infos()]  # the ghost NodeInfo included
    scalars = {name: None for i in infos for name in i.allocatable.scalar}
    bulk, one_by_one = NodeArrays(len(infos), scalars), NodeArrays(len(infos), scalars)
    bulk.requested[:] = 99  # set_rows sets every cell, whatever was there
    bulk.set_rows(infos)
    for row, info in enumerate(infos):
        one_by_one.set_row(row, info)
    for name in ("allocatable", "requested", "non_zero_requested", "unschedulable", "has_hard_taints"):
        assert np.array_equal(getattr(bulk, name), getattr(one_by_one, name)), name
    assert np.array_equal(bulk.prefer_no_schedule_taints, one_by_one.prefer_no_schedule_taints)
    assert bulk.has_hard_taints.any() and bulk.prefer_no_schedule_taints.max() == 2
    with pytest.raises(ValueError):
        bulk.set_rows(infos[:-1])


def test_an_empty_cache_builds_no_rows() -> None:
    snap = Snapshot()
    assert Cache().update_snapshot(snap) == 0
    assert len(snap) == 0


def _node(**parts: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": "n"}, "spec": {}, "status": {"allocatable": {"cpu": "1"}}}
    for where, value in parts.items():
        section, key = where.split("__")
        body[section][key] = value
    return body


def test_parse_node_absent_and_empty_lists() -> None:
    bare = parse_node(_node())
    assert (bare.taints, bare.images, bare.declared_features, bare.annotations) == ((), (), (), {})
    empty = parse_node(_node(spec__taints=[], status__images=[], status__declaredFeatures=[]))
    assert (empty.taints, empty.images, empty.declared_features) == ((), (), ())
    full = parse_node(
        _node(
            spec__taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}],
            status__images=[{"names": ["a", "b"], "sizeBytes": 5}],
            status__declaredFeatures=["F1", "F2"],
            metadata__annotations={"x": "y"},
        )
    )
    assert [(t.key, t.value, t.effect) for t in full.taints] == [("k", "v", "NoSchedule")]
    assert full.images == ((("a", "b"), 5),)
    assert full.declared_features == ("F1", "F2")
    assert full.annotations == {"x": "y"}
    assert parse_node(_node()).annotations is not bare.annotations  # each node its own dict


@pytest.mark.parametrize(
    ("parts", "path"),
    [
        ({"spec__taints": "x"}, "spec.taints"),
        ({"spec__taints": {}}, "spec.taints"),
        ({"status__declaredFeatures": "F"}, "status.declaredFeatures"),
        ({"status__images": {}}, "status.images"),
        ({"metadata__annotations": []}, "metadata.annotations"),
        ({"metadata__annotations": {"a": 1}}, "metadata.annotations.a"),
        # Two malformed fields: the first in the order they are read is reported.
        ({"status__images": "x", "spec__taints": "x"}, "status.images"),
        ({"spec__taints": "x", "status__declaredFeatures": "x"}, "spec.taints"),
        ({"metadata__labels": [], "spec__taints": "x"}, "metadata.labels"),
    ],
)
def test_parse_node_reports_the_first_malformed_field(parts: dict[str, Any], path: str) -> None:
    with pytest.raises(ObjectError) as err:
        parse_node(_node(**parts))
    assert err.value.path == path


def test_image_rows_and_affinity_lists_equal_a_rescan() -> None:
    cache = _cache(random.Random(11), 30)
    snap = Snapshot()
    cache.update_snapshot(snap)
    infos = snap.list()
    assert [i for i in infos if i.image_states] and [i for i in infos if not i.image_states]
    for image in [f"img{k}" for k in range(6)]:
        want = [
            (row, info.image_states[image]) for row, info in enumerate(infos) if image in info.image_states
        ]
        got = snap.image_rows(image)
        if not want:
            assert got is None
            continue
        assert got is not None
        rows, sizes, nums = got
        assert rows.tolist() == [row for row, _ in want]
        assert sizes.tolist() == [float(st.size) for _, st in want]
        assert nums.tolist() == [float(st.num_nodes) for _, st in want]
    affinity = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"a": "b"}}}
    ]}}  # fmt: skip
    cache.add_pod(make_pod("anti", node_name=infos[5].name, affinity=affinity))
    cache.update_snapshot(snap)
    assert [i.name for i in snap.have_pods_with_affinity_list()] == [infos[5].name]
    assert [i.name for i in snap.have_pods_with_required_anti_affinity_list()] == [infos[5].name]
    fresh = Snapshot()
    cache.update_snapshot(fresh)  # built from nothing: the lists are scanned, not kept up to date
    assert [i.name for i in fresh.have_pods_with_required_anti_affinity_list()] == [infos[5].name]


def test_a_node_info_clone_copies_every_field_to_itself() -> None:
    """clone() passes the fields positionally: a field added or moved must not land in another's
    place. Every field set apart from its default, then compared field by field."""
    import dataclasses

    from kopf_scheduler.api.types import Resource
    from kopf_scheduler.framework.types import HostPortInfo, ImageState

    pod = make_pod("p", cpu="1")
    ports = HostPortInfo()
    info = NodeInfo(
        node=make_node("n1", cpu="4"),
        pods=[pod],
        pods_with_affinity=[pod, pod],
        pods_with_required_anti_affinity=[pod, pod, pod],
        used_ports=ports,
        requested=Resource(milli_cpu=1000),
        non_zero_requested=Resource(milli_cpu=2000),
        allocatable=Resource(milli_cpu=4000),
        image_states={"img": ImageState(size=5, num_nodes=1)},
        pvc_ref_counts={"ns/claim": 2},
        generation=17,
        watchers=[lambda _: None],
    )
    copy = info.clone()
    for f in dataclasses.fields(NodeInfo):
        if f.name == "watchers":
            assert copy.watchers is None  # a snapshot's callbacks are not the copy's
        elif f.name == "used_ports":
            assert type(copy.used_ports) is HostPortInfo and copy.used_ports is not ports
        else:
            assert getattr(copy, f.name) == getattr(info, f.name), f.name
    assert copy.pods is not info.pods and copy.requested is not info.requested
