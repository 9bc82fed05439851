"""Scheduler profiles: the reference's ``KubeSchedulerProfile`` as typed dataclasses, plus defaults.

A profile spec is what a ``SchedulerProfile`` custom resource carries. ``parse_profile`` parses it
and merges it into the default plugin set exactly as the reference's v1 defaulting does
(``mergePlugins``: custom entries replace defaults in place, ``"*"`` disables all defaults at a
point). Resolving it against the plugin registry is framework construction and lives in
``framework/profiles.py`` (``load_profile``). Pure data: nothing here imports the framework
(``ResolvedPlugins``, what it derives, is declared here for that reason).

Why stdlib dataclasses, validated by pydantic: pydantic stays the validator (constraints, aliases and
descriptions ride in each field's metadata, which pydantic reads; ``__pydantic_config__`` is a plain
dict), but it is imported at the first validation (a SchedulerProfile, a ``--config`` file, a
pluginConfig entry), not on the way to the first bind: importing it and building the models was
~55 ms of every start (issue 30). Plugin ``Args`` follow the same pattern (``Before``/``After``
stand in for pydantic's field validators).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from kopf_scheduler.config import features, kubescheduler

if TYPE_CHECKING:
    from pydantic import ConfigDict, GetCoreSchemaHandler, TypeAdapter, ValidationError
    from pydantic_core import CoreSchema

__all__ = [
    "ARGS_CONFIG",
    "DEFAULT_MULTI_POINT",
    "DEFAULT_SCHEDULER_NAME",
    "EXTENSION_POINTS",
    "After",
    "Before",
    "PluginConfig",
    "PluginRef",
    "PluginSet",
    "Plugins",
    "ProfileError",
    "ResolvedPlugins",
    "SchedulerProfileSpec",
    "ValidDefaults",
    "adapter",
    "default_args",
    "default_spec",
    "location",
    "merge_plugins",
    "parse_profile",
    "profile_json_schema",
    "to_camel",
    "validation_errors",
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

# The reference's getDefaultPlugins (v1.37.2) at its default feature gates: NodeDeclaredFeatures (GA)
# appended last and, DynamicResourceAllocation being GA and locked on, DynamicResources (weight 2)
# right before DefaultPreemption (applyDynamicResources), so its PostFilter runs first. With
# GenericWorkload on, GangScheduling is appended too (features.default_multi_point, which the
# defaulting below follows). (name, weight) where weight matters only for Score plugins.
DEFAULT_MULTI_POINT: tuple[tuple[str, int | None], ...] = features.default_multi_point(
    features.FeatureGates()
)

_T = TypeVar("_T")

# TypeMeta a plugin's args may carry (kube-scheduler's --write-config-to and /configz write it).
ARGS_API_VERSION = "kubescheduler.config.k8s.io/v1"


def to_camel(name: str) -> str:
    """``scheduler_name`` -> ``schedulerName``: the API's spelling of a field (pydantic's
    ``alias_generators.to_camel`` for these names; a test holds them equal)."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


# pydantic's model config for these dataclasses, as a plain dict (a ConfigDict is a TypedDict).
_CONFIG: ConfigDict = {"alias_generator": to_camel, "populate_by_name": True, "extra": "forbid"}
# Plugin args name their aliases themselves (the reference's JSON names are not all camelCase).
ARGS_CONFIG: ConfigDict = {"populate_by_name": True, "extra": "forbid"}


_ADAPTERS: dict[type, Any] = {}


def adapter(model: type[_T]) -> TypeAdapter[_T]:
    """pydantic's validator of a dataclass (or model), built at its first use and kept."""
    found: TypeAdapter[_T] | None = _ADAPTERS.get(model)
    if found is None:
        from pydantic import TypeAdapter

        found = _ADAPTERS[model] = TypeAdapter(model)
    return found


# pydantic's words for a model's errors, where a dataclass's differ (the messages users see).
_MODEL_WORDS = {
    "unexpected_keyword_argument": "Extra inputs are not permitted",
    "missing_argument": "Field required",
}


def validation_errors(exc: ValidationError) -> list[tuple[tuple[int | str, ...], str]]:
    """``(location, message)`` of each error, worded as pydantic words a model's."""
    return [(tuple(err["loc"]), _MODEL_WORDS.get(err["type"], err["msg"])) for err in exc.errors()]


class Before:
    """``Annotated[T, Before(fn)]``: ``fn`` rewrites the raw value before it is validated as ``T``
    (pydantic's ``BeforeValidator``, declared without importing pydantic)."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        from pydantic_core import core_schema

        return core_schema.no_info_before_validator_function(self.fn, handler(source))


class After:
    """``Annotated[T, After(fn)]``: ``fn`` checks (and may replace) the value validated as ``T``
    (pydantic's ``AfterValidator``, declared without importing pydantic)."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        from pydantic_core import core_schema

        return core_schema.no_info_after_validator_function(self.fn, handler(source))


@dataclass
class PluginRef:
    """A plugin by name, with its weight where one applies (only Score plugins have weights)."""

    __pydantic_config__ = _CONFIG

    name: str = field(
        metadata={"min_length": 1, "description": "The plugin's name, as registered (e.g. NodeResourcesFit)."}
    )
    weight: int | None = field(
        default=None,
        metadata={
            "ge": 0,
            "le": MAX_WEIGHT,
            "description": "The plugin's weight; used only at the Score extension point. Unset or 0 means 1.",
        },
    )


@dataclass
class PluginSet:
    """Plugins to enable and default plugins to disable at one extension point.

    When both lists are empty, the extension point keeps its default plugins.
    """

    __pydantic_config__ = _CONFIG

    enabled: list[PluginRef] = field(
        default_factory=list,
        metadata={
            "description": "Plugins to enable besides the defaults; they run after the default plugins, in "
            "the order listed here."
        },
    )
    disabled: list[PluginRef] = field(
        default_factory=list,
        metadata={
            "description": 'Default plugins to disable; a single entry named "*" disables all of them.'
        },
    )


@dataclass
class Plugins:
    """Plugins per extension point, merged into the defaults.

    An extension point left out keeps its default plugins. Enabled plugins run after the defaults;
    to run one earlier, disable the defaults there and enable them again in the wanted order.
    """

    __pydantic_config__ = _CONFIG

    pre_enqueue: PluginSet = field(
        default_factory=PluginSet,
        metadata={
            "description": "Plugins run before a pod is added to the scheduling queue; a pod waits while one"
            " rejects it."
        },
    )
    queue_sort: PluginSet = field(
        default_factory=PluginSet,
        metadata={
            "description": "The plugin that orders pods in the scheduling queue; exactly one must be in "
            "force."
        },
    )
    pre_filter: PluginSet = field(
        default_factory=PluginSet,
        metadata={
            "description": "Plugins run at the PreFilter extension point, once per pod before filtering."
        },
    )
    filter: PluginSet = field(
        default_factory=PluginSet,
        metadata={"description": "Plugins that rule out the nodes that cannot run the pod."},
    )
    post_filter: PluginSet = field(
        default_factory=PluginSet,
        metadata={
            "description": "Plugins run after filtering, only when no node fits the pod (e.g. preemption)."
        },
    )
    pre_score: PluginSet = field(
        default_factory=PluginSet,
        metadata={"description": "Plugins run before scoring, once per pod."},
    )
    score: PluginSet = field(
        default_factory=PluginSet,
        metadata={
            "description": "Plugins that rank the nodes that passed filtering; their scores are weighted and"
            " summed."
        },
    )
    reserve: PluginSet = field(
        default_factory=PluginSet,
        metadata={
            "description": "Plugins that reserve resources once a node is chosen, and release them if the "
            "pod is not bound."
        },
    )
    permit: PluginSet = field(
        default_factory=PluginSet,
        metadata={"description": "Plugins that may hold back or deny the binding of a pod."},
    )
    pre_bind: PluginSet = field(
        default_factory=PluginSet,
        metadata={"description": "Plugins run just before a pod is bound (e.g. binding its volumes)."},
    )
    bind: PluginSet = field(
        default_factory=PluginSet,
        metadata={
            "description": "Plugins that bind the pod to its node, in order; the first one that succeeds "
            "ends the list."
        },
    )
    post_bind: PluginSet = field(
        default_factory=PluginSet,
        metadata={"description": "Plugins run after a pod has been bound."},
    )
    multi_point: PluginSet = field(
        default_factory=PluginSet,
        metadata={
            "description": "Plugins enabled at every extension point they implement: the simple way to "
            "configure a plugin."
        },
    )

    def point(self, camel: str) -> PluginSet:
        # A field by its API name (every key of _SNAKE names one of this class's fields): no probe.
        ps: PluginSet = getattr(self, _SNAKE[camel])
        return ps


_SNAKE = {to_camel(f.name): f.name for f in dataclasses.fields(Plugins)}


@dataclass
class PluginConfig:
    """Arguments handed to a plugin when it is created (once, however many extension points it serves)."""

    __pydantic_config__ = _CONFIG

    name: str = field(
        metadata={"min_length": 1, "description": "The name of the plugin these arguments are for."}
    )
    args: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "description": "The plugin's arguments (its *Args type, e.g. NodeResourcesFitArgs); the plugin "
            "validates them. Omitted fields take the plugin's defaults."
        },
    )


class ValidDefaults:
    """A plugin's Args whose defaults are valid as declared (our own constants): its default
    instance, for a plugin without a pluginConfig entry, is constructed rather than validated
    (``default_args``), so the default profile imports no validator on the way to the first bind.
    ``test_config_defaults`` checks, for every in-tree Args, that it equals the validated one."""


def default_args(model: type[_T]) -> _T:
    """The args of a plugin the profile gives none: ``model()`` for ``ValidDefaults`` (a dataclass of
    our constants), else validated from ``{}`` (an out-of-tree Args may need fields, or check them)."""
    return model() if issubclass(model, ValidDefaults) else adapter(model).validate_python({})


@dataclass(slots=True)
class ResolvedPlugins:
    """What ``NewFramework`` derives from a profile, computed once at validation.

    Computed by ``framework.profiles.resolve_plugins``; declared here, as plain data (plugin classes
    only as ``type``), so the profile model can carry it and ``config`` never imports the framework
    (the reference's ``apis/config`` holds typed plugin args the same way).
    """

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


@dataclass
class SchedulerProfileSpec:
    """One profile (``KubeSchedulerProfile``) plus our per-profile queue backoff settings."""

    __pydantic_config__ = _CONFIG

    scheduler_name: str = field(
        metadata={
            "min_length": 1,
            "description": "The scheduler name this profile serves: pods whose spec.schedulerName equals "
            "it are scheduled with this profile.",
        }
    )
    percentage_of_nodes_to_score: int | None = field(
        default=None,
        metadata={
            "ge": 0,
            "le": 100,
            "description": "Stop looking for feasible nodes once this percentage of all nodes has been "
            "found feasible (but never fewer than 100 nodes); e.g. 30 in a 500-node cluster stops at 150. "
            "Unset or 0 means adaptive: from 50% in small clusters down to 5% in large ones.",
        },
    )
    pod_initial_backoff_seconds: float = field(
        default=1.0,
        metadata={
            "gt": 0,
            "description": "The first backoff of a pod that could not be scheduled, in seconds; it doubles "
            "at each further attempt. Default 1.",
        },
    )
    pod_max_backoff_seconds: float = field(
        default=10.0,
        metadata={
            "gt": 0,
            "description": "The longest backoff of a pod that could not be scheduled, in seconds; at least "
            "podInitialBackoffSeconds. Default 10.",
        },
    )
    plugins: Plugins | None = field(
        default=None,
        metadata={
            "description": "Plugins to enable or disable per extension point, on top of the default plugins."
            " An extension point with neither keeps its defaults."
        },
    )
    plugin_config: list[PluginConfig] = field(
        default_factory=list,
        metadata={
            "description": "Arguments per plugin; a plugin without an entry uses its default arguments."
        },
    )

    def __post_init__(self) -> None:
        # Set by framework.profiles.load_profile; config imports no plugin class. Not a field: not
        # validated, compared, or part of the schema.
        self._resolved: ResolvedPlugins | None = None
        if self.pod_max_backoff_seconds < self.pod_initial_backoff_seconds:
            raise ValueError(
                "podMaxBackoffSeconds: must be greater than or equal to podInitialBackoffSeconds"
            )

    @property
    def resolved(self) -> ResolvedPlugins | None:
        """Set by ``framework.profiles.load_profile``: plugins per extension point, weights, args."""
        return self._resolved

    def set_resolved(self, resolved: ResolvedPlugins) -> None:
        self._resolved = resolved


class ProfileError(ValueError):
    """An invalid profile; ``errors`` holds ``(field path, message)`` pairs."""

    def __init__(self, errors: Sequence[tuple[str, str]]) -> None:
        self.errors = list(errors)
        super().__init__("; ".join(f"{path}: {msg}" if path else msg for path, msg in self.errors))


# --- defaults and merging -----------------------------------------------------------------------


_POINTS = tuple(_SNAKE)


def merge_plugins(custom: Plugins | None) -> Plugins:
    """Defaults merged with the profile's plugins (idempotent: merging twice changes nothing).

    The reference's v1 mergePlugins, written once (``kubescheduler.merge_plugins``, on the v1 shape a
    KubeSchedulerConfiguration decodes to) under the process's feature gates (``features.current``);
    a profile's validated plugins take the same path as a file's. The defaults alone (``None``) are
    our own constants: constructed, not validated (``test_config_defaults`` checks they are equal).
    """
    if custom is None:
        return _default_plugins()
    plugins = adapter(Plugins)
    merged = kubescheduler.merge_plugins(plugins.dump_python(custom, by_alias=True, exclude_none=True))
    # The v1 file has points a profile does not carry (placementGenerate, ...): left empty by both.
    return plugins.validate_python({point: merged.get(point) or {} for point in _POINTS})


def _default_plugins() -> Plugins:
    """``Plugins`` validated from the default plugins, built as it builds them, without validating."""
    merged = kubescheduler.merge_plugins(None)
    return Plugins(**{_SNAKE[point]: _plugin_set(merged.get(point) or {}) for point in _POINTS})


def _plugin_set(raw: Mapping[str, Any]) -> PluginSet:
    return PluginSet(**{key: [PluginRef(**ref) for ref in refs] for key, refs in raw.items()})


def default_spec(scheduler_name: str = DEFAULT_SCHEDULER_NAME) -> SchedulerProfileSpec:
    """``parse_profile({"schedulerName": scheduler_name})`` without validating: the profile that exists
    without any SchedulerProfile resource is made of our own constants, and the way to the first bind
    need not import the validator for it (``test_config_defaults`` checks the two are equal)."""
    if not scheduler_name:  # not ours to construct: the validation's message
        return parse_profile({"schedulerName": scheduler_name})
    return SchedulerProfileSpec(scheduler_name=scheduler_name, plugins=_default_plugins())


def parse_profile(spec: Mapping[str, Any]) -> SchedulerProfileSpec:
    """Parse one profile spec and merge it into the defaults; raise ProfileError naming the field.

    Only the shape is checked here; ``framework.profiles.load_profile`` also resolves the plugins
    against a registry (unknown plugins, extension points, weights, args)."""
    from pydantic import ValidationError

    spec, errors = strip_args_type_meta(spec)
    if errors:
        raise ProfileError(errors)
    try:
        profile = adapter(SchedulerProfileSpec).validate_python(dict(spec))
    except ValidationError as exc:
        for where, msg in validation_errors(exc):
            loc = location(where)
            if msg.startswith("Value error, ") and ": " in msg:  # our own check names its field
                loc, _, msg = msg.removeprefix("Value error, ").partition(": ")
            errors.append((loc, msg))
        raise ProfileError(errors) from None
    profile.plugins = merge_plugins(profile.plugins)
    return profile


def strip_args_type_meta(spec: Mapping[str, Any]) -> tuple[Mapping[str, Any], list[tuple[str, str]]]:
    """``pluginConfig[].args`` without their ``apiVersion``/``kind``, checked as kube-scheduler's decoder
    checks them: the kind must be the plugin's ``<Name>Args`` of ``kubescheduler.config.k8s.io/v1``."""
    configs = spec.get("pluginConfig")
    if not isinstance(configs, list) or not any(
        isinstance(pc, Mapping) and isinstance(pc.get("args"), Mapping) and _has_type_meta(pc["args"])
        for pc in configs
    ):
        return spec, []
    errors: list[tuple[str, str]] = []
    out = []
    for i, pc in enumerate(configs):
        args = pc.get("args") if isinstance(pc, Mapping) else None
        if not isinstance(args, Mapping) or not _has_type_meta(args):
            out.append(pc)
            continue
        name = str(pc.get("name") or "")
        problem = args_type_meta_error(name, args)
        if problem:
            errors.append((f"pluginConfig[{i}].args", problem))
        out.append({**pc, "args": {k: v for k, v in args.items() if k not in ("apiVersion", "kind")}})
    return {**spec, "pluginConfig": out}, errors


def _has_type_meta(args: Mapping[str, Any]) -> bool:
    return "apiVersion" in args or "kind" in args


def args_type_meta_error(name: str, args: Mapping[str, Any]) -> str | None:
    """The reference's words for args whose TypeMeta is not the plugin's (None when it is)."""
    want = f"{name}Args"
    version = args.get("apiVersion") or ARGS_API_VERSION
    kind = args.get("kind") or want
    group = str(version).rpartition("/")[0]
    if group == "kubescheduler.config.k8s.io" and kind != want:
        return f"args for plugin {name} were not of type {want}.{group}, got {kind}.{group}"
    if version != ARGS_API_VERSION:
        return f'no kind "{kind}" is registered for version "{version}"'
    return None


def location(loc: Sequence[int | str]) -> str:
    """A pydantic error location as a field path: ``pluginConfig[0].args.foo``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def profile_json_schema() -> dict[str, Any]:
    """JSON schema of a profile spec (camelCase), for generating the CRD."""
    return adapter(SchedulerProfileSpec).json_schema(by_alias=True)
