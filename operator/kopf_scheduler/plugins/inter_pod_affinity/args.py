"""InterPodAffinityArgs (the reference's ``InterPodAffinityArgs`` with its validation)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kopf_scheduler.config.profile import ValidDefaults


class InterPodAffinityArgs(ValidDefaults, BaseModel):
    """``InterPodAffinityArgs`` with the reference's defaults and validation."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid", defer_build=True)

    hard_pod_affinity_weight: int = Field(default=1, alias="hardPodAffinityWeight")
    ignore_preferred_terms_of_existing_pods: bool = Field(
        default=False, alias="ignorePreferredTermsOfExistingPods"
    )

    @field_validator("hard_pod_affinity_weight")
    @classmethod
    def _weight_in_range(cls, v: int) -> int:
        if not 0 <= v <= 100:
            raise ValueError(f"hardPodAffinityWeight: Invalid value: {v}: not in valid range [0-100]")
        return v
