"""Devices already in use, gathered from allocated claims (the reference's ``AllocatedState``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction

from kopf_scheduler.api.resource import AllocationResult, DeviceID, ResourceClaim

__all__ = ["AllocatedState", "DeviceID", "SharedDeviceID", "gather_allocated_state"]

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

    def add_allocation(self, allocation: AllocationResult) -> None:
        for result in allocation.results:
            if result.admin_access:
                continue  # admin access does not take a device from others
            device = result.device_id
            if result.share_id:
                self.allocated_shared_device_ids.add((*device, result.share_id))
                total = self.aggregated_capacity.setdefault(device, {})
                for name, amount in result.consumed_capacity.items():
                    total[name] = total.get(name, Fraction(0)) + amount
            else:
                self.allocated_devices.add(device)


def gather_allocated_state(claims: Iterable[ResourceClaim]) -> AllocatedState:
    state = AllocatedState()
    for claim in claims:
        if claim.status.allocation is not None:
            state.add_allocation(claim.status.allocation)
    return state
