"""PodTopologySpread's bincount path (per-row counts refreshed by generation) equals the walk over nodes."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
from spread_affinity_helpers import FakeHandle, build_snapshot, node, pod

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.framework.interface import CycleState
from kopf_scheduler.plugins.pod_topology_spread import (
    PRE_FILTER_KEY,
    PRE_SCORE_KEY,
    PodTopologySpread,
    PodTopologySpreadArgs,
)

HOST, ZONE = "kubernetes.io/hostname", "zone"


class _Walking(PodTopologySpread):
    """The same plugin with the numpy shortcut turned off: PreFilter/PreScore walk every node."""

    def _vector_snapshot(self, *args: Any, **kwargs: Any) -> Any:
        return None


def _incoming(rng: random.Random, name: str) -> Pod:
    sel = {"matchLabels": {"app": f"a{rng.randrange(3)}"}}
    constraints = [
        {"maxSkew": rng.randrange(1, 3), "topologyKey": key, "whenUnsatisfiable": when, "labelSelector": sel}
        for key in (ZONE, HOST)
        for when in ("DoNotSchedule", "ScheduleAnyway")
        if rng.random() < 0.6
    ]
    return pod(name, labels={"app": f"a{rng.randrange(3)}"}, topologySpreadConstraints=constraints)


def _run(pl: PodTopologySpread, incoming: Pod, snap: Any, feasible: list[int]) -> tuple[Any, ...]:
    state = CycleState()
    _, pre = pl.pre_filter(state, incoming, snap.list())
    pf: Any = pre.code if pre is not None else state.get(PRE_FILTER_KEY)
    if pre is None:
        pf = (pf.tp_value_to_match_num, pf.min_match_num, pf.domains_at_count)
    nodes = [snap.node_infos[r] for r in feasible]
    pre = pl.pre_score(state, incoming, nodes)
    if pre is not None:
        return pf, pre.code
    ps = state.get(PRE_SCORE_KEY)
    scores = [pl.score(state, incoming, n)[0] for n in nodes]
    vec = pl.score_vector(state, incoming, snap, np.array(feasible, dtype=np.int64))
    assert vec is not None and vec.tolist() == scores
    return pf, ps.topology_value_to_pod_counts, ps.topology_normalizing_weight, ps.ignored_nodes, scores


def test_vector_counts_match_walk() -> None:
    rng = random.Random(3)
    nodes = [node(f"n{i}", zone=f"z{i % 3}", **{HOST: f"n{i}"}) for i in range(6)]
    nodes.append(node("bare"))  # no zone label: ignored or excluded
    existing = [pod(f"e{i}", f"n{i % 6}", labels={"app": f"a{i % 3}"}) for i in range(15)]
    snap = build_snapshot(nodes, existing)
    args = PodTopologySpreadArgs(defaulting_type="List")
    fast = PodTopologySpread(args, FakeHandle(snap))
    walked = _Walking(args, FakeHandle(snap))
    for step in range(80):
        info = snap.node_infos[rng.randrange(len(snap))]
        if info.pods and rng.random() < 0.4:
            info.remove_pod(info.pods[rng.randrange(len(info.pods))])
        else:
            info.add_pod(pod(f"s{step}", info.name, labels={"app": f"a{rng.randrange(3)}"}))
        if step % 2:
            snap.replace(snap.index[info.name], info)
        incoming = _incoming(rng, f"in{step}")
        feasible = sorted(rng.sample(range(len(snap)), rng.randrange(1, len(snap) + 1)))
        assert _run(fast, incoming, snap, feasible) == _run(walked, incoming, snap, feasible)
