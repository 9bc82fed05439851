"""Dynamic Resource Allocation with structured parameters: the allocator the DynamicResources
plugin calls (the reference's ``k8s.io/dynamic-resource-allocation/structured``) and the DRA
manager the framework hands the plugins.

Pure engine code: typed resource.k8s.io/v1 views (``api/resource.py``) in, allocation results out.
"""

from .allocator import ALLOCATION_RESULTS_MAX_SIZE, AllocationError, Allocator, InvalidPoolsError
from .cel import CelCache, CelError
from .extended import DEVICE_CLASS_PREFIX, ExtendedResources, is_dra_extended_resource_name
from .features import DEFAULT_FEATURES, Features
from .manager import ClaimTracker, DraManager
from .pools import Pool, PoolCache, node_matches
from .state import AllocatedState, DeviceID, SharedDeviceID, gather_allocated_state
from .taint_rules import TaintRuleCache, apply_taint_rules

__all__ = [
    "ALLOCATION_RESULTS_MAX_SIZE",
    "DEFAULT_FEATURES",
    "DEVICE_CLASS_PREFIX",
    "AllocatedState",
    "AllocationError",
    "Allocator",
    "CelCache",
    "CelError",
    "ClaimTracker",
    "DeviceID",
    "DraManager",
    "ExtendedResources",
    "Features",
    "InvalidPoolsError",
    "Pool",
    "PoolCache",
    "SharedDeviceID",
    "TaintRuleCache",
    "apply_taint_rules",
    "gather_allocated_state",
    "is_dra_extended_resource_name",
    "node_matches",
]
