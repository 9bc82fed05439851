"""InterPodAffinityArgs (the reference's ``InterPodAffinityArgs`` with its validation)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from kopf_scheduler.config.profile import ARGS_CONFIG, After, ValidDefaults


def _weight_in_range(v: int) -> int:
    if not 0 <= v <= 100:
        raise ValueError(f"hardPodAffinityWeight: Invalid value: {v}: not in valid range [0-100]")
    return v


@dataclass
class InterPodAffinityArgs(ValidDefaults):
    """``InterPodAffinityArgs`` with the reference's defaults and validation."""

    __pydantic_config__ = ARGS_CONFIG

    hard_pod_affinity_weight: Annotated[int, After(_weight_in_range)] = field(
        default=1, metadata={"alias": "hardPodAffinityWeight"}
    )
    ignore_preferred_terms_of_existing_pods: bool = field(
        default=False, metadata={"alias": "ignorePreferredTermsOfExistingPods"}
    )
