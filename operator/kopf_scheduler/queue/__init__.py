"""The scheduling queue and the nominator."""

from kopf_scheduler.queue.nominator import Nominator
from kopf_scheduler.queue.scheduling_queue import (
    PriorityQueue,
    QueuedPodInfo,
    QueueingStrategy,
    default_less,
)

__all__ = [
    "Nominator",
    "PriorityQueue",
    "QueuedPodInfo",
    "QueueingStrategy",
    "default_less",
]
