"""Helpers shared by several plugins (the reference's ``plugins/helper`` package)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

import numpy as np

from kopf_scheduler.api.objects import Node
from kopf_scheduler.framework.interface import MAX_NODE_SCORE

if TYPE_CHECKING:
    from kopf_scheduler.framework.snapshot import Snapshot

__all__ = ["NodeMaskMemo", "default_normalize_score"]


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


class NodeMaskMemo:
    """A boolean per snapshot row for predicates of the Node object alone, per signature.

    Pods of one template share their selector, so a predicate like "matches this node affinity"
    is worth evaluating once per node and signature, then again only for rows whose NodeInfo
    changed since (``Snapshot.row_generation``; a pod bound there counts as a change, which keeps
    it exact for node updates too, and a few dozen rows a cycle at most). A new row layout
    (nodes added or removed) starts over. At most ``limit`` signatures, least recent out.
    """

    __slots__ = ("_entries", "_limit")

    def __init__(self, limit: int = 64) -> None:
        self._entries: OrderedDict[Hashable, tuple[int, np.ndarray, np.ndarray]] = OrderedDict()
        self._limit = limit

    def mask(self, snapshot: Snapshot, signature: Hashable, pred: Callable[[Node], bool]) -> np.ndarray:
        """The predicate for every row (False where the row has no Node object); do not modify it."""
        gens = snapshot.row_generation
        infos = snapshot.node_infos
        entry = self._entries.get(signature)
        if entry is None or entry[0] != snapshot.layout or len(entry[1]) != len(gens):
            values = np.fromiter(
                (info.node is not None and pred(info.node) for info in infos), dtype=bool, count=len(infos)
            )
            entry = (snapshot.layout, gens.copy(), values)
            self._entries[signature] = entry
            if len(self._entries) > self._limit:
                self._entries.popitem(last=False)
        else:
            self._entries.move_to_end(signature)
            changed = np.flatnonzero(gens != entry[1])
            if changed.size:
                values = entry[2]
                for r in changed.tolist():
                    node = infos[r].node
                    values[r] = node is not None and pred(node)
                entry[1][changed] = gens[changed]
        return entry[2]
