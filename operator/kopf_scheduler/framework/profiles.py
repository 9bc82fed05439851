"""A profile's plugins resolved against the registry (the plugin part of the reference's
``NewFramework``): multiPoint expansion and ordering, Score weights, typed args.

Lives in the framework, not in ``config``: it needs the plugin classes (which extension points
a class implements, its ``Args`` model). ``load_profile`` is the validated entry point the edge,
simulate and explain use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from kopf_scheduler.config.profile import (
    DEFAULT_SCHEDULER_NAME,
    EXTENSION_POINTS,
    MAX_NODE_SCORE,
    MAX_TOTAL_SCORE,
    ProfileError,
    SchedulerProfileSpec,
    location,
    merge_plugins,
    parse_profile,
)
from kopf_scheduler.framework.registry import PluginImportError, Registry, default_registry

__all__ = ["ResolvedPlugins", "default_profile", "load_profile", "resolve_plugins"]


@dataclass(slots=True)
class ResolvedPlugins:
    """What ``NewFramework`` derives from a profile, computed once at validation."""

    points: dict[str, list[str]]  # extension point -> plugin names in run order
    weights: dict[str, int]  # Score plugin -> weight
    args: dict[str, Any]  # plugin -> validated Args model instance (or None)
    classes: dict[str, type] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        seen: dict[str, None] = {}
        for names in self.points.values():
            for n in names:
                seen[n] = None
        return list(seen)


def _implements(cls: type, point: str) -> bool:
    return all(callable(getattr(cls, m, None)) for m in EXTENSION_POINTS[point])


def resolve_plugins(spec: SchedulerProfileSpec, registry: Registry | None = None) -> ResolvedPlugins:
    """Expand multiPoint, order plugins, compute weights, validate args (``NewFramework``)."""
    registry = registry if registry is not None else default_registry()
    plugins = spec.plugins if spec.plugins is not None else merge_plugins(None)
    errors: list[tuple[str, str]] = []
    classes: dict[str, type] = {}

    def load(name: str, path: str) -> type | None:
        if name in classes:
            return classes[name]
        if name not in registry:
            errors.append((path, f"unknown plugin {name!r}"))
            return None
        try:
            cls = registry.get_class(name)
        except PluginImportError as exc:
            errors.append((path, str(exc)))
            return None
        classes[name] = cls
        return cls

    # Every plugin named anywhere must exist (the reference's pluginsNeeded + factory lookup).
    for point in (*EXTENSION_POINTS, "multiPoint"):
        for i, ref in enumerate(plugins.point(point).enabled):
            load(ref.name, f"plugins.{point}.enabled[{i}].name")

    # Per extension point lists, then multiPoint expansion with the reference's ordering.
    points: dict[str, list[str]] = {}
    for point in EXTENSION_POINTS:
        pset = plugins.point(point)
        explicit: list[str] = []
        for i, ref in enumerate(pset.enabled):
            cls = classes.get(ref.name)
            if cls is None:
                continue
            path = f"plugins.{point}.enabled[{i}].name"
            if not _implements(cls, point):
                errors.append((path, f"plugin {ref.name!r} does not extend {point} plugin"))
            elif ref.name in explicit:
                errors.append((path, f"plugin {ref.name!r} already registered as {point} plugin"))
            else:
                explicit.append(ref.name)
        disabled = {p.name for p in pset.disabled}
        if "*" in disabled:
            points[point] = explicit
            continue
        overrides: list[str] = []
        multi: list[str] = []
        for i, ref in enumerate(plugins.multi_point.enabled):
            cls = classes.get(ref.name)
            if cls is None or not _implements(cls, point) or ref.name in disabled:
                continue
            if ref.name in explicit:
                overrides.append(ref.name)
                continue
            if ref.name in multi:
                errors.append(
                    (f"plugins.multiPoint.enabled[{i}].name", f"plugin {ref.name!r} already registered")
                )
                continue
            multi.append(ref.name)
        ordered = (
            [n for n in explicit if n in overrides] + multi + [n for n in explicit if n not in overrides]
        )
        points[point] = ordered

    if len(points["queueSort"]) != 1 and not errors:
        errors.append(
            (
                "plugins.queueSort",
                f"exactly one queue sort plugin is required, got {len(points['queueSort'])}",
            )
        )
    if not points["bind"] and not errors:
        errors.append(("plugins.bind", "at least one bind plugin is required"))

    # Score weights: Score entries first, then multiPoint; the first mention wins; 0 means 1.
    weights: dict[str, int] = {}
    total = 0
    for ref in [*plugins.score.enabled, *plugins.multi_point.enabled]:
        cls = classes.get(ref.name)
        if cls is None or not _implements(cls, "score") or ref.name in weights:
            continue
        weights[ref.name] = ref.weight or 1
        if weights[ref.name] * MAX_NODE_SCORE > MAX_TOTAL_SCORE - total:
            errors.append(("plugins.score", "total score of Score plugins could overflow"))
        total += weights[ref.name] * MAX_NODE_SCORE

    # Typed args: pluginConfig entries are validated by the plugin's Args model.
    args: dict[str, Any] = {}
    seen: set[str] = set()
    for i, pc in enumerate(spec.plugin_config):
        path = f"pluginConfig[{i}]"
        if pc.name in seen:
            errors.append((f"{path}.name", f"duplicate config for plugin {pc.name!r}"))
            continue
        seen.add(pc.name)
        cls = load(pc.name, f"{path}.name")
        if cls is None:
            continue
        model = getattr(cls, "Args", None)
        if model is None:
            if pc.args:
                errors.append((f"{path}.args", f"plugin {pc.name!r} takes no args"))
            args[pc.name] = None
            continue
        try:
            args[pc.name] = model.model_validate(pc.args)
        except ValidationError as exc:
            for err in exc.errors():
                errors.append((location([f"{path}.args", *err["loc"]]), err["msg"]))
    needed = {n for names in points.values() for n in names}
    for name in needed:
        if name in args:
            continue
        model = getattr(classes[name], "Args", None)
        if model is None:
            args[name] = None
            continue
        try:
            args[name] = model()
        except ValidationError as exc:
            errors.append(
                (f"pluginConfig[{name}].args", f"plugin {name!r} needs args: {exc.errors()[0]['msg']}")
            )

    if errors:
        raise ProfileError(errors)
    return ResolvedPlugins(points=points, weights=weights, args=args, classes=classes)


def load_profile(spec: Mapping[str, Any], registry: Registry | None = None) -> SchedulerProfileSpec:
    """Parse, default-merge and resolve one profile spec; raise ProfileError naming the field, so
    a bad profile is rejected before it replaces a working one."""
    profile = parse_profile(spec)
    profile.set_resolved(resolve_plugins(profile, registry))
    return profile


def default_profile(
    scheduler_name: str = DEFAULT_SCHEDULER_NAME, registry: Registry | None = None
) -> SchedulerProfileSpec:
    """The profile that exists without any SchedulerProfile resource."""
    return load_profile({"schedulerName": scheduler_name}, registry)
