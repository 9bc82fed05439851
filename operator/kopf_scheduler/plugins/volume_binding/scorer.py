"""The capacity scorer's broken-linear function over the utilization shape (``scorer.go``)."""

from __future__ import annotations

from collections.abc import Sequence


def go_div(a: int, b: int) -> int:
    """Integer division truncating toward zero, as Go's ``/``."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def broken_linear(shape: Sequence[tuple[int, int]], p: int) -> int:
    """``helper.BuildBrokenLinearFunction``: linear interpolation between the shape's points."""
    for i, (util, score) in enumerate(shape):
        if p <= util:
            if i == 0:
                return score
            prev_util, prev_score = shape[i - 1]
            return prev_score + go_div((score - prev_score) * (p - prev_util), util - prev_util)
    return shape[-1][1]
