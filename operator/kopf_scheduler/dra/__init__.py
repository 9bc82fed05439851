"""Dynamic Resource Allocation with structured parameters: the allocator the DynamicResources
plugin calls (the reference's ``k8s.io/dynamic-resource-allocation/structured``).

Pure engine code: raw resource.k8s.io/v1 objects in, ``status.allocation`` dicts out.
"""

from .allocator import ALLOCATION_RESULTS_MAX_SIZE, AllocationError, Allocator, InvalidPoolsError
from .cel import CelCache, CelError
from .extended import (
    DEVICE_CLASS_PREFIX,
    EXTENDED_RESOURCES,
    ExtendedResources,
    is_dra_extended_resource_name,
)
from .features import DEFAULT_FEATURES, Features
from .pools import Pool, PoolCache, node_matches
from .state import AllocatedState, DeviceID, SharedDeviceID, allocation_results, gather_allocated_state
from .taint_rules import TaintRuleCache, apply_taint_rules

__all__ = [
    "ALLOCATION_RESULTS_MAX_SIZE",
    "DEFAULT_FEATURES",
    "DEVICE_CLASS_PREFIX",
    "EXTENDED_RESOURCES",
    "AllocatedState",
    "AllocationError",
    "Allocator",
    "CelCache",
    "CelError",
    "DeviceID",
    "ExtendedResources",
    "Features",
    "InvalidPoolsError",
    "Pool",
    "PoolCache",
    "SharedDeviceID",
    "TaintRuleCache",
    "allocation_results",
    "apply_taint_rules",
    "gather_allocated_state",
    "is_dra_extended_resource_name",
    "node_matches",
]
