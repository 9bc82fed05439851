"""Typed views of ``scheduling.k8s.io/v1``: the PriorityClass.

The scheduler reads a pod's resolved ``spec.priority`` and ``spec.preemptionPolicy`` (admission
copies them from the class), so the classes only feed ``handle.objects`` and simulate's inputs.
PodGroup (``scheduling.k8s.io/v1beta1``) has its own module, ``api/podgroup.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kopf_scheduler.api.meta import ObjectMeta, parse_meta
from kopf_scheduler.api.types import ObjectError, as_int

__all__ = ["PREEMPT_LOWER_PRIORITY", "PriorityClass", "parse_priority_class"]

PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"  # the apiserver's default preemptionPolicy


@dataclass(frozen=True, slots=True)
class PriorityClass:
    metadata: ObjectMeta
    value: int = 0
    global_default: bool = False
    preemption_policy: str = PREEMPT_LOWER_PRIORITY


def parse_priority_class(raw: Mapping[str, Any]) -> PriorityClass:
    global_default = raw.get("globalDefault", False)
    if not isinstance(global_default, bool):
        raise ObjectError("globalDefault", f"expected a boolean, got {type(global_default).__name__}")
    policy = raw.get("preemptionPolicy")
    if policy is not None and not isinstance(policy, str):
        raise ObjectError("preemptionPolicy", f"expected a string, got {type(policy).__name__}")
    return PriorityClass(
        metadata=parse_meta(raw.get("metadata")),
        value=as_int(raw.get("value"), "value"),
        global_default=global_default,
        preemption_policy=policy or PREEMPT_LOWER_PRIORITY,
    )
