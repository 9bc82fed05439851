"""PodGroup (``scheduling.k8s.io/v1beta1``): the unit of workload-aware (gang) scheduling.

Pods join a group through ``spec.schedulingGroup.podGroupName``; a ``gang`` policy asks for
``minCount`` members to be placed together or not at all, a ``basic`` policy (or none) for none
of that (the reference treats such a group's minCount as 1).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kopf_scheduler.api.meta import ObjectMeta, parse_namespaced_meta
from kopf_scheduler.api.types import as_int, as_list, as_mapping

__all__ = [
    "POD_GROUP_INITIALLY_SCHEDULED",
    "PodGroup",
    "parse_pod_group",
    "pod_group_key",
]

# The PodGroup condition the scheduler owns (the reference's schedulingapi.PodGroupInitiallyScheduled).
POD_GROUP_INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"


def pod_group_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


@dataclass(slots=True, frozen=True)
class PodGroup:
    """The typed view of a PodGroup (``api/kinds.py``'s ``POD_GROUP``), parsed once at the edge."""

    metadata: ObjectMeta
    # spec.schedulingPolicy.gang.minCount; None when the policy is not a gang.
    gang_min_count: int | None = None
    priority: int = 0
    preemption_policy: str = ""
    # spec.disruptionMode.all: its placed pods are preempted together or not at all.
    disruption_all: bool = False
    # status.conditions as stored: the base of the scheduler's status write (a merge patch replaces
    # the whole list, so the conditions other controllers own go back unchanged); plugins never read it.
    conditions: tuple[Mapping[str, Any], ...] = ()

    @property
    def namespace(self) -> str:
        return self.metadata.namespace

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def uid(self) -> str:
        return self.metadata.uid

    @property
    def generation(self) -> int:
        return self.metadata.generation

    @property
    def key(self) -> str:
        return pod_group_key(self.metadata.namespace, self.metadata.name)

    @property
    def min_count(self) -> int:
        """What must be scheduled for the group to count as placed (1 without a gang policy)."""
        return self.gang_min_count if self.gang_min_count is not None else 1

    def condition(self, type_: str) -> Mapping[str, Any] | None:
        for cond in self.conditions:
            if cond.get("type") == type_:
                return cond
        return None


def parse_pod_group(obj: Mapping[str, Any]) -> PodGroup:
    """Raises ObjectError (a ValueError) naming the first malformed field."""
    spec = as_mapping(obj.get("spec"), "spec")
    status = as_mapping(obj.get("status"), "status")
    policy = as_mapping(spec.get("schedulingPolicy"), "spec.schedulingPolicy")
    gang_raw = policy.get("gang")
    gang_min: int | None = None
    if gang_raw is not None:
        gang = as_mapping(gang_raw, "spec.schedulingPolicy.gang")
        gang_min = as_int(gang.get("minCount"), "spec.schedulingPolicy.gang.minCount")
    disruption = as_mapping(spec.get("disruptionMode"), "spec.disruptionMode")
    conditions = tuple(
        as_mapping(c, f"status.conditions[{i}]")
        for i, c in enumerate(as_list(status.get("conditions"), "status.conditions"))
    )
    return PodGroup(
        metadata=parse_namespaced_meta(obj.get("metadata")),
        gang_min_count=gang_min,
        priority=as_int(spec.get("priority"), "spec.priority"),
        preemption_policy=str(spec.get("preemptionPolicy") or ""),
        disruption_all=disruption.get("all") is not None,
        conditions=conditions,
    )
