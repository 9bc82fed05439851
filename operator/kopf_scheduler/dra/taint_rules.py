"""DeviceTaintRules: taints an administrator puts on devices without touching their ResourceSlices
(the reference's ResourceSlice tracker, whose "patched" slices the scheduler allocates from).

A rule selects devices by driver, pool and device name (each optional) and adds its taint to every
selected device; the allocator then treats it like a taint the driver published.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["TaintRuleCache", "apply_taint_rules"]

Raw = Mapping[str, Any]


def _patch(slice_: Raw, rules: Sequence[Raw]) -> Raw:
    spec = slice_.get("spec") or {}
    driver, pool = spec.get("driver"), (spec.get("pool") or {}).get("name")
    patched: dict[str, Any] | None = None
    for rule in rules:
        selector = (rule.get("spec") or {}).get("deviceSelector")
        if not isinstance(selector, Mapping):
            continue
        if selector.get("driver") is not None and selector["driver"] != driver:
            continue
        if selector.get("pool") is not None and selector["pool"] != pool:
            continue
        taint = (rule.get("spec") or {}).get("taint") or {}
        for index, device in enumerate(spec.get("devices") or ()):
            if selector.get("device") is not None and selector["device"] != device.get("name"):
                continue
            if patched is None:
                patched = copy.deepcopy(dict(slice_))
            target = patched["spec"]["devices"][index]
            target["taints"] = [*(target.get("taints") or ()), dict(taint)]
    return patched if patched is not None else slice_


def apply_taint_rules(slices: Sequence[Raw], rules: Sequence[Raw]) -> list[Raw]:
    """The slices as the allocator sees them: devices carry the taints of the rules selecting them."""
    if not rules:
        return list(slices)
    return [_patch(s, rules) for s in slices]


class TaintRuleCache:
    """Patched slices kept while neither the slice nor any rule changed (identity as version), so
    the allocator's per-device caches keep working across cycles."""

    def __init__(self) -> None:
        self._rules: tuple[Raw, ...] = ()
        self._patched: dict[int, tuple[Raw, Raw]] = {}

    def slices(self, slices: Sequence[Raw], rules: Sequence[Raw]) -> list[Raw]:
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
