"""The DRA feature gates the structured allocator consults.

v1.37.2's defaults select the reference's "incubating" allocator (DRAPrioritizedList, DRAAdminAccess,
partitionable devices, device taints, consumable capacity and binding conditions on; compatibility
groups, derived and list attributes off), so that one is what :mod:`.allocator` implements.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_FEATURES", "Features"]


@dataclass(frozen=True, slots=True)
class Features:
    admin_access: bool = True
    prioritized_list: bool = True
    partitionable_devices: bool = True
    device_taints: bool = True
    consumable_capacity: bool = True
    device_binding_and_status: bool = True
    fractional_capacity_range: bool = True
    extended_resource: bool = True


DEFAULT_FEATURES = Features()
