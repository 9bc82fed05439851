"""The DRA manager: what DynamicResources (every profile's instance) and NodeResourcesFit share for
the engine's lifetime (the reference's ``SharedDRAManager``, handed to plugins by the framework).

- the claims as this scheduler knows them (:class:`ClaimTracker`);
- compiled CEL selectors and their results per device (:class:`~.cel.CelCache`);
- each node's pools (:class:`~.pools.PoolCache`) and the slices as DeviceTaintRules patch them
  (:class:`~.taint_rules.TaintRuleCache`);
- which DeviceClass an extended resource name stands for (:class:`~.extended.ExtendedResources`).

Built once by ``new_engine`` (one per object store): a profile edited live rebuilds its plugins,
and in-flight allocations and warm caches must survive that.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import operator
import threading
import weakref
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from kopf_scheduler.api import kinds

from .extended import ExtendedResources

if TYPE_CHECKING:  # imported when first used: a cluster without claims never needs them
    from kopf_scheduler.api.resource import ResourceClaim

    from .cel import CelCache
    from .pools import PoolCache
    from .state import AllocatedDevices, AllocatedState
    from .taint_rules import TaintRuleCache

__all__ = ["ClaimTracker", "DraManager"]


def _rv(claim: ResourceClaim) -> int:
    try:
        return int(claim.metadata.resource_version or 0)
    except ValueError:
        return 0


class ClaimTracker:
    """The claims the plugin sees: the informer's, overlaid with what this scheduler has done and
    the watch has not shown yet (the reference's claim tracker). Two overlays:

    - *pending* allocations (by claim uid), from Reserve until PreBind wrote them (or Unreserve
      dropped them), so that the next pod's PreFilter counts their devices as taken: two pods
      never get one device;
    - *assumed* claims (by key), what PreBind's API write returned, until the informer delivers
      that version or a newer one, so that a PreFilter in between does not see the claim as still
      unallocated.

    The devices of the claims allocated in that overlaid view are kept in an index
    (:class:`~.state.AllocatedDevices`), brought up to date at each PreFilter from the claims that
    changed since the last one; the pending allocations are added to each PreFilter's copy.
    """

    def __init__(self, objects: Mapping[str, Mapping[str, object]]) -> None:
        self._objects = objects
        self._pending: dict[str, ResourceClaim] = {}  # claim uid -> claim with its allocation
        self._assumed: dict[str, ResourceClaim] = {}  # claim key -> claim as the API returned it
        self._lock = threading.Lock()
        self._write_locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        # The index of allocated devices and what it was built from: the informer's map (keys and
        # views, in its order), the claim counted per key (the informer's or the assumed one, when
        # allocated), and the keys that were assumed then.
        self._index: AllocatedDevices | None = None
        self._synced: Mapping[str, ResourceClaim] | None = None
        self._synced_keys: list[str] = []
        self._synced_views: list[ResourceClaim] = []
        self._counted: dict[str, ResourceClaim] = {}
        self._synced_assumed: set[str] = set()

    def write_lock(self, namespace: str, name: str) -> asyncio.Lock:
        """The lock PreBind holds while writing this claim (alive while anyone holds or awaits it)."""
        key = f"{namespace}/{name}"
        lock = self._write_locks.get(key)
        if lock is None:
            lock = self._write_locks[key] = asyncio.Lock()
        return lock

    def _informer(self) -> Mapping[str, ResourceClaim]:
        return kinds.objects_of(self._objects, kinds.RESOURCE_CLAIM)

    def get(self, namespace: str, name: str) -> ResourceClaim | None:
        key = f"{namespace}/{name}"
        return self._resolve(key, self._informer().get(key))

    def _resolve(self, key: str, seen: ResourceClaim | None) -> ResourceClaim | None:
        """The claim under ``key``: the assumed one while the informer's (``seen``) is older."""
        assumed = self._assumed.get(key)
        if assumed is not None:
            if seen is not None and seen.metadata.uid == assumed.metadata.uid and _rv(seen) < _rv(assumed):
                return assumed
            # The watch caught up, or the claim was replaced or deleted (only claims the informer
            # had are ever written, so an absent one is gone).
            self._assumed.pop(key, None)
        return seen

    def all(self) -> Iterator[ResourceClaim]:
        assumed = self._assumed
        for key, claim in self._informer().items():
            if assumed and key in assumed:
                found = self.get(*key.split("/", 1))
                if found is not None:
                    yield found
                continue
            yield claim

    # -- pending allocations (Reserve .. PreBind) --

    def signal_pending(self, uid: str, claim: ResourceClaim) -> None:
        with self._lock:
            self._pending[uid] = claim

    def get_pending(self, uid: str) -> ResourceClaim | None:
        return self._pending.get(uid)

    def remove_pending(self, uid: str) -> bool:
        with self._lock:
            return self._pending.pop(uid, None) is not None

    def assume(self, claim: ResourceClaim) -> None:
        self._assumed[claim.key] = claim

    def restore(self, namespace: str, name: str) -> None:
        self._assumed.pop(f"{namespace}/{name}", None)

    # -- devices in use --

    def allocated_state(self) -> AllocatedState:
        state = self._sync().state()
        informer = self._informer()
        for uid, claim in list(self._pending.items()):
            if claim.status.allocation is None:
                continue
            stored = informer.get(claim.key)
            if stored is not None and stored.metadata.uid == uid and stored.status.allocation is not None:
                continue  # already counted as allocated
            state.add_allocation(claim.status.allocation)
        return state

    def _sync(self) -> AllocatedDevices:
        """The index brought up to date with the claims as :meth:`all` shows them.

        Any writer may have replaced a view in the informer's map (the informers, simulate's
        in-memory client), so what changed is found by identity: in C, comparing the map's views
        with the last sync's in order (new keys come last); only when a key went (or came back) is
        the map compared key by key. Each changed claim's allocation is then swapped in the index.
        """
        from .state import AllocatedDevices

        informer = self._informer()
        keys = list(informer)
        views = list(informer.values())
        index = self._index
        before = len(self._synced_keys)
        if index is None or informer is not self._synced:
            index = self._index = AllocatedDevices()
            self._counted = {}
            changed: list[str] = keys
        elif len(keys) >= before and keys[:before] == self._synced_keys:
            moved = map(operator.is_not, views, self._synced_views)
            changed = [*itertools.compress(self._synced_keys, moved), *keys[before:]]
        else:
            last = dict(zip(self._synced_keys, self._synced_views, strict=True))
            changed = [key for key, view in zip(keys, views, strict=True) if last.pop(key, None) is not view]
            changed += last  # gone
        self._synced, self._synced_keys, self._synced_views = informer, keys, views
        assumed = set(self._assumed)
        recheck = {*changed, *assumed, *self._synced_assumed} if assumed or self._synced_assumed else changed
        counted = self._counted
        for key in recheck:
            claim = self._resolve(key, informer.get(key))
            old = counted.get(key)
            if claim is old:
                continue
            old_allocation = old.status.allocation if old is not None else None
            allocation = claim.status.allocation if claim is not None else None
            if allocation is not old_allocation:
                if old_allocation is not None:
                    index.remove(old_allocation)
                if allocation is not None:
                    index.add(allocation)
            if claim is not None and allocation is not None:
                counted[key] = claim
            else:
                counted.pop(key, None)
        self._synced_assumed = set(self._assumed)  # less any that resolving found stale
        return index


class DraManager:
    """One per engine (object store); see the module's docstring.

    The caches of the allocator's inputs are made, and their modules (CEL, the pools) imported, on
    first use: only a pod with claims gets that far, so an ordinary cluster's start never pays it.
    """

    def __init__(self, objects: Mapping[str, Mapping[str, object]]) -> None:
        self.claims = ClaimTracker(objects)
        self.extended_resources = ExtendedResources()

    @functools.cached_property
    def cel(self) -> CelCache:
        from .cel import CelCache

        return CelCache()

    @functools.cached_property
    def pools(self) -> PoolCache:
        from .pools import PoolCache

        return PoolCache()

    @functools.cached_property
    def taint_rules(self) -> TaintRuleCache:
        from .taint_rules import TaintRuleCache

        return TaintRuleCache()
