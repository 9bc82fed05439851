"""Scheduler profiles: the reference's ``KubeSchedulerProfile`` as pydantic models, plus defaults.

A profile spec is what a ``SchedulerProfile`` custom resource carries. ``load_profile`` parses it,
merges it into the default plugin set exactly as the reference's v1 defaulting does
(``mergePlugins``: custom entries replace defaults in place, ``"*"`` disables all defaults at a
point), then resolves it against the registry the way ``NewFramework`` does (multiPoint expansion,
score weights, typed plugin args) so that a bad profile is rejected before it replaces a working
one, with an error naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from kopf_scheduler.framework.registry import PluginImportError, Registry, default_registry

__all__ = [
    "DEFAULT_MULTI_POINT",
    "DEFAULT_SCHEDULER_NAME",
    "EXTENSION_POINTS",
    "PluginConfig",
    "PluginRef",
    "PluginSet",
    "Plugins",
    "ProfileError",
    "ResolvedPlugins",
    "SchedulerProfileSpec",
    "default_profile",
    "load_profile",
    "merge_plugins",
    "profile_json_schema",
    "resolve_plugins",
]

DEFAULT_SCHEDULER_NAME = "kopf-scheduler"
MAX_NODE_SCORE = 100
MAX_TOTAL_SCORE = 2**63 - 1
MAX_WEIGHT = 2**31 - 1  # the reference's weights are int32

# Extension point (camelCase, as in the API) -> methods a plugin needs to sit there.
EXTENSION_POINTS: dict[str, tuple[str, ...]] = {
    "preEnqueue": ("pre_enqueue",),
    "queueSort": ("less",),
    "preFilter": ("pre_filter",),
    "filter": ("filter",),
    "postFilter": ("post_filter",),
    "preScore": ("pre_score",),
    "score": ("score",),
    "reserve": ("reserve", "unreserve"),
    "permit": ("permit",),
    "preBind": ("pre_bind",),
    "bind": ("bind",),
    "postBind": ("post_bind",),
}

# The reference's getDefaultPlugins (v1.37.2) with its default feature gates applied:
# NodeDeclaredFeatures (GA) is appended last and, DynamicResourceAllocation being GA and locked
# on, DynamicResources (weight 2) goes right before DefaultPreemption (applyDynamicResources), so
# its PostFilter runs first. Only its behaviour for pods without ResourceClaims is modelled.
# (name, weight) where weight matters only for Score plugins.
DEFAULT_MULTI_POINT: tuple[tuple[str, int | None], ...] = (
    ("SchedulingGates", None),
    ("PrioritySort", None),
    ("NodeName", None),
    ("NodeUnschedulable", None),
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodePorts", None),
    ("NodeResourcesFit", 1),
    ("VolumeRestrictions", None),
    ("NodeVolumeLimits", None),
    ("VolumeBinding", None),
    ("VolumeZone", None),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("DynamicResources", 2),
    ("DefaultPreemption", None),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
    ("DefaultBinder", None),
    ("NodeDeclaredFeatures", None),
)


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class PluginRef(_Model):
    """A plugin by name, with its weight where one applies (only Score plugins have weights)."""

    name: str = Field(min_length=1, description="The plugin's name, as registered (e.g. NodeResourcesFit).")
    weight: int | None = Field(
        default=None,
        ge=0,
        le=MAX_WEIGHT,
        description="The plugin's weight; used only at the Score extension point. Unset or 0 means 1.",
    )


class PluginSet(_Model):
    """Plugins to enable and default plugins to disable at one extension point.

    When both lists are empty, the extension point keeps its default plugins.
    """

    enabled: list[PluginRef] = Field(
        default_factory=list,
        description="Plugins to enable besides the defaults; they run after the default plugins, in "
        "the order listed here.",
    )
    disabled: list[PluginRef] = Field(
        default_factory=list,
        description='Default plugins to disable; a single entry named "*" disables all of them.',
    )


class Plugins(_Model):
    """Plugins per extension point, merged into the defaults.

    An extension point left out keeps its default plugins. Enabled plugins run after the defaults;
    to run one earlier, disable the defaults there and enable them again in the wanted order.
    """

    pre_enqueue: PluginSet = Field(
        default_factory=PluginSet,
        description="Plugins run before a pod is added to the scheduling queue; a pod waits while one "
        "rejects it.",
    )
    queue_sort: PluginSet = Field(
        default_factory=PluginSet,
        description="The plugin that orders pods in the scheduling queue; exactly one must be in force.",
    )
    pre_filter: PluginSet = Field(
        default_factory=PluginSet,
        description="Plugins run at the PreFilter extension point, once per pod before filtering.",
    )
    filter: PluginSet = Field(
        default_factory=PluginSet,
        description="Plugins that rule out the nodes that cannot run the pod.",
    )
    post_filter: PluginSet = Field(
        default_factory=PluginSet,
        description="Plugins run after filtering, only when no node fits the pod (e.g. preemption).",
    )
    pre_score: PluginSet = Field(
        default_factory=PluginSet,
        description="Plugins run before scoring, once per pod.",
    )
    score: PluginSet = Field(
        default_factory=PluginSet,
        description="Plugins that rank the nodes that passed filtering; their scores are weighted and "
        "summed.",
    )
    reserve: PluginSet = Field(
        default_factory=PluginSet,
        description="Plugins that reserve resources once a node is chosen, and release them if the pod "
        "is not bound.",
    )
    permit: PluginSet = Field(
        default_factory=PluginSet,
        description="Plugins that may hold back or deny the binding of a pod.",
    )
    pre_bind: PluginSet = Field(
        default_factory=PluginSet,
        description="Plugins run just before a pod is bound (e.g. binding its volumes).",
    )
    bind: PluginSet = Field(
        default_factory=PluginSet,
        description="Plugins that bind the pod to its node, in order; the first one that succeeds ends "
        "the list.",
    )
    post_bind: PluginSet = Field(
        default_factory=PluginSet,
        description="Plugins run after a pod has been bound.",
    )
    multi_point: PluginSet = Field(
        default_factory=PluginSet,
        description="Plugins enabled at every extension point they implement: the simple way to "
        "configure a plugin.",
    )

    def point(self, camel: str) -> PluginSet:
        ps: PluginSet = getattr(self, _SNAKE[camel])
        return ps


_SNAKE = {to_camel(name): name for name in Plugins.model_fields}


class PluginConfig(_Model):
    """Arguments handed to a plugin when it is created (once, however many extension points it serves)."""

    name: str = Field(min_length=1, description="The name of the plugin these arguments are for.")
    args: dict[str, Any] = Field(
        default_factory=dict,
        description="The plugin's arguments (its *Args type, e.g. NodeResourcesFitArgs); the plugin "
        "validates them. Omitted fields take the plugin's defaults.",
    )


class SchedulerProfileSpec(_Model):
    """One profile (``KubeSchedulerProfile``) plus our per-profile queue backoff settings."""

    scheduler_name: str = Field(
        min_length=1,
        description="The scheduler name this profile serves: pods whose spec.schedulerName equals it "
        "are scheduled with this profile.",
    )
    percentage_of_nodes_to_score: int | None = Field(
        default=None,
        ge=0,
        le=100,
        description="Stop looking for feasible nodes once this percentage of all nodes has been found "
        "feasible (but never fewer than 100 nodes); e.g. 30 in a 500-node cluster stops at 150. Unset or "
        "0 means adaptive: from 50% in small clusters down to 5% in large ones.",
    )
    pod_initial_backoff_seconds: float = Field(
        default=1.0,
        gt=0,
        description="The first backoff of a pod that could not be scheduled, in seconds; it doubles at "
        "each further attempt. Default 1.",
    )
    pod_max_backoff_seconds: float = Field(
        default=10.0,
        gt=0,
        description="The longest backoff of a pod that could not be scheduled, in seconds; at least "
        "podInitialBackoffSeconds. Default 10.",
    )
    plugins: Plugins | None = Field(
        default=None,
        description="Plugins to enable or disable per extension point, on top of the default plugins. "
        "An extension point with neither keeps its defaults.",
    )
    plugin_config: list[PluginConfig] = Field(
        default_factory=list,
        description="Arguments per plugin; a plugin without an entry uses its default arguments.",
    )

    _resolved: ResolvedPlugins | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _backoff_order(self) -> SchedulerProfileSpec:
        if self.pod_max_backoff_seconds < self.pod_initial_backoff_seconds:
            raise ValueError(
                "podMaxBackoffSeconds: must be greater than or equal to podInitialBackoffSeconds"
            )
        return self

    @property
    def resolved(self) -> ResolvedPlugins | None:
        """Set by ``load_profile``: the plugins per extension point, weights and typed args."""
        return self._resolved


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


class ProfileError(ValueError):
    """An invalid profile; ``errors`` holds ``(field path, message)`` pairs."""

    def __init__(self, errors: Sequence[tuple[str, str]]) -> None:
        self.errors = list(errors)
        super().__init__("; ".join(f"{path}: {msg}" if path else msg for path, msg in self.errors))


# --- defaults and merging -----------------------------------------------------------------------


def _default_plugins() -> Plugins:
    return Plugins(
        multi_point=PluginSet(enabled=[PluginRef(name=n, weight=w) for n, w in DEFAULT_MULTI_POINT])
    )


def _merge_set(default: PluginSet, custom: PluginSet) -> PluginSet:
    """The reference's mergePluginSet: replace defaults in place, append the rest, honour disables."""
    disabled = [PluginRef(name=p.name) for p in custom.disabled] + [
        PluginRef(name=p.name) for p in default.disabled
    ]
    disabled_names = {p.name for p in disabled}
    custom_index = {p.name: i for i, p in enumerate(custom.enabled)}
    replaced: set[int] = set()
    enabled: list[PluginRef] = []
    if "*" not in disabled_names:
        for plugin in default.enabled:
            if plugin.name in disabled_names:
                continue
            i = custom_index.get(plugin.name)
            if i is not None:
                plugin = custom.enabled[i]
                replaced.add(i)
            enabled.append(plugin.model_copy())
    enabled.extend(p.model_copy() for i, p in enumerate(custom.enabled) if i not in replaced)
    return PluginSet(enabled=enabled, disabled=disabled)


def merge_plugins(custom: Plugins | None) -> Plugins:
    """Defaults merged with the profile's plugins (idempotent: merging twice changes nothing)."""
    default = _default_plugins()
    if custom is None:
        return default
    merged = {
        name: _merge_set(getattr(default, name), getattr(custom, name)) for name in Plugins.model_fields
    }
    return Plugins(**merged)


# --- resolution against the registry ------------------------------------------------------------


def _implements(cls: type, point: str) -> bool:
    return all(callable(getattr(cls, m, None)) for m in EXTENSION_POINTS[point])


def _loc(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


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
                errors.append((_loc([f"{path}.args", *err["loc"]]), err["msg"]))
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


# --- entry points -------------------------------------------------------------------------------


def load_profile(spec: Mapping[str, Any], registry: Registry | None = None) -> SchedulerProfileSpec:
    """Parse, default-merge and validate one profile spec; raise ProfileError naming the field."""
    try:
        profile = SchedulerProfileSpec.model_validate(dict(spec))
    except ValidationError as exc:
        errors = []
        for err in exc.errors():
            msg = err["msg"]
            loc = _loc(err["loc"])
            if msg.startswith("Value error, ") and ": " in msg:  # our model validator names its field
                loc, _, msg = msg.removeprefix("Value error, ").partition(": ")
            errors.append((loc, msg))
        raise ProfileError(errors) from None
    profile.plugins = merge_plugins(profile.plugins)
    profile._resolved = resolve_plugins(profile, registry)
    return profile


def default_profile(
    scheduler_name: str = DEFAULT_SCHEDULER_NAME, registry: Registry | None = None
) -> SchedulerProfileSpec:
    """The profile that exists without any SchedulerProfile resource."""
    return load_profile({"schedulerName": scheduler_name}, registry)


def profile_json_schema() -> dict[str, Any]:
    """JSON schema of a profile spec (camelCase), for generating the CRD."""
    return SchedulerProfileSpec.model_json_schema(by_alias=True)
