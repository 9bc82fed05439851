"""Devices already in use, gathered from allocated claims (the reference's ``AllocatedState``), and
the index they are gathered from (the reference's ``allocatedDevices``), kept as claims come and go.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction

from kopf_scheduler.api.resource import AllocationResult, DeviceID, ResourceClaim

__all__ = ["AllocatedDevices", "AllocatedState", "DeviceID", "SharedDeviceID", "gather_allocated_state"]

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


class AllocatedDevices:
    """The devices of a changing set of allocations: each added when its claim is seen allocated,
    removed when that claim is deallocated, replaced or deleted, so that a PreFilter copies the
    result instead of re-reading every allocated claim (O(allocated claims) a pod, O(n^2) over a
    workload that allocates a claim a pod).

    A device held by two allocations (admin access aside, only a broken cluster does that) stays in
    use until both are gone, as gathering it from every claim would have it.
    """

    def __init__(self) -> None:
        self._devices: set[DeviceID] = set()
        self._shared: set[SharedDeviceID] = set()
        self._capacity: dict[DeviceID, dict[str, Fraction]] = {}
        # Holders beyond the first, for the rare device or share held twice.
        self._more_devices: dict[DeviceID, int] = {}
        self._more_shared: dict[SharedDeviceID, int] = {}
        self._shares: dict[DeviceID, int] = {}  # shares of a device: its capacity entry lives while > 0

    def add(self, allocation: AllocationResult) -> None:
        for result in allocation.results:
            if result.admin_access:
                continue  # admin access does not take a device from others
            device = result.device_id
            if result.share_id:
                shared = (*device, result.share_id)
                if shared in self._shared:
                    self._more_shared[shared] = self._more_shared.get(shared, 0) + 1
                else:
                    self._shared.add(shared)
                self._shares[device] = self._shares.get(device, 0) + 1
                total = self._capacity.setdefault(device, {})
                for name, amount in result.consumed_capacity.items():
                    total[name] = total.get(name, Fraction(0)) + amount
            elif device in self._devices:
                self._more_devices[device] = self._more_devices.get(device, 0) + 1
            else:
                self._devices.add(device)

    def remove(self, allocation: AllocationResult) -> None:
        """Undo :meth:`add` of the same allocation."""
        for result in allocation.results:
            if result.admin_access:
                continue
            device = result.device_id
            if result.share_id:
                shared = (*device, result.share_id)
                more = self._more_shared.pop(shared, 0)
                if more > 1:
                    self._more_shared[shared] = more - 1
                elif not more:
                    self._shared.discard(shared)
                left = self._shares.pop(device, 0) - 1
                if left > 0:
                    self._shares[device] = left
                    total = self._capacity[device]
                    for name, amount in result.consumed_capacity.items():
                        total[name] = total.get(name, Fraction(0)) - amount
                else:
                    self._capacity.pop(device, None)
            else:
                more = self._more_devices.pop(device, 0)
                if more > 1:
                    self._more_devices[device] = more - 1
                elif not more:
                    self._devices.discard(device)

    def state(self) -> AllocatedState:
        """A copy the allocator may keep while this index changes (the reference's ``Clone``)."""
        return AllocatedState(
            set(self._devices),
            set(self._shared),
            {device: dict(total) for device, total in self._capacity.items()},
        )


def gather_allocated_state(claims: Iterable[ResourceClaim]) -> AllocatedState:
    state = AllocatedState()
    for claim in claims:
        if claim.status.allocation is not None:
            state.add_allocation(claim.status.allocation)
    return state
