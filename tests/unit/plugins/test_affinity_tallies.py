"""InterPodAffinity's running per-row sums (TallyStore) equal a full walk over the nodes, every cycle."""

from __future__ import annotations

import random
from typing import Any

from spread_affinity_helpers import FakeHandle, build_snapshot, node, pod

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.framework.interface import CycleState
from kopf_scheduler.plugins.inter_pod_affinity import PRE_FILTER_KEY, PRE_SCORE_KEY, InterPodAffinity

HOST, ZONE = "kubernetes.io/hostname", "zone"


def _term(key: str, app: str) -> dict[str, Any]:
    return {"topologyKey": key, "labelSelector": {"matchLabels": {"app": app}}}


def _random_pod(rng: random.Random, name: str, node_name: str = "") -> Pod:
    app = f"a{rng.randrange(3)}"
    key = rng.choice([HOST, ZONE])
    affinity: dict[str, Any] = {}
    roll = rng.random()
    if roll < 0.3:
        affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [_term(key, app)]}
    elif roll < 0.5:
        weighted = {"weight": 3, "podAffinityTerm": _term(key, app)}
        affinity["podAffinity"] = {"preferredDuringSchedulingIgnoredDuringExecution": [weighted]}
    elif roll < 0.6:
        affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [_term(key, app)]}
    extra: dict[str, Any] = {"affinity": affinity} if affinity else {}
    return pod(name, node_name, labels={"app": f"a{rng.randrange(3)}"}, **extra)


def _state(pl: InterPodAffinity, incoming: Pod, nodes: Any) -> tuple[Any, Any]:
    """(PreFilter counts or the Skip code, PreScore topology scores or the Skip code)."""
    state = CycleState()
    _, pre = pl.pre_filter(state, incoming, nodes)
    pf: Any = pre.code if pre is not None else state.get(PRE_FILTER_KEY)
    if pre is None:
        pf = (pf.existing_anti_affinity_counts, pf.affinity_counts, pf.anti_affinity_counts)
    pre = pl.pre_score(state, incoming, nodes)
    ps: Any = pre.code if pre is not None else state.get(PRE_SCORE_KEY).topology_score
    return pf, ps


def test_tallies_match_full_walk() -> None:
    rng = random.Random(11)
    nodes = [node(f"n{i}", zone=f"z{i % 3}", **{HOST: f"n{i}"}) for i in range(8)]
    snap = build_snapshot(nodes, [_random_pod(rng, f"e{i}", f"n{i % 8}") for i in range(20)])
    tallied = InterPodAffinity(None, FakeHandle(snap))
    walked = InterPodAffinity(None, None)
    non_trivial = 0
    for step in range(120):
        info = snap.node_infos[rng.randrange(len(snap))]
        if info.pods and rng.random() < 0.4:
            info.remove_pod(info.pods[rng.randrange(len(info.pods))])
        else:
            info.add_pod(_random_pod(rng, f"s{step}", info.name))
        if step % 2:
            snap.replace(snap.index[info.name], info)  # in-place edits must be seen either way
        incoming = _random_pod(rng, f"in{step}")
        got = _state(tallied, incoming, snap.list())
        assert got == _state(walked, incoming, list(snap.list()))
        non_trivial += isinstance(got[0], tuple) and isinstance(got[1], dict)
    assert non_trivial > 10
