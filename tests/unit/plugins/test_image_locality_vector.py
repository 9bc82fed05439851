"""ImageLocality.score_vector agrees with score, including snapshots refreshed row by row by the cache."""

from __future__ import annotations

import random

from node_plugin_helpers import FakeHandle, all_rows, assert_score_vector_agrees
from test_image_locality import CASES, MB, pod_with, snapshot_with_images

from kopf_scheduler.cache.cache import Cache
from kopf_scheduler.cache.snapshot import Snapshot
from kopf_scheduler.framework.interface import CycleState
from kopf_scheduler.plugins.image_locality import ImageLocality
from kopf_scheduler_workbench.testing.builders import make_node, make_pod


def test_reference_cases_vector() -> None:
    for _, images, node_images, expected in CASES:
        nodes = [make_node(f"machine{i + 1}", images=imgs) for i, imgs in enumerate(node_images)]
        snapshot = snapshot_with_images(nodes)
        pl = ImageLocality(None, FakeHandle(snapshot))
        assert assert_score_vector_agrees(pl, CycleState(), pod_with(*images), snapshot) == expected
        for pod in (pod_with(), pod_with("absent"), pod_with(*images, images[0])):
            assert_score_vector_agrees(pl, CycleState(), pod, snapshot)


def test_random_clusters_through_cache_updates() -> None:
    rng = random.Random(7)
    sizes = {f"img{j}:latest": rng.randrange(1, 3000) * MB for j in range(6)}
    cache = Cache()
    snapshot = Snapshot()
    pl = ImageLocality(None, FakeHandle(snapshot))
    for step in range(60):
        name = f"m{rng.randrange(12)}"
        images = [([img], size) for img, size in sizes.items() if rng.random() < 0.4]
        cache.add_node(make_node(name, images=images))
        if step % 5 == 0:
            cache.add_pod(make_pod(f"p{step}", node_name=name))
        cache.update_snapshot(snapshot)
        pod = pod_with(*[f"img{rng.randrange(6)}" for _ in range(rng.randrange(0, 4))])
        assert_score_vector_agrees(pl, CycleState(), pod, snapshot)
        sub = all_rows(snapshot)[::-2]
        vec = pl.score_vector(CycleState(), pod, snapshot, sub)
        assert vec is not None
        assert vec.tolist() == [pl.score(CycleState(), pod, snapshot.node_infos[r])[0] for r in sub]
