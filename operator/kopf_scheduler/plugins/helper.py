"""Helpers shared by several plugins (the reference's ``plugins/helper`` package)."""

from __future__ import annotations

import numpy as np

from kopf_scheduler.framework.interface import MAX_NODE_SCORE

__all__ = ["default_normalize_score"]


def default_normalize_score(scores: np.ndarray, reverse: bool, max_priority: int = MAX_NODE_SCORE) -> None:
    """``helper.DefaultNormalizeScore``, in place: scale to [0, max_priority] by the highest score,
    optionally reversed (fewer is better)."""
    max_count = int(scores.max()) if scores.size else 0
    if max_count <= 0:
        if reverse:
            scores[:] = max_priority
        return
    # Scores are non-negative here, so floor division is Go's truncating division.
    scaled = max_priority * scores // max_count
    scores[:] = max_priority - scaled if reverse else scaled
