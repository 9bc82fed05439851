"""The claims the plugin sees: the informer's, overlaid with what this scheduler has done and the
watch has not shown yet (the reference's ``DefaultDRAManager`` with its claim tracker).

Two overlays, both keyed by claim uid:

- *pending* allocations, from Reserve until PreBind wrote them (or Unreserve dropped them), so that
  the next pod's PreFilter counts their devices as taken: two pods never get one device;
- *assumed* claims, what PreBind's API write returned, until the informer delivers that version
  or a newer one, so that a PreFilter in between does not see the claim as still unallocated.

One tracker per object store, shared by every profile's plugin instance: a profile edited live
rebuilds its plugins, and in-flight allocations must survive that.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

from kopf_scheduler.dra import AllocatedState

__all__ = ["ClaimTracker", "tracker_for"]

Raw = Mapping[str, Any]
KIND = "ResourceClaim"


def _rv(obj: Raw) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def _key(obj: Raw) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"


class ClaimTracker:
    def __init__(self, objects: Mapping[str, Mapping[str, Any]]) -> None:
        self._objects = objects
        self._pending: dict[str, Raw] = {}  # claim uid -> claim with status.allocation
        self._assumed: dict[str, Raw] = {}  # claim key -> claim as the API returned it
        self._lock = threading.Lock()
        self._write_locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def write_lock(self, namespace: str, name: str) -> asyncio.Lock:
        """The lock PreBind holds while writing this claim (alive while anyone holds or awaits it)."""
        key = f"{namespace}/{name}"
        lock = self._write_locks.get(key)
        if lock is None:
            lock = self._write_locks[key] = asyncio.Lock()
        return lock

    def _informer(self) -> Mapping[str, Any]:
        return self._objects.get(KIND, {})

    def get(self, namespace: str, name: str) -> Raw | None:
        key = f"{namespace}/{name}"
        seen = self._informer().get(key)
        assumed = self._assumed.get(key)
        if assumed is not None:
            if seen is not None and (
                (seen.get("metadata") or {}).get("uid") == (assumed.get("metadata") or {}).get("uid")
                and _rv(seen) < _rv(assumed)
            ):
                return assumed
            # The watch caught up, or the claim was replaced or deleted (only claims the informer
            # had are ever written, so an absent one is gone).
            self._assumed.pop(key, None)
        return seen

    def all(self) -> Iterator[Raw]:
        assumed = self._assumed
        for key, claim in self._informer().items():
            if assumed and key in assumed:
                found = self.get(*key.split("/", 1))
                if found is not None:
                    yield found
                continue
            yield claim

    # -- pending allocations (Reserve .. PreBind) --

    def signal_pending(self, uid: str, claim: Raw) -> None:
        with self._lock:
            self._pending[uid] = claim

    def get_pending(self, uid: str) -> Raw | None:
        return self._pending.get(uid)

    def remove_pending(self, uid: str) -> bool:
        with self._lock:
            return self._pending.pop(uid, None) is not None

    def assume(self, claim: Raw) -> None:
        self._assumed[_key(claim)] = claim

    def restore(self, namespace: str, name: str) -> None:
        self._assumed.pop(f"{namespace}/{name}", None)

    # -- devices in use --

    def allocated_state(self) -> AllocatedState:
        state = AllocatedState()
        pending = self._pending
        for claim in self.all():
            allocation = (claim.get("status") or {}).get("allocation")
            if isinstance(allocation, Mapping):
                state.add_allocation(allocation)
        for uid, claim in list(pending.items()):
            allocation = (claim.get("status") or {}).get("allocation")
            if isinstance(allocation, Mapping):
                stored = self._informer().get(_key(claim))
                if (
                    stored is not None
                    and (stored.get("metadata") or {}).get("uid") == uid
                    and ((stored.get("status") or {}).get("allocation"))
                ):
                    continue  # already counted as allocated
                state.add_allocation(allocation)
        return state


_TRACKERS: dict[int, tuple[Mapping[str, Any], ClaimTracker]] = {}


def tracker_for(objects: Mapping[str, Mapping[str, Any]]) -> ClaimTracker:
    """The tracker of this object store (held with the store, so the id stays unique)."""
    found = _TRACKERS.get(id(objects))
    if found is not None and found[0] is objects:
        return found[1]
    tracker = ClaimTracker(objects)
    if len(_TRACKERS) >= 16:  # a scheduler has one store; tests and simulate runs make many
        _TRACKERS.pop(next(iter(_TRACKERS)))
    _TRACKERS[id(objects)] = (objects, tracker)
    return tracker
