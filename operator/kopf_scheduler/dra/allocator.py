"""The structured-parameters allocator (the reference's "incubating" one, the v1.37.2 default).

Claims are allocated one after the other, each request's devices one after the other, by an
exhaustive backtracking search over the node's pools in a fixed order (pools by driver and name,
pools with binding conditions last; slices by name; devices as listed), trying only combinations,
not permutations, within one request. The first full solution wins: there is no scoring, so the
result is deterministic and equal to the reference's for the same objects.

Errors that make allocation impossible everywhere (an unknown class, a CEL runtime error, a claim
that asks for too many devices) raise :class:`AllocationError` with the reference's text; "does
not fit on this node" is ``None``.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from kopf_scheduler.api.objects import Node
from kopf_scheduler.api.quantity import QuantityError, parse_quantity

from .cel import CelCache, CelError
from .features import Features
from .pools import Pool, PoolCache, node_matches
from .state import AllocatedState, DeviceID

__all__ = ["ALLOCATION_RESULTS_MAX_SIZE", "AllocationError", "Allocator", "InvalidPoolsError"]

Raw = Mapping[str, Any]
ALLOCATION_RESULTS_MAX_SIZE = 32  # resourceapi.AllocationResultsMaxSize


class AllocationError(Exception):
    """Allocation cannot succeed on any node; ``str()`` is the reference's error text."""


class InvalidPoolsError(AllocationError):
    """Not fatal: no solution on this node and some pool was invalid (ErrFailedAllocationOnNode)."""


class _MaxSizeExceeded(Exception):
    pass


def _kobj(claim: Raw) -> str:
    meta = claim.get("metadata") or {}
    ns, name = meta.get("namespace") or "", meta.get("name") or ""
    return f"{ns}/{name}" if ns else str(name)


def _device_id_str(device: DeviceID) -> str:
    return "/".join(device)


@dataclass(slots=True)
class _Request:
    """A request or a subrequest of ``firstAvailable``, with what allocation learnt about it."""

    raw: Raw
    name: str
    parent: str | None = None  # the parent request's name for a subrequest
    class_: Raw | None = None
    num_devices: int = 0
    all_devices: list[_Device] = field(default_factory=list)
    selected_sub: int = 0

    @property
    def full_name(self) -> str:
        return f"{self.parent}/{self.name}" if self.parent is not None else self.name

    @property
    def class_name(self) -> str:
        return str(self.raw.get("deviceClassName") or "")

    @property
    def mode(self) -> str:
        return str(self.raw.get("allocationMode") or "ExactCount")

    @property
    def count(self) -> int:
        return int(self.raw.get("count", 1) or 1) if self.mode == "ExactCount" else 0

    @property
    def admin_access(self) -> bool:
        return bool(self.raw.get("adminAccess"))

    @property
    def selectors(self) -> Sequence[Raw]:
        return [s for s in self.raw.get("selectors") or () if isinstance(s, Mapping)]

    @property
    def tolerations(self) -> list[Raw]:
        return [t for t in self.raw.get("tolerations") or () if isinstance(t, Mapping)]

    @property
    def capacity_requests(self) -> Mapping[str, Any] | None:
        capacity = self.raw.get("capacity")
        if not isinstance(capacity, Mapping):
            return None
        requests = capacity.get("requests")
        return requests if isinstance(requests, Mapping) else None


@dataclass(slots=True, eq=False)
class _Device:
    id: DeviceID
    raw: Raw
    slice: Raw
    pool: Pool


@dataclass(slots=True)
class _Result:
    request: _Request
    device: _Device
    share_id: str | None = None
    consumed: dict[str, Fraction] | None = None


class _Constraint:
    def __init__(self, requests: Sequence[str], attribute: str, distinct: bool) -> None:
        self.requests = set(requests)
        self.attribute = attribute
        self.distinct = distinct
        self.values: list[tuple[str, Any]] = []

    def _applies(self, request: str, sub: str | None) -> bool:
        if not self.requests:
            return True
        return request in self.requests or (sub is not None and f"{request}/{sub}" in self.requests)

    def add(self, request: str, sub: str | None, device: _Device) -> bool:
        if not self._applies(request, sub):
            return True
        value = _lookup_attribute(device, self.attribute)
        if value is None:
            return False
        if self.distinct:
            if value in self.values:
                return False
        elif self.values and value != self.values[0]:
            return False
        self.values.append(value)
        return True

    def remove(self, request: str, sub: str | None, device: _Device) -> None:
        if self._applies(request, sub):
            self.values.pop()


def _lookup_attribute(device: _Device, name: str) -> tuple[str, Any] | None:
    attrs = device.raw.get("attributes") or {}
    attr = attrs.get(name)
    if attr is None:
        domain, sep, ident = name.partition("/")
        if not sep or domain != device.id[0]:
            return None
        attr = attrs.get(ident)
    if not isinstance(attr, Mapping):
        return None
    for kind in ("string", "int", "bool", "version"):
        if kind in attr:
            return (kind, attr[kind])
    return None


def _tolerates(toleration: Raw, taint: Raw) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return operator == "Exists"


def _taint_prevents(device: Raw, request: _Request) -> bool:
    for taint in device.get("taints") or ():
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(
            _tolerates(t, taint) for t in request.tolerations
        ):
            return True
    return False


def _q(value: Any) -> Fraction:
    try:
        return parse_quantity(value)
    except QuantityError:
        return Fraction(0)


def _format_quantity(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    milli = value * 1000
    return f"{-((-milli.numerator) // milli.denominator)}m"


# --- consumable capacity --------------------------------------------------------------------------


def _consumed_for(requested: Any | None, capacity: Raw) -> Fraction:
    policy = capacity.get("requestPolicy") if isinstance(capacity.get("requestPolicy"), Mapping) else None
    if requested is None:
        if policy and policy.get("default") is not None:
            return _q(policy["default"])
        return _q(capacity.get("value", 0))
    want = _q(requested)
    if policy is None:
        return want
    valid_range = policy.get("validRange")
    if isinstance(valid_range, Mapping) and valid_range.get("min") is not None:
        low = _q(valid_range["min"])
        if want < low:
            return low
        if valid_range.get("step") is None:
            return want
        step = _q(valid_range["step"])
        if step <= 0:
            return want
        n = -((-(want - low)) // step)
        return low + step * n
    valid_values = policy.get("validValues")
    if valid_values:
        for v in valid_values:
            if want <= _q(v):
                return _q(v)
    return want


def _violates_policy(amount: Fraction, capacity: Raw) -> bool:
    policy = capacity.get("requestPolicy")
    if not isinstance(policy, Mapping):
        return False
    if policy.get("default") is not None and amount == _q(policy["default"]):
        return False
    valid_range = policy.get("validRange")
    if isinstance(valid_range, Mapping):
        if valid_range.get("max") is not None and amount > _q(valid_range["max"]):
            return True
        if valid_range.get("step") is not None and valid_range.get("min") is not None:
            step = _q(valid_range["step"])
            return step > 0 and ((amount - _q(valid_range["min"])) / step).denominator != 1
        return False
    valid_values = policy.get("validValues")
    if valid_values:
        return all(amount != _q(v) for v in valid_values)
    return False


def _consumed_capacity(requests: Mapping[str, Any] | None, capacities: Raw) -> dict[str, Fraction]:
    return {
        str(n): _consumed_for((requests or {}).get(n), c)
        for n, c in capacities.items()
        if isinstance(c, Mapping)
    }


def _fits_capacity(
    current: Mapping[str, Fraction],
    requests: Mapping[str, Any] | None,
    device: Raw,
    allocating: Mapping[str, Fraction] | None,
) -> bool:
    capacities = device.get("capacity") or {}
    if requests and any(name not in capacities for name in requests):
        return False
    consumed = _consumed_capacity(requests, capacities)
    for name, cap in capacities.items():
        amount = consumed.get(str(name), Fraction(0))
        if amount < 0 or _violates_policy(amount, cap):
            return False
        total = current.get(str(name), Fraction(0)) + amount + (allocating or {}).get(str(name), Fraction(0))
        if total > _q(cap.get("value", 0)):
            return False
    return True


# --- the allocator ------------------------------------------------------------------------------


class Allocator:
    """Built once per scheduling cycle; ``allocate`` is called per node."""

    def __init__(
        self,
        features: Features,
        allocated_state: AllocatedState,
        classes: Mapping[str, Raw],
        slices: Iterable[Raw],
        cel_cache: CelCache,
        pool_cache: PoolCache | None = None,
    ) -> None:
        self.features = features
        self.pool_cache = pool_cache if pool_cache is not None else PoolCache()
        self.allocated_state = allocated_state
        self.classes = classes
        self.cel_cache = cel_cache
        self.all_slices: list[Raw] = list(slices)
        self.slices_on_node: dict[str, list[Raw]] = {}
        self.slices_shared: list[Raw] = []
        for s in self.all_slices:
            node_name = (s.get("spec") or {}).get("nodeName")
            if node_name:
                self.slices_on_node.setdefault(str(node_name), []).append(s)
            else:
                self.slices_shared.append(s)
        self._available_counters: dict[tuple[str, str], dict[str, dict[str, Fraction]]] = {}

    def allocate(self, node: Node, claims: Sequence[Raw]) -> list[dict[str, Any]] | None:
        run = _Run(self, node, claims)
        return run.allocate()

    def available_counters(self, pool: Pool) -> dict[str, dict[str, Fraction]]:
        found = self._available_counters.get(pool.id)
        if found is not None:
            return found
        available = {name: dict(counters) for name, counters in pool.counter_sets.items()}
        for group in (pool.slices_targeting_node, pool.slices_not_targeting_node):
            for s in group:
                spec = s.get("spec") or {}
                for d in spec.get("devices") or ():
                    device_id = (
                        str(spec.get("driver", "")),
                        str((spec.get("pool") or {}).get("name", "")),
                        str(d.get("name", "")),
                    )
                    if not self.allocated_state.is_allocated(device_id):
                        continue
                    for consumption in d.get("consumesCounters") or ():
                        counters = available.get(str(consumption.get("counterSet", "")))
                        if counters is None:
                            continue
                        for cname, c in (consumption.get("counters") or {}).items():
                            if cname in counters:
                                counters[cname] -= _q((c or {}).get("value", 0))
        self._available_counters[pool.id] = available
        return available


class _Run:
    """One ``Allocate`` call: the search state for one node and one pod's claims."""

    def __init__(self, owner: Allocator, node: Node, claims: Sequence[Raw]) -> None:
        self.a = owner
        self.features = owner.features
        self.node = node
        self.claims = list(claims)
        self.pools: list[Pool] = []
        self.requests: dict[tuple[int, int, int], _Request] = {}
        self.constraints: list[list[_Constraint]] = []
        self.matches: dict[tuple[DeviceID, int, int, int], bool] = {}
        self.allocating: dict[DeviceID, set[int]] = {}
        self.allocating_capacity: dict[DeviceID, dict[str, Fraction]] = {}
        self.consumed_counters: dict[tuple[str, str], dict[str, dict[str, Fraction]]] = {}
        self.results: list[list[_Result]] = [[] for _ in self.claims]
        self.devices: dict[int, list[_Device]] = {}  # id(slice) -> its devices (slices outlive the run)

    # -- setup --

    def allocate(self) -> list[dict[str, Any]] | None:
        slices = self.a.slices_on_node.get(self.node.name, []) + self.a.slices_shared
        try:
            self.pools = self.a.pool_cache.get(slices, self.node, self.features, self.a.all_slices)
        except ValueError as exc:
            raise AllocationError(f"gather pool information: {exc}") from None
        for ci, claim in enumerate(self.claims):
            self._prepare_claim(ci, claim)
        limit = sys.getrecursionlimit()
        if limit < 10_000:
            sys.setrecursionlimit(10_000)
        try:
            done = self._allocate_one(0, 0, 0, 0, False, (0, 0, 0))
        except _MaxSizeExceeded:
            done = False
        if not done:
            if any(p.invalid for p in self.pools):
                raise InvalidPoolsError("invalid resource pools were encountered")
            return None
        return [self._result(ci, claim) for ci, claim in enumerate(self.claims)]

    def _prepare_claim(self, ci: int, claim: Raw) -> None:
        devices = ((claim.get("spec") or {}).get("devices")) or {}
        min_devices = 0
        for ri, request in enumerate(devices.get("requests") or ()):
            name = str(request.get("name", ""))
            subs = request.get("firstAvailable") or []
            if subs and not self.features.prioritized_list:
                raise AllocationError(
                    f"claim {_kobj(claim)}, request {name}: has subrequests, "
                    "but the DRAPrioritizedList feature is disabled"
                )
            if subs:
                per_request = sys.maxsize
                for si, sub in enumerate(subs):
                    data = self._validate(ci, claim, _Request(sub, str(sub.get("name", "")), name), ri, si)
                    self.requests[(ci, ri, si)] = data
                    per_request = min(per_request, data.num_devices)
            else:
                exactly = request.get("exactly") or {}
                data = self._validate(ci, claim, _Request(exactly, name), ri, 0)
                self.requests[(ci, ri, 0)] = data
                per_request = data.num_devices
            if per_request > ALLOCATION_RESULTS_MAX_SIZE - min_devices:
                raise AllocationError(
                    f"claim {_kobj(claim)}, request {name}: adding {per_request} devices exceeds the claim "
                    "limit "
                    f"of {ALLOCATION_RESULTS_MAX_SIZE}, with {min_devices} already accounted for"
                )
            min_devices += per_request
        constraints: list[_Constraint] = []
        for i, c in enumerate(devices.get("constraints") or ()):
            requests = [str(r) for r in c.get("requests") or ()]
            if c.get("matchAttribute"):
                constraints.append(_Constraint(requests, str(c["matchAttribute"]), False))
            elif c.get("distinctAttribute"):
                constraints.append(_Constraint(requests, str(c["distinctAttribute"]), True))
            else:
                raise AllocationError(
                    f"claim {_kobj(claim)}, constraint #{i}: empty constraint (unsupported constraint type?)"
                )
        self.constraints.append(constraints)

    def _validate(self, ci: int, claim: Raw, req: _Request, ri: int, si: int) -> _Request:
        where = f"claim {_kobj(claim)}, request {req.name}"
        if req.raw.get("derivedAttributes"):
            raise AllocationError(
                f"{where}: cannot handle request with derived attributes, the feature is disabled"
            )
        for i, selector in enumerate(req.selectors):
            if not isinstance(selector.get("cel"), Mapping):
                raise AllocationError(
                    f"{where}, selector #{i}: CEL expression empty (unsupported selector type?)"
                )
        if not self.features.admin_access and req.admin_access:
            raise AllocationError(f"{where}: admin access is requested, but the feature is disabled")
        if not self.features.consumable_capacity and req.capacity_requests is not None:
            raise AllocationError(
                f"{where}: has capacity requests, but the DRAConsumableCapacity feature is disabled"
            )
        if not req.class_name:
            raise AllocationError(f"{where}: missing device class name (unsupported request type?)")
        class_ = self.a.classes.get(req.class_name)
        if class_ is None:
            raise AllocationError(
                f"{where}: could not retrieve device class {req.class_name}: "
                f'deviceclass.resource.k8s.io "{req.class_name}" not found'
            )
        req.class_ = class_
        if req.mode == "ExactCount":
            req.num_devices = req.count
        elif req.mode == "All":
            for pool in self.pools:
                if pool.incomplete:
                    raise AllocationError(
                        f"{where}: asks for all devices, but resource pool {pool.driver}/{pool.pool} "
                        "is currently being updated"
                    )
                if pool.invalid:
                    raise AllocationError(
                        f"{where}: asks for all devices, but resource pool {pool.driver}/{pool.pool} "
                        "is currently invalid"
                    )
                for slice_ in pool.slices_targeting_node:
                    for device in self._slice_devices(slice_, pool):
                        if not self._selectable(ci, ri, si, req, device):
                            continue
                        if self.features.consumable_capacity and not _fits_capacity(
                            {}, req.capacity_requests, device.raw, None
                        ):
                            continue
                        req.all_devices.append(device)
            req.num_devices = len(req.all_devices)
        else:
            raise AllocationError(f"{where}: unsupported count mode {req.mode}")
        return req

    def _slice_devices(self, slice_: Raw, pool: Pool) -> list[_Device]:
        """The slice's devices, made once per allocation: the search walks them at every level."""
        found = self.devices.get(id(slice_))
        if found is None:
            found = self.devices[id(slice_)] = self._make_devices(slice_, pool)
        return found

    def _make_devices(self, slice_: Raw, pool: Pool) -> list[_Device]:
        return [
            _Device((pool.driver, pool.pool, str(d.get("name", ""))), d, slice_, pool)
            for d in (slice_.get("spec") or {}).get("devices") or ()
            if isinstance(d, Mapping)
        ]

    # -- matching --

    def _selectable(self, ci: int, ri: int, si: int, req: _Request, device: _Device) -> bool:
        raw = device.raw
        if not self.features.device_binding_and_status and raw.get("bindingConditions"):
            return False
        key = (device.id, ci, ri, si)
        found = self.matches.get(key)
        if found is not None:
            return found
        result = self._selectors_match(
            ci, device, req.class_, ((req.class_ or {}).get("spec") or {}).get("selectors") or ()
        ) and self._selectors_match(ci, device, None, req.selectors)
        if result and (device.slice.get("spec") or {}).get("perDeviceNodeSelection"):
            try:
                result = node_matches(
                    self.node,
                    str(raw.get("nodeName") or ""),
                    bool(raw.get("allNodes")),
                    raw.get("nodeSelector"),
                )
            except ValueError as exc:
                raise AllocationError(str(exc)) from None
        self.matches[key] = result
        return result

    def _selectors_match(
        self, ci: int, device: _Device, class_: Raw | None, selectors: Iterable[Raw]
    ) -> bool:
        for i, selector in enumerate(selectors):
            expression = str((selector.get("cel") or {}).get("expression", ""))
            where = (
                f"class {(class_.get('metadata') or {}).get('name', '')}"
                if class_ is not None
                else f"claim {_kobj(self.claims[ci])}"
            )
            compiled = self.a.cel_cache.get_or_compile(expression)
            if compiled.error is not None:
                raise AllocationError(f"{where}: selector #{i}: CEL compile error: {compiled.error}")
            try:
                if not self.a.cel_cache.device_matches(compiled, expression, device.id[0], device.raw):
                    return False
            except CelError as exc:
                raise AllocationError(
                    f"{where}: selector #{i} on device {_device_id_str(device.id)}: CEL runtime error: {exc}"
                ) from None
        return True

    # -- in-use bookkeeping --

    def _in_use(self, device: DeviceID) -> bool:
        return device in self.a.allocated_state.allocated_devices or bool(self.allocating.get(device))

    def _capacity_in_use(self, device: DeviceID) -> bool:
        state = self.a.allocated_state
        if device in state.aggregated_capacity:
            return True
        if any(s[:3] == device for s in state.allocated_shared_device_ids):
            return True
        return device in self.allocating_capacity

    def _fits_remaining(self, req: _Request, device: _Device) -> bool:
        current = self.a.allocated_state.aggregated_capacity.get(device.id)
        if (
            current is None
            and req.capacity_requests is None
            and device.id not in self.allocating_capacity
            and not any(
                isinstance(c, Mapping) and "requestPolicy" in c
                for c in (device.raw.get("capacity") or {}).values()
            )
        ):
            # Nothing requested and nothing consumed: what is taken is each capacity's whole value,
            # which fits.
            return True
        current = current or {}
        return _fits_capacity(
            current, req.capacity_requests, device.raw, self.allocating_capacity.get(device.id)
        )

    def _reserve_counters(self, device: _Device) -> bool:
        available = self.a.available_counters(device.pool)
        consumed = self.consumed_counters.setdefault(device.pool.id, {})
        self._add_counters(device, consumed, 1)
        for set_name, counters in available.items():
            used = consumed.get(set_name, {})
            for cname, have in counters.items():
                if have < used.get(cname, Fraction(0)):
                    self._add_counters(device, consumed, -1)
                    return False
        return True

    def _add_counters(self, device: _Device, consumed: dict[str, dict[str, Fraction]], sign: int) -> None:
        for consumption in device.raw.get("consumesCounters") or ():
            target = consumed.setdefault(str(consumption.get("counterSet", "")), {})
            for cname, c in (consumption.get("counters") or {}).items():
                target[cname] = target.get(cname, Fraction(0)) + sign * _q((c or {}).get("value", 0))

    # -- the search --

    def _allocate_one(
        self, ci: int, ri: int, si: int, di: int, in_sub: bool, start: tuple[int, int, int]
    ) -> bool:
        if ci >= len(self.claims):
            return True
        claim = self.claims[ci]
        requests = (((claim.get("spec") or {}).get("devices")) or {}).get("requests") or ()
        if ri >= len(requests):
            try:
                return self._allocate_one(ci + 1, 0, 0, 0, False, (0, 0, 0))
            except _MaxSizeExceeded:
                return False
        req = self.requests[(ci, ri, si)]
        if not in_sub and req.parent is not None:
            all_exceeded = True
            sub = 0
            while (ci, ri, sub) in self.requests:
                try:
                    success = self._allocate_one(ci, ri, sub, di, True, (0, 0, 0))
                except _MaxSizeExceeded:
                    sub += 1
                    continue
                all_exceeded = False
                if success:
                    self.requests[(ci, ri, 0)].selected_sub = sub
                    return True
                sub += 1
            if all_exceeded:
                raise _MaxSizeExceeded
            return False

        do_all = req.mode == "All"
        if do_all and not req.all_devices:
            return False
        if di >= req.num_devices:
            return self._allocate_one(ci, ri + 1, 0, 0, False, (0, 0, 0))
        if req.num_devices - di > ALLOCATION_RESULTS_MAX_SIZE - len(self.results[ci]):
            raise _MaxSizeExceeded
        if do_all:
            device = req.all_devices[di]
            undo = self._allocate_device(ci, ri, si, req, device, must=True)
            if undo is None:
                return False
            try:
                done = self._allocate_one(ci, ri, si, di + 1, in_sub, (0, 0, 0))
            except BaseException:
                undo()
                raise
            if not done:
                undo()
            return done

        for pi in range(start[0], len(self.pools)):
            pool = self.pools[pi]
            if pool.incomplete or pool.invalid:
                continue
            slice_start = start[1] if pi == start[0] else 0
            for sli in range(slice_start, len(pool.slices_targeting_node)):
                slice_ = pool.slices_targeting_node[sli]
                devices = self._slice_devices(slice_, pool)
                dev_start = start[2] if (pi == start[0] and sli == start[1]) else 0
                for dvi in range(dev_start, len(devices)):
                    device = devices[dvi]
                    if req.admin_access:
                        if ci in self.allocating.get(device.id, ()):
                            continue
                    elif self._in_use(device.id):
                        continue
                    if not self._selectable(ci, ri, si, req, device):
                        continue
                    if self.features.consumable_capacity and not self._fits_remaining(req, device):
                        continue
                    undo = self._allocate_device(ci, ri, si, req, device, must=False)
                    if undo is None:
                        continue
                    try:
                        done = self._allocate_one(ci, ri, si, di + 1, in_sub, (pi, sli, dvi + 1))
                    except BaseException:
                        undo()
                        raise
                    if done:
                        return True
                    undo()
        return False

    def _allocate_device(self, ci: int, ri: int, si: int, req: _Request, device: _Device, must: bool) -> Any:
        """Tentatively take the device; return an undo callable, or None when it cannot be taken."""
        multi = self.features.consumable_capacity and bool(device.raw.get("allowMultipleAllocations"))
        if not multi and req.admin_access and ci in self.allocating.get(device.id, ()):
            return None
        if not req.admin_access and self._in_use(device.id):
            return None
        counters = device.raw.get("consumesCounters")
        if not self.features.partitionable_devices and counters:
            return None
        undo_steps: list[Any] = []

        def undo() -> None:
            for step in reversed(undo_steps):
                step()

        skip_counters = multi and self._capacity_in_use(device.id)
        if not skip_counters and counters:
            if not self._reserve_counters(device):
                return None
            consumed = self.consumed_counters[device.pool.id]
            undo_steps.append(lambda: self._add_counters(device, consumed, -1))
        base, sub = (req.parent, req.name) if req.parent is not None else (req.name, None)
        if self.features.device_taints and _taint_prevents(device.raw, req):
            undo()
            return None
        for constraint in self.constraints[ci]:
            if not constraint.add(base, sub, device):
                undo()
                if must:
                    raise AllocationError(
                        f"claim {_kobj(self.claims[ci])}, request {req.name}: cannot add device "
                        f"{_device_id_str(device.id)} because a claim constraint would not be satisfied"
                    )
                return None
            undo_steps.append(lambda c=constraint: c.remove(base, sub, device))
        if not multi:
            holders = self.allocating.setdefault(device.id, set())
            holders.add(ci)
            undo_steps.append(lambda: holders.discard(ci))
        share_id: str | None = None
        consumed_capacity: dict[str, Fraction] | None = None
        if self.features.consumable_capacity:
            if not self._fits_remaining(req, device):
                undo()
                return None
            if multi:
                consumed_capacity = _consumed_capacity(
                    req.capacity_requests, device.raw.get("capacity") or {}
                )
                share_id = str(uuid.uuid4())
                existed = device.id in self.allocating_capacity
                total = self.allocating_capacity.setdefault(device.id, {})
                for name, amount in consumed_capacity.items():
                    total[name] = total.get(name, Fraction(0)) + amount

                def release(
                    total: dict[str, Fraction] = total, amounts: dict[str, Fraction] = consumed_capacity
                ) -> None:
                    for name, amount in amounts.items():
                        total[name] -= amount
                    if not existed:
                        self.allocating_capacity.pop(device.id, None)

                undo_steps.append(release)
        results = self.results[ci]
        results.append(_Result(req, device, share_id, consumed_capacity or None))
        undo_steps.append(results.pop)
        return undo

    # -- the result --

    def _result(self, ci: int, claim: Raw) -> dict[str, Any]:
        devices = ((claim.get("spec") or {}).get("devices")) or {}
        out_results: list[dict[str, Any]] = []
        for r in self.results[ci]:
            item: dict[str, Any] = {
                "request": r.request.full_name,
                "driver": r.device.id[0],
                "pool": r.device.id[1],
                "device": r.device.id[2],
            }
            if r.request.admin_access:
                item["adminAccess"] = True
            if r.request.tolerations:
                item["tolerations"] = [dict(t) for t in r.request.tolerations]
            if self.features.device_binding_and_status:
                if r.device.raw.get("bindingConditions"):
                    item["bindingConditions"] = list(r.device.raw["bindingConditions"])
                if r.device.raw.get("bindingFailureConditions"):
                    item["bindingFailureConditions"] = list(r.device.raw["bindingFailureConditions"])
            if r.share_id is not None:
                item["shareID"] = r.share_id
            if r.consumed:
                item["consumedCapacity"] = {k: _format_quantity(v) for k, v in r.consumed.items()}
            out_results.append(item)

        config: list[dict[str, Any]] = []
        class_ranges: dict[str, tuple[int, int]] = {}
        requests = list(devices.get("requests") or ())
        for ri in range(len(requests)):
            req = self.requests[(ci, ri, 0)]
            if req.parent is not None:
                req = self.requests[(ci, ri, req.selected_sub)]
            if req.class_ is None:
                continue
            cname = str((req.class_.get("metadata") or {}).get("name", ""))
            if cname in class_ranges:
                lo, hi = class_ranges[cname]
                for i in range(lo, hi):
                    config[i]["requests"].append(req.full_name)
                continue
            lo = len(config)
            for c in ((req.class_.get("spec") or {}).get("config")) or ():
                entry = {"source": "FromClass", "requests": [req.full_name]}
                entry.update({k: v for k, v in c.items() if k != "requests"})
                config.append(entry)
            class_ranges[cname] = (lo, len(config))
        for c in devices.get("config") or ():
            wanted = list(c.get("requests") or ())
            body = {k: v for k, v in c.items() if k != "requests"}
            if not wanted:
                config.append({"source": "FromClaim", **body})
                continue
            for ri, request in enumerate(requests):
                if request.get("name") in wanted:
                    config.append({"source": "FromClaim", "requests": wanted, **body})
                    break
                req = self.requests[(ci, ri, 0)]
                if req.parent is None:
                    continue
                chosen = self.requests[(ci, ri, req.selected_sub)]
                if chosen.full_name in wanted:
                    config.append({"source": "FromClaim", "requests": wanted, **body})
                    break
        for entry in config:
            listed = entry.get("requests")
            if not listed:
                continue
            covers_all = True
            for ri, request in enumerate(requests):
                if request.get("name") in listed:
                    continue
                req = self.requests[(ci, ri, 0)]
                if req.parent is not None and self.requests[(ci, ri, req.selected_sub)].full_name in listed:
                    continue
                covers_all = False
                break
            if covers_all:
                del entry["requests"]

        allocation: dict[str, Any] = {"devices": {"results": out_results}}
        if config:
            allocation["devices"]["config"] = config
        selector = self._node_selector(self.results[ci])
        if selector is not None:
            allocation["nodeSelector"] = selector
        return allocation

    def _node_selector(self, results: list[_Result]) -> dict[str, Any] | None:
        fields: list[Raw] = []
        expressions: list[Raw] = []
        for r in results:
            spec = r.device.slice.get("spec") or {}
            if spec.get("perDeviceNodeSelection"):
                node_name, selector = r.device.raw.get("nodeName"), r.device.raw.get("nodeSelector")
            else:
                node_name, selector = spec.get("nodeName"), spec.get("nodeSelector")
            if node_name or r.device.raw.get("bindsToNode"):
                return {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [self.node.name]}
                            ]
                        }
                    ]
                }
            if isinstance(selector, Mapping):
                terms = selector.get("nodeSelectorTerms") or []
                if len(terms) == 1:
                    for src, dst in (
                        (terms[0].get("matchFields"), fields),
                        (terms[0].get("matchExpressions"), expressions),
                    ):
                        for requirement in src or ():
                            if requirement not in dst:
                                dst.append(requirement)
                elif len(terms) > 1:
                    raise AllocationError(
                        "create NodeSelector for claim: unsupported ResourceSlice.NodeSelector "
                        f"with {len(terms)} terms"
                    )
        if not fields and not expressions:
            return None
        term: dict[str, Any] = {}
        if expressions:
            term["matchExpressions"] = [dict(e) for e in expressions]
        if fields:
            term["matchFields"] = [dict(f) for f in fields]
        return {"nodeSelectorTerms": [term]}
