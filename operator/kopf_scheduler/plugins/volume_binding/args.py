"""VolumeBindingArgs and its shape validation (the reference's ``VolumeBindingArgs`` and its validation)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from kopf_scheduler.config.profile import ARGS_CONFIG, After, Before, ValidDefaults

MAX_CUSTOM_PRIORITY_SCORE = 10


MAX_UTILIZATION = 100


@dataclass
class UtilizationShapePoint:
    __pydantic_config__ = ARGS_CONFIG

    utilization: int
    score: int


def default_shape() -> list[UtilizationShapePoint]:
    """The v1 default with StorageCapacityScoring on: emptier nodes score higher (10 at 0%, 0 at 100%)."""
    return [
        UtilizationShapePoint(utilization=0, score=MAX_CUSTOM_PRIORITY_SCORE),
        UtilizationShapePoint(utilization=100, score=0),
    ]


def _non_negative(value: int) -> int:
    if value < 0:
        raise ValueError("invalid BindTimeoutSeconds, should not be a negative value")
    return value


def _default_when_empty(value: Any) -> Any:
    return default_shape() if value is None or value == [] else value


@dataclass
class VolumeBindingArgs(ValidDefaults):
    """``VolumeBindingArgs`` with v1 defaulting and validation under the 1.37 gates
    (StorageCapacityScoring on: ``shape`` defaults when empty and is always validated)."""

    __pydantic_config__ = ARGS_CONFIG

    bind_timeout_seconds: Annotated[int, After(_non_negative)] = field(
        default=600, metadata={"alias": "bindTimeoutSeconds"}
    )
    shape: Annotated[list[UtilizationShapePoint], Before(_default_when_empty)] = field(
        default_factory=default_shape
    )

    def __post_init__(self) -> None:
        errors = shape_errors(self.shape)
        if errors:
            raise ValueError("; ".join(errors))


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
