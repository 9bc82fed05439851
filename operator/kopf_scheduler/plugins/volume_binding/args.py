"""VolumeBindingArgs and its shape validation (the reference's ``VolumeBindingArgs`` and its validation)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kopf_scheduler.config.profile import ValidDefaults

MAX_CUSTOM_PRIORITY_SCORE = 10


MAX_UTILIZATION = 100


class UtilizationShapePoint(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid", defer_build=True)

    utilization: int = Field(alias="utilization")
    score: int = Field(alias="score")


def default_shape() -> list[UtilizationShapePoint]:
    """The v1 default with StorageCapacityScoring on: emptier nodes score higher (10 at 0%, 0 at 100%)."""
    return [
        UtilizationShapePoint.model_construct(utilization=0, score=MAX_CUSTOM_PRIORITY_SCORE),
        UtilizationShapePoint.model_construct(utilization=100, score=0),
    ]


class VolumeBindingArgs(ValidDefaults, BaseModel):
    """``VolumeBindingArgs`` with v1 defaulting and validation under the 1.37 gates
    (StorageCapacityScoring on: ``shape`` defaults when empty and is always validated)."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid", defer_build=True)

    bind_timeout_seconds: int = Field(600, alias="bindTimeoutSeconds")
    shape: list[UtilizationShapePoint] = Field(default_factory=default_shape, alias="shape")

    @field_validator("bind_timeout_seconds")
    @classmethod
    def _non_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError("invalid BindTimeoutSeconds, should not be a negative value")
        return value

    @field_validator("shape", mode="before")
    @classmethod
    def _default_when_empty(cls, value: Any) -> Any:
        return default_shape() if value is None or value == [] else value

    @model_validator(mode="after")
    def _valid_shape(self) -> VolumeBindingArgs:
        errors = shape_errors(self.shape)
        if errors:
            raise ValueError("; ".join(errors))
        return self


def shape_errors(shape: Sequence[UtilizationShapePoint]) -> list[str]:
    """``validateFunctionShape``: the first unsorted point, then every out-of-range value."""
    if not shape:
        return ["shape: Required value: at least one point must be specified"]
    errors = []
    for i in range(1, len(shape)):
        if shape[i - 1].utilization >= shape[i].utilization:
            errors.append(
                f"shape[{i}].utilization: Invalid value: {shape[i].utilization}: "
                "values must be sorted in increasing order"
            )
            break
    for i, point in enumerate(shape):
        if not 0 <= point.utilization <= MAX_UTILIZATION:
            errors.append(
                f"shape[{i}].utilization: Invalid value: {point.utilization}: not in valid range [0, 100]"
            )
        if not 0 <= point.score <= MAX_CUSTOM_PRIORITY_SCORE:
            errors.append(f"shape[{i}].score: Invalid value: {point.score}: not in valid range [0, 10]")
    return errors
