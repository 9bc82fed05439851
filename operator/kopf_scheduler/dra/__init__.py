"""Dynamic Resource Allocation with structured parameters: the allocator the DynamicResources
plugin calls (the reference's ``k8s.io/dynamic-resource-allocation/structured``) and the DRA
manager the framework hands the plugins.

Pure engine code: typed resource.k8s.io/v1 views (``api/resource.py``) in, allocation results out.
Import the module that holds a name (``dra.manager``, ``dra.allocator``, ``dra.extended``, ...),
never this package: what an ordinary cluster's first cycle needs (the manager, the extended
resource names, the features) stays apart from the allocator, the pools and CEL, which are imported
when a pod with claims (or a DRA object) is first met.
"""
