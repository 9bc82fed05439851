"""ImageLocality: the reference's image_locality_test.go cases and helpers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from node_plugin_helpers import FakeHandle, make_snapshot, scores

from kopf_scheduler.api.objects import Node
from kopf_scheduler.cache.snapshot import Snapshot
from kopf_scheduler.framework.interface import CycleState
from kopf_scheduler.framework.types import ImageState
from kopf_scheduler.plugins.image_locality import ImageLocality, calculate_priority, normalized_image_name
from kopf_scheduler_workbench.testing.builders import make_node, make_pod

MB = 1024 * 1024

NODE_40_300_2000 = [
    (["gcr.io/40:latest", "gcr.io/40:v1"], 40 * MB),
    (["gcr.io/300:latest", "gcr.io/300:v1"], 300 * MB),
    (["gcr.io/2000:latest"], 2000 * MB),
]
NODE_250_10 = [(["gcr.io/250:latest"], 250 * MB), (["gcr.io/10:latest", "gcr.io/10:v1"], 10 * MB)]
NODE_600_40_900 = [
    (["gcr.io/600:latest"], 600 * MB),
    (["gcr.io/40:latest"], 40 * MB),
    (["gcr.io/900:latest"], 900 * MB),
]
NODE_300_600_900 = [
    (["gcr.io/300:latest"], 300 * MB),
    (["gcr.io/600:latest"], 600 * MB),
    (["gcr.io/900:latest"], 900 * MB),
]
NODE_4000_30 = [(["gcr.io/4000:latest"], 4000 * MB), (["gcr.io/30:latest"], 30 * MB)]


def snapshot_with_images(nodes: Sequence[Node]) -> Snapshot:
    """Fill image states as the cache summarises them: size and on how many nodes each name is."""
    snapshot = make_snapshot(nodes)
    where: dict[str, tuple[int, set[str]]] = {}
    for node in nodes:
        for names, size in node.images:
            for name in names:
                where.setdefault(name, (size, set()))[1].add(node.name)
    for info in snapshot.list():
        assert info.node is not None
        info.image_states = {
            name: ImageState(where[name][0], len(where[name][1]))
            for names, _ in info.node.images
            for name in names
        }
    return snapshot


def pod_with(*images: str, init: Sequence[str] = ()) -> Any:
    return make_pod(
        "p",
        containers=[{"name": f"c{i}", "image": im} for i, im in enumerate(images)],
        initContainers=[{"name": f"i{i}", "image": im} for i, im in enumerate(init)],
    )


CASES = [
    # machine1: 40MB * 1/2 = 20MB < 23MB -> 0; machine2: 250MB/2 -> 100 * (125 - 23) / (2000 - 23) = 5
    (
        "two images spread on two nodes, prefer the larger image one",
        ["gcr.io/40", "gcr.io/250"],
        [NODE_40_300_2000, NODE_250_10],
        [0, 5],
    ),
    # machine1: (40 + 300)/2 = 170MB -> 100 * 147 / 1977 = 7
    (
        "two images on one node, prefer this node",
        ["gcr.io/40", "gcr.io/300"],
        [NODE_40_300_2000, NODE_250_10],
        [7, 0],
    ),
    # machine1: 600 + 900 = 1500 -> 100 * 1477 / 2977 = 49; machine2: 150 + 600 + 900 -> 54
    (
        "three images",
        ["gcr.io/300", "gcr.io/600", "gcr.io/900"],
        [NODE_600_40_900, NODE_300_600_900],
        [49, 54],
    ),
    # 4000MB/2 = 2000 > 1000 * 2 containers -> capped at 100
    ("if exceed limit, use limit", ["gcr.io/4000", "gcr.io/10"], [NODE_4000_30, NODE_250_10], [100, 0]),
    (
        "untagged names mean latest; other tags do not match",
        ["gcr.io/10:v2", "gcr.io/250"],
        [NODE_250_10, []],
        [5, 0],
    ),
]


@pytest.mark.parametrize(("name", "images", "node_images", "expected"), CASES)
def test_score(name: str, images: list[str], node_images: list[Any], expected: list[int]) -> None:
    nodes = [make_node(f"machine{i + 1}", images=imgs) for i, imgs in enumerate(node_images)]
    snapshot = snapshot_with_images(nodes)
    pl = ImageLocality(None, FakeHandle(snapshot))
    assert scores(pl, CycleState(), pod_with(*images), snapshot) == expected


def test_init_containers_count() -> None:
    nodes = [make_node("machine1", images=NODE_300_600_900), make_node("machine2")]
    snapshot = snapshot_with_images(nodes)
    pl = ImageLocality(None, FakeHandle(snapshot))
    # 300/2 + 600/2 = 450MB over 2 containers: 100 * (450 - 23) / (2000 - 23) = 21
    assert scores(pl, CycleState(), pod_with("gcr.io/600", init=["gcr.io/300"]), snapshot) == [21, 0]


def test_helpers() -> None:
    assert normalized_image_name("gcr.io/10") == "gcr.io/10:latest"
    assert normalized_image_name("gcr.io/10:v1") == "gcr.io/10:v1"
    assert normalized_image_name("localhost:5000/img") == "localhost:5000/img:latest"
    assert calculate_priority(0, 1) == 0
    assert calculate_priority(1000 * MB, 1) == 100
    assert calculate_priority(5000 * MB, 1) == 100
    assert calculate_priority(0, 0) == 0


def test_image_volumes_count_like_containers() -> None:
    """image_locality_test.go "pod with ImageVolume": gcr.io/30 + an image volume of gcr.io/300."""
    nodes = [make_node("node1", images=NODE_300_600_900), make_node("node2", images=NODE_4000_30)]
    snapshot = snapshot_with_images(nodes)
    pl = ImageLocality(None, FakeHandle(snapshot))
    with_volume = make_pod(
        "p",
        containers=[{"name": "c", "image": "gcr.io/30"}],
        volumes=[{"name": "imageVolume", "image": {"reference": "gcr.io/300"}}],
    )
    # node1: 100 * (300M / 2 - 23M) / (1000M * 2 - 23M) = 6; node2: 30M / 2 < 23M -> 0
    assert scores(pl, CycleState(), with_volume, snapshot) == [6, 0]
    assert scores(pl, CycleState(), pod_with("gcr.io/30", "gcr.io/300"), snapshot) == [6, 0]
    vec = pl.score_vector(CycleState(), with_volume, snapshot, np.arange(2, dtype=np.int64))
    assert vec is not None and vec.tolist() == [6, 0]


def test_scores_from_the_parsed_pod_alone() -> None:
    """The parsed containers and volumes are all it reads: the pod's raw object may be gone (a
    container naming no image counts, and scores nothing)."""
    nodes = [make_node("node1", images=NODE_300_600_900), make_node("node2", images=NODE_4000_30)]
    snapshot = snapshot_with_images(nodes)
    pl = ImageLocality(None, FakeHandle(snapshot))
    pod = make_pod(
        "p",
        containers=[{"name": "c", "image": "gcr.io/600"}, {"name": "bare"}],
        initContainers=[{"name": "i", "image": "gcr.io/30"}],
        volumes=[{"name": "imageVolume", "image": {"reference": "gcr.io/300"}}],
    )
    expected = scores(pl, CycleState(), pod, snapshot)
    pod.raw = {}
    # node1: (600M + 300M) / 2 over 4 "containers": 100 * (450M - 23M) / (4000M - 23M) = 10;
    # node2: 30M / 2 < 23M -> 0
    assert scores(pl, CycleState(), pod, snapshot) == expected == [10, 0]
    vec = pl.score_vector(CycleState(), pod, snapshot, np.arange(2, dtype=np.int64))
    assert vec is not None and vec.tolist() == [10, 0]
