"""Snapshot's nodes-with-affinity-pods lists, kept up to date row by row, equal a full rescan."""

from __future__ import annotations

import random
from typing import Any

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.cache.cache import Cache
from kopf_scheduler.cache.snapshot import Snapshot
from kopf_scheduler_workbench.testing.builders import make_node, make_pod

HOST = "kubernetes.io/hostname"


def _affinity(kind: str) -> dict[str, Any]:
    term = {"topologyKey": HOST, "labelSelector": {"matchLabels": {"app": "x"}}}
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def test_lists_follow_cache_updates() -> None:
    rng = random.Random(5)
    cache = Cache()
    snapshot = Snapshot()
    for i in range(20):
        cache.add_node(make_node(f"n{i:02d}"))
    pods: list[Pod] = []
    for step in range(300):
        if pods and rng.random() < 0.4:
            cache.remove_pod(pods.pop(rng.randrange(len(pods))))
        else:
            kind = rng.choice([None, "podAffinity", "podAntiAffinity"])
            extra: dict[str, Any] = {"affinity": _affinity(kind)} if kind else {}
            pod = make_pod(f"p{step}", node_name=f"n{rng.randrange(20):02d}", **extra)
            cache.add_pod(pod)
            pods.append(pod)
        cache.update_snapshot(snapshot)
        if step % 3:
            continue  # let several changes pile up between reads
        infos = snapshot.list()
        assert list(snapshot.have_pods_with_affinity_list()) == [n for n in infos if n.pods_with_affinity]
        assert list(snapshot.have_pods_with_required_anti_affinity_list()) == [
            n for n in infos if n.pods_with_required_anti_affinity
        ]
