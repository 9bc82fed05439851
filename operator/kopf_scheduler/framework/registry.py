"""Plugin registry: plugin name -> class, in-tree plus out-of-tree via entry points.

In-tree plugins are named as ``"module:Class"`` strings and imported only when a profile needs
them, so a broken or missing plugin module only fails the profiles that name it, with an error
that says which plugin and why. Out-of-tree plugins come from the ``kopf_scheduler.plugins``
entry-point group (name = plugin name, value = ``module:Class``).
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["ENTRY_POINT_GROUP", "IN_TREE", "PluginImportError", "Registry", "default_registry"]

ENTRY_POINT_GROUP = "kopf_scheduler.plugins"

_P = "kopf_scheduler.plugins."
IN_TREE: dict[str, str] = {
    "PrioritySort": _P + "priority_sort:PrioritySort",
    "SchedulingGates": _P + "scheduling_gates:SchedulingGates",
    "NodeUnschedulable": _P + "node_unschedulable:NodeUnschedulable",
    "NodeName": _P + "node_name:NodeName",
    "TaintToleration": _P + "taint_toleration:TaintToleration",
    "NodeAffinity": _P + "node_affinity:NodeAffinity",
    "NodePorts": _P + "node_ports:NodePorts",
    "NodeResourcesFit": _P + "node_resources_fit:NodeResourcesFit",
    "NodeResourcesBalancedAllocation": _P
    + "node_resources_balanced_allocation:NodeResourcesBalancedAllocation",
    "ImageLocality": _P + "image_locality:ImageLocality",
    "DefaultBinder": _P + "default_binder:DefaultBinder",
    "DynamicResources": _P + "dynamic_resources:DynamicResources",
    "InterPodAffinity": _P + "inter_pod_affinity:InterPodAffinity",
    "PodTopologySpread": _P + "pod_topology_spread:PodTopologySpread",
    "VolumeBinding": _P + "volume_binding:VolumeBinding",
    "VolumeRestrictions": _P + "volume_restrictions:VolumeRestrictions",
    "VolumeZone": _P + "volume_zone:VolumeZone",
    "NodeVolumeLimits": _P + "node_volume_limits:NodeVolumeLimits",
    "NodeDeclaredFeatures": _P + "node_declared_features:NodeDeclaredFeatures",
    "DefaultPreemption": _P + "default_preemption:DefaultPreemption",
    "GangScheduling": _P + "gang_scheduling:GangScheduling",
}


class PluginImportError(ImportError):
    """A registered plugin could not be loaded; the message names the plugin and its target."""


class Registry(Mapping[str, Any]):
    """Name -> plugin class, resolved lazily and cached. Values may be classes or targets."""

    def __init__(self, entries: Mapping[str, Any] | None = None) -> None:
        self._targets: dict[str, Any] = dict(entries or {})
        self._loaded: dict[str, type] = {}

    def register(self, name: str, target: Any) -> None:
        """Add or replace a plugin: a class, a ``"module:Class"`` string or an entry point."""
        self._targets[name] = target
        self._loaded.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._targets

    def __iter__(self) -> Iterator[str]:
        return iter(self._targets)

    def __len__(self) -> int:
        return len(self._targets)

    def __getitem__(self, name: str) -> type:
        return self.get_class(name)

    def get_class(self, name: str) -> type:
        """The plugin class; KeyError for unknown names, PluginImportError when it does not load."""
        cls = self._loaded.get(name)
        if cls is not None:
            return cls
        target = self._targets[name]
        try:
            if isinstance(target, type):
                cls = target
            elif isinstance(target, str):
                module_name, _, attr = target.partition(":")
                cls = getattr(importlib.import_module(module_name), attr)
            else:  # importlib.metadata.EntryPoint
                cls = target.load()
        except Exception as exc:
            raise PluginImportError(f"plugin {name!r} ({_describe(target)}) cannot be loaded: {exc}") from exc
        if not isinstance(cls, type):
            raise PluginImportError(f"plugin {name!r} ({_describe(target)}) is not a class")
        self._loaded[name] = cls
        return cls

    def copy(self) -> Registry:
        other = Registry(self._targets)
        other._loaded = dict(self._loaded)
        return other


def _describe(target: Any) -> str:
    if isinstance(target, type):
        return f"{target.__module__}:{target.__qualname__}"
    if isinstance(target, str):
        return target
    return f"entry point {getattr(target, 'value', target)!s}"


def default_registry() -> Registry:
    """In-tree plugins plus the ``kopf_scheduler.plugins`` entry points (which may override)."""
    reg = Registry(IN_TREE)
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        reg.register(ep.name, ep)
    return reg
