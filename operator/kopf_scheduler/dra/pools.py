"""Resource pools as one node sees them (the reference's ``GatherPools``).

A pool is the set of ResourceSlices of one driver with one pool name at the newest generation.
It is complete when all ``resourceSliceCount`` slices of that generation are known; an incomplete
pool cannot be allocated from (its devices may be duplicated in slices not seen yet), and an
invalid one (duplicate device names, unknown counter sets) neither.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from kopf_scheduler.api.objects import Node
from kopf_scheduler.api.resource import Device, DeviceID, DeviceRequestAllocationResult, ResourceSlice
from kopf_scheduler.api.types import NodeSelector

from .features import Features

__all__ = ["Pool", "PoolCache", "PoolDevice", "node_matches"]


def node_matches(node: Node, node_name: str, all_nodes: bool, node_selector: NodeSelector | None) -> bool:
    if node_name:
        return node.name == node_name
    if all_nodes:
        return True
    if node_selector is not None:
        return node_selector.matches(node.name, node.labels)
    return False


@dataclass(slots=True)
class Pool:
    driver: str
    pool: str
    incomplete: bool = False
    invalid: bool = False
    invalid_reason: str = ""
    slices_targeting_node: list[ResourceSlice] = field(default_factory=list)
    slices_not_targeting_node: list[ResourceSlice] = field(default_factory=list)
    counter_sets: dict[str, Mapping[str, Fraction]] = field(default_factory=dict)
    # id(slice) -> its devices as the allocator walks them: made once while the pool is cached
    # (every pod's Filter on the node), not once per pod and node.
    _devices: dict[int, list[PoolDevice]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def id(self) -> tuple[str, str]:
        return (self.driver, self.pool)

    def devices(self, slice_: ResourceSlice) -> list[PoolDevice]:
        """The devices of one of the pool's slices (which the pool keeps alive, hence the id)."""
        found = self._devices.get(id(slice_))
        if found is None:
            found = self._devices[id(slice_)] = [
                PoolDevice((self.driver, self.pool, d.name), d, slice_, self) for d in slice_.devices
            ]
        return found


@dataclass(slots=True, eq=False)
class PoolDevice:
    """A device of a pool's slice, with what the allocator asks of it at every node and level."""

    id: DeviceID
    spec: Device  # the slice's entry for it (typed)
    slice: ResourceSlice
    pool: Pool
    # Whether any capacity has a request policy (a consumed amount other than its whole value).
    has_policy: bool = field(init=False)
    # Its allocation result entries by what else they hold (the allocator's ``_device_result``).
    results: dict[tuple[Any, ...], DeviceRequestAllocationResult] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.has_policy = any(c.request_policy is not None for c in self.spec.capacity.values())


def _relevant(slice_: ResourceSlice, node: Node) -> bool:
    if slice_.node_name or slice_.all_nodes or slice_.node_selector is not None:
        return node_matches(node, slice_.node_name, slice_.all_nodes, slice_.node_selector)
    if slice_.per_device_node_selection:
        return any(node_matches(node, d.node_name, d.all_nodes, d.node_selector) for d in slice_.devices)
    return False


class PoolCache:
    """A node's pools, kept while neither the node nor any of its slices changed (the informers
    replace an object's view on every update, so identity is the version).

    Gathering is per node per pod otherwise, and pools depend only on those objects, except for a
    pool split over slices of other nodes, whose completeness depends on every slice: never cached.
    """

    def __init__(self, max_size: int = 50_000) -> None:
        self._cached: dict[tuple[int, tuple[int, ...]], tuple[Node, list[ResourceSlice], list[Pool]]] = {}
        self._max = max_size

    def get(
        self,
        slices_for_node: Sequence[ResourceSlice],
        node: Node,
        features: Features,
        all_slices: Sequence[ResourceSlice],
    ) -> list[Pool]:
        key = (id(node), tuple(map(id, slices_for_node)))
        found = self._cached.get(key)
        if found is not None and found[0] is node and all(map(operator.is_, found[1], slices_for_node)):
            return found[2]  # the same ids, as many: the same objects
        pools, local = _gather(slices_for_node, node, features, all_slices)
        if local:
            if len(self._cached) >= self._max:
                self._cached.clear()
            self._cached[key] = (node, list(slices_for_node), pools)
        return pools


def _gather(
    slices_for_node: Sequence[ResourceSlice],
    node: Node,
    features: Features,
    all_slices: Sequence[ResourceSlice],
) -> tuple[list[Pool], bool]:
    """The pools, and whether they were built from ``slices_for_node`` alone."""
    local = True
    by_pool: dict[tuple[str, str], list[ResourceSlice]] = {}
    for slice_ in slices_for_node:
        if not features.partitionable_devices and (
            slice_.per_device_node_selection is not None or slice_.shared_counters
        ):
            continue
        if slice_.uses_compatibility_groups:
            continue  # DRADeviceCompatibilityGroups is off in v1.37.2
        if not _relevant(slice_, node):
            continue
        pid = (slice_.driver, slice_.pool.name)
        have = by_pool.get(pid)
        generation = slice_.pool.generation
        if have is None or generation > have[0].pool.generation:
            by_pool[pid] = [slice_]
        elif generation == have[0].pool.generation:
            have.append(slice_)

    result: list[Pool] = []
    with_binding_conditions: list[Pool] = []
    for pid, slices in by_pool.items():
        count = slices[0].pool.resource_slice_count
        if len(slices) == count:
            pool = _build_pool(pid, slices, features, None)
        else:
            local = False
            generation = slices[0].pool.generation
            same: list[ResourceSlice] = []
            obsolete = False
            for s in all_slices:
                if (s.driver, s.pool.name) != pid:
                    continue
                if s.pool.generation == generation:
                    same.append(s)
                elif s.pool.generation > generation:
                    obsolete = True
                    break
            if obsolete:
                continue
            same = [s for s in same if not s.uses_compatibility_groups]
            if len(same) != count:
                result.append(Pool(pid[0], pid[1], incomplete=True))
                continue
            pool = _build_pool(pid, slices, features, same)
        if any(d.binding_conditions for s in pool.slices_targeting_node for d in s.devices):
            with_binding_conditions.append(pool)
        else:
            result.append(pool)
    result.sort(key=lambda p: p.id)
    with_binding_conditions.sort(key=lambda p: p.id)
    return result + with_binding_conditions, local


def _name(slice_: ResourceSlice) -> str:
    return slice_.metadata.name


def _build_pool(
    pid: tuple[str, str],
    slices: list[ResourceSlice],
    features: Features,
    all_for_pool: list[ResourceSlice] | None,
) -> Pool:
    slices = sorted(slices, key=_name)
    device_slices: list[ResourceSlice] = []
    counter_slices: list[ResourceSlice] = []
    not_targeting: list[ResourceSlice] = []
    for s in slices:
        (counter_slices if features.partitionable_devices and s.shared_counters else device_slices).append(s)
    if all_for_pool is not None and len(slices) < len(all_for_pool):
        names = {_name(s) for s in slices}
        for s in all_for_pool:
            if _name(s) in names:
                continue
            if features.partitionable_devices and s.shared_counters:
                counter_slices.append(s)
            else:
                not_targeting.append(s)
    seen: set[str] = set()
    for s in device_slices:
        for d in s.devices:
            if d.name in seen:
                return Pool(pid[0], pid[1], invalid=True, invalid_reason=f"duplicate device name {d.name}")
            seen.add(d.name)
    if not features.partitionable_devices:
        return Pool(pid[0], pid[1], slices_targeting_node=device_slices)
    counter_sets: dict[str, Mapping[str, Fraction]] = {}
    for s in counter_slices:
        for cs in s.shared_counters:
            if cs.name in counter_sets:
                return Pool(
                    pid[0], pid[1], invalid=True, invalid_reason=f"duplicate counter set name {cs.name}"
                )
            counter_sets[cs.name] = cs.counters
    for group in (device_slices, not_targeting):
        for s in group:
            for d in s.devices:
                for consumption in d.consumes_counters:
                    set_name = consumption.counter_set
                    if set_name not in counter_sets:
                        return Pool(
                            pid[0], pid[1], invalid=True, invalid_reason=f"counter set {set_name} not found"
                        )
                    for cname in consumption.counters:
                        if cname not in counter_sets[set_name]:
                            return Pool(
                                pid[0],
                                pid[1],
                                invalid=True,
                                invalid_reason=f"counter {cname} not found in counter set {set_name}",
                            )
    return Pool(
        pid[0],
        pid[1],
        slices_targeting_node=device_slices,
        slices_not_targeting_node=not_targeting,
        counter_sets=counter_sets,
    )
