"""DynamicResources: device allocation through ResourceClaims (the reference's
``plugins/dynamicresources``), split as the reference splits it."""

from .dynamic_resources import STATE_KEY, STATE_NOT_FOUND, DynamicResources, DynamicResourcesArgs

__all__ = ["STATE_KEY", "STATE_NOT_FOUND", "DynamicResources", "DynamicResourcesArgs"]
