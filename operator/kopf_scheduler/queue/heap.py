"""An indexed binary heap of queued pods (the reference's ``backend/heap``): activeQ and backoffQ."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from kopf_scheduler.framework.types import QueuedPodInfo

__all__ = ["Heap"]


class Heap:
    """A binary heap keyed by pod UID with O(log n) delete and re-position."""

    __slots__ = ("_items", "_less", "_pos")

    def __init__(self, less: Callable[[QueuedPodInfo, QueuedPodInfo], bool]) -> None:
        self._items: list[QueuedPodInfo] = []
        self._pos: dict[str, int] = {}
        self._less = less

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, uid: object) -> bool:
        return uid in self._pos

    def __iter__(self) -> Iterator[QueuedPodInfo]:
        return iter(list(self._items))

    def get(self, uid: str) -> QueuedPodInfo | None:
        i = self._pos.get(uid)
        return None if i is None else self._items[i]

    def push(self, qpi: QueuedPodInfo) -> None:
        """Add, or replace the entry with the same UID and re-position it."""
        i = self._pos.get(qpi.uid)
        if i is not None:
            self._items[i] = qpi
            self._fix(i)
            return
        self._items.append(qpi)
        self._pos[qpi.uid] = len(self._items) - 1
        self._up(len(self._items) - 1)

    def peek(self) -> QueuedPodInfo | None:
        return self._items[0] if self._items else None

    def pop(self) -> QueuedPodInfo | None:
        if not self._items:
            return None
        return self._remove_at(0)

    def remove(self, uid: str) -> QueuedPodInfo | None:
        i = self._pos.get(uid)
        return None if i is None else self._remove_at(i)

    def fix(self, uid: str) -> None:
        i = self._pos.get(uid)
        if i is not None:
            self._fix(i)

    def _remove_at(self, i: int) -> QueuedPodInfo:
        items = self._items
        item = items[i]
        last = items.pop()
        del self._pos[item.uid]
        if i < len(items):
            items[i] = last
            self._pos[last.uid] = i
            self._fix(i)
        return item

    def _fix(self, i: int) -> None:
        if not self._up(i):
            self._down(i)

    def _up(self, i: int) -> bool:
        items, pos, less = self._items, self._pos, self._less
        item = items[i]
        moved = False
        while i > 0:
            parent = (i - 1) >> 1
            if not less(item, items[parent]):
                break
            items[i] = items[parent]
            pos[items[i].uid] = i
            i = parent
            moved = True
        items[i] = item
        pos[item.uid] = i
        return moved

    def _down(self, i: int) -> None:
        items, pos, less = self._items, self._pos, self._less
        n = len(items)
        item = items[i]
        while True:
            child = 2 * i + 1
            if child >= n:
                break
            right = child + 1
            if right < n and less(items[right], items[child]):
                child = right
            if not less(items[child], item):
                break
            items[i] = items[child]
            pos[items[i].uid] = i
            i = child
        items[i] = item
        pos[item.uid] = i
