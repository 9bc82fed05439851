"""Plugin registry: plugin name -> class, in-tree plus out-of-tree via entry points.

In-tree plugins are named as ``"module:Class"`` strings and imported only when a profile needs
them, so a broken or missing plugin module only fails the profiles that name it, with an error
that says which plugin and why. Out-of-tree plugins come from the ``kopf_scheduler.plugins``
entry-point group (name = plugin name, value = ``module:Class``), scanned when a name that is not
in-tree is first asked for (or the registry listed): the scan of every installed distribution
(~3 ms) is not on the way to an ordinary start's first bind. An entry point cannot replace an
in-tree plugin (kube-scheduler's ``Registry.Merge`` refuses a name it has): it is not used.

A class is checked against the extension points and capabilities of ``framework/interface.py``
when it is registered (a class) or first loaded (a target): what Go's compiler checks of
``var _ fwk.FilterPlugin = &Fit{}``, and what a missing method would otherwise hide (a misspelt
``filter_vectr`` is no hook: the runtime would silently run without it).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import sys
from collections.abc import Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

from kopf_scheduler.framework.interface import (
    CAPABILITIES,
    EXTENSION_POINT_PROTOCOLS,
    implements,
    protocol_methods,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "IN_TREE",
    "EntryPointLike",
    "PluginCapabilityError",
    "PluginImportError",
    "Registry",
    "capability_problems",
    "default_registry",
    "plugin_args_model",
]

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


@runtime_checkable
class EntryPointLike(Protocol):
    """What the registry needs of an ``importlib.metadata.EntryPoint``: its ``module:attr`` and
    ``load()`` (a test or an embedding program may give its own)."""

    value: str

    def load(self) -> Any: ...


class PluginImportError(ImportError):
    """A registered plugin could not be loaded; the message names the plugin and its target."""


class PluginCapabilityError(PluginImportError):
    """A plugin class whose hooks do not match the protocols it declares or implements."""


_PROTOCOLS: tuple[type, ...] = (*EXTENSION_POINT_PROTOCOLS.values(), *CAPABILITIES)
_HOOKS: frozenset[str] = frozenset(m for p in _PROTOCOLS for m in protocol_methods(p))
# How alike a method's name must be to a hook's to be taken for its misspelling (difflib's ratio:
# "filter_vectr" ~ "filter_vector" 0.96, "pre_filter_state" ~ "pre_filter" 0.77).
_MISSPELT = 0.85


def capability_problems(cls: type) -> list[str]:
    """What is wrong with ``cls``'s hooks, in words; empty when nothing is.

    A protocol declared (subclassed) must be implemented; one implemented in part (``add_pod``
    without ``remove_pod``) is a mistake either way; a capability needs the extension point it
    extends (``normalize_score`` without ``score``); and a public method named almost like a hook
    that is none of the class's is taken for a misspelt hook."""
    problems: list[str] = []
    mine: set[str] = set()
    for protocol in _PROTOCOLS:
        methods = protocol_methods(protocol)
        have = [m for m in methods if implements(cls, _single(protocol, m))]
        missing = [m for m in methods if m not in have]
        if protocol in cls.__mro__ and missing:
            problems.append(f"declares {protocol.__name__} but does not implement {', '.join(missing)}")
        elif have and missing:
            problems.append(
                f"implements {protocol.__name__} in part: {', '.join(have)} without {', '.join(missing)}"
            )
        elif have:
            mine.update(have)
            base = CAPABILITIES.get(protocol)
            if base is not None and not implements(cls, base):
                problems.append(
                    f"implements {protocol.__name__} ({', '.join(have)}) but not the {base.__name__} it "
                    f"extends ({', '.join(protocol_methods(base))})"
                )
    for name in _public_methods(cls):
        if name in _HOOKS:
            continue
        near = difflib.get_close_matches(name, _HOOKS - mine, n=1, cutoff=_MISSPELT)
        if near:
            problems.append(f"has {name}(), which is no hook: a misspelt {near[0]}()?")
    args = _declared_args(cls)
    if args is not None and not _is_args_type(args):
        problems.append(f"has Args = {args!r}, which is no dataclass nor pydantic model (nor None)")
    return problems


def _is_args_type(args: object) -> bool:
    """A dataclass (validated by pydantic at its first pluginConfig) or a pydantic model. A class can
    only be a pydantic model once pydantic is imported, so this needs no import of its own."""
    if not isinstance(args, type):
        return False
    if dataclasses.is_dataclass(args):
        return True
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and issubclass(args, pydantic.BaseModel)


def _declared_args(cls: type) -> object:
    """The ``Args`` the class or a base declares (``Plugin.Args``), None when none does: read from
    the classes' own namespaces, as a class attribute, once when the class is checked."""
    for klass in cls.__mro__:
        if "Args" in vars(klass):
            return vars(klass)["Args"]
    return None


def plugin_args_model(cls: type) -> type | None:
    """A checked plugin class's args type (None: it takes no args)."""
    args = _declared_args(cls)
    if args is None:
        return None
    if not isinstance(args, type) or not _is_args_type(args):
        raise PluginCapabilityError(
            f"plugin class {cls.__qualname__} has Args = {args!r}, which is no dataclass nor pydantic model"
        )
    return args


@functools.cache
def _single(protocol: type, method: str) -> type:
    """A stand-in protocol of one method, for :func:`implements` (which checks them all); made once
    (a class made per check was ~3.5 ms of the in-tree plugins' checks at start-up)."""
    return type(protocol.__name__, (), {method: vars(protocol)[method]})


def _public_methods(cls: type) -> set[str]:
    """Public functions the class and its bases define, but for protocols' stubs and ``object``."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass is object or klass.__dict__.get("_is_protocol", False):
            continue
        names.update(k for k, v in vars(klass).items() if not k.startswith("_") and callable(v))
    return names


def _checked(name: str, target: Any, cls: type) -> type:
    problems = capability_problems(cls)
    if problems:
        raise PluginCapabilityError(f"plugin {name!r} ({_describe(target)}) {'; '.join(problems)}")
    return cls


class Registry(Mapping[str, Any]):
    """Name -> plugin class, resolved lazily and cached. Values may be classes or targets.

    ``entry_point_group``: entry points of that group add the names not registered otherwise,
    scanned when a name the registry lacks is first asked for, or when it is listed."""

    def __init__(
        self, entries: Mapping[str, Any] | None = None, *, entry_point_group: str | None = None
    ) -> None:
        self._targets: dict[str, Any] = dict(entries or {})
        self._loaded: dict[str, type] = {}
        self._args: dict[str, type | None] = {}
        self._unscanned = entry_point_group

    def _scan(self) -> None:
        """Add the entry points of the group not scanned yet, under the names not taken."""
        group, self._unscanned = self._unscanned, None
        if group is None:
            return
        import importlib.metadata

        for ep in importlib.metadata.entry_points(group=group):
            self._targets.setdefault(ep.name, ep)

    def register(self, name: str, target: Any) -> None:
        """Add or replace a plugin: a class, a ``"module:Class"`` string or an entry point. A class
        is checked here (PluginCapabilityError); a target when it is first loaded."""
        if isinstance(target, type):
            _checked(name, target, target)
        self._targets[name] = target
        self._loaded.pop(name, None)
        self._args.pop(name, None)

    def __contains__(self, name: object) -> bool:
        if name not in self._targets:
            self._scan()
        return name in self._targets

    def __iter__(self) -> Iterator[str]:
        self._scan()
        return iter(self._targets)

    def __len__(self) -> int:
        self._scan()
        return len(self._targets)

    def __getitem__(self, name: str) -> type:
        return self.get_class(name)

    def get_class(self, name: str) -> type:
        """The plugin class; KeyError for unknown names, PluginImportError when it does not load."""
        cls = self._loaded.get(name)
        if cls is not None:
            return cls
        if name not in self._targets:
            self._scan()
        target = self._targets[name]
        try:
            if isinstance(target, type):
                cls = target
            elif isinstance(target, str):
                module_name, _, attr = target.partition(":")
                # The target names the class (an import, not a probe: a missing one is an error).
                cls = getattr(importlib.import_module(module_name), attr)
            else:  # importlib.metadata.EntryPoint
                cls = target.load()
        except Exception as exc:
            raise PluginImportError(f"plugin {name!r} ({_describe(target)}) cannot be loaded: {exc}") from exc
        if not isinstance(cls, type):
            raise PluginImportError(f"plugin {name!r} ({_describe(target)}) is not a class")
        self._loaded[name] = _checked(name, target, cls)
        self._args[name] = plugin_args_model(cls)
        return cls

    def args_model(self, name: str) -> type | None:
        """The plugin's pluginConfig args type, as checked when it was loaded (None: no args);
        the errors of :meth:`get_class`."""
        self.get_class(name)
        return self._args[name]

    def copy(self) -> Registry:
        other = Registry(self._targets, entry_point_group=self._unscanned)
        other._loaded = dict(self._loaded)
        other._args = dict(self._args)
        return other


def _describe(target: Any) -> str:
    if isinstance(target, type):
        return f"{target.__module__}:{target.__qualname__}"
    if isinstance(target, str):
        return target
    if isinstance(target, EntryPointLike):
        return f"entry point {target.value}"
    return repr(target)


def default_registry() -> Registry:
    """In-tree plugins plus the ``kopf_scheduler.plugins`` entry points (scanned when first needed)."""
    return Registry(IN_TREE, entry_point_group=ENTRY_POINT_GROUP)
