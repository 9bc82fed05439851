"""InterPodAffinity's PreFilter and PreScore states: counts per topology pair."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.plugins.inter_pod_affinity.terms import NO_TERMS, PodTerms

NAME = "InterPodAffinity"


PRE_FILTER_KEY = "PreFilter" + NAME


PRE_SCORE_KEY = "PreScore" + NAME


Pair = tuple[str, str]


def add_count(counts: dict[Pair, int], pair: Pair, value: int) -> None:
    n = counts.get(pair, 0) + value
    if n == 0:
        counts.pop(pair, None)
    else:
        counts[pair] = n


@dataclass(slots=True)
class PreFilterState:
    existing_anti_affinity_counts: dict[Pair, int] = field(default_factory=dict)
    affinity_counts: dict[Pair, int] = field(default_factory=dict)
    anti_affinity_counts: dict[Pair, int] = field(default_factory=dict)
    terms: PodTerms = NO_TERMS  # incoming pod's, namespaceSelector merged into namespaces
    pod: Pod | None = None
    namespace_labels: Mapping[str, str] = field(default_factory=dict)  # the pod's Namespace's, never mutated

    def clone(self) -> PreFilterState:
        return PreFilterState(
            dict(self.existing_anti_affinity_counts),
            dict(self.affinity_counts),
            dict(self.anti_affinity_counts),
            self.terms,
            self.pod,
            self.namespace_labels,
        )


@dataclass(slots=True)
class PreScoreState:
    topology_score: dict[str, dict[str, int]] = field(default_factory=dict)

    def clone(self) -> PreScoreState:
        return self
