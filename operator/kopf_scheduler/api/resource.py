"""Typed views of the DRA kinds (resource.k8s.io/v1): ResourceClaim, ResourceSlice, DeviceClass,
DeviceTaintRule and ResourceClaimTemplate.

Parsed once at the edge (the informers, simulate's loader) by the parsers registered on their
``api/kinds.py`` constants; the structured allocator (``kopf_scheduler.dra``) and the
DynamicResources plugin read only these fields. Quantities (capacities, counters, capacity
requests and policies) are parsed exactly, node selectors into matchers; CEL selectors stay
expressions, compiled by the DRA manager's CEL cache.

Each view is immutable and replaced, not changed, when its object changes: the allocator's caches
(compiled selectors' results per device, a node's pools) use a view's identity as its version.

Writes go back as API objects built from the typed fields (:func:`claim_to_api`); only what the
scheduler never reads nor changes (a claim's spec, opaque driver parameters, drivers' device
status) travels as the stored JSON.

A malformed object raises :class:`~kopf_scheduler.api.types.ObjectError` naming the field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from kopf_scheduler.api.meta import ObjectMeta, parse_meta, parse_namespaced_meta
from kopf_scheduler.api.quantity import QuantityError, parse_quantity
from kopf_scheduler.api.selectors import parse_node_selector
from kopf_scheduler.api.types import (
    NodeSelector,
    NodeSelectorRequirement,
    ObjectError,
    as_int,
    as_list,
    as_mapping,
)

__all__ = [
    "API_VERSION",
    "AllocatedDeviceStatus",
    "AllocationConfiguration",
    "AllocationResult",
    "CapacityRange",
    "CapacityRequestPolicy",
    "ClaimConfiguration",
    "ConsumerReference",
    "CounterConsumption",
    "CounterSet",
    "Device",
    "DeviceAttribute",
    "DeviceCapacity",
    "DeviceClass",
    "DeviceConstraint",
    "DeviceID",
    "DeviceRequest",
    "DeviceRequestAllocationResult",
    "DeviceSubRequest",
    "DeviceTaint",
    "DeviceTaintRule",
    "DeviceTaintSelector",
    "DeviceToleration",
    "ResourceClaim",
    "ResourceClaimSpec",
    "ResourceClaimStatus",
    "ResourceClaimTemplate",
    "ResourcePool",
    "ResourceSlice",
    "allocation_to_api",
    "claim_to_api",
    "claim_with_requests",
    "device_request_to_api",
    "node_selector_to_api",
    "parse_allocation",
    "parse_device_class",
    "parse_device_taint_rule",
    "parse_resource_claim",
    "parse_resource_claim_template",
    "parse_resource_slice",
]

API_VERSION = "resource.k8s.io/v1"
DeviceID = tuple[str, str, str]  # (driver, pool, device)

_NO_FRACTIONS: Mapping[str, Fraction] = {}


def _quantity(raw: Any, path: str) -> Fraction:
    try:
        return parse_quantity(raw)
    except QuantityError as exc:
        raise ObjectError(path, str(exc)) from None


def _opt_quantity(raw: Any, path: str) -> Fraction | None:
    return None if raw is None else _quantity(raw, path)


def _strings(raw: Any, path: str) -> tuple[str, ...]:
    return tuple(str(s) for s in as_list(raw, path))


def _opt_str(raw: Any) -> str | None:
    return None if raw is None else str(raw)


def _opaque(raw: Any, path: str) -> Mapping[str, Any] | None:
    """A configuration entry's ``opaque`` (the driver's, passed on as written)."""
    opaque = as_mapping(raw, path).get("opaque")
    return None if opaque is None else as_mapping(opaque, f"{path}.opaque")


def _opt_selector(raw: Any, path: str) -> NodeSelector | None:
    return None if raw is None else parse_node_selector(raw, path)


# --- shared pieces ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    key: str
    value: str
    effect: str  # NoSchedule | NoExecute | None (the effect named "None")
    time_added: str | None = None


def _taint(raw: Any, path: str) -> DeviceTaint:
    t = as_mapping(raw, path)
    return DeviceTaint(
        str(t.get("key") or ""),
        str(t.get("value") or ""),
        str(t.get("effect") or ""),
        _opt_str(t.get("timeAdded")),
    )


@dataclass(frozen=True, slots=True)
class DeviceToleration:
    key: str = ""
    operator: str = ""  # "" as written: Equal
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None

    def tolerates(self, taint: DeviceTaint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        operator = self.operator or "Equal"
        if operator == "Equal":
            return self.value == taint.value
        return operator == "Exists"

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, value in (
            ("key", self.key),
            ("operator", self.operator),
            ("value", self.value),
            ("effect", self.effect),
        ):
            if value:
                out[name] = value
        if self.toleration_seconds is not None:
            out["tolerationSeconds"] = self.toleration_seconds
        return out


def _toleration(raw: Any, path: str) -> DeviceToleration:
    t = as_mapping(raw, path)
    seconds = t.get("tolerationSeconds")
    return DeviceToleration(
        str(t.get("key") or ""),
        str(t.get("operator") or ""),
        str(t.get("value") or ""),
        str(t.get("effect") or ""),
        None if seconds is None else as_int(seconds, f"{path}.tolerationSeconds"),
    )


@dataclass(frozen=True, slots=True)
class DeviceSelector:
    """A CEL selector's expression; None when the selector is of a kind this version does not know."""

    expression: str | None


def _selectors(raw: Any, path: str) -> tuple[DeviceSelector, ...]:
    out = []
    for i, item in enumerate(as_list(raw, path)):
        cel = as_mapping(item, f"{path}[{i}]").get("cel")
        if isinstance(cel, Mapping):
            out.append(DeviceSelector(str(cel.get("expression") or "")))
        else:
            out.append(DeviceSelector(None))
    return tuple(out)


# --- ResourceSlice ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeviceAttribute:
    kind: str  # int | bool | string | version
    value: int | bool | str


def _attribute(raw: Any, path: str) -> DeviceAttribute | None:
    a = as_mapping(raw, path)
    if "int" in a:
        return DeviceAttribute("int", as_int(a["int"], f"{path}.int"))
    if "bool" in a:
        return DeviceAttribute("bool", bool(a["bool"]))
    if "string" in a:
        return DeviceAttribute("string", str(a["string"]))
    if "version" in a:
        return DeviceAttribute("version", str(a["version"]))
    return None  # list attributes (DRAListTypeAttributes, off in v1.37.2)


@dataclass(frozen=True, slots=True)
class CapacityRange:
    min: Fraction | None = None
    max: Fraction | None = None
    step: Fraction | None = None


@dataclass(frozen=True, slots=True)
class CapacityRequestPolicy:
    default: Fraction | None = None
    valid_values: tuple[Fraction, ...] = ()
    valid_range: CapacityRange | None = None


@dataclass(frozen=True, slots=True)
class DeviceCapacity:
    value: Fraction
    request_policy: CapacityRequestPolicy | None = None


def _capacity(raw: Any, path: str) -> DeviceCapacity:
    c = as_mapping(raw, path)
    policy = c.get("requestPolicy")
    parsed: CapacityRequestPolicy | None = None
    if isinstance(policy, Mapping):
        ppath = f"{path}.requestPolicy"
        rng = policy.get("validRange")
        valid_range = None
        if isinstance(rng, Mapping):
            rpath = f"{ppath}.validRange"
            valid_range = CapacityRange(
                _opt_quantity(rng.get("min"), f"{rpath}.min"),
                _opt_quantity(rng.get("max"), f"{rpath}.max"),
                _opt_quantity(rng.get("step"), f"{rpath}.step"),
            )
        parsed = CapacityRequestPolicy(
            _opt_quantity(policy.get("default"), f"{ppath}.default"),
            tuple(
                _quantity(v, f"{ppath}.validValues[{i}]")
                for i, v in enumerate(as_list(policy.get("validValues"), f"{ppath}.validValues"))
            ),
            valid_range,
        )
    return DeviceCapacity(_quantity(c.get("value", 0), f"{path}.value"), parsed)


def _counters(raw: Any, path: str) -> Mapping[str, Fraction]:
    return {
        str(name): _quantity(as_mapping(c, f"{path}.{name}").get("value", 0), f"{path}.{name}.value")
        for name, c in as_mapping(raw, path).items()
    }


@dataclass(frozen=True, slots=True)
class CounterConsumption:
    counter_set: str
    counters: Mapping[str, Fraction]


@dataclass(frozen=True, slots=True)
class CounterSet:
    name: str
    counters: Mapping[str, Fraction]


@dataclass(frozen=True, slots=True, eq=False)
class Device:
    """One device a driver publishes. Compared by identity: the allocator's caches key on it."""

    name: str
    attributes: Mapping[str, DeviceAttribute] = field(default_factory=dict)
    capacity: Mapping[str, DeviceCapacity] = field(default_factory=dict)
    consumes_counters: tuple[CounterConsumption, ...] = ()
    # Per-device node selection (the slice's perDeviceNodeSelection): one of the three.
    node_name: str = ""
    node_selector: NodeSelector | None = None
    all_nodes: bool = False
    taints: tuple[DeviceTaint, ...] = ()
    binds_to_node: bool = False
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    allow_multiple_allocations: bool = False
    # A counter consumption names compatibility groups (DRADeviceCompatibilityGroups, off in
    # v1.37.2): the reference leaves a slice with such a device out.
    uses_compatibility_groups: bool = False


def _device(raw: Any, path: str) -> Device:
    d = as_mapping(raw, path)
    attributes: dict[str, DeviceAttribute] = {}
    for name, value in as_mapping(d.get("attributes"), f"{path}.attributes").items():
        attr = _attribute(value, f"{path}.attributes.{name}")
        if attr is not None:
            attributes[str(name)] = attr
    consumes = []
    uses_groups = False
    for i, item in enumerate(as_list(d.get("consumesCounters"), f"{path}.consumesCounters")):
        cpath = f"{path}.consumesCounters[{i}]"
        c = as_mapping(item, cpath)
        uses_groups = uses_groups or bool(c.get("compatibilityGroups"))
        consumes.append(
            CounterConsumption(
                str(c.get("counterSet") or ""), _counters(c.get("counters"), f"{cpath}.counters")
            )
        )
    return Device(
        name=str(d.get("name") or ""),
        attributes=attributes,
        capacity={
            str(name): _capacity(value, f"{path}.capacity.{name}")
            for name, value in as_mapping(d.get("capacity"), f"{path}.capacity").items()
        },
        consumes_counters=tuple(consumes),
        node_name=str(d.get("nodeName") or ""),
        node_selector=_opt_selector(d.get("nodeSelector"), f"{path}.nodeSelector"),
        all_nodes=bool(d.get("allNodes")),
        taints=tuple(
            _taint(t, f"{path}.taints[{i}]") for i, t in enumerate(as_list(d.get("taints"), f"{path}.taints"))
        ),
        binds_to_node=bool(d.get("bindsToNode")),
        binding_conditions=_strings(d.get("bindingConditions"), f"{path}.bindingConditions"),
        binding_failure_conditions=_strings(
            d.get("bindingFailureConditions"), f"{path}.bindingFailureConditions"
        ),
        allow_multiple_allocations=bool(d.get("allowMultipleAllocations")),
        uses_compatibility_groups=uses_groups,
    )


@dataclass(frozen=True, slots=True)
class ResourcePool:
    name: str
    generation: int = 0
    resource_slice_count: int = 0


@dataclass(frozen=True, slots=True, eq=False)
class ResourceSlice:
    """Compared by identity, as its devices (the pool cache keys on it)."""

    metadata: ObjectMeta
    driver: str
    pool: ResourcePool
    node_name: str = ""
    node_selector: NodeSelector | None = None
    all_nodes: bool = False
    per_device_node_selection: bool | None = None  # None: not set (DRAPartitionableDevices' check)
    shared_counters: tuple[CounterSet, ...] = ()
    devices: tuple[Device, ...] = ()

    @property
    def uses_compatibility_groups(self) -> bool:
        return any(d.uses_compatibility_groups for d in self.devices)


def parse_resource_slice(raw: Mapping[str, Any]) -> ResourceSlice:
    spec = as_mapping(raw.get("spec"), "spec")
    pool = as_mapping(spec.get("pool"), "spec.pool")
    per_device = spec.get("perDeviceNodeSelection")
    return ResourceSlice(
        metadata=parse_meta(raw.get("metadata")),
        driver=str(spec.get("driver") or ""),
        pool=ResourcePool(
            str(pool.get("name") or ""),
            as_int(pool.get("generation"), "spec.pool.generation"),
            as_int(pool.get("resourceSliceCount"), "spec.pool.resourceSliceCount"),
        ),
        node_name=str(spec.get("nodeName") or ""),
        node_selector=_opt_selector(spec.get("nodeSelector"), "spec.nodeSelector"),
        all_nodes=bool(spec.get("allNodes")),
        per_device_node_selection=None if per_device is None else bool(per_device),
        shared_counters=tuple(
            CounterSet(
                str(as_mapping(cs, f"spec.sharedCounters[{i}]").get("name") or ""),
                _counters(cs.get("counters"), f"spec.sharedCounters[{i}].counters"),
            )
            for i, cs in enumerate(as_list(spec.get("sharedCounters"), "spec.sharedCounters"))
        ),
        devices=tuple(
            _device(d, f"spec.devices[{i}]")
            for i, d in enumerate(as_list(spec.get("devices"), "spec.devices"))
        ),
    )


# --- DeviceClass ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeviceClass:
    metadata: ObjectMeta
    selectors: tuple[DeviceSelector, ...] = ()
    # Each config entry's ``opaque`` configuration (driver and parameters; None for a kind this
    # version does not know), copied into allocations.
    config: tuple[Mapping[str, Any] | None, ...] = ()
    extended_resource_name: str | None = None  # DRAExtendedResource


def parse_device_class(raw: Mapping[str, Any]) -> DeviceClass:
    spec = as_mapping(raw.get("spec"), "spec")
    return DeviceClass(
        metadata=parse_meta(raw.get("metadata")),
        selectors=_selectors(spec.get("selectors"), "spec.selectors"),
        config=tuple(
            _opaque(c, f"spec.config[{i}]") for i, c in enumerate(as_list(spec.get("config"), "spec.config"))
        ),
        extended_resource_name=_opt_str(spec.get("extendedResourceName") or None),
    )


# --- DeviceTaintRule --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeviceTaintSelector:
    driver: str | None = None
    pool: str | None = None
    device: str | None = None


@dataclass(frozen=True, slots=True)
class DeviceTaintRule:
    metadata: ObjectMeta
    selector: DeviceTaintSelector | None
    taint: DeviceTaint


def parse_device_taint_rule(raw: Mapping[str, Any]) -> DeviceTaintRule:
    spec = as_mapping(raw.get("spec"), "spec")
    selector = spec.get("deviceSelector")
    parsed = None
    if selector is not None:
        s = as_mapping(selector, "spec.deviceSelector")
        parsed = DeviceTaintSelector(
            _opt_str(s.get("driver")), _opt_str(s.get("pool")), _opt_str(s.get("device"))
        )
    return DeviceTaintRule(parse_meta(raw.get("metadata")), parsed, _taint(spec.get("taint"), "spec.taint"))


# --- ResourceClaim ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeviceSubRequest:
    """``exactly`` (named as its request) or one of ``firstAvailable``'s subrequests."""

    name: str
    device_class_name: str
    selectors: tuple[DeviceSelector, ...] = ()
    allocation_mode: str = "ExactCount"  # ExactCount | All
    count: int = 1
    admin_access: bool = False
    tolerations: tuple[DeviceToleration, ...] = ()
    capacity_requests: Mapping[str, Fraction] | None = None  # DRAConsumableCapacity
    derived_attributes: bool = False  # asks for derived attributes (that feature is off)


def _sub_request(raw: Any, path: str, name: str | None = None) -> DeviceSubRequest:
    r = as_mapping(raw, path)
    capacity = r.get("capacity")
    requests: Mapping[str, Fraction] | None = None
    if isinstance(capacity, Mapping) and isinstance(capacity.get("requests"), Mapping):
        requests = {
            str(k): _quantity(v, f"{path}.capacity.requests.{k}") for k, v in capacity["requests"].items()
        }
    return DeviceSubRequest(
        name=str(r.get("name") or "") if name is None else name,
        device_class_name=str(r.get("deviceClassName") or ""),
        selectors=_selectors(r.get("selectors"), f"{path}.selectors"),
        allocation_mode=str(r.get("allocationMode") or "ExactCount"),
        count=as_int(r.get("count"), f"{path}.count", 1) or 1,
        admin_access=bool(r.get("adminAccess")),
        tolerations=tuple(
            _toleration(t, f"{path}.tolerations[{i}]")
            for i, t in enumerate(as_list(r.get("tolerations"), f"{path}.tolerations"))
        ),
        capacity_requests=requests,
        derived_attributes=bool(r.get("derivedAttributes")),
    )


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    name: str
    exactly: DeviceSubRequest | None = None
    first_available: tuple[DeviceSubRequest, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceConstraint:
    requests: tuple[str, ...] = ()
    match_attribute: str | None = None
    distinct_attribute: str | None = None


@dataclass(frozen=True, slots=True)
class ClaimConfiguration:
    requests: tuple[str, ...] = ()
    opaque: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ResourceClaimSpec:
    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[DeviceConstraint, ...] = ()
    config: tuple[ClaimConfiguration, ...] = ()


def _claim_spec(raw: Any, path: str) -> ResourceClaimSpec:
    devices = as_mapping(as_mapping(raw, path).get("devices"), f"{path}.devices")
    requests = []
    for i, item in enumerate(as_list(devices.get("requests"), f"{path}.devices.requests")):
        rpath = f"{path}.devices.requests[{i}]"
        r = as_mapping(item, rpath)
        name = str(r.get("name") or "")
        exactly = r.get("exactly")
        requests.append(
            DeviceRequest(
                name,
                None if exactly is None else _sub_request(exactly, f"{rpath}.exactly", name),
                tuple(
                    _sub_request(s, f"{rpath}.firstAvailable[{j}]")
                    for j, s in enumerate(as_list(r.get("firstAvailable"), f"{rpath}.firstAvailable"))
                ),
            )
        )
    constraints = []
    for i, item in enumerate(as_list(devices.get("constraints"), f"{path}.devices.constraints")):
        c = as_mapping(item, f"{path}.devices.constraints[{i}]")
        constraints.append(
            DeviceConstraint(
                _strings(c.get("requests"), f"{path}.devices.constraints[{i}].requests"),
                _opt_str(c.get("matchAttribute") or None),
                _opt_str(c.get("distinctAttribute") or None),
            )
        )
    config = []
    for i, item in enumerate(as_list(devices.get("config"), f"{path}.devices.config")):
        c = as_mapping(item, f"{path}.devices.config[{i}]")
        config.append(
            ClaimConfiguration(
                _strings(c.get("requests"), f"{path}.devices.config[{i}].requests"),
                _opaque(c, f"{path}.devices.config[{i}]"),
            )
        )
    return ResourceClaimSpec(tuple(requests), tuple(constraints), tuple(config))


@dataclass(frozen=True, slots=True)
class DeviceRequestAllocationResult:
    request: str  # "<request>" or "<request>/<subrequest>"
    driver: str
    pool: str
    device: str
    admin_access: bool = False
    tolerations: tuple[DeviceToleration, ...] = ()
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    share_id: str | None = None
    consumed_capacity: Mapping[str, Fraction] = field(default_factory=lambda: _NO_FRACTIONS)

    @property
    def device_id(self) -> DeviceID:
        return (self.driver, self.pool, self.device)


@dataclass(frozen=True, slots=True)
class AllocationConfiguration:
    source: str  # FromClass | FromClaim
    requests: tuple[str, ...] = ()
    opaque: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class AllocationResult:
    results: tuple[DeviceRequestAllocationResult, ...] = ()
    config: tuple[AllocationConfiguration, ...] = ()
    node_selector: NodeSelector | None = None
    allocation_timestamp: str | None = None
    # The allocation as stored: the write path's base (an allocation never changes once written,
    # so a status write sends it back as read); None for one this scheduler made. Plugins never read it.
    raw: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)


def parse_allocation(raw: Any, path: str = "status.allocation") -> AllocationResult:
    a = as_mapping(raw, path)
    devices = as_mapping(a.get("devices"), f"{path}.devices")
    results = []
    for i, item in enumerate(as_list(devices.get("results"), f"{path}.devices.results")):
        rpath = f"{path}.devices.results[{i}]"
        r = as_mapping(item, rpath)
        share = r.get("shareID")
        results.append(
            DeviceRequestAllocationResult(
                request=str(r.get("request") or ""),
                driver=str(r.get("driver") or ""),
                pool=str(r.get("pool") or ""),
                device=str(r.get("device") or ""),
                admin_access=bool(r.get("adminAccess")),
                tolerations=tuple(
                    _toleration(t, f"{rpath}.tolerations[{j}]")
                    for j, t in enumerate(as_list(r.get("tolerations"), f"{rpath}.tolerations"))
                ),
                binding_conditions=_strings(r.get("bindingConditions"), f"{rpath}.bindingConditions"),
                binding_failure_conditions=_strings(
                    r.get("bindingFailureConditions"), f"{rpath}.bindingFailureConditions"
                ),
                share_id=str(share) if share else None,
                consumed_capacity={
                    str(k): _quantity(v, f"{rpath}.consumedCapacity.{k}")
                    for k, v in as_mapping(r.get("consumedCapacity"), f"{rpath}.consumedCapacity").items()
                }
                or _NO_FRACTIONS,
            )
        )
    config = []
    for i, item in enumerate(as_list(devices.get("config"), f"{path}.devices.config")):
        c = as_mapping(item, f"{path}.devices.config[{i}]")
        config.append(
            AllocationConfiguration(
                str(c.get("source") or ""),
                _strings(c.get("requests"), f"{path}.devices.config[{i}].requests"),
                _opaque(c, f"{path}.devices.config[{i}]"),
            )
        )
    stamp = a.get("allocationTimestamp")
    return AllocationResult(
        tuple(results),
        tuple(config),
        _opt_selector(a.get("nodeSelector"), f"{path}.nodeSelector"),
        str(stamp) if stamp else None,
        raw=a,
    )


@dataclass(frozen=True, slots=True)
class ConsumerReference:
    resource: str
    name: str
    uid: str
    api_group: str = ""

    def to_api(self) -> dict[str, str]:
        out = {"resource": self.resource, "name": self.name, "uid": self.uid}
        if self.api_group:
            out = {"apiGroup": self.api_group, **out}
        return out


@dataclass(frozen=True, slots=True)
class AllocatedDeviceStatus:
    """A driver's report on an allocated device; the scheduler reads its conditions only."""

    driver: str
    pool: str
    device: str
    share_id: str | None = None
    conditions: Mapping[str, str] = field(default_factory=dict)  # type -> status ("True"...)
    # The entry as stored (data, networkData, full conditions): the write path's base, sent back
    # unchanged in a status write. Plugins never read it. Compared: any change is a change of status.
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def device_id(self) -> DeviceID:
        return (self.driver, self.pool, self.device)


@dataclass(frozen=True, slots=True)
class ResourceClaimStatus:
    allocation: AllocationResult | None = None
    reserved_for: tuple[ConsumerReference, ...] = ()
    devices: tuple[AllocatedDeviceStatus, ...] = ()


def _claim_status(raw: Any, path: str = "status") -> ResourceClaimStatus:
    s = as_mapping(raw, path)
    allocation = s.get("allocation")
    devices = []
    for i, item in enumerate(as_list(s.get("devices"), f"{path}.devices")):
        dpath = f"{path}.devices[{i}]"
        d = as_mapping(item, dpath)
        share = d.get("shareID")
        devices.append(
            AllocatedDeviceStatus(
                str(d.get("driver") or ""),
                str(d.get("pool") or ""),
                str(d.get("device") or ""),
                str(share) if share else None,
                {
                    str(c.get("type")): str(c.get("status"))
                    for j, item2 in enumerate(as_list(d.get("conditions"), f"{dpath}.conditions"))
                    for c in (as_mapping(item2, f"{dpath}.conditions[{j}]"),)
                },
                d,
            )
        )
    return ResourceClaimStatus(
        parse_allocation(allocation, f"{path}.allocation") if allocation else None,
        tuple(
            ConsumerReference(
                str(r.get("resource") or ""),
                str(r.get("name") or ""),
                str(r.get("uid") or ""),
                str(r.get("apiGroup") or ""),
            )
            for i, item in enumerate(as_list(s.get("reservedFor"), f"{path}.reservedFor"))
            for r in (as_mapping(item, f"{path}.reservedFor[{i}]"),)
        ),
        tuple(devices),
    )


_EMPTY_STATUS = ResourceClaimStatus()


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    metadata: ObjectMeta
    spec: ResourceClaimSpec
    status: ResourceClaimStatus = _EMPTY_STATUS
    finalizers: tuple[str, ...] = ()
    generate_name: str = ""  # the claim DRAExtendedResource makes is created by generateName
    # The object as last read: the write path's base for what the scheduler never changes (the
    # spec, labels, annotations, owners), sent back in a PUT; metadata the scheduler writes and the
    # whole status are taken from the typed fields (claim_to_api). Plugins never read it.
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @property
    def allocation(self) -> AllocationResult | None:
        return self.status.allocation

    def is_reserved_for(self, uid: str) -> bool:
        return any(r.uid == uid for r in self.status.reserved_for)


def parse_resource_claim(raw: Mapping[str, Any]) -> ResourceClaim:
    meta = as_mapping(raw.get("metadata"), "metadata")
    return ResourceClaim(
        metadata=parse_namespaced_meta(meta),
        spec=_claim_spec(raw.get("spec"), "spec"),
        status=_claim_status(raw.get("status")) if raw.get("status") else _EMPTY_STATUS,
        finalizers=_strings(meta.get("finalizers"), "metadata.finalizers"),
        generate_name=str(meta.get("generateName") or ""),
        raw=raw,
    )


# --- ResourceClaimTemplate --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResourceClaimTemplate:
    metadata: ObjectMeta
    spec: ResourceClaimSpec
    # The claims' spec as written: the base of the claims made from the template (simulate plays
    # the resourceclaim controller), sent as given when one is written. Plugins never read it.
    claim_spec_raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


def parse_resource_claim_template(raw: Mapping[str, Any]) -> ResourceClaimTemplate:
    spec = as_mapping(as_mapping(raw.get("spec"), "spec").get("spec"), "spec.spec")
    return ResourceClaimTemplate(
        parse_namespaced_meta(raw.get("metadata")), _claim_spec(spec, "spec.spec"), claim_spec_raw=spec
    )


# --- writes -----------------------------------------------------------------------------------


def _requirement_to_api(r: NodeSelectorRequirement) -> dict[str, Any]:
    out: dict[str, Any] = {"key": r.key, "operator": r.operator}
    if r.values:
        out["values"] = list(r.values)
    return out


def node_selector_to_api(selector: NodeSelector) -> dict[str, Any]:
    terms = []
    for term in selector.terms:
        out: dict[str, Any] = {}
        if term.match_expressions:
            out["matchExpressions"] = [_requirement_to_api(r) for r in term.match_expressions]
        if term.match_fields:
            out["matchFields"] = [_requirement_to_api(r) for r in term.match_fields]
        terms.append(out)
    return {"nodeSelectorTerms": terms}


def _format_quantity(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    milli = value * 1000
    return f"{-((-milli.numerator) // milli.denominator)}m"


def _result_to_api(r: DeviceRequestAllocationResult) -> dict[str, Any]:
    out: dict[str, Any] = {"request": r.request, "driver": r.driver, "pool": r.pool, "device": r.device}
    if r.admin_access:
        out["adminAccess"] = True
    if r.tolerations:
        out["tolerations"] = [t.to_api() for t in r.tolerations]
    if r.binding_conditions:
        out["bindingConditions"] = list(r.binding_conditions)
    if r.binding_failure_conditions:
        out["bindingFailureConditions"] = list(r.binding_failure_conditions)
    if r.share_id is not None:
        out["shareID"] = r.share_id
    if r.consumed_capacity:
        out["consumedCapacity"] = {k: _format_quantity(v) for k, v in r.consumed_capacity.items()}
    return out


def _config_to_api(c: AllocationConfiguration) -> dict[str, Any]:
    out: dict[str, Any] = {"source": c.source}
    if c.requests:
        out["requests"] = list(c.requests)
    if c.opaque is not None:
        out["opaque"] = dict(c.opaque)
    return out


def allocation_to_api(allocation: AllocationResult) -> dict[str, Any]:
    """``status.allocation`` as the API takes it: as stored when it was read, else from the fields."""
    if allocation.raw is not None:
        out = dict(allocation.raw)
    else:
        devices: dict[str, Any] = {"results": [_result_to_api(r) for r in allocation.results]}
        if allocation.config:
            devices["config"] = [_config_to_api(c) for c in allocation.config]
        out = {"devices": devices}
        if allocation.node_selector is not None:
            out["nodeSelector"] = node_selector_to_api(allocation.node_selector)
    if allocation.allocation_timestamp is not None:
        out["allocationTimestamp"] = allocation.allocation_timestamp
    return out


def _sub_request_to_api(r: DeviceSubRequest, named: bool) -> dict[str, Any]:
    if r.derived_attributes or any(s.expression is None for s in r.selectors):
        raise ValueError(f"device request {r.name!r}: a field this version does not parse cannot be written")
    out: dict[str, Any] = {"name": r.name} if named else {}
    out["deviceClassName"] = r.device_class_name
    if r.selectors:
        out["selectors"] = [{"cel": {"expression": s.expression}} for s in r.selectors]
    out["allocationMode"] = r.allocation_mode
    if r.allocation_mode == "ExactCount":
        out["count"] = r.count
    if r.admin_access:
        out["adminAccess"] = True
    if r.tolerations:
        out["tolerations"] = [t.to_api() for t in r.tolerations]
    if r.capacity_requests is not None:
        out["capacity"] = {"requests": {k: _format_quantity(v) for k, v in r.capacity_requests.items()}}
    return out


def device_request_to_api(r: DeviceRequest) -> dict[str, Any]:
    """A device request as the API takes it (``spec.devices.requests[]``), from its fields."""
    out: dict[str, Any] = {"name": r.name}
    if r.exactly is not None:
        out["exactly"] = _sub_request_to_api(r.exactly, named=False)
    if r.first_available:
        out["firstAvailable"] = [_sub_request_to_api(s, named=True) for s in r.first_available]
    return out


def claim_with_requests(claim: ResourceClaim, requests: Sequence[DeviceRequest]) -> ResourceClaim:
    """The claim asking for these devices and nothing else: the typed spec, and the write base's
    spec that ``claim_to_api`` sends made from the same fields (DRA's extended resources make the
    claim for each node so, in Filter: no parse per node)."""
    spec = {"devices": {"requests": [device_request_to_api(r) for r in requests]}}
    return dataclasses.replace(
        claim, spec=ResourceClaimSpec(tuple(requests)), raw={**claim.raw, "spec": spec}
    )


def claim_to_api(claim: ResourceClaim) -> dict[str, Any]:
    """The claim as an API object for a write: metadata the scheduler sets (name, uid, version,
    finalizers) and the whole status from the typed fields, the rest as last read."""
    meta = dict(claim.raw.get("metadata") or {})
    for key, value in (
        ("name", claim.metadata.name),
        ("generateName", claim.generate_name),
        ("namespace", claim.metadata.namespace),
        ("uid", claim.metadata.uid),
        ("resourceVersion", claim.metadata.resource_version),
    ):
        if value:
            meta[key] = value
        else:
            meta.pop(key, None)
    if claim.finalizers:
        meta["finalizers"] = list(claim.finalizers)
    else:
        meta.pop("finalizers", None)
    status: dict[str, Any] = {}
    if claim.status.allocation is not None:
        status["allocation"] = allocation_to_api(claim.status.allocation)
    if claim.status.reserved_for:
        status["reservedFor"] = [r.to_api() for r in claim.status.reserved_for]
    if claim.status.devices:
        status["devices"] = [dict(d.raw) for d in claim.status.devices]
    out: dict[str, Any] = {
        **claim.raw,
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": meta,
        "status": status,
    }
    out.setdefault("spec", {})
    return out
