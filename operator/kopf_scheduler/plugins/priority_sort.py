"""PrioritySort: the default QueueSort, higher priority first, then first come first served."""

from __future__ import annotations

from typing import Any

from kopf_scheduler.framework.interface import Plugin

__all__ = ["PrioritySort"]


class PrioritySort(Plugin):
    """QueueSort over queued pod infos (``pod.priority``, ``timestamp`` when added to activeQ)."""

    name = "PrioritySort"

    def less(self, a: Any, b: Any) -> bool:
        p1, p2 = a.pod.priority, b.pod.priority
        return p1 > p2 or (p1 == p2 and a.timestamp < b.timestamp)
