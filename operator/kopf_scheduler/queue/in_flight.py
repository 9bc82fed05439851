"""Pods being scheduled and the cluster events seen meanwhile (the in-flight half of the
reference's ``active_queue.go``).

An event that arrives while a pod is between ``pop`` and ``done`` is kept, so that when the pod
comes back unschedulable the queue can replay the events it missed against its rejecting plugins;
events older than every in-flight pod are dropped.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.framework.events import ClusterEvent

__all__ = ["InFlight", "InFlightEvent"]


@dataclass(slots=True)
class InFlightEvent:
    seq: int
    event: ClusterEvent
    old: Any
    new: Any


class InFlight:
    """uid -> the sequence number of the first event the pod may see, its latest version, and
    whether it was deleted meanwhile; plus the events recorded while any pod is in flight."""

    __slots__ = ("_deleted", "_event_seq", "_events", "_latest", "_start")

    def __init__(self) -> None:
        self._start: dict[str, int] = {}
        self._latest: dict[str, Pod] = {}
        self._deleted: set[str] = set()
        self._events: deque[InFlightEvent] = deque()
        self._event_seq = 0

    def __contains__(self, uid: object) -> bool:
        return uid in self._start

    def __bool__(self) -> bool:
        return bool(self._start)

    def uids(self) -> list[str]:
        return list(self._start)

    def start(self, pod: Pod) -> None:
        """``pod`` was popped: it sees events recorded from now on."""
        # Re-inserted at the end: starts stay in non-decreasing order, so the oldest is the first.
        self._start.pop(pod.uid, None)
        self._start[pod.uid] = self._event_seq
        self._latest[pod.uid] = pod
        self._deleted.discard(pod.uid)

    def update(self, pod: Pod) -> None:
        """A newer version of an in-flight pod (it is requeued with it)."""
        self._latest[pod.uid] = pod

    def latest(self, uid: str) -> Pod | None:
        return self._latest.get(uid)

    def mark_deleted(self, uid: str) -> None:
        self._deleted.add(uid)

    def is_deleted(self, uid: str) -> bool:
        return uid in self._deleted

    def record(self, event: ClusterEvent, old: Any, new: Any) -> None:
        """Keep ``event`` for the pods in flight (none: nothing to keep)."""
        if not self._start:
            return
        self._events.append(InFlightEvent(self._event_seq, event, old, new))
        self._event_seq += 1

    def events_for(self, uid: str) -> Iterator[InFlightEvent] | None:
        """The events the pod saw while in flight; None when it is not in flight."""
        start = self._start.get(uid)
        if start is None:
            return None
        return (rec for rec in self._events if rec.seq >= start)

    def finish(self, uid: str) -> None:
        """The pod's attempt is over; drop the events no pod in flight still needs."""
        if self._start.pop(uid, None) is None:
            return
        self._latest.pop(uid, None)
        self._deleted.discard(uid)
        if not self._start:
            self._events.clear()
            return
        oldest = next(iter(self._start.values()))  # O(1): see start()
        events = self._events
        while events and events[0].seq < oldest:
            events.popleft()

    def sizes(self) -> dict[str, int]:
        """Entry counts of each structure (memory-bound checks)."""
        return {
            "in_flight": len(self._start),
            "latest": len(self._latest),
            "deleted": len(self._deleted),
            "events": len(self._events),
        }
