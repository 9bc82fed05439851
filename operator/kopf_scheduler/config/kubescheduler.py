"""``kubescheduler.config.k8s.io/v1`` KubeSchedulerConfiguration: decoded, defaulted and validated as
kube-scheduler v1.37.2 does, then turned into the engine's profiles.

The reference's path, in order, each step here with its messages:

1. strict decoding (``LoadConfigFromFile``): unknown fields and wrong types refused
   (``strict decoding error: unknown field "foo"``, ``json: cannot unmarshal string into Go struct
   field ...``); a plugin's ``args`` decoded as its ``<Name>Args`` kind (TypeMeta accepted);
2. defaulting (``apis/config/v1/defaults.go``): parallelism 16, one ``default-scheduler`` profile,
   the default plugins merged in (``default_plugins.go``, under the feature gates), every needed
   plugin's args defaulted, leader election 15s/10s/2s on ``kube-system/kube-scheduler`` leases,
   qps 50 / burst 100, backoffs 1s/10s;
3. the leader-election flags (the only flags that override a file, ``ApplyLeaderElectionTo``);
4. validation (``apis/config/validation``): every error collected, printed as one aggregate
   (``[parallelism: Invalid value: 0: should be an integer value greater than zero, ...]``);
5. framework construction per profile (``NewFramework``; here :func:`plugin_init_error` for the
   args a plugin validates itself, and ``framework.profiles.framework_error`` for the plugin lists):
   ``initializing profiles: creating profile for scheduler name X: ...``.

The document stays in its v1 form (plain data) throughout: messages quote its values, and
:meth:`KubeSchedulerConfiguration.document` is what ``--write-config-to`` writes. The engine's
profiles (:meth:`KubeSchedulerConfiguration.profile_specs`) are ``SchedulerProfile`` specs, so a file
and a custom resource become the same framework.
"""

from __future__ import annotations

import base64
import binascii
import copy
import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kopf_scheduler.config import features
from kopf_scheduler.config.gotext import (
    DurationError,
    FieldError,
    aggregate,
    format_duration,
    is_extended_resource_name,
    is_qualified_name,
    parse_duration,
)

if TYPE_CHECKING:  # PyYAML is imported where a file is read or a document shown, not with config
    import yaml

__all__ = [
    "API_VERSION",
    "DEFAULT_SCHEDULER_NAME",
    "KIND",
    "ClientConnection",
    "ConfigError",
    "ExtenderConfig",
    "ExtenderTLSConfig",
    "KubeSchedulerConfiguration",
    "LeaderElection",
    "default_config",
    "defaulted",
    "load",
    "load_document",
    "plugin_init_error",
    "read_yaml",
    "validate",
]

API_VERSION = "kubescheduler.config.k8s.io/v1"
GROUP = "kubescheduler.config.k8s.io"
KIND = "KubeSchedulerConfiguration"
DEFAULT_SCHEDULER_NAME = "default-scheduler"  # v1.DefaultSchedulerName
_SCHEME = ' in scheme "pkg/runtime/scheme.go:111"'
_MAX_CUSTOM_PRIORITY_SCORE = 10


class ConfigError(ValueError):
    """A configuration kube-scheduler would refuse; ``str()`` is its message, word for word."""


# --- the v1 types, as the strict decoder sees them -----------------------------------------------


@dataclass(frozen=True)
class _Struct:
    name: str  # Go type name without package (json error messages name it)
    go: str  # package-qualified, for "of type ..."
    fields: Mapping[str, Any]


@dataclass(frozen=True)
class _List:
    elem: Any
    go: str


_ANY = "any"  # decoded without checks (core types we only read)
_RAW = "raw"  # RawExtension: any JSON, decoded later


def _plugin_set(prefix: str = "v1") -> _Struct:
    plugin = _Struct("Plugin", f"{prefix}.Plugin", {"name": "string", "weight": "int32"})
    return _Struct(
        "PluginSet",
        f"{prefix}.PluginSet",
        {"enabled": _List(plugin, f"[]{prefix}.Plugin"), "disabled": _List(plugin, f"[]{prefix}.Plugin")},
    )


# camelCase extension points of v1.Plugins, in the struct's order.
PLUGIN_POINTS = (
    "preEnqueue",
    "queueSort",
    "preFilter",
    "filter",
    "postFilter",
    "preScore",
    "score",
    "reserve",
    "permit",
    "preBind",
    "bind",
    "postBind",
    "multiPoint",
    "placementGenerate",
    "placementScore",
    "podGroupPostFilter",
)
# Points of the v1 API that the engine's profile model does not have (topology-aware placement is
# not built; podGroupPostFilter plugins take part whenever enabled, see framework/runtime.py).
UNSUPPORTED_POINTS = ("placementGenerate", "placementScore", "podGroupPostFilter")

_PLUGINS = _Struct("Plugins", "v1.Plugins", {p: _plugin_set() for p in PLUGIN_POINTS})
_PROFILE = _Struct(
    "KubeSchedulerProfile",
    "v1.KubeSchedulerProfile",
    {
        "schedulerName": "string",
        "percentageOfNodesToScore": "int32",
        "plugins": _PLUGINS,
        "pluginConfig": _List(
            _Struct("PluginConfig", "v1.PluginConfig", {"name": "string", "args": _RAW}), "[]v1.PluginConfig"
        ),
    },
)
_EXTENDER = _Struct(
    "Extender",
    "v1.Extender",
    {
        "urlPrefix": "string",
        "filterVerb": "string",
        "preemptVerb": "string",
        "prioritizeVerb": "string",
        "weight": "int64",
        "bindVerb": "string",
        "enableHTTPS": "bool",
        "tlsConfig": _Struct(
            "ExtenderTLSConfig",
            "v1.ExtenderTLSConfig",
            {
                "insecure": "bool",
                "serverName": "string",
                "certFile": "string",
                "keyFile": "string",
                "caFile": "string",
                "certData": "bytes",
                "keyData": "bytes",
                "caData": "bytes",
            },
        ),
        "httpTimeout": "duration",
        "nodeCacheCapable": "bool",
        "managedResources": _List(
            _Struct(
                "ExtenderManagedResource",
                "v1.ExtenderManagedResource",
                {"name": "string", "ignoredByScheduler": "bool"},
            ),
            "[]v1.ExtenderManagedResource",
        ),
        "ignorable": "bool",
    },
)
_CONFIGURATION = _Struct(
    KIND,
    f"v1.{KIND}",
    {
        "apiVersion": "string",
        "kind": "string",
        "parallelism": "int32",
        "leaderElection": _Struct(
            "LeaderElectionConfiguration",
            "v1alpha1.LeaderElectionConfiguration",
            {
                "leaderElect": "bool",
                "leaseDuration": "duration",
                "renewDeadline": "duration",
                "retryPeriod": "duration",
                "resourceLock": "string",
                "resourceName": "string",
                "resourceNamespace": "string",
            },
        ),
        "clientConnection": _Struct(
            "ClientConnectionConfiguration",
            "v1alpha1.ClientConnectionConfiguration",
            {
                "kubeconfig": "string",
                "acceptContentTypes": "string",
                "contentType": "string",
                "qps": "float32",
                "burst": "int32",
            },
        ),
        "enableProfiling": "bool",
        "enableContentionProfiling": "bool",
        "percentageOfNodesToScore": "int32",
        "podInitialBackoffSeconds": "int64",
        "podMaxBackoffSeconds": "int64",
        "profiles": _List(_PROFILE, "[]v1.KubeSchedulerProfile"),
        "extenders": _List(_EXTENDER, "[]v1.Extender"),
        "delayCacheUntilActive": "bool",
    },
)

_RESOURCE_SPEC = _List(
    _Struct("ResourceSpec", "v1.ResourceSpec", {"name": "string", "weight": "int64"}), "[]v1.ResourceSpec"
)
_SHAPE = _List(
    _Struct("UtilizationShapePoint", "v1.UtilizationShapePoint", {"utilization": "int32", "score": "int32"}),
    "[]v1.UtilizationShapePoint",
)
_NODE_SELECTOR_REQUIREMENTS = _List(
    _Struct(
        "NodeSelectorRequirement",
        "v1.NodeSelectorRequirement",
        {"key": "string", "operator": "string", "values": _List("string", "[]string")},
    ),
    "[]v1.NodeSelectorRequirement",
)
_NODE_SELECTOR_TERM = _Struct(
    "NodeSelectorTerm",
    "v1.NodeSelectorTerm",
    {"matchExpressions": _NODE_SELECTOR_REQUIREMENTS, "matchFields": _NODE_SELECTOR_REQUIREMENTS},
)
_TYPE_META = {"apiVersion": "string", "kind": "string"}

# The plugin args kinds kube-scheduler's v1 scheme registers (config/v1/register.go).
ARGS_KINDS: Mapping[str, _Struct] = {
    "DefaultPreemption": _Struct(
        "DefaultPreemptionArgs",
        "v1.DefaultPreemptionArgs",
        {**_TYPE_META, "minCandidateNodesPercentage": "int32", "minCandidateNodesAbsolute": "int32"},
    ),
    "InterPodAffinity": _Struct(
        "InterPodAffinityArgs",
        "v1.InterPodAffinityArgs",
        {**_TYPE_META, "hardPodAffinityWeight": "int32", "ignorePreferredTermsOfExistingPods": "bool"},
    ),
    "NodeResourcesBalancedAllocation": _Struct(
        "NodeResourcesBalancedAllocationArgs",
        "v1.NodeResourcesBalancedAllocationArgs",
        {**_TYPE_META, "resources": _RESOURCE_SPEC},
    ),
    "NodeResourcesFit": _Struct(
        "NodeResourcesFitArgs",
        "v1.NodeResourcesFitArgs",
        {
            **_TYPE_META,
            "ignoredResources": _List("string", "[]string"),
            "ignoredResourceGroups": _List("string", "[]string"),
            "scoringStrategy": _Struct(
                "ScoringStrategy",
                "v1.ScoringStrategy",
                {
                    "type": "string",
                    "resources": _RESOURCE_SPEC,
                    "requestedToCapacityRatio": _Struct(
                        "RequestedToCapacityRatioParam", "v1.RequestedToCapacityRatioParam", {"shape": _SHAPE}
                    ),
                },
            ),
        },
    ),
    "PodTopologySpread": _Struct(
        "PodTopologySpreadArgs",
        "v1.PodTopologySpreadArgs",
        {
            **_TYPE_META,
            "defaultConstraints": _List(
                _Struct(
                    "TopologySpreadConstraint",
                    "v1.TopologySpreadConstraint",
                    {
                        "maxSkew": "int32",
                        "topologyKey": "string",
                        "whenUnsatisfiable": "string",
                        "labelSelector": _ANY,
                        "minDomains": "int32",
                        "nodeAffinityPolicy": "string",
                        "nodeTaintsPolicy": "string",
                        "matchLabelKeys": _List("string", "[]string"),
                    },
                ),
                "[]v1.TopologySpreadConstraint",
            ),
            "defaultingType": "string",
        },
    ),
    "VolumeBinding": _Struct(
        "VolumeBindingArgs",
        "v1.VolumeBindingArgs",
        {**_TYPE_META, "bindTimeoutSeconds": "int64", "shape": _SHAPE},
    ),
    "NodeAffinity": _Struct(
        "NodeAffinityArgs",
        "v1.NodeAffinityArgs",
        {
            **_TYPE_META,
            "addedAffinity": _Struct(
                "NodeAffinity",
                "v1.NodeAffinity",
                {
                    "requiredDuringSchedulingIgnoredDuringExecution": _Struct(
                        "NodeSelector",
                        "v1.NodeSelector",
                        {"nodeSelectorTerms": _List(_NODE_SELECTOR_TERM, "[]v1.NodeSelectorTerm")},
                    ),
                    "preferredDuringSchedulingIgnoredDuringExecution": _List(
                        _Struct(
                            "PreferredSchedulingTerm",
                            "v1.PreferredSchedulingTerm",
                            {"weight": "int32", "preference": _NODE_SELECTOR_TERM},
                        ),
                        "[]v1.PreferredSchedulingTerm",
                    ),
                },
            ),
        },
    ),
    "DynamicResources": _Struct(
        "DynamicResourcesArgs",
        "v1.DynamicResourcesArgs",
        {**_TYPE_META, "filterTimeout": "duration", "bindingTimeout": "duration"},
    ),
}

_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


class _TypeError(Exception):
    """The first type mismatch; Go's json keeps decoding and reports the first one."""


class _Decoder:
    """sigs.k8s.io/json's strict decoding of YAML-turned-JSON into the v1 types."""

    def __init__(self) -> None:
        self.unknown: list[str] = []
        self.type_error: str | None = None

    def _mismatch(self, value: Any, struct: str, path: str, go: str, *, show: bool = False) -> None:
        if self.type_error is not None:
            return
        if isinstance(value, bool):
            kind = "bool"
        elif isinstance(value, int | float):
            kind = f"number {_json_number(value)}" if show else "number"
        elif isinstance(value, str):
            kind = "string"
        elif isinstance(value, list):
            kind = "array"
        else:
            kind = "object"
        where = f"Go struct field {struct}.{path}" if struct else "Go value"
        self.type_error = f"json: cannot unmarshal {kind} into {where} of type {go}"

    def decode(self, value: Any, typ: Any, struct: str, path: str, upath: str) -> Any:
        """``value`` as ``typ``; ``struct``/``path`` name it in type errors, ``upath`` in unknown fields."""
        if value is None:
            return None
        if typ in (_ANY, _RAW):
            return value
        if isinstance(typ, _Struct):
            if not isinstance(value, Mapping):
                self._mismatch(value, struct, path, typ.go)
                return None
            out: dict[str, Any] = {}
            for key, item in value.items():
                key = str(key)
                sub = typ.fields.get(key)
                sub_path = f"{path}.{key}" if path else key
                sub_upath = f"{upath}.{key}" if upath else key
                if sub is None:
                    self.unknown.append(sub_upath)
                    continue
                decoded = self.decode(item, sub, typ.name, sub_path, sub_upath)
                if decoded is not None:
                    out[key] = decoded
            return out
        if isinstance(typ, _List):
            if not isinstance(value, list):
                self._mismatch(value, struct, path, typ.go)
                return None
            items = [self.decode(v, typ.elem, struct, path, f"{upath}[{i}]") for i, v in enumerate(value)]
            return [v for v in items if v is not None] if typ.elem not in (_ANY, _RAW) else items
        if typ == "string":
            if isinstance(value, Mapping | list):
                self._mismatch(value, struct, path, "string")
                return None
            # sigs.k8s.io/yaml turns a YAML scalar into the JSON string the field wants.
            return _yaml_scalar_text(value)
        if typ == "bool":
            if not isinstance(value, bool):
                self._mismatch(value, struct, path, "bool")
                return None
            return value
        if typ in _INT_RANGES:
            if isinstance(value, bool) or not isinstance(value, int | float):
                self._mismatch(value, struct, path, typ)
                return None
            if isinstance(value, float) and not value.is_integer():
                self._mismatch(value, struct, path, typ, show=True)
                return None
            low, high = _INT_RANGES[typ]
            if not low <= int(value) <= high:
                self._mismatch(value, struct, path, typ, show=True)
                return None
            return int(value)
        if typ == "float32":
            if isinstance(value, bool) or not isinstance(value, int | float):
                self._mismatch(value, struct, path, "float32")
                return None
            return float(value)
        if typ == "duration":
            if not isinstance(value, str):
                self._mismatch(value, struct, path, "string")
                return None
            try:
                return format_duration(parse_duration(value))
            except DurationError as exc:
                raise _TypeError(str(exc)) from None
        if typ == "bytes":
            if not isinstance(value, str):
                self._mismatch(value, struct, path, "[]uint8")
                return None
            return value
        raise AssertionError(typ)


def _json_number(value: int | float) -> str:
    return str(value) if isinstance(value, int) else repr(value)


def _yaml_scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _strict(errors: Sequence[str]) -> str:
    return "strict decoding error: " + ", ".join(errors)


def _unknown(paths: Sequence[str]) -> list[str]:
    return [f'unknown field "{p}"' for p in sorted(paths)]


def decode_args(name: str, raw: Any) -> tuple[dict[str, Any] | None, str | None, list[str]]:
    """One plugin's ``args`` as its registered kind (PluginConfig.decodeNestedObjects).

    Returns (args, error, unknown fields). Args of an unregistered plugin come back as they are."""
    kind = ARGS_KINDS.get(name)
    if kind is None:
        return (dict(raw) if isinstance(raw, Mapping) else raw), None, []
    if raw is None:
        raw = {}
    want = f"{name}Args"
    if isinstance(raw, Mapping):
        version = raw.get("apiVersion") or API_VERSION
        got = raw.get("kind") or want
        if version != API_VERSION:
            if str(version).rpartition("/")[0] == GROUP and got != want:
                return None, f"args for plugin {name} were not of type {want}.{GROUP}, got {got}.{GROUP}", []
            return (
                None,
                f'decoding args for plugin {name}: no kind "{got}" is registered for version '
                f'"{version}"{_SCHEME}',
                [],
            )
        if got != want:
            return None, f"args for plugin {name} were not of type {want}.{GROUP}, got {got}.{GROUP}", []
    decoder = _Decoder()
    try:
        args = decoder.decode(raw, kind, "", "", "")
    except _TypeError as exc:
        return None, f"decoding args for plugin {name}: {exc}", []
    if decoder.type_error:
        return None, f"decoding args for plugin {name}: {decoder.type_error}", []
    out = dict(args or {})
    out.pop("apiVersion", None)
    out.pop("kind", None)
    return out, None, decoder.unknown


# --- reading -------------------------------------------------------------------------------------


def read_yaml(text: str) -> Any:
    """One YAML (or JSON) document; duplicate keys are kube-scheduler's strict-decoding error.

    PyYAML is imported here, not with config: the way to the first bind reads no file."""
    import yaml

    duplicates: list[str] = []

    def construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if key in seen:  # go-yaml names the line where the repeated key's value starts
                duplicates.append(f'  line {value_node.start_mark.line + 1}: key "{key}" already set in map')
            seen.add(key)
        return loader.construct_mapping(node, deep=deep)

    class UniqueKeyLoader(yaml.SafeLoader):
        """YAML with duplicate keys refused, as sigs.k8s.io/yaml's strict unmarshal does."""

    UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    loader = UniqueKeyLoader(io.StringIO(text))
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        raise ConfigError(f"yaml: {exc}") from None
    finally:
        loader.dispose()
    if duplicates:
        raise ConfigError("strict decoding error: yaml: unmarshal errors:\n" + "\n".join(duplicates))
    return data


def _check_type_meta(data: Any, text: str | None) -> None:
    if not isinstance(data, Mapping):
        got = "array" if isinstance(data, list) else "string" if isinstance(data, str) else "number"
        raise ConfigError(
            f"couldn't get version/kind; json parse error: json: cannot unmarshal {got} into Go value of "
            'type struct { APIVersion string "json:\\"apiVersion,omitempty\\""; Kind string '
            '"json:\\"kind,omitempty\\"" }'
        )
    if not data.get("kind"):
        raise ConfigError(f"Object 'Kind' is missing in '{_shown(data, text)}'")
    if not data.get("apiVersion"):
        raise ConfigError(f"Object 'apiVersion' is missing in '{_shown(data, text)}'")
    if data["apiVersion"] != API_VERSION or data["kind"] != KIND:
        raise ConfigError(
            f'no kind "{data["kind"]}" is registered for version "{data["apiVersion"]}"{_SCHEME}'
        )


def _shown(data: Mapping[str, Any], text: str | None) -> str:
    """The document as a message quotes it: the file's text, else the data as YAML."""
    if text is not None:
        return text
    import yaml

    return yaml.safe_dump(dict(data))


def decode(data: Any, text: str | None = None) -> dict[str, Any]:
    """Strict decoding of a parsed document into the v1 shape (no defaults yet)."""
    _check_type_meta(data, text)
    decoder = _Decoder()
    try:
        doc = decoder.decode(data, _CONFIGURATION, "", "", "")
    except _TypeError as exc:
        raise ConfigError(str(exc)) from None
    if decoder.type_error:
        raise ConfigError(decoder.type_error)
    strict = _unknown(decoder.unknown)
    for i, profile in enumerate(doc.get("profiles") or []):
        for j, pc in enumerate(profile.get("pluginConfig") or []):
            args, error, unknown = decode_args(pc.get("name", ""), pc.get("args"))
            where = f"decoding .profiles[{i}].pluginConfig[{j}]"
            if error:
                raise ConfigError(f"{where}: {error}")
            if unknown:
                name = pc.get("name", "")
                inner = _strict(_unknown(unknown))
                strict.append(f"{where}: {_strict([f'decoding args for plugin {name}: {inner}'])}")
            if args is not None:
                pc["args"] = args
    if strict:
        raise ConfigError(_strict(strict))
    return doc


# --- defaulting ----------------------------------------------------------------------------------

_DEFAULT_RESOURCES = ({"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1})


def default_plugins(gates: features.FeatureGates | None = None) -> dict[str, Any]:
    """getDefaultPlugins in the v1 shape: everything at multiPoint."""
    enabled = []
    for name, weight in features.default_multi_point(gates):
        entry: dict[str, Any] = {"name": name}
        if weight is not None:
            entry["weight"] = weight
        enabled.append(entry)
    return {"multiPoint": {"enabled": enabled}}


def _merge_set(default: Mapping[str, Any], custom: Mapping[str, Any]) -> dict[str, Any]:
    """mergePluginSet: custom entries replace defaults in place, the rest are appended; "*" disables all."""
    disabled = [{"name": p.get("name", "")} for p in custom.get("disabled") or ()]
    disabled += [{"name": p.get("name", "")} for p in default.get("disabled") or ()]
    disabled_names = {p["name"] for p in disabled}
    custom_enabled = list(custom.get("enabled") or ())
    index = {p.get("name", ""): i for i, p in enumerate(custom_enabled)}
    replaced: set[int] = set()
    enabled: list[dict[str, Any]] = []
    if "*" not in disabled_names:
        for plugin in default.get("enabled") or ():
            if plugin["name"] in disabled_names:
                continue
            i = index.get(plugin["name"])
            if i is not None:
                plugin = custom_enabled[i]
                replaced.add(i)
            enabled.append(dict(plugin))
    enabled += [dict(p) for i, p in enumerate(custom_enabled) if i not in replaced]
    out: dict[str, Any] = {}
    if enabled:
        out["enabled"] = enabled
    if disabled:
        out["disabled"] = disabled
    return out


def merge_plugins(
    custom: Mapping[str, Any] | None, gates: features.FeatureGates | None = None
) -> dict[str, Any]:
    """mergePlugins of the v1 defaulting: the defaults with ``custom`` merged in, point by point.

    The one implementation: a SchedulerProfile's plugins (``profile.merge_plugins``) merge here too.
    """
    default = default_plugins(gates)
    if custom is None:
        return default
    return {p: _merge_set(default.get(p) or {}, custom.get(p) or {}) for p in PLUGIN_POINTS}


def _default_resources(resources: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    if not resources:
        return [dict(r) for r in _DEFAULT_RESOURCES]
    return [{**r, "weight": r.get("weight") or 1} for r in resources]


def default_args(
    name: str, args: dict[str, Any], gates: features.FeatureGates | None = None
) -> dict[str, Any]:
    """SetDefaults_<Name>Args on a decoded args object (a copy)."""
    gates = gates if gates is not None else features.current()
    out = copy.deepcopy(args)
    if name == "DefaultPreemption":
        out.setdefault("minCandidateNodesPercentage", 10)
        out.setdefault("minCandidateNodesAbsolute", 100)
    elif name == "InterPodAffinity":
        out.setdefault("hardPodAffinityWeight", 1)
        out.setdefault("ignorePreferredTermsOfExistingPods", False)
    elif name == "VolumeBinding":
        out.setdefault("bindTimeoutSeconds", 600)
        if not out.get("shape") and gates.enabled("StorageCapacityScoring"):
            out["shape"] = [
                {"utilization": 0, "score": _MAX_CUSTOM_PRIORITY_SCORE},
                {"utilization": 100, "score": 0},
            ]
    elif name == "NodeResourcesBalancedAllocation":
        out["resources"] = _default_resources(out.get("resources"))
    elif name == "PodTopologySpread":
        if not out.get("defaultingType"):
            out["defaultingType"] = "System"
    elif name == "NodeResourcesFit":
        strategy = out.get("scoringStrategy")
        if strategy is None:
            strategy = out["scoringStrategy"] = {"type": "LeastAllocated"}
        strategy["resources"] = _default_resources(strategy.get("resources"))
    elif name == "DynamicResources":
        if "filterTimeout" not in out and gates.enabled("DRASchedulerFilterTimeout"):
            out["filterTimeout"] = "10s"
        if (
            "bindingTimeout" not in out
            and gates.enabled("DRADeviceBindingConditions")
            and gates.enabled("DRAResourceClaimDeviceStatus")
        ):
            out["bindingTimeout"] = "10m0s"
    return out


def _plugins_names(plugins: Mapping[str, Any]) -> list[str]:
    names = {
        p.get("name", "") for point in PLUGIN_POINTS for p in (plugins.get(point) or {}).get("enabled") or ()
    }
    return sorted(names)


def defaulted(doc: Mapping[str, Any], gates: features.FeatureGates | None = None) -> dict[str, Any]:
    """SetDefaults_KubeSchedulerConfiguration on a decoded document (a copy)."""
    gates = gates if gates is not None else features.current()
    out = copy.deepcopy(dict(doc))
    out["apiVersion"], out["kind"] = API_VERSION, KIND
    out.setdefault("parallelism", 16)
    profiles = out.setdefault("profiles", [])
    if not profiles:
        profiles.append({})
    if len(profiles) == 1 and profiles[0].get("schedulerName") is None:
        profiles[0]["schedulerName"] = DEFAULT_SCHEDULER_NAME
    for prof in profiles:
        prof["plugins"] = merge_plugins(prof.get("plugins"), gates)
        configs = prof.setdefault("pluginConfig", [])
        existing = set()
        for pc in configs:
            existing.add(pc.get("name", ""))
            if pc.get("name") in ARGS_KINDS:
                pc["args"] = default_args(pc["name"], pc.get("args") or {}, gates)
        for name in _plugins_names(prof["plugins"]):
            if name not in existing and name in ARGS_KINDS:
                configs.append({"name": name, "args": default_args(name, {}, gates)})
    out.setdefault("percentageOfNodesToScore", 0)
    le = out.setdefault("leaderElection", {})
    le["resourceLock"] = le.get("resourceLock") or "leases"
    le["resourceNamespace"] = le.get("resourceNamespace") or "kube-system"
    le["resourceName"] = le.get("resourceName") or "kube-scheduler"
    cc = out.setdefault("clientConnection", {})
    cc["contentType"] = cc.get("contentType") or "application/vnd.kubernetes.protobuf"
    cc["qps"] = cc.get("qps") or 50.0
    cc["burst"] = cc.get("burst") or 100
    cc.setdefault("kubeconfig", "")
    cc.setdefault("acceptContentTypes", "")
    for key, default in (("leaseDuration", "15s"), ("renewDeadline", "10s"), ("retryPeriod", "2s")):
        if not le.get(key) or parse_duration(le[key]) == 0:
            le[key] = default
    le.setdefault("leaderElect", True)
    out.setdefault("podInitialBackoffSeconds", 1)
    out.setdefault("podMaxBackoffSeconds", 10)
    out.setdefault("enableProfiling", True)
    if out["enableProfiling"]:
        out.setdefault("enableContentionProfiling", True)
    return out


# --- validation ----------------------------------------------------------------------------------


def _child(path: str | None, name: str) -> str:
    return f"{path}.{name}" if path else name


def _validate_label_name(value: str, path: str) -> list[FieldError]:
    return [FieldError.invalid(path, value, msg) for msg in is_qualified_name(value)]


def _validate_default_preemption(path: str | None, args: Mapping[str, Any]) -> list[FieldError]:
    errs = []
    pct, absolute = args.get("minCandidateNodesPercentage", 0), args.get("minCandidateNodesAbsolute", 0)
    pct_path, abs_path = (
        _child(path, "minCandidateNodesPercentage"),
        _child(path, "minCandidateNodesAbsolute"),
    )
    if not 0 <= pct <= 100:
        errs.append(FieldError.invalid(pct_path, pct, "not in valid range [0, 100]"))
    if absolute < 0:
        errs.append(FieldError.invalid(abs_path, absolute, "not in valid range [0, inf)"))
    if pct == 0 and absolute == 0:
        errs.append(
            FieldError.invalid(pct_path, pct, "cannot be zero at the same time as minCandidateNodesAbsolute")
        )
        errs.append(
            FieldError.invalid(
                abs_path, absolute, "cannot be zero at the same time as minCandidateNodesPercentage"
            )
        )
    return errs


def _validate_inter_pod_affinity(path: str | None, args: Mapping[str, Any]) -> list[FieldError]:
    weight = args.get("hardPodAffinityWeight", 0)
    if not 0 <= weight <= 100:
        return [
            FieldError.invalid(_child(path, "hardPodAffinityWeight"), weight, "not in valid range [0, 100]")
        ]
    return []


def _validate_pod_topology_spread(path: str | None, args: Mapping[str, Any]) -> list[FieldError]:
    errs = []
    defaulting = args.get("defaultingType", "")
    constraints = args.get("defaultConstraints") or []
    dt_path = _child(path, "defaultingType")
    if defaulting not in ("System", "List"):
        errs.append(FieldError.not_supported(dt_path, defaulting, ["System", "List"]))
    elif defaulting == "System" and constraints:
        errs.append(FieldError.invalid(dt_path, defaulting, "when .defaultConstraints are not empty"))
    base = _child(path, "defaultConstraints")
    for i, c in enumerate(constraints):
        p = f"{base}[{i}]"
        skew = c.get("maxSkew", 0)
        if skew <= 0:
            errs.append(FieldError.invalid(f"{p}.maxSkew", skew, "not in valid range (0, inf)"))
        key = c.get("topologyKey", "")
        if not key:
            errs.append(FieldError.required(f"{p}.topologyKey", "can not be empty"))
        else:
            errs += _validate_label_name(key, f"{p}.topologyKey")
        action = c.get("whenUnsatisfiable", "")
        if not action:
            errs.append(FieldError.required(f"{p}.whenUnsatisfiable", "can not be empty"))
        elif action not in ("DoNotSchedule", "ScheduleAnyway"):
            errs.append(
                FieldError.not_supported(
                    f"{p}.whenUnsatisfiable", action, ["DoNotSchedule", "ScheduleAnyway"]
                )
            )
        if c.get("labelSelector") is not None:
            errs.append(
                FieldError.forbidden(
                    f"{p}.labelSelector",
                    "constraint must not define a selector, as they deduced for each pod",
                )
            )
        for other in constraints[:i]:
            if other.get("topologyKey", "") == key and other.get("whenUnsatisfiable", "") == action:
                errs.append(FieldError.duplicate(p, f"{{{key}, {action}}}"))
                break
    return errs


def _validate_shape(shape: Sequence[Mapping[str, Any]], path: str) -> list[FieldError]:
    if not shape:
        return [FieldError.required(path, "at least one point must be specified")]
    errs = []
    for i in range(1, len(shape)):
        if shape[i - 1].get("utilization", 0) >= shape[i].get("utilization", 0):
            errs.append(
                FieldError.invalid(
                    f"{path}[{i}].utilization",
                    shape[i].get("utilization", 0),
                    "values must be sorted in increasing order",
                )
            )
            break
    for i, point in enumerate(shape):
        utilization, score = point.get("utilization", 0), point.get("score", 0)
        if not 0 <= utilization <= 100:
            errs.append(
                FieldError.invalid(f"{path}[{i}].utilization", utilization, "not in valid range [0, 100]")
            )
        if not 0 <= score <= _MAX_CUSTOM_PRIORITY_SCORE:
            errs.append(
                FieldError.invalid(
                    f"{path}[{i}].score", score, f"not in valid range [0, {_MAX_CUSTOM_PRIORITY_SCORE}]"
                )
            )
    return errs


def _validate_balanced_allocation(path: str | None, args: Mapping[str, Any]) -> list[FieldError]:
    errs = []
    seen: set[str] = set()
    base = _child(path, "resources")
    for i, res in enumerate(args.get("resources") or []):
        name = res.get("name", "")
        if name in seen:
            errs.append(FieldError.duplicate(f"{base}[{i}].name", name))
        seen.add(name)
        weight = res.get("weight", 0)
        if weight != 1:
            errs.append(FieldError.invalid(f"{base}[{i}].weight", weight, "must be 1"))
    return errs


def _selector_requirements(reqs: Sequence[Mapping[str, Any]], path: str, fields_: bool) -> list[FieldError]:
    errs: list[FieldError] = []
    for i, req in enumerate(reqs):
        p = f"{path}[{i}]"
        op, values, key = req.get("operator", ""), list(req.get("values") or []), req.get("key", "")
        if fields_:
            if op in ("In", "NotIn"):
                if len(values) != 1:
                    errs.append(FieldError.invalid(f"{p}.values", values or None, "must have one element"))
            else:
                errs.append(FieldError.not_supported(f"{p}.operator", op, ["In", "NotIn"]))
            continue
        if op not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
            errs.append(
                FieldError.not_supported(
                    f"{p}.operator", op, ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
                )
            )
            continue
        problems = is_qualified_name(key)
        if problems:
            errs.append(FieldError.invalid(f"{p}.key", key, "; ".join(problems)))
        shown = values or None
        if op in ("In", "NotIn") and not values:
            errs.append(
                FieldError.invalid(
                    f"{p}.values", shown, "for 'in', 'notin' operators, values set can't be empty"
                )
            )
        elif op in ("Exists", "DoesNotExist") and values:
            errs.append(
                FieldError.invalid(
                    f"{p}.values", shown, "values set must be empty for exists and does not exist"
                )
            )
        elif op in ("Gt", "Lt"):
            if len(values) != 1:
                errs.append(
                    FieldError.invalid(
                        f"{p}.values", shown, "for 'Gt', 'Lt' operators, exactly one value is required"
                    )
                )
            for j, v in enumerate(values):
                try:
                    int(v, 10)
                except ValueError:
                    errs.append(
                        FieldError.invalid(
                            f"{p}.values[{j}]", v, "for 'Gt', 'Lt' operators, the value must be an integer"
                        )
                    )
    return errs


def _node_selector_term(term: Mapping[str, Any], path: str) -> list[FieldError]:
    errs = []
    if term.get("matchExpressions"):
        errs += _selector_requirements(term["matchExpressions"], f"{path}.matchExpressions", fields_=False)
    if term.get("matchFields"):
        errs += _selector_requirements(term["matchFields"], f"{path}.matchFields", fields_=True)
    return errs


def _validate_node_affinity(path: str | None, args: Mapping[str, Any]) -> list[FieldError]:
    affinity = args.get("addedAffinity")
    if not affinity:
        return []
    errs: list[FieldError] = []
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is not None:
        base = _child(path, "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution")
        for i, term in enumerate(required.get("nodeSelectorTerms") or []):
            errs += _node_selector_term(term, f"{base}.nodeSelectorTerms[{i}]")
    preferred = affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
    base = _child(path, "addedAffinity.preferredDuringSchedulingIgnoredDuringExecution")
    for i, term in enumerate(preferred):
        # The reference's path stops at the term's index (no ".preference"), so ours does too.
        errs += _node_selector_term(term.get("preference") or {}, f"{base}[{i}]")
    return errs


def _validate_volume_binding(path: str | None, args: Mapping[str, Any]) -> list[FieldError]:
    errs = []
    timeout = args.get("bindTimeoutSeconds", 0)
    if timeout < 0:
        errs.append(
            FieldError.invalid(
                _child(path, "bindTimeoutSeconds"),
                timeout,
                "invalid BindTimeoutSeconds, should not be a negative value",
            )
        )
    shape = args.get("shape")
    if features.current().enabled("StorageCapacityScoring"):
        errs += _validate_shape(shape or [], _child(path, "shape"))
    elif shape is not None:
        errs.append(
            FieldError.invalid(
                _child(path, "shape"),
                shape,
                "unexpected field `shape`, remove it or turn on the feature gate StorageCapacityScoring",
            )
        )
    return errs


_STRATEGIES = ("LeastAllocated", "MostAllocated", "RequestedToCapacityRatio")


def _validate_node_resources_fit(path: str | None, args: Mapping[str, Any]) -> list[FieldError]:
    errs: list[FieldError] = []
    for i, res in enumerate(args.get("ignoredResources") or []):
        errs += _validate_label_name(res, f"{_child(path, 'ignoredResources')}[{i}]")
    for i, group in enumerate(args.get("ignoredResourceGroups") or []):
        p = f"{_child(path, 'ignoredResourceGroups')}[{i}]"
        if "/" in group:
            errs.append(FieldError.invalid(p, group, "resource group name can't contain '/'"))
        errs += _validate_label_name(group, p)
    strategy = args.get("scoringStrategy")
    sp = _child(path, "scoringStrategy")
    if strategy is None:
        errs.append(FieldError.required(sp, "ScoringStrategy field is required"))
        return errs
    kind = strategy.get("type", "")
    if kind not in _STRATEGIES:
        errs.append(FieldError.not_supported(f"{sp}.type", kind, sorted(_STRATEGIES)))
    for i, res in enumerate(strategy.get("resources") or []):
        weight = res.get("weight", 0)
        if not 0 < weight <= 100:
            errs.append(
                FieldError.invalid(
                    f"{sp}.resources[{i}].weight",
                    weight,
                    f"resource weight of {res.get('name', '')} not in valid range (0, 100]",
                )
            )
    ratio = strategy.get("requestedToCapacityRatio")
    if kind == "RequestedToCapacityRatio":
        if ratio is None:
            errs.append(
                FieldError.required(
                    f"{sp}.requestedToCapacityRatio",
                    "must be specified when type is RequestedToCapacityRatio",
                )
            )
        else:
            errs += _validate_shape(ratio.get("shape") or [], f"{sp}.requestedToCapacityRatio.shape")
    elif ratio is not None:
        errs.append(
            FieldError.forbidden(
                f"{sp}.requestedToCapacityRatio", "must be nil when type is not RequestedToCapacityRatio"
            )
        )
    return errs


def _validate_dynamic_resources(path: str | None, args: Mapping[str, Any]) -> list[FieldError]:
    gates = features.current()
    errs = []
    filter_timeout = args.get("filterTimeout")
    if gates.enabled("DRASchedulerFilterTimeout"):
        if filter_timeout is not None and parse_duration(filter_timeout) < 0:
            errs.append(
                FieldError.invalid(_child(path, "filterTimeout"), filter_timeout, "must be zero or positive")
            )
    elif filter_timeout is not None:
        errs.append(
            FieldError.forbidden(
                _child(path, "filterTimeout"), "DRASchedulingFilterTimeout feature gate is disabled"
            )
        )
    binding_timeout = args.get("bindingTimeout")
    if gates.enabled("DRADeviceBindingConditions") and gates.enabled("DRAResourceClaimDeviceStatus"):
        if binding_timeout is not None and parse_duration(binding_timeout) < 10**9:
            errs.append(
                FieldError.invalid(
                    _child(path, "bindingTimeout"), binding_timeout, "must be at least 1 second"
                )
            )
    elif binding_timeout is not None:
        errs.append(
            FieldError.forbidden(
                _child(path, "bindingTimeout"),
                "DRADeviceBindingConditions or DRAResourceClaimDeviceStatus feature gate is disabled",
            )
        )
    return errs


ArgsValidator = Callable[[str | None, Mapping[str, Any]], list[FieldError]]

# The reference's validation_pluginargs.go, by plugin name.
ARGS_VALIDATORS: Mapping[str, ArgsValidator] = {
    "DefaultPreemption": _validate_default_preemption,
    "InterPodAffinity": _validate_inter_pod_affinity,
    "NodeAffinity": _validate_node_affinity,
    "NodeResourcesBalancedAllocation": _validate_balanced_allocation,
    "NodeResourcesFit": _validate_node_resources_fit,
    "PodTopologySpread": _validate_pod_topology_spread,
    "VolumeBinding": _validate_volume_binding,
    "DynamicResources": _validate_dynamic_resources,
}

# validatePluginConfig's table keys NodeResourcesFit's validator under "NodeResourcesFitArgs", a name
# no plugin has: the reference validates those args only when the plugin is built (plugin_init_error).
_VALIDATED_IN_CONFIG = frozenset(ARGS_VALIDATORS) - {"NodeResourcesFit"}

# invalidPluginsByVersion: plugins removed before v1. The reference names the version by core v1's
# SchemeGroupVersion ("v1"), so the message says "v1" where the file says kubescheduler.config.k8s.io/v1.
_REMOVED_PLUGINS = ("AzureDiskLimits", "CinderLimits", "EBSLimits", "GCEPDLimits")
_REMOVED_MSG = f'was invalid in version "v1" (KubeSchedulerConfiguration is version "{API_VERSION}")'


def plugin_init_error(name: str, args: Mapping[str, Any] | None) -> str | None:
    """What a plugin's factory says of its (defaulted) args, validated with no field path."""
    validator = ARGS_VALIDATORS.get(name)
    if validator is None or args is None:
        return None
    errs = validator(None, args)
    return aggregate(errs) if errs else None


def _internal_plugin_set(pset: Mapping[str, Any] | None) -> dict[str, Any]:
    """A v1 PluginSet as the internal type marshals (Go field names, weight 0 for unset, null lists)."""

    def plugins(items: Any) -> list[dict[str, Any]] | None:
        if not items:
            return None
        return [{"Name": p.get("name", ""), "Weight": p.get("weight") or 0} for p in items]

    pset = pset or {}
    return {"Enabled": plugins(pset.get("enabled")), "Disabled": plugins(pset.get("disabled"))}


def _validate_profile(path: str, profile: Mapping[str, Any]) -> list[FieldError]:
    errs: list[FieldError] = []
    if not profile.get("schedulerName"):
        errs.append(FieldError.required(f"{path}.schedulerName"))
    pct = profile.get("percentageOfNodesToScore")
    if pct is not None and not 0 <= pct <= 100:
        errs.append(FieldError.invalid(f"{path}.percentageOfNodesToScore", pct, "not in valid range [0-100]"))
    plugins = profile.get("plugins") or {}
    for point in PLUGIN_POINTS:
        if point == "multiPoint":
            continue
        for i, p in enumerate((plugins.get(point) or {}).get("enabled") or []):
            if p.get("name") in _REMOVED_PLUGINS:
                errs.append(
                    FieldError.invalid(
                        f"{path}.plugins.{point}.enabled[{i}]",
                        p["name"],
                        _REMOVED_MSG,
                    )
                )
    seen: set[str] = set()
    for i, pc in enumerate(profile.get("pluginConfig") or []):
        p = f"{path}.pluginConfig[{i}]"
        name = pc.get("name", "")
        if name in seen:
            errs.append(FieldError.duplicate(p, name))
        seen.add(name)
        if name in _REMOVED_PLUGINS:
            errs.append(FieldError.invalid(p, name, _REMOVED_MSG))
        elif name in _VALIDATED_IN_CONFIG:
            errs += ARGS_VALIDATORS[name](f"{p}.args", pc.get("args") or {})
    return errs


def _validate_common_queue_sort(profiles: Sequence[Mapping[str, Any]]) -> list[FieldError]:
    errs: list[FieldError] = []
    first = profiles[0]
    canon = ((first.get("plugins") or {}).get("queueSort")) or {}
    canon_enabled = canon.get("enabled") or []
    name = canon_enabled[0].get("name", "") if canon_enabled else ""
    if len(canon_enabled) > 1:
        errs.append(
            FieldError.invalid(
                "profiles[0].plugins.queueSort.Enabled",
                len(canon_enabled),
                "only one queue sort plugin can be enabled",
            )
        )
    canon_args = None
    for pc in first.get("pluginConfig") or []:
        if name and pc.get("name") == name:
            canon_args = pc.get("args")
    for i, profile in enumerate(profiles[1:], start=1):
        current = ((profile.get("plugins") or {}).get("queueSort")) or {}
        if _internal_plugin_set(current) != _internal_plugin_set(canon):
            errs.append(
                FieldError.invalid(
                    f"profiles[{i}].plugins.queueSort",
                    _internal_plugin_set(current),
                    "must be the same for all profiles",
                )
            )
        for pc in profile.get("pluginConfig") or []:
            if pc.get("name") == name and pc.get("args") != canon_args:
                errs.append(
                    FieldError.invalid(
                        f"profiles[{i}].pluginConfig.args",
                        pc.get("args"),
                        "queueSort must be the same for all profiles",
                    )
                )
    return errs


def _validate_extenders(extenders: Sequence[Mapping[str, Any]]) -> list[FieldError]:
    errs: list[FieldError] = []
    binders = 0
    managed: set[str] = set()
    for i, ext in enumerate(extenders):
        p = f"extenders[{i}]"
        if ext.get("prioritizeVerb") and ext.get("weight", 0) <= 0:
            errs.append(
                FieldError.invalid(
                    f"{p}.weight", ext.get("weight", 0), "must have a positive weight applied to it"
                )
            )
        if ext.get("bindVerb"):
            binders += 1
        for j, res in enumerate(ext.get("managedResources") or []):
            rp = f"{p}.managedResources[{j}].name"
            name = res.get("name", "")
            problems = is_qualified_name(name)
            errs += [FieldError.invalid(rp, name, msg) for msg in problems]
            if not problems and not is_extended_resource_name(name):
                errs.append(FieldError.invalid(rp, name, "is an invalid extended resource name"))
            if name in managed:
                errs.append(FieldError.invalid(rp, name, "duplicate extender managed resource name"))
            managed.add(name)
    if binders > 1:
        errs.append(
            FieldError.invalid(
                "extenders",
                f"found {binders} extenders implementing bind",
                "only one extender can implement bind",
            )
        )
    return errs


def validation_errors(doc: Mapping[str, Any]) -> list[FieldError]:
    """ValidateKubeSchedulerConfiguration on a defaulted document, every error in the reference's order."""
    errs: list[FieldError] = []
    cc = doc.get("clientConnection") or {}
    if cc.get("burst", 0) < 0:
        errs.append(FieldError.invalid("clientConnection.burst", cc["burst"], "must be non-negative"))
    le = doc.get("leaderElection") or {}
    if le.get("leaderElect"):
        durations = {
            k: parse_duration(le.get(k) or "0") for k in ("leaseDuration", "renewDeadline", "retryPeriod")
        }
        for key in ("leaseDuration", "renewDeadline", "retryPeriod"):
            if durations[key] <= 0:
                errs.append(
                    FieldError.invalid(
                        f"leaderElection.{key}", le.get(key) or "0s", "must be greater than zero"
                    )
                )
        if durations["leaseDuration"] <= durations["renewDeadline"]:
            errs.append(
                FieldError.invalid(
                    "leaderElection.leaseDuration",
                    le.get("renewDeadline") or "0s",
                    "must be greater than `RenewDeadline`",
                )
            )
        for key in ("resourceLock", "resourceNamespace", "resourceName"):
            if not le.get(key):
                errs.append(FieldError.required(f"leaderElection.{key}"))
        if le.get("resourceLock") != "leases":
            errs.append(
                FieldError.invalid(
                    "leaderElection.resourceLock",
                    le.get("resourceLock", ""),
                    'resourceLock value must be "leases"',
                )
            )
    parallelism = doc.get("parallelism", 0)
    if parallelism <= 0:
        errs.append(
            FieldError.invalid("parallelism", parallelism, "should be an integer value greater than zero")
        )
    profiles = doc.get("profiles") or []
    if not profiles:
        errs.append(FieldError.required("profiles"))
    else:
        names: dict[str, int] = {}
        for i, profile in enumerate(profiles):
            errs += _validate_profile(f"profiles[{i}]", profile)
            name = profile.get("schedulerName") or ""
            if name in names:
                # The reference passes a *field.Path as the value; it marshals as {}.
                errs.append(FieldError.duplicate(f"profiles[{i}].schedulerName", {}))
            names[name] = i
        errs += _validate_common_queue_sort(profiles)
    pct = doc.get("percentageOfNodesToScore")
    if pct is not None and not 0 <= pct <= 100:
        errs.append(FieldError.invalid("percentageOfNodesToScore", pct, "not in valid range [0-100]"))
    initial, maximum = doc.get("podInitialBackoffSeconds", 0), doc.get("podMaxBackoffSeconds", 0)
    if initial <= 0:
        errs.append(FieldError.invalid("podInitialBackoffSeconds", initial, "must be greater than 0"))
    if maximum < initial:
        errs.append(
            FieldError.invalid(
                "podMaxBackoffSeconds", maximum, "must be greater than or equal to PodInitialBackoffSeconds"
            )
        )
    errs += _validate_extenders(doc.get("extenders") or [])
    return errs


def validate(doc: Mapping[str, Any]) -> None:
    errs = validation_errors(doc)
    if errs:
        raise ConfigError(aggregate(errs))


# --- the result ----------------------------------------------------------------------------------


def _seconds(duration: str) -> float:
    return parse_duration(duration) / 1e9


@dataclass(frozen=True)
class LeaderElection:
    leader_elect: bool
    lease_duration: float
    renew_deadline: float
    retry_period: float
    resource_lock: str
    resource_name: str
    resource_namespace: str


@dataclass(frozen=True)
class ClientConnection:
    kubeconfig: str
    accept_content_types: str
    content_type: str
    qps: float
    burst: int


_BASE64 = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")


def _base64(text: str) -> bytes:
    """A ``[]byte`` field as encoding/json decodes it (standard base64); its error as Go words it."""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        body = text.rstrip("=")
        bad = next((i for i, ch in enumerate(body) if ch not in _BASE64), len(body))
        raise ConfigError(f"illegal base64 data at input byte {bad}") from None


@dataclass(frozen=True)
class ExtenderTLSConfig:
    """``v1.ExtenderTLSConfig`` (the ``*Data`` fields decoded from base64)."""

    insecure: bool = False
    server_name: str = ""
    cert_file: str = ""
    key_file: str = ""
    ca_file: str = ""
    cert_data: bytes = b""
    key_data: bytes = b""
    ca_data: bytes = b""


@dataclass(frozen=True)
class ExtenderConfig:
    """``v1.Extender``, one of ``extenders[]``; ``http_timeout`` in seconds (0: unset, the
    extender's default of 5 s applies)."""

    url_prefix: str
    filter_verb: str = ""
    preempt_verb: str = ""
    prioritize_verb: str = ""
    weight: int = 0
    bind_verb: str = ""
    enable_https: bool = False
    tls_config: ExtenderTLSConfig | None = None
    http_timeout: float = 0.0
    node_cache_capable: bool = False
    managed_resources: tuple[tuple[str, bool], ...] = ()  # (name, ignoredByScheduler)
    ignorable: bool = False

    @classmethod
    def from_document(cls, ext: Mapping[str, Any]) -> ExtenderConfig:
        tls = ext.get("tlsConfig")
        tls_config = None
        if tls is not None:
            data = {key: _base64(tls.get(key) or "") for key in ("certData", "keyData", "caData")}
            tls_config = ExtenderTLSConfig(
                insecure=bool(tls.get("insecure")),
                server_name=tls.get("serverName") or "",
                cert_file=tls.get("certFile") or "",
                key_file=tls.get("keyFile") or "",
                ca_file=tls.get("caFile") or "",
                cert_data=data["certData"],
                key_data=data["keyData"],
                ca_data=data["caData"],
            )
        return cls(
            url_prefix=ext.get("urlPrefix") or "",
            filter_verb=ext.get("filterVerb") or "",
            preempt_verb=ext.get("preemptVerb") or "",
            prioritize_verb=ext.get("prioritizeVerb") or "",
            weight=int(ext.get("weight") or 0),
            bind_verb=ext.get("bindVerb") or "",
            enable_https=bool(ext.get("enableHTTPS")),
            tls_config=tls_config,
            http_timeout=_seconds(ext["httpTimeout"]) if ext.get("httpTimeout") else 0.0,
            node_cache_capable=bool(ext.get("nodeCacheCapable")),
            managed_resources=tuple(
                (r.get("name") or "", bool(r.get("ignoredByScheduler")))
                for r in ext.get("managedResources") or ()
            ),
            ignorable=bool(ext.get("ignorable")),
        )


@dataclass
class KubeSchedulerConfiguration:
    """A decoded, defaulted and validated configuration.

    ``document`` is the defaulted v1 document (``--write-config-to``); ``source`` the profiles as
    written (before defaulting), which the engine's profiles and ``config import`` are made from.
    """

    document: dict[str, Any]
    source_profiles: list[dict[str, Any]] = field(default_factory=list)

    @property
    def parallelism(self) -> int:
        return int(self.document["parallelism"])

    @property
    def percentage_of_nodes_to_score(self) -> int:
        return int(self.document.get("percentageOfNodesToScore") or 0)

    @property
    def pod_initial_backoff_seconds(self) -> int:
        return int(self.document["podInitialBackoffSeconds"])

    @property
    def pod_max_backoff_seconds(self) -> int:
        return int(self.document["podMaxBackoffSeconds"])

    @property
    def delay_cache_until_active(self) -> bool:
        return bool(self.document.get("delayCacheUntilActive"))

    @property
    def extenders(self) -> list[dict[str, Any]]:
        return list(self.document.get("extenders") or [])

    def extender_configs(self) -> list[ExtenderConfig]:
        """``extenders[]``, typed (ConfigError for ``*Data`` that is not base64)."""
        return [ExtenderConfig.from_document(e) for e in self.extenders]

    def extender_ignored_resources(self) -> list[str]:
        """What NodeResourcesFit skips in every profile: the extenders' managed resources marked
        ``ignoredByScheduler``, in order (``buildExtenders`` sets them as its ``ignoredResources``)."""
        return [name for e in self.extender_configs() for name, ignored in e.managed_resources if ignored]

    @property
    def leader_election(self) -> LeaderElection:
        le = self.document["leaderElection"]
        return LeaderElection(
            leader_elect=bool(le.get("leaderElect")),
            lease_duration=_seconds(le["leaseDuration"]),
            renew_deadline=_seconds(le["renewDeadline"]),
            retry_period=_seconds(le["retryPeriod"]),
            resource_lock=le["resourceLock"],
            resource_name=le["resourceName"],
            resource_namespace=le["resourceNamespace"],
        )

    @property
    def client_connection(self) -> ClientConnection:
        cc = self.document["clientConnection"]
        return ClientConnection(
            kubeconfig=cc.get("kubeconfig") or "",
            accept_content_types=cc.get("acceptContentTypes") or "",
            content_type=cc["contentType"],
            qps=float(cc["qps"]),
            burst=int(cc["burst"]),
        )

    @property
    def scheduler_names(self) -> list[str]:
        return [p["schedulerName"] for p in self.document["profiles"]]

    def profile_specs(self) -> list[dict[str, Any]]:
        """The profiles as ``SchedulerProfile`` specs (what ``config import`` writes and the engine loads).

        Plugins and args as written (the engine merges the same defaults under the same gates; args of
        plugins the profile does not use are left out, as NewFramework ignores them); the global
        percentageOfNodesToScore where a profile sets none; the global backoffs on each."""
        out = []
        for defaulted_profile, source in zip(self.document["profiles"], self.source_profiles, strict=True):
            spec: dict[str, Any] = {"schedulerName": defaulted_profile["schedulerName"]}
            pct = source.get("percentageOfNodesToScore")
            if pct is None and self.percentage_of_nodes_to_score:
                pct = self.percentage_of_nodes_to_score
            if pct is not None:
                spec["percentageOfNodesToScore"] = pct
            spec["podInitialBackoffSeconds"] = self.pod_initial_backoff_seconds
            spec["podMaxBackoffSeconds"] = self.pod_max_backoff_seconds
            plugins = {
                point: _clean_set(pset)
                for point, pset in (source.get("plugins") or {}).items()
                if point not in UNSUPPORTED_POINTS and _clean_set(pset)
            }
            if plugins:
                spec["plugins"] = plugins
            needed = set(_plugins_names(defaulted_profile["plugins"]))
            configs = []
            for pc in source.get("pluginConfig") or []:
                if pc.get("name") not in needed:
                    continue  # NewFramework never reads the args of a plugin the profile does not use
                entry: dict[str, Any] = {"name": pc.get("name", "")}
                if pc.get("args"):
                    entry["args"] = {k: v for k, v in pc["args"].items() if k not in ("apiVersion", "kind")}
                configs.append(entry)
            if configs:
                spec["pluginConfig"] = configs
            out.append(spec)
        return out


def _clean_set(pset: Mapping[str, Any] | None) -> dict[str, Any]:
    out = {}
    for key in ("enabled", "disabled"):
        items = (pset or {}).get(key) or []
        if items:
            out[key] = [{k: v for k, v in p.items() if v is not None} for p in items]
    return out


def _unsupported(doc: Mapping[str, Any]) -> None:
    """What kopf-scheduler refuses that kube-scheduler would take (said, never silently ignored)."""
    for i, profile in enumerate(doc.get("profiles") or []):
        for point in UNSUPPORTED_POINTS:
            if _clean_set((profile.get("plugins") or {}).get(point)):
                raise ConfigError(
                    f"profiles[{i}].plugins.{point}: not supported by kopf-scheduler (its placement and pod "
                    "group post-filter plugins take part wherever they are enabled)"
                )


def load_document(
    data: Any,
    *,
    text: str | None = None,
    leader_election: Mapping[str, Any] | None = None,
    gates: features.FeatureGates | None = None,
) -> KubeSchedulerConfiguration:
    """Decode, default, apply the leader-election flags, validate: kube-scheduler's ``--config`` path.

    ``leader_election`` holds the ``--leader-elect*`` flags given on the command line (v1 field
    names; durations as Go strings), which override the file as in ``ApplyLeaderElectionTo``."""
    doc = decode(data, text)
    source = copy.deepcopy(doc.get("profiles") or [{}])
    full = defaulted(doc, gates)
    if leader_election:
        full["leaderElection"].update(leader_election)
    validate(full)
    _unsupported(full)
    return KubeSchedulerConfiguration(full, source)


def load(text: str, **kwargs: Any) -> KubeSchedulerConfiguration:
    """A KubeSchedulerConfiguration file's text (YAML or JSON)."""
    return load_document(read_yaml(text), text=text, **kwargs)


def default_config(gates: features.FeatureGates | None = None) -> KubeSchedulerConfiguration:
    """What kube-scheduler runs with when given no file."""
    return load_document({"apiVersion": API_VERSION, "kind": KIND}, gates=gates)


def internal_plugin_set(pset: Mapping[str, Any] | None) -> dict[str, Any]:
    return _internal_plugin_set(pset)


def written_document(config: KubeSchedulerConfiguration) -> dict[str, Any]:
    """What ``kube-scheduler --write-config-to`` writes for this configuration.

    The defaulted document in the v1 encoding of the internal types (every extension point present,
    unset weights as 0), each profile's pluginConfig as its framework captures it: the args of the
    plugins it uses, by name."""
    doc = copy.deepcopy(config.document)
    out: dict[str, Any] = {k: v for k, v in doc.items() if k not in ("profiles", "extenders")}
    if not out.get("delayCacheUntilActive"):
        out.pop("delayCacheUntilActive", None)
    if doc.get("extenders"):
        out["extenders"] = doc["extenders"]
    profiles = []
    for prof in doc["profiles"]:
        needed = set(_plugins_names(prof["plugins"]))
        configs = [
            {
                "name": pc["name"],
                "args": {"apiVersion": API_VERSION, "kind": f"{pc['name']}Args", **pc["args"]},
            }
            for pc in prof.get("pluginConfig") or []
            if pc.get("name") in needed and pc.get("name") in ARGS_KINDS
        ]
        plugins = {}
        for point in PLUGIN_POINTS:
            pset = prof["plugins"].get(point) or {}
            plugins[point] = {
                key: [{"name": p.get("name", ""), "weight": p.get("weight") or 0} for p in pset[key]]
                for key in ("enabled", "disabled")
                if pset.get(key)
            }
        entry: dict[str, Any] = {"pluginConfig": sorted(configs, key=lambda c: c["name"]), "plugins": plugins}
        if prof.get("percentageOfNodesToScore") is not None:
            entry["percentageOfNodesToScore"] = prof["percentageOfNodesToScore"]
        entry["schedulerName"] = prof.get("schedulerName") or ""
        profiles.append(entry)
    out["profiles"] = profiles
    return out
