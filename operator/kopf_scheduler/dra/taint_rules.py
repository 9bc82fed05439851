"""DeviceTaintRules: taints an administrator puts on devices without touching their ResourceSlices
(the reference's ResourceSlice tracker, whose "patched" slices the scheduler allocates from).

A rule selects devices by driver, pool and device name (each optional) and adds its taint to every
selected device; the allocator then treats it like a taint the driver published.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from kopf_scheduler.api.resource import Device, DeviceTaintRule, ResourceSlice

__all__ = ["TaintRuleCache", "apply_taint_rules"]


def _patch(slice_: ResourceSlice, rules: Sequence[DeviceTaintRule]) -> ResourceSlice:
    devices: list[Device] | None = None
    for rule in rules:
        selector = rule.selector
        if selector is None:
            continue
        if selector.driver is not None and selector.driver != slice_.driver:
            continue
        if selector.pool is not None and selector.pool != slice_.pool.name:
            continue
        for index, device in enumerate(slice_.devices):
            if selector.device is not None and selector.device != device.name:
                continue
            if devices is None:
                devices = list(slice_.devices)
            devices[index] = dataclasses.replace(devices[index], taints=(*devices[index].taints, rule.taint))
    return slice_ if devices is None else dataclasses.replace(slice_, devices=tuple(devices))


def apply_taint_rules(
    slices: Sequence[ResourceSlice], rules: Sequence[DeviceTaintRule]
) -> list[ResourceSlice]:
    """The slices as the allocator sees them: devices carry the taints of the rules selecting them."""
    if not rules:
        return list(slices)
    return [_patch(s, rules) for s in slices]


class TaintRuleCache:
    """Patched slices kept while neither the slice nor any rule changed (identity as version), so
    the allocator's per-device caches keep working across cycles."""

    def __init__(self) -> None:
        self._rules: tuple[DeviceTaintRule, ...] = ()
        self._patched: dict[int, tuple[ResourceSlice, ResourceSlice]] = {}

    def slices(
        self, slices: Sequence[ResourceSlice], rules: Sequence[DeviceTaintRule]
    ) -> list[ResourceSlice]:
        if not rules:
            return list(slices)
        if len(rules) != len(self._rules) or any(
            a is not b for a, b in zip(rules, self._rules, strict=False)
        ):
            self._rules = tuple(rules)
            self._patched = {}
        out = []
        for s in slices:
            found = self._patched.get(id(s))
            if found is None or found[0] is not s:
                found = (s, _patch(s, self._rules))
                self._patched[id(s)] = found
            out.append(found[1])
        if len(self._patched) > 4 * len(slices) + 1024:
            live = {id(s) for s in slices}
            self._patched = {k: v for k, v in self._patched.items() if k in live}
        return out
