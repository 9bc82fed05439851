"""OpportunisticBatching: signatures, and placements equal to unbatched scheduling on random clusters.

Equal means: every pod lands on a node the full Filter and Score pass, run on the same snapshot just
before it, scores highest (ties are broken at random on both paths, so the node itself may differ
among equals). The clusters are small enough (< 100 nodes) that the unbatched pass sees every node.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from kopf_scheduler.engine import Engine, new_engine
from kopf_scheduler.framework.batch import ScoredNodes
from kopf_scheduler.framework.interface import CycleState
from kopf_scheduler.framework.profiles import default_profile, load_profile
from kopf_scheduler.framework.runtime import Framework
from kopf_scheduler.memory_client import MemoryClusterClient
from kopf_scheduler_workbench.testing.builders import make_node, make_pod

NAME = "batched"
# scheduler_perf's batching config: PodTopologySpread without system defaults, else no pod signs.
NO_TOPOLOGY = {"name": "PodTopologySpread", "args": {"defaultingType": "List", "defaultConstraints": []}}


def profile(batching_name: str = NAME) -> Any:
    return load_profile({"schedulerName": batching_name, "pluginConfig": [NO_TOPOLOGY]})


def test_default_profile_never_signs_and_no_topology_profile_signs_equal_pods_equally() -> None:
    fw = Framework(default_profile())
    assert fw.signatures_enabled
    assert fw.sign_pod(make_pod("a", cpu="1")) is None  # system-default spreading: not signable
    fw = Framework(profile())
    a = fw.sign_pod(make_pod("a", cpu="1", labels={"app": "x"}))
    b = fw.sign_pod(make_pod("b", cpu="1", labels={"app": "x"}))
    assert a is not None and a == b
    assert fw.sign_pod(make_pod("c", cpu="2", labels={"app": "x"})) != a
    assert fw.sign_pod(make_pod("d", cpu="1", labels={"app": "y"})) != a  # InterPodAffinity signs labels
    spread = {
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
        ]
    }
    assert fw.sign_pod(make_pod("e", cpu="1", **spread)) is None
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "zone"}]}}
    assert fw.sign_pod(make_pod("f", cpu="1", affinity=anti)) is None


def test_a_refusal_is_asked_first_next_time_and_signatures_do_not_change() -> None:
    fw = Framework(profile())
    pod = make_pod("a", cpu="1", labels={"app": "x"})
    before = fw.sign_pod(pod)
    spread = {
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
        ]
    }
    assert fw.sign_pod(make_pod("e", cpu="1", **spread)) is None
    refuser = fw._sign_plugins[fw._sign_refuser]
    assert refuser.name == "PodTopologySpread"
    calls: list[str] = []
    for p in fw._sign_plugins:
        original = p.sign

        def counted(pod: Any, _original: Any = original, _name: str = p.name) -> Any:
            calls.append(_name)
            return _original(pod)

        p.sign = counted  # type: ignore[method-assign]
    assert fw.sign_pod(make_pod("e2", cpu="1", **spread)) is None
    assert calls == ["PodTopologySpread"]  # the only call for another pod it refuses
    calls.clear()
    assert fw.sign_pod(pod) == before  # merged in plugin order whatever the call order
    assert len(calls) == len(fw._sign_plugins) and calls[0] == "PodTopologySpread"


async def test_an_unsignable_pod_keeps_no_scores_and_flushes_as_not_batchable() -> None:
    from kopf_scheduler.metrics.recorder import NoopMetrics

    class Flushes(NoopMetrics):
        def __init__(self) -> None:
            self.reasons: list[str] = []

        def batch_flushed(self, profile: str, reason: str) -> None:
            self.reasons.append(reason)

    metrics = Flushes()
    engine = new_engine(MemoryClusterClient(), [default_profile()], metrics=metrics)
    for i in range(3):
        engine.handlers.add_node(make_node(f"n{i}", cpu="4"))
    fw = engine.profiles.get("kopf-scheduler")
    assert fw is not None and fw.batch is not None
    built: list[int] = []
    original = ScoredNodes.around

    def around(*args: Any, **kwargs: Any) -> ScoredNodes:
        built.append(1)
        return original(*args, **kwargs)

    ScoredNodes.around = staticmethod(around)  # type: ignore[method-assign,assignment]
    try:
        engine.handlers.add_pod(make_pod("p", cpu="1", scheduler_name="kopf-scheduler"))
        assert await engine.scheduler.schedule_one()
    finally:
        ScoredNodes.around = original  # type: ignore[method-assign]
    assert built == [] and metrics.reasons == ["pod_not_batchable"]


def test_scored_nodes_pop_best_first_ties_by_randomizer() -> None:
    totals = np.array([1, 5, 5, 2, 9])
    nodes = ScoredNodes.around(
        ["a", "b", "c", "d", "e"],
        np.arange(5),
        0,
        {"p": totals.copy()},
        totals,
        np.array([9, 1, 7, 3, 0]),
        chosen=4,  # "e" was the pass's choice: not offered again
    )
    assert len(nodes) == 4
    assert [nodes.pop() for _ in range(4)] == ["c", "b", "d", "a"]
    assert len(nodes) == 0 and nodes.last == 0


def random_cluster(rng: random.Random, engine: Engine) -> None:
    images = [f"registry.example/app-{i}:v1" for i in range(4)]
    for i in range(rng.randint(8, 60)):
        taints = []
        if rng.random() < 0.2:
            taints.append(
                {
                    "key": "dedicated",
                    "value": "batch",
                    "effect": rng.choice(["NoSchedule", "PreferNoSchedule"]),
                }
            )
        node = make_node(
            f"n{i:02d}",
            cpu=str(rng.choice([2, 4, 8, 16])),
            memory=f"{rng.choice([4, 8, 16, 32])}Gi",
            labels={"zone": f"z{rng.randint(0, 2)}", "disk": rng.choice(["ssd", "hdd"])},
            taints=taints,
            images=[
                ([img], rng.randint(50, 900) * 1024 * 1024) for img in rng.sample(images, rng.randint(0, 3))
            ],
        )
        engine.handlers.add_node(node)


def templates(rng: random.Random) -> list[dict[str, Any]]:
    out = []
    for t in range(rng.randint(2, 4)):
        spec: dict[str, Any] = {
            "cpu": rng.choice(["100m", "250m", "500m", "1", "1500m"]),
            "memory": rng.choice(["128Mi", "512Mi", "1Gi", "2Gi"]),
            "labels": {"app": f"t{t}"},
        }
        extra: dict[str, Any] = {}
        if rng.random() < 0.5:
            extra["tolerations"] = [{"key": "dedicated", "operator": "Equal", "value": "batch"}]
        if rng.random() < 0.4:
            extra["nodeSelector"] = {"disk": rng.choice(["ssd", "hdd"])}
        if rng.random() < 0.5:
            image = f"registry.example/app-{rng.randint(0, 3)}:v1"
            extra["containers"] = [
                {
                    "name": "c",
                    "image": image,
                    "resources": {"requests": {"cpu": spec["cpu"], "memory": spec["memory"]}},
                }
            ]
        out.append({**spec, **extra})
    return out


def best_nodes(engine: Engine, pod: Any) -> set[str]:
    """The unbatched pass on the current snapshot: every node with the highest total score."""
    sched = engine.scheduler
    fw = engine.profiles.get(NAME)
    assert fw is not None
    sched.cache.update_snapshot(sched.snapshot)
    state = CycleState()
    feasible, _, _ = sched.find_nodes_that_fit_pod(fw, state, pod)
    if not len(feasible):
        return set()
    infos = sched.snapshot.node_infos
    if len(feasible) == 1:
        return {infos[int(feasible[0])].name}
    totals = sched.prioritize_nodes(fw, state, pod, feasible)
    return {infos[int(feasible[j])].name for j in np.flatnonzero(totals == totals.max())}


@pytest.mark.parametrize("seed", range(12))
async def test_batched_placements_equal_unbatched_on_random_clusters(seed: int) -> None:
    rng = random.Random(seed)
    client = MemoryClusterClient()
    engine = new_engine(client, [profile()], rng=random.Random(seed))
    random_cluster(rng, engine)
    fw = engine.profiles.get(NAME)
    assert fw is not None and fw.batch is not None
    kinds = templates(rng)
    runs = [(rng.choice(kinds), rng.randint(1, 25)) for _ in range(6)]
    n = 0
    for spec, count in runs:
        for _ in range(count):
            n += 1
            pod = make_pod(f"p{n:03d}", scheduler_name=NAME, **spec)
            engine.handlers.add_pod(pod)
            expected = best_nodes(engine, pod)
            assert await engine.scheduler.schedule_one()
            await engine.scheduler.wait_for_bindings()
            got = client.bindings.get(pod.key)
            if not expected:
                assert got is None
                continue
            assert got in expected, (seed, pod.name, got, sorted(expected))
    assert fw.batch.batched_pods > 0, "no pod was placed by a hint: the test would prove nothing"
