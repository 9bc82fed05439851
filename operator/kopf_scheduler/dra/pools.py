"""Resource pools as one node sees them (the reference's ``GatherPools``).

A pool is the set of ResourceSlices of one driver with one pool name at the newest generation.
It is complete when all ``resourceSliceCount`` slices of that generation are known; an incomplete
pool cannot be allocated from (its devices may be duplicated in slices not seen yet), and an
invalid one (duplicate device names, unknown counter sets) neither.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from kopf_scheduler.api.objects import Node
from kopf_scheduler.api.quantity import QuantityError, parse_quantity
from kopf_scheduler.api.selectors import parse_node_selector
from kopf_scheduler.api.types import ObjectError

from .features import Features

__all__ = ["Pool", "PoolCache", "node_matches"]

Raw = Mapping[str, Any]


def node_matches(node: Node, node_name: str, all_nodes: bool, node_selector: Raw | None) -> bool:
    if node_name:
        return node.name == node_name
    if all_nodes:
        return True
    if node_selector is not None:
        try:
            selector = parse_node_selector(node_selector, "nodeSelector")
        except ObjectError as exc:
            raise ValueError(f"failed to parse node selector: {exc}") from None
        return selector.matches(node.name, node.labels)
    return False


def _spec(slice_: Raw) -> Raw:
    spec = slice_.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _pool_ref(slice_: Raw) -> Raw:
    pool = _spec(slice_).get("pool")
    return pool if isinstance(pool, Mapping) else {}


def _generation(slice_: Raw) -> int:
    return int(_pool_ref(slice_).get("generation", 0) or 0)


def _devices(slice_: Raw) -> list[Raw]:
    return [d for d in _spec(slice_).get("devices") or () if isinstance(d, Mapping)]


def _name(obj: Raw) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


@dataclass(slots=True)
class Pool:
    driver: str
    pool: str
    incomplete: bool = False
    invalid: bool = False
    invalid_reason: str = ""
    slices_targeting_node: list[Raw] = field(default_factory=list)
    slices_not_targeting_node: list[Raw] = field(default_factory=list)
    counter_sets: dict[str, dict[str, Fraction]] = field(default_factory=dict)

    @property
    def id(self) -> tuple[str, str]:
        return (self.driver, self.pool)


def _uses_compatibility_groups(slice_: Raw) -> bool:
    return any("compatibilityGroups" in d for d in _devices(slice_))


def _relevant(slice_: Raw, node: Node) -> bool:
    spec = _spec(slice_)
    node_name, all_nodes, selector = (
        str(spec.get("nodeName") or ""),
        bool(spec.get("allNodes")),
        spec.get("nodeSelector"),
    )
    if node_name or all_nodes or selector is not None:
        return node_matches(node, node_name, all_nodes, selector)
    if spec.get("perDeviceNodeSelection"):
        return any(
            node_matches(node, str(d.get("nodeName") or ""), bool(d.get("allNodes")), d.get("nodeSelector"))
            for d in _devices(slice_)
        )
    return False


class PoolCache:
    """A node's pools, kept while neither the node nor any of its slices changed (the informers
    replace an object's dict on every update, so identity is the version).

    Gathering is per node per pod otherwise, and pools depend only on those objects, except for a
    pool split over slices of other nodes, whose completeness depends on every slice: never cached.
    """

    def __init__(self, max_size: int = 50_000) -> None:
        self._cached: dict[tuple[int, tuple[int, ...]], tuple[Node, list[Raw], list[Pool]]] = {}
        self._max = max_size

    def get(
        self, slices_for_node: Sequence[Raw], node: Node, features: Features, all_slices: Sequence[Raw]
    ) -> list[Pool]:
        key = (id(node), tuple(id(s) for s in slices_for_node))
        found = self._cached.get(key)
        if (
            found is not None
            and found[0] is node
            and all(a is b for a, b in zip(found[1], slices_for_node, strict=True))
        ):
            return found[2]
        pools, local = _gather(slices_for_node, node, features, all_slices)
        if local:
            if len(self._cached) >= self._max:
                self._cached.clear()
            self._cached[key] = (node, list(slices_for_node), pools)
        return pools


def _gather(
    slices_for_node: Sequence[Raw], node: Node, features: Features, all_slices: Sequence[Raw]
) -> tuple[list[Pool], bool]:
    """The pools, and whether they were built from ``slices_for_node`` alone."""
    local = True
    by_pool: dict[tuple[str, str], list[Raw]] = {}
    for slice_ in slices_for_node:
        spec = _spec(slice_)
        if not features.partitionable_devices and (
            spec.get("perDeviceNodeSelection") is not None or spec.get("sharedCounters")
        ):
            continue
        if _uses_compatibility_groups(slice_):
            continue  # DRADeviceCompatibilityGroups is off in v1.37.2
        try:
            relevant = _relevant(slice_, node)
        except ValueError as exc:
            raise ValueError(f"failed to perform node selection for slice {_name(slice_)}: {exc}") from None
        if not relevant:
            continue
        pid = (str(spec.get("driver", "")), str(_pool_ref(slice_).get("name", "")))
        have = by_pool.get(pid)
        if have is None or _generation(slice_) > _generation(have[0]):
            by_pool[pid] = [slice_]
        elif _generation(slice_) == _generation(have[0]):
            have.append(slice_)

    result: list[Pool] = []
    with_binding_conditions: list[Pool] = []
    for pid, slices in by_pool.items():
        count = int(_pool_ref(slices[0]).get("resourceSliceCount", 0) or 0)
        if len(slices) == count:
            pool = _build_pool(pid, slices, features, None)
        else:
            local = False
            generation = _generation(slices[0])
            same: list[Raw] = []
            obsolete = False
            for s in all_slices:
                spec = _spec(s)
                if (str(spec.get("driver", "")), str(_pool_ref(s).get("name", ""))) != pid:
                    continue
                if _generation(s) == generation:
                    same.append(s)
                elif _generation(s) > generation:
                    obsolete = True
                    break
            if obsolete:
                continue
            same = [s for s in same if not _uses_compatibility_groups(s)]
            if len(same) != count:
                result.append(Pool(pid[0], pid[1], incomplete=True))
                continue
            pool = _build_pool(pid, slices, features, same)
        if any(d.get("bindingConditions") for s in pool.slices_targeting_node for d in _devices(s)):
            with_binding_conditions.append(pool)
        else:
            result.append(pool)
    result.sort(key=lambda p: p.id)
    with_binding_conditions.sort(key=lambda p: p.id)
    return result + with_binding_conditions, local


def _build_pool(
    pid: tuple[str, str], slices: list[Raw], features: Features, all_for_pool: list[Raw] | None
) -> Pool:
    slices = sorted(slices, key=_name)
    device_slices: list[Raw] = []
    counter_slices: list[Raw] = []
    not_targeting: list[Raw] = []
    for s in slices:
        (
            counter_slices
            if features.partitionable_devices and _spec(s).get("sharedCounters")
            else device_slices
        ).append(s)
    if all_for_pool is not None and len(slices) < len(all_for_pool):
        names = {_name(s) for s in slices}
        for s in all_for_pool:
            if _name(s) in names:
                continue
            if features.partitionable_devices and _spec(s).get("sharedCounters"):
                counter_slices.append(s)
            else:
                not_targeting.append(s)
    seen: set[str] = set()
    for s in device_slices:
        for d in _devices(s):
            name = str(d.get("name", ""))
            if name in seen:
                return Pool(pid[0], pid[1], invalid=True, invalid_reason=f"duplicate device name {name}")
            seen.add(name)
    if not features.partitionable_devices:
        return Pool(pid[0], pid[1], slices_targeting_node=device_slices)
    counter_sets: dict[str, dict[str, Fraction]] = {}
    for s in counter_slices:
        for cs in _spec(s).get("sharedCounters") or ():
            name = str(cs.get("name", ""))
            if name in counter_sets:
                return Pool(pid[0], pid[1], invalid=True, invalid_reason=f"duplicate counter set name {name}")
            counters: dict[str, Fraction] = {}
            for cname, counter in (cs.get("counters") or {}).items():
                try:
                    counters[str(cname)] = parse_quantity((counter or {}).get("value", 0))
                except QuantityError:
                    counters[str(cname)] = Fraction(0)
            counter_sets[name] = counters
    for group in (device_slices, not_targeting):
        for s in group:
            for d in _devices(s):
                for consumption in d.get("consumesCounters") or ():
                    set_name = str(consumption.get("counterSet", ""))
                    if set_name not in counter_sets:
                        return Pool(
                            pid[0], pid[1], invalid=True, invalid_reason=f"counter set {set_name} not found"
                        )
                    for cname in consumption.get("counters") or {}:
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
