"""Feature gates as kube-scheduler v1.37.2 takes them (``--feature-gates``), and what they change here.

The reference keeps one process-wide gate (``utilfeature.DefaultFeatureGate``) that its defaulting,
validation and plugins read; so do we: :func:`current` is read where the reference reads its gate
(the default plugin set, plugin-args defaults and validation, the DRA allocator's features), and
:func:`set_current` / :func:`using` change it (``run`` once at start; ``simulate`` around one run).

Every gate kube-scheduler registers is known (``feature_gates_data``, generated from the pinned
release), with its default, lock and dependencies, and a value is refused with the reference's words
(``unrecognized feature gate: X``, ``cannot set feature gate X to false, feature is locked to true``,
``X is enabled, but depends on features that are disabled: [Y]``). A gate the reference scheduler
reads whose non-default side kopf-scheduler does not implement is refused too (:data:`IMPLEMENTED`
lists those it does): running with it silently ignored would schedule differently from the reference.
Gates the scheduler never reads (the kubelet's, the apiserver's) are accepted and change nothing,
as in the reference.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType

from kopf_scheduler.config.feature_gates_data import GATES, VERSION

__all__ = [
    "IMPLEMENTED",
    "SCHEDULER_GATES",
    "FeatureGateError",
    "FeatureGates",
    "current",
    "default_multi_point",
    "set_current",
    "using",
]

# Gates the reference's scheduler reads (pkg/scheduler: feature.NewSchedulerFeaturesFromGates and the
# framework, queue, defaulting and validation).
SCHEDULER_GATES: frozenset[str] = frozenset(
    {
        "CompositePodGroup",
        "DRAAdminAccess",
        "DRAConsumableCapacity",
        "DRADerivedAttributes",
        "DRADeviceBindingConditions",
        "DRADeviceCompatibilityGroups",
        "DRADeviceTaintRules",
        "DRADeviceTaints",
        "DRAExtendedResource",
        "DRAFractionalCapacityRange",
        "DRAListTypeAttributes",
        "DRANodeAllocatableResources",
        "DRAOptionalNodeOperations",
        "DRAPartitionableDevices",
        "DRAPrioritizedList",
        "DRAResourceClaimDeviceStatus",
        "DRASchedulerFilterTimeout",
        "DRAWorkloadResourceClaims",
        "DynamicResourceAllocation",
        "GenericWorkload",
        "InPlacePodLevelResourcesVerticalScaling",
        "InPlacePodVerticalScaling",
        "InPlacePodVerticalScalingSchedulerPreemption",
        "InterPodAffinityHostnameFastPath",
        "MatchLabelKeysInPodTopologySpread",
        "NodeDeclaredFeatures",
        "NodeInclusionPolicyInPodTopologySpread",
        "NominatedNodeNameForExpectation",
        "OpportunisticBatching",
        "PodGroupPreemptionPolicy",
        "PodLevelResources",
        "SchedulerAsyncAPICalls",
        "SchedulerAsyncPreemption",
        "SchedulerPopFromBackoffQ",
        "SchedulerPreQueueingHints",
        "StorageCapacityScoring",
        "TaintTolerationComparisonOperators",
        "TopologyAwareWorkloadScheduling",
        "VolumeAttributesClass",
        "VolumeLimitScaling",
    }
)

# Scheduler gates whose both sides kopf-scheduler implements, and what each changes:
IMPLEMENTED: Mapping[str, str] = MappingProxyType(
    {
        "GenericWorkload": "the default plugin set gains GangScheduling (PodGroups are gang-scheduled "
        "by every profile that does not disable it)",
        "OpportunisticBatching": "pods with the signature of the pod before them take its node hint",
        "DRAPrioritizedList": "DRA requests with firstAvailable",
        "DRAPartitionableDevices": "DRA devices that consume shared counters",
        "DRADeviceTaints": "DRA device taints and tolerations",
        "DRAConsumableCapacity": "DRA devices shared by capacity (allowMultipleAllocations)",
        "DRADeviceBindingConditions": "DRA devices with binding conditions (PreBind waits for them)",
        "SchedulerPreQueueingHints": "the queue narrows a cluster event to the pods a plugin's "
        "PreQueueingHint names (DynamicResources: a claim's pods), counted in "
        "pre_queueing_hint_evaluations_total",
    }
)

# kube-scheduler's gate-dependent additions to its default plugins (apis/config/v1/default_plugins.go):
# the base list, then NodeDeclaredFeatures appended, DynamicResources before DefaultPreemption,
# GangScheduling appended.
_BASE_MULTI_POINT: tuple[tuple[str, int | None], ...] = (
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
    ("DefaultPreemption", None),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
    ("DefaultBinder", None),
)

_SPECIAL = {"AllAlpha": "ALPHA", "AllBeta": "BETA"}


class FeatureGateError(ValueError):
    """A ``--feature-gates`` value the reference (or kopf-scheduler) refuses; the message is its words."""


def _aggregate(errors: Sequence[str]) -> str:
    """apimachinery's aggregate error text: one message alone, several in brackets, no repeats."""
    unique = list(dict.fromkeys(errors))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


def _parse_bool(key: str, text: str) -> bool:
    """Go's strconv.ParseBool, with the reference's message when it fails."""
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise FeatureGateError(
        f'invalid value of {key}={text}, err: strconv.ParseBool: parsing "{text}": invalid syntax'
    )


class FeatureGates:
    """Gate values: v1.37.2's defaults plus the overrides given (validated at construction)."""

    def __init__(self, overrides: Mapping[str, bool] | None = None) -> None:
        self.overrides: dict[str, bool] = dict(overrides or {})
        self.enabled_map: dict[str, bool] = self._resolve(self.overrides)

    @classmethod
    def parse(cls, values: str | Iterable[str] | None) -> FeatureGates:
        """``--feature-gates`` values (``A=true,B=false``; the flag may repeat; ``kube:`` prefixes)."""
        if values is None:
            return cls()
        texts = [values] if isinstance(values, str) else list(values)
        overrides: dict[str, bool] = {}
        for text in texts:
            for item in text.split(","):
                if not item:
                    continue
                key, sep, value = item.partition("=")
                key = key.strip()
                component, colon, name = key.partition(":")
                if colon:
                    if component != "kube":
                        raise FeatureGateError(f"component not registered: {component}")
                    key = name
                if not sep:
                    raise FeatureGateError(f"missing bool value for {key}")
                overrides[key] = _parse_bool(key, value.strip())
        return cls(overrides)

    @staticmethod
    def _resolve(overrides: Mapping[str, bool]) -> dict[str, bool]:
        """The reference's featureGate.SetFromMap: unknown names stop at once; locks, then dependencies."""
        errors: list[str] = []
        enabled: dict[str, bool] = {}
        for key, value in overrides.items():
            spec = GATES.get(key)
            if spec is None:
                raise FeatureGateError(f"unrecognized feature gate: {key}")
            default, locked, _, _ = spec
            if locked and default != value:
                errors.append(
                    f"cannot set feature gate {key} to {_go_bool(value)}, feature is locked to "
                    f"{_go_bool(default)}"
                )
                continue
            if key in _SPECIAL:  # AllAlpha / AllBeta: every gate of that stage not set explicitly
                for name, (_, name_locked, stage, _) in GATES.items():
                    if stage == _SPECIAL[key] and not name_locked and name not in overrides:
                        enabled[name] = value
            enabled[key] = value
        if errors:
            raise FeatureGateError(_aggregate(errors))

        def on(name: str) -> bool:
            return enabled.get(name, GATES[name][0])

        for name, (_, _, _, deps) in sorted(GATES.items()):
            if deps and on(name):
                off = [d for d in deps if not on(d)]
                if off:
                    errors.append(
                        f"{name} is enabled, but depends on features that are disabled: [{' '.join(off)}]"
                    )
        if errors:
            raise FeatureGateError(_aggregate(errors))
        # Ours: a scheduler gate whose non-default side is not built here.
        for name, value in enabled.items():
            if name in SCHEDULER_GATES and name not in IMPLEMENTED and value != GATES[name][0]:
                raise FeatureGateError(
                    f"feature gate {name}={_go_bool(value)} is not supported by kopf-scheduler: it "
                    f"implements {name} only at its {VERSION} default ({_go_bool(GATES[name][0])})"
                )
        return enabled

    def enabled(self, name: str) -> bool:
        value = self.enabled_map.get(name)
        if value is not None:
            return value
        spec = GATES.get(name)
        if spec is None:
            raise KeyError(f"unknown feature gate {name!r}")
        return spec[0]

    def warnings(self) -> list[str]:
        """What the reference logs when a GA or deprecated gate is set."""
        out = []
        for key, value in self.overrides.items():
            stage = GATES[key][2]
            if stage in ("", "DEPRECATED"):
                kind = "GA" if stage == "" else "deprecated"
                setting = f"{key}={_go_bool(value)}"
                out.append(f"setting {kind} feature gate {setting}. It will be removed in a future release.")
        return out

    def to_flag(self) -> str:
        """The overrides as a ``--feature-gates`` value (sorted)."""
        return ",".join(f"{k}={_go_bool(v)}" for k, v in sorted(self.overrides.items()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FeatureGates) and self.enabled_map == other.enabled_map

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.enabled_map.items())))

    def __repr__(self) -> str:
        return f"FeatureGates({self.to_flag()!r})"


def _go_bool(value: bool) -> str:
    return "true" if value else "false"


_CURRENT = FeatureGates()


def current() -> FeatureGates:
    """The process's gates (the reference's ``utilfeature.DefaultFeatureGate``)."""
    return _CURRENT


def set_current(gates: FeatureGates) -> None:
    global _CURRENT
    _CURRENT = gates


@contextlib.contextmanager
def using(gates: FeatureGates) -> Iterator[FeatureGates]:
    """Run a block with ``gates`` in force (simulate, tests), then restore the previous ones."""
    previous = _CURRENT
    set_current(gates)
    try:
        yield gates
    finally:
        set_current(previous)


def default_multi_point(gates: FeatureGates | None = None) -> tuple[tuple[str, int | None], ...]:
    """kube-scheduler's default multiPoint plugins (name, weight) under ``gates`` (getDefaultPlugins)."""
    gates = gates if gates is not None else _CURRENT
    plugins = list(_BASE_MULTI_POINT)
    if gates.enabled("NodeDeclaredFeatures"):
        plugins.append(("NodeDeclaredFeatures", None))
    # InPlacePodVerticalScalingSchedulerPreemption (DeferredPodScheduling) and
    # TopologyAwareWorkloadScheduling (placement plugins) are refused above: not built here.
    if gates.enabled("DynamicResourceAllocation"):
        at = next(i for i, (name, _) in enumerate(plugins) if name == "DefaultPreemption")
        plugins.insert(at, ("DynamicResources", 2))
    if gates.enabled("GenericWorkload"):
        plugins.append(("GangScheduling", None))
    return tuple(plugins)
