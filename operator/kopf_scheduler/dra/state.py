"""Devices already in use, gathered from allocated claims (the reference's ``AllocatedState``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from kopf_scheduler.api.quantity import QuantityError, parse_quantity

__all__ = ["AllocatedState", "DeviceID", "SharedDeviceID", "allocation_results", "gather_allocated_state"]

DeviceID = tuple[str, str, str]  # (driver, pool, device)
SharedDeviceID = tuple[str, str, str, str]  # (driver, pool, device, shareID)


@dataclass(slots=True)
class AllocatedState:
    allocated_devices: set[DeviceID] = field(default_factory=set)
    allocated_shared_device_ids: set[SharedDeviceID] = field(default_factory=set)
    # Capacity consumed per device by its shares, summed as exact quantities.
    aggregated_capacity: dict[DeviceID, dict[str, Fraction]] = field(default_factory=dict)

    def is_allocated(self, device: DeviceID) -> bool:
        """Whether any allocation holds the device, exclusively or as a share (counters use this)."""
        if device in self.allocated_devices or device in self.aggregated_capacity:
            return True
        return any(shared[:3] == device for shared in self.allocated_shared_device_ids)

    def add_allocation(self, allocation: Mapping[str, Any]) -> None:
        for result in allocation_results(allocation):
            if result.get("adminAccess"):
                continue  # admin access does not take a device from others
            device = _device_of(result)
            share = result.get("shareID")
            if share:
                self.allocated_shared_device_ids.add((*device, str(share)))
                consumed = result.get("consumedCapacity") or {}
                if isinstance(consumed, Mapping):
                    total = self.aggregated_capacity.setdefault(device, {})
                    for name, amount in consumed.items():
                        try:
                            total[str(name)] = total.get(str(name), Fraction(0)) + parse_quantity(amount)
                        except QuantityError:
                            continue
            else:
                self.allocated_devices.add(device)


def _device_of(result: Mapping[str, Any]) -> DeviceID:
    return (str(result.get("driver", "")), str(result.get("pool", "")), str(result.get("device", "")))


def allocation_results(allocation: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    devices = allocation.get("devices") or {}
    results = devices.get("results") if isinstance(devices, Mapping) else None
    return [r for r in results or () if isinstance(r, Mapping)]


def gather_allocated_state(claims: Iterable[Mapping[str, Any]]) -> AllocatedState:
    state = AllocatedState()
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation")
        if isinstance(allocation, Mapping):
            state.add_allocation(allocation)
    return state
