"""Typed views of ``policy/v1``: the PodDisruptionBudget, as preemption reads it.

Parsed once at the edge (``api/kinds.py``'s ``POD_DISRUPTION_BUDGET``); preemption's dry runs
read the budgets straight from ``handle.objects`` instead of re-reading dicts every PostFilter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kopf_scheduler.api.meta import ObjectMeta, parse_namespaced_meta
from kopf_scheduler.api.selectors import parse_label_selector
from kopf_scheduler.api.types import LabelSelector, as_int, as_mapping

__all__ = ["PodDisruptionBudget", "parse_pod_disruption_budget"]


@dataclass(frozen=True, slots=True)
class PodDisruptionBudget:
    """What preemption reads of a budget (the reference's ``filterPodsWithPDBViolation``)."""

    metadata: ObjectMeta
    # spec.selector; None (nil) matches no pod, and neither does an empty one (the reference skips both).
    selector: LabelSelector | None = None
    # status.disruptionsAllowed: evictions the budget still allows.
    disruptions_allowed: int = 0
    # status.disruptedPods: names of pods already evicted, counted by the apiserver but not yet gone.
    disrupted_pods: frozenset[str] = frozenset()


def parse_pod_disruption_budget(raw: Mapping[str, Any]) -> PodDisruptionBudget:
    """Raises ObjectError naming the malformed field (the apiserver validates the selector, so an
    invalid one never reaches a real informer)."""
    spec = as_mapping(raw.get("spec"), "spec")
    status = as_mapping(raw.get("status"), "status")
    return PodDisruptionBudget(
        metadata=parse_namespaced_meta(raw.get("metadata")),
        selector=parse_label_selector(spec.get("selector"), "spec.selector"),
        disruptions_allowed=as_int(status.get("disruptionsAllowed"), "status.disruptionsAllowed"),
        disrupted_pods=frozenset(as_mapping(status.get("disruptedPods"), "status.disruptedPods")),
    )
