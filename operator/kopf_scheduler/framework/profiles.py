"""A profile's plugins resolved against the registry (the plugin part of the reference's
``NewFramework``): multiPoint expansion and ordering, Score weights, typed args.

Lives in the framework, not in ``config``: it needs the plugin classes (which extension points
a class implements, its ``Args`` model). ``load_profile`` is the validated entry point the edge,
simulate and explain use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kopf_scheduler.config.kubescheduler import ConfigError, KubeSchedulerConfiguration, plugin_init_error
from kopf_scheduler.config.profile import (
    DEFAULT_SCHEDULER_NAME,
    EXTENSION_POINTS,
    MAX_NODE_SCORE,
    MAX_TOTAL_SCORE,
    ProfileError,
    ResolvedPlugins,
    SchedulerProfileSpec,
    adapter,
    default_args,
    default_spec,
    location,
    merge_plugins,
    parse_profile,
    validation_errors,
)
from kopf_scheduler.framework.interface import EXTENSION_POINT_PROTOCOLS, ScorePlugin, implements
from kopf_scheduler.framework.registry import PluginImportError, Registry, default_registry

__all__ = [
    "ResolvedPlugins",
    "default_profile",
    "framework_error",
    "load_profile",
    "profiles_from_config",
    "resolve_plugins",
]


def _implements(cls: type, point: str) -> bool:
    """``cls`` implements the protocol of the extension point (``framework/interface.py``)."""
    return implements(cls, EXTENSION_POINT_PROTOCOLS[point])


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
        if load(pc.name, f"{path}.name") is None:
            continue
        model = registry.args_model(pc.name)
        if model is None:
            if pc.args:
                errors.append((f"{path}.args", f"plugin {pc.name!r} takes no args"))
            args[pc.name] = None
            continue
        from pydantic import ValidationError  # the first args to validate: pydantic's import

        try:
            args[pc.name] = adapter(model).validate_python(pc.args)
        except ValidationError as exc:
            for where, msg in validation_errors(exc):
                errors.append((location([f"{path}.args", *where]), msg))
    needed = {n for names in points.values() for n in names}
    for name in needed:
        if name in args:
            continue
        model = registry.args_model(name)
        if model is None:
            args[name] = None
            continue
        try:
            args[name] = default_args(model)
        except ValueError as exc:  # pydantic's ValidationError is one (validated: not our defaults)
            from pydantic import ValidationError

            if not isinstance(exc, ValidationError):
                raise
            first = validation_errors(exc)[0][1]
            errors.append((f"pluginConfig[{name}].args", f"plugin {name!r} needs args: {first}"))

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
    """The profile that exists without any SchedulerProfile resource: ``load_profile`` of
    ``{"schedulerName": scheduler_name}``, its spec constructed rather than validated (our constants)."""
    profile = default_spec(scheduler_name)
    profile.set_resolved(resolve_plugins(profile, registry))
    return profile


# --- kube-scheduler's NewFramework checks, in its words (KubeSchedulerConfiguration files) ------

# getExtensionPoints' order, with each point's protocol (its messages name the Go interface,
# which the protocol is named after).
_FRAMEWORK_POINTS: tuple[tuple[str, str, type], ...] = tuple(
    (point, EXTENSION_POINT_PROTOCOLS[point].__name__, EXTENSION_POINT_PROTOCOLS[point])
    for point in (
        "preFilter",
        "filter",
        "postFilter",
        "reserve",
        "preScore",
        "score",
        "preBind",
        "bind",
        "postBind",
        "permit",
        "preEnqueue",
        "queueSort",
        "placementGenerate",
        "placementScore",
        "podGroupPostFilter",
    )
)


def framework_error(profile: Mapping[str, Any], registry: Registry | None = None) -> str | None:
    """The first error kube-scheduler's NewFramework reports for a defaulted v1 profile, or None.

    ``profile`` is one entry of a defaulted KubeSchedulerConfiguration (config.kubescheduler): its
    plugins merged with the defaults and its pluginConfig args defaulted. The message is the
    reference's whole ``initializing profiles: creating profile for scheduler name X: ...``."""
    registry = registry if registry is not None else default_registry()
    name = profile.get("schedulerName") or ""
    problem = _framework_problem(profile, registry)
    if problem is None:
        return None
    return f"initializing profiles: creating profile for scheduler name {name}: {problem}"


def _framework_problem(profile: Mapping[str, Any], registry: Registry) -> str | None:
    plugins: Mapping[str, Any] = profile.get("plugins") or {}

    def enabled(point: str) -> list[Mapping[str, Any]]:
        return list((plugins.get(point) or {}).get("enabled") or ())

    needed = {p.get("name", "") for point, _, _ in _FRAMEWORK_POINTS for p in enabled(point)}
    needed |= {p.get("name", "") for p in enabled("multiPoint")}
    args = {pc.get("name"): pc.get("args") for pc in profile.get("pluginConfig") or ()}
    classes: dict[str, type] = {}
    for plugin in sorted(needed):
        if plugin not in registry:
            continue
        try:
            classes[plugin] = registry.get_class(plugin)
        except PluginImportError as exc:
            return f'initializing plugin "{plugin}": {exc}'
        problem = plugin_init_error(plugin, args.get(plugin))
        if problem:
            return f'initializing plugin "{plugin}": {problem}'

    lists: dict[str, list[str]] = {}
    for point, kind, protocol in _FRAMEWORK_POINTS:
        names: list[str] = []
        for p in enabled(point):
            plugin = p.get("name", "")
            if plugin not in classes:
                return f'{kind} "{plugin}" does not exist'
            if not implements(classes[plugin], protocol):
                return f'plugin "{plugin}" does not extend {kind} plugin'
            if plugin in names:
                return f'plugin "{plugin}" already registered as "{kind}"'
            names.append(plugin)
        lists[point] = names
    if enabled("multiPoint"):
        for point, kind, protocol in _FRAMEWORK_POINTS:
            disabled = {p.get("name", "") for p in (plugins.get(point) or {}).get("disabled") or ()}
            if "*" in disabled:
                continue
            explicit = lists[point]
            overrides: list[str] = []
            multi: list[str] = []
            for p in enabled("multiPoint"):
                plugin = p.get("name", "")
                if plugin not in classes:
                    return f'{kind} "{plugin}" does not exist'
                if not implements(classes[plugin], protocol) or plugin in disabled:
                    continue
                if plugin in explicit:
                    overrides.append(plugin)
                    continue
                if plugin in multi:
                    return f'plugin "{plugin}" already registered as "{kind}"'
                multi.append(plugin)
            lists[point] = (
                [n for n in explicit if n in overrides] + multi + [n for n in explicit if n not in overrides]
            )
    name = profile.get("schedulerName") or ""
    if len(lists["queueSort"]) != 1:
        return (
            f'only one queue sort plugin required for profile with scheduler name "{name}", but got '
            f"{len(lists['queueSort'])}"
        )
    if not lists["bind"]:
        return f'at least one bind plugin is needed for profile with scheduler name "{name}"'
    if len(lists["placementGenerate"]) > 1:
        return f'at most one placement generate plugin is allowed for profile with scheduler name "{name}"'
    total = 0
    seen: set[str] = set()
    for p in [*enabled("score"), *enabled("multiPoint")]:
        plugin = p.get("name", "")
        cls = classes.get(plugin)
        if cls is None or not implements(cls, ScorePlugin) or plugin in seen:
            continue
        seen.add(plugin)
        weight = int(p.get("weight") or 0) or 1
        if weight * MAX_NODE_SCORE > MAX_TOTAL_SCORE - total:
            return "score plugins: total score of Score plugins could overflow"
        total += weight * MAX_NODE_SCORE
    return None


def profiles_from_config(
    config: KubeSchedulerConfiguration, registry: Registry | None = None
) -> list[SchedulerProfileSpec]:
    """The engine's profiles for a validated KubeSchedulerConfiguration (kube-scheduler's profile.NewMap).

    Raise ConfigError with the reference's message for what its NewFramework refuses; then with the
    same prefix for anything our own profile model refuses that the reference took."""
    specs = config.profile_specs()
    out = []
    for defaulted, spec in zip(config.document["profiles"], specs, strict=True):
        problem = framework_error(defaulted, registry)
        if problem:
            raise ConfigError(problem)
        try:
            out.append(load_profile(spec, registry))
        except ProfileError as exc:
            raise ConfigError(
                f"initializing profiles: creating profile for scheduler name {spec['schedulerName']}: {exc}"
            ) from None
    return out
