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

import functools
import operator
import sys
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from kopf_scheduler.api.objects import Node
from kopf_scheduler.api.resource import (
    AllocationConfiguration,
    AllocationResult,
    Device,
    DeviceCapacity,
    DeviceClass,
    DeviceRequestAllocationResult,
    DeviceSelector,
    DeviceSubRequest,
    ResourceClaim,
    ResourceSlice,
)
from kopf_scheduler.api.types import NodeSelector, NodeSelectorRequirement, NodeSelectorTerm

from .cel import CelCache, CelError
from .features import Features
from .pools import Pool, PoolCache, PoolDevice, node_matches
from .state import AllocatedState, DeviceID

__all__ = ["ALLOCATION_RESULTS_MAX_SIZE", "AllocationError", "Allocator", "InvalidPoolsError"]

ALLOCATION_RESULTS_MAX_SIZE = 32  # resourceapi.AllocationResultsMaxSize


class AllocationError(Exception):
    """Allocation cannot succeed on any node; ``str()`` is the reference's error text."""


class InvalidPoolsError(AllocationError):
    """Not fatal: no solution on this node and some pool was invalid (ErrFailedAllocationOnNode)."""


class _MaxSizeExceeded(Exception):
    pass


def _kobj(claim: ResourceClaim) -> str:
    ns, name = claim.metadata.namespace, claim.metadata.name
    return f"{ns}/{name}" if ns else name


def _device_id_str(device: DeviceID) -> str:
    return "/".join(device)


@dataclass(slots=True)
class _Request:
    """A request or a subrequest of ``firstAvailable``, with what allocation learnt about it."""

    spec: DeviceSubRequest
    parent: str | None = None  # the parent request's name for a subrequest
    class_: DeviceClass | None = None
    num_devices: int = 0
    all_devices: list[PoolDevice] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def full_name(self) -> str:
        return f"{self.parent}/{self.name}" if self.parent is not None else self.name

    @property
    def class_name(self) -> str:
        return self.spec.device_class_name

    @property
    def mode(self) -> str:
        return self.spec.allocation_mode

    @property
    def count(self) -> int:
        return self.spec.count if self.mode == "ExactCount" else 0

    @property
    def admin_access(self) -> bool:
        return self.spec.admin_access

    @property
    def selectors(self) -> Sequence[DeviceSelector]:
        return self.spec.selectors

    @property
    def capacity_requests(self) -> Mapping[str, Fraction] | None:
        return self.spec.capacity_requests


@dataclass(slots=True)
class _Result:
    request: _Request
    device: PoolDevice
    share_id: str | None = None
    consumed: dict[str, Fraction] | None = None


@dataclass(slots=True)
class _Prepared:
    """A pod's claims as validated at one node, for the next (see ``Allocator._prepared``)."""

    claims: tuple[ResourceClaim, ...]
    requests: dict[tuple[int, int, int], _Request] = field(default_factory=dict)
    constraints: list[list[tuple[Collection[str], str, bool]]] = field(default_factory=list)
    error: str | None = None
    # A claim's allocation config by its index, once made, when no firstAvailable choice shapes it.
    configs: dict[int, tuple[AllocationConfiguration, ...]] = field(default_factory=dict)

    def fits(self, claims: Sequence[ResourceClaim]) -> bool:
        """Whether these are the same claims (the extended-resource one is made anew per node)."""
        return len(claims) == len(self.claims) and all(map(operator.is_, claims, self.claims))


class _Constraint:
    def __init__(self, requests: Collection[str], attribute: str, distinct: bool) -> None:
        self.requests = set(requests)
        self.attribute = attribute
        self.distinct = distinct
        self.values: list[tuple[str, Any]] = []

    def _applies(self, request: str, sub: str | None) -> bool:
        if not self.requests:
            return True
        return request in self.requests or (sub is not None and f"{request}/{sub}" in self.requests)

    def add(self, request: str, sub: str | None, device: PoolDevice) -> bool:
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

    def remove(self, request: str, sub: str | None, device: PoolDevice) -> None:
        if self._applies(request, sub):
            self.values.pop()


def _lookup_attribute(device: PoolDevice, name: str) -> tuple[str, Any] | None:
    attrs = device.spec.attributes
    attr = attrs.get(name)
    if attr is None:
        domain, sep, ident = name.partition("/")
        if not sep or domain != device.id[0]:
            return None
        attr = attrs.get(ident)
    if attr is None:
        return None
    return (attr.kind, attr.value)


def _taint_prevents(device: Device, request: _Request) -> bool:
    for taint in device.taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not any(
            t.tolerates(taint) for t in request.spec.tolerations
        ):
            return True
    return False


# --- consumable capacity --------------------------------------------------------------------------


def _consumed_for(requested: Fraction | None, capacity: DeviceCapacity) -> Fraction:
    policy = capacity.request_policy
    if requested is None:
        if policy is not None and policy.default is not None:
            return policy.default
        return capacity.value
    want = requested
    if policy is None:
        return want
    valid_range = policy.valid_range
    if valid_range is not None and valid_range.min is not None:
        low = valid_range.min
        if want < low:
            return low
        if valid_range.step is None:
            return want
        step = valid_range.step
        if step <= 0:
            return want
        n = -((-(want - low)) // step)
        return low + step * n
    for v in policy.valid_values:
        if want <= v:
            return v
    return want


def _violates_policy(amount: Fraction, capacity: DeviceCapacity) -> bool:
    policy = capacity.request_policy
    if policy is None:
        return False
    if policy.default is not None and amount == policy.default:
        return False
    valid_range = policy.valid_range
    if valid_range is not None:
        if valid_range.max is not None and amount > valid_range.max:
            return True
        if valid_range.step is not None and valid_range.min is not None:
            step = valid_range.step
            return step > 0 and ((amount - valid_range.min) / step).denominator != 1
        return False
    if policy.valid_values:
        return all(amount != v for v in policy.valid_values)
    return False


def _consumed_capacity(
    requests: Mapping[str, Fraction] | None, capacities: Mapping[str, DeviceCapacity]
) -> dict[str, Fraction]:
    return {n: _consumed_for((requests or {}).get(n), c) for n, c in capacities.items()}


def _fits_capacity(
    current: Mapping[str, Fraction],
    requests: Mapping[str, Fraction] | None,
    device: Device,
    allocating: Mapping[str, Fraction] | None,
) -> bool:
    capacities = device.capacity
    if requests and any(name not in capacities for name in requests):
        return False
    consumed = _consumed_capacity(requests, capacities)
    for name, cap in capacities.items():
        amount = consumed.get(name, Fraction(0))
        if amount < 0 or _violates_policy(amount, cap):
            return False
        total = current.get(name, Fraction(0)) + amount + (allocating or {}).get(name, Fraction(0))
        if total > cap.value:
            return False
    return True


@functools.lru_cache(maxsize=16384)
def _on_node(name: str) -> NodeSelector:
    """A node-local allocation's selector (immutable: one per node, shared by its allocations)."""
    return NodeSelector(
        (NodeSelectorTerm(match_fields=(NodeSelectorRequirement("metadata.name", "In", (name,)),)),)
    )


# --- the allocator ------------------------------------------------------------------------------


class Allocator:
    """Built once per scheduling cycle; ``allocate`` is called per node."""

    def __init__(
        self,
        features: Features,
        allocated_state: AllocatedState,
        classes: Mapping[str, DeviceClass],
        slices: Iterable[ResourceSlice],
        cel_cache: CelCache,
        pool_cache: PoolCache | None = None,
    ) -> None:
        self.features = features
        self.pool_cache = pool_cache if pool_cache is not None else PoolCache()
        self.allocated_state = allocated_state
        self.classes = classes
        self.cel_cache = cel_cache
        self.all_slices: list[ResourceSlice] = list(slices)
        self.slices_on_node: dict[str, list[ResourceSlice]] = {}
        self.slices_shared: list[ResourceSlice] = []
        for s in self.all_slices:
            if s.node_name:
                self.slices_on_node.setdefault(s.node_name, []).append(s)
            else:
                self.slices_shared.append(s)
        self._available_counters: dict[tuple[str, str], dict[str, dict[str, Fraction]]] = {}
        # What the pod's claims ask, validated (or the error that made them invalid), made at the
        # first node and reused for the others (the reference's allocator does it in its
        # constructor): it depends on the claims and classes only, unless a request asks for all
        # devices, whose number is the node's.
        self._prepared: _Prepared | None = None

    def allocate(self, node: Node, claims: Sequence[ResourceClaim]) -> list[AllocationResult] | None:
        run = _Run(self, node, claims)
        return run.allocate()

    def available_counters(self, pool: Pool) -> dict[str, dict[str, Fraction]]:
        found = self._available_counters.get(pool.id)
        if found is not None:
            return found
        available = {name: dict(counters) for name, counters in pool.counter_sets.items()}
        for group in (pool.slices_targeting_node, pool.slices_not_targeting_node):
            for s in group:
                for d in s.devices:
                    if not self.allocated_state.is_allocated((s.driver, s.pool.name, d.name)):
                        continue
                    for consumption in d.consumes_counters:
                        counters = available.get(consumption.counter_set)
                        if counters is None:
                            continue
                        for cname, amount in consumption.counters.items():
                            if cname in counters:
                                counters[cname] -= amount
        self._available_counters[pool.id] = available
        return available


class _Run:
    """One ``Allocate`` call: the search state for one node and one pod's claims."""

    def __init__(self, owner: Allocator, node: Node, claims: Sequence[ResourceClaim]) -> None:
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
        self.selected: dict[tuple[int, int], int] = {}  # (claim, request) -> firstAvailable's chosen one
        self.prepared: _Prepared | None = None  # the claims as validated at an earlier node, if reused

    # -- setup --

    def allocate(self) -> list[AllocationResult] | None:
        slices = self.a.slices_on_node.get(self.node.name, []) + self.a.slices_shared
        try:
            self.pools = self.a.pool_cache.get(slices, self.node, self.features, self.a.all_slices)
        except ValueError as exc:
            raise AllocationError(f"gather pool information: {exc}") from None
        prepared = self.a._prepared
        if prepared is not None and prepared.fits(self.claims):
            if prepared.error is not None:
                raise AllocationError(prepared.error)
            self.requests = prepared.requests
            self.constraints = [[_Constraint(*c) for c in specs] for specs in prepared.constraints]
            self.prepared = prepared
        else:
            self._prepare()
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

    def _prepare(self) -> None:
        """Validate the claims' requests and constraints; kept for the next nodes when that did not
        depend on this one's pools."""
        per_node = any(
            sub.allocation_mode == "All"
            for claim in self.claims
            for request in claim.spec.requests
            for sub in (request.first_available or (request.exactly or DeviceSubRequest(request.name, ""),))
        )
        try:
            for ci, claim in enumerate(self.claims):
                self._prepare_claim(ci, claim)
        except AllocationError as exc:
            if not per_node and type(exc) is AllocationError:
                self.a._prepared = _Prepared(tuple(self.claims), error=str(exc))
            raise
        if not per_node:
            constraints: list[list[tuple[Collection[str], str, bool]]] = [
                [(c.requests, c.attribute, c.distinct) for c in cs] for cs in self.constraints
            ]
            self.a._prepared = _Prepared(tuple(self.claims), self.requests, constraints)

    def _prepare_claim(self, ci: int, claim: ResourceClaim) -> None:
        spec = claim.spec
        min_devices = 0
        for ri, request in enumerate(spec.requests):
            name = request.name
            subs = request.first_available
            if subs and not self.features.prioritized_list:
                raise AllocationError(
                    f"claim {_kobj(claim)}, request {name}: has subrequests, "
                    "but the DRAPrioritizedList feature is disabled"
                )
            if subs:
                per_request = sys.maxsize
                for si, sub in enumerate(subs):
                    data = self._validate(ci, claim, _Request(sub, name), ri, si)
                    self.requests[(ci, ri, si)] = data
                    per_request = min(per_request, data.num_devices)
            else:
                exactly = request.exactly or DeviceSubRequest(name, "")
                data = self._validate(ci, claim, _Request(exactly), ri, 0)
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
        for i, c in enumerate(spec.constraints):
            if c.match_attribute:
                constraints.append(_Constraint(c.requests, c.match_attribute, False))
            elif c.distinct_attribute:
                constraints.append(_Constraint(c.requests, c.distinct_attribute, True))
            else:
                raise AllocationError(
                    f"claim {_kobj(claim)}, constraint #{i}: empty constraint (unsupported constraint type?)"
                )
        self.constraints.append(constraints)

    def _validate(self, ci: int, claim: ResourceClaim, req: _Request, ri: int, si: int) -> _Request:
        where = f"claim {_kobj(claim)}, request {req.name}"
        if req.spec.derived_attributes:
            raise AllocationError(
                f"{where}: cannot handle request with derived attributes, the feature is disabled"
            )
        for i, selector in enumerate(req.selectors):
            if selector.expression is None:
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
                    for device in pool.devices(slice_):
                        if not self._selectable(ci, ri, si, req, device):
                            continue
                        if self.features.consumable_capacity and not _fits_capacity(
                            {}, req.capacity_requests, device.spec, None
                        ):
                            continue
                        req.all_devices.append(device)
            req.num_devices = len(req.all_devices)
        else:
            raise AllocationError(f"{where}: unsupported count mode {req.mode}")
        return req

    # -- matching --

    def _selectable(self, ci: int, ri: int, si: int, req: _Request, device: PoolDevice) -> bool:
        spec = device.spec
        if not self.features.device_binding_and_status and spec.binding_conditions:
            return False
        key = (device.id, ci, ri, si)
        found = self.matches.get(key)
        if found is not None:
            return found
        result = self._selectors_match(
            ci, device, req.class_, req.class_.selectors if req.class_ is not None else ()
        ) and self._selectors_match(ci, device, None, req.selectors)
        if result and device.slice.per_device_node_selection:
            result = node_matches(self.node, spec.node_name, spec.all_nodes, spec.node_selector)
        self.matches[key] = result
        return result

    def _selectors_match(
        self, ci: int, device: PoolDevice, class_: DeviceClass | None, selectors: Iterable[DeviceSelector]
    ) -> bool:
        cel_cache = self.a.cel_cache
        for i, selector in enumerate(selectors):
            expression = selector.expression or ""
            compiled = cel_cache.get_or_compile(expression)
            if compiled.error is not None:
                where = self._selector_owner(ci, class_)
                raise AllocationError(f"{where}: selector #{i}: CEL compile error: {compiled.error}")
            try:
                if not cel_cache.device_matches(compiled, expression, device.id[0], device.spec):
                    return False
            except CelError as exc:
                where = self._selector_owner(ci, class_)
                raise AllocationError(
                    f"{where}: selector #{i} on device {_device_id_str(device.id)}: CEL runtime error: {exc}"
                ) from None
        return True

    def _selector_owner(self, ci: int, class_: DeviceClass | None) -> str:
        """Whose selector failed, for the error (written only then: matching runs per device)."""
        return f"class {class_.metadata.name}" if class_ is not None else f"claim {_kobj(self.claims[ci])}"

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

    def _fits_remaining(self, req: _Request, device: PoolDevice) -> bool:
        current = self.a.allocated_state.aggregated_capacity.get(device.id)
        if (
            current is None
            and req.capacity_requests is None
            and device.id not in self.allocating_capacity
            and not device.has_policy
        ):
            # Nothing requested and nothing consumed: what is taken is each capacity's whole value,
            # which fits.
            return True
        current = current or {}
        return _fits_capacity(
            current, req.capacity_requests, device.spec, self.allocating_capacity.get(device.id)
        )

    def _reserve_counters(self, device: PoolDevice) -> bool:
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

    def _add_counters(self, device: PoolDevice, consumed: dict[str, dict[str, Fraction]], sign: int) -> None:
        for consumption in device.spec.consumes_counters:
            target = consumed.setdefault(consumption.counter_set, {})
            for cname, amount in consumption.counters.items():
                target[cname] = target.get(cname, Fraction(0)) + sign * amount

    # -- the search --

    def _allocate_one(
        self, ci: int, ri: int, si: int, di: int, in_sub: bool, start: tuple[int, int, int]
    ) -> bool:
        if ci >= len(self.claims):
            return True
        if ri >= len(self.claims[ci].spec.requests):
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
                    self.selected[(ci, ri)] = sub
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

        admin_access = req.admin_access
        allocated = self.a.allocated_state.allocated_devices
        allocating = self.allocating
        capacity = self.features.consumable_capacity
        for pi in range(start[0], len(self.pools)):
            pool = self.pools[pi]
            if pool.incomplete or pool.invalid:
                continue
            slice_start = start[1] if pi == start[0] else 0
            for sli in range(slice_start, len(pool.slices_targeting_node)):
                slice_ = pool.slices_targeting_node[sli]
                devices = pool.devices(slice_)
                dev_start = start[2] if (pi == start[0] and sli == start[1]) else 0
                for dvi in range(dev_start, len(devices)):
                    device = devices[dvi]
                    if admin_access:
                        if ci in allocating.get(device.id, ()):
                            continue
                    elif device.id in allocated or allocating.get(device.id):  # in use (``_in_use``)
                        continue
                    if not self._selectable(ci, ri, si, req, device):
                        continue
                    if capacity and not self._fits_remaining(req, device):
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

    def _allocate_device(
        self, ci: int, ri: int, si: int, req: _Request, device: PoolDevice, must: bool
    ) -> Any:
        """Tentatively take the device; return an undo callable, or None when it cannot be taken."""
        multi = self.features.consumable_capacity and device.spec.allow_multiple_allocations
        if not multi and req.admin_access and ci in self.allocating.get(device.id, ()):
            return None
        if not req.admin_access and self._in_use(device.id):
            return None
        counters = device.spec.consumes_counters
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
        if self.features.device_taints and _taint_prevents(device.spec, req):
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
                consumed_capacity = _consumed_capacity(req.capacity_requests, device.spec.capacity)
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

    def _result(self, ci: int, claim: ResourceClaim) -> AllocationResult:
        binding = self.features.device_binding_and_status
        results = tuple(self._device_result(r, binding) for r in self.results[ci])
        prepared = self.prepared
        config = prepared.configs.get(ci) if prepared is not None else None
        if config is None:
            config = self._config(ci, claim)
            if prepared is not None and all(
                self.requests[(ci, ri, 0)].parent is None for ri in range(len(claim.spec.requests))
            ):
                prepared.configs[ci] = config
        return AllocationResult(results, config, self._node_selector(self.results[ci]))

    def _config(self, ci: int, claim: ResourceClaim) -> tuple[AllocationConfiguration, ...]:
        """The claim's configuration entries: its classes', then its own, for the requests chosen."""
        spec = claim.spec
        # Entries as (source, requests or None for "all of the claim's", opaque).
        config: list[tuple[str, list[str], Mapping[str, Any] | None]] = []
        class_ranges: dict[str, tuple[int, int]] = {}
        requests = spec.requests
        for ri in range(len(requests)):
            req = self.requests[(ci, ri, 0)]
            if req.parent is not None:
                req = self.requests[(ci, ri, self.selected.get((ci, ri), 0))]
            if req.class_ is None:
                continue
            cname = req.class_.metadata.name
            if cname in class_ranges:
                lo, hi = class_ranges[cname]
                for i in range(lo, hi):
                    config[i][1].append(req.full_name)
                continue
            lo = len(config)
            for opaque in req.class_.config:
                config.append(("FromClass", [req.full_name], opaque))
            class_ranges[cname] = (lo, len(config))
        for c in spec.config:
            wanted = list(c.requests)
            if not wanted:
                config.append(("FromClaim", [], c.opaque))
                continue
            for ri, request in enumerate(requests):
                if request.name in wanted:
                    config.append(("FromClaim", wanted, c.opaque))
                    break
                req = self.requests[(ci, ri, 0)]
                if req.parent is None:
                    continue
                chosen = self.requests[(ci, ri, self.selected.get((ci, ri), 0))]
                if chosen.full_name in wanted:
                    config.append(("FromClaim", wanted, c.opaque))
                    break
        out_config: list[AllocationConfiguration] = []
        for source, listed, opaque in config:
            if listed and self._covers_all(ci, listed):
                listed = []
            out_config.append(AllocationConfiguration(source, tuple(listed), opaque))
        return tuple(out_config)

    @staticmethod
    def _device_result(r: _Result, binding: bool) -> DeviceRequestAllocationResult:
        """One device's entry; a whole device's is kept on the device for the next pods (the same
        request name, tolerations and gate make the same entry: only a share differs per claim)."""
        request = r.request
        key: tuple[Any, ...] | None = None
        if r.share_id is None and not r.consumed:
            key = (request.full_name, request.admin_access, request.spec.tolerations, binding)
            found = r.device.results.get(key)
            if found is not None:
                return found
        device = r.device
        result = DeviceRequestAllocationResult(
            request=request.full_name,
            driver=device.id[0],
            pool=device.id[1],
            device=device.id[2],
            admin_access=request.admin_access,
            tolerations=request.spec.tolerations,
            binding_conditions=device.spec.binding_conditions if binding else (),
            binding_failure_conditions=device.spec.binding_failure_conditions if binding else (),
            share_id=r.share_id,
            consumed_capacity=r.consumed or {},
        )
        if key is not None:
            device.results[key] = result
        return result

    def _covers_all(self, ci: int, listed: Sequence[str]) -> bool:
        for ri, request in enumerate(self.claims[ci].spec.requests):
            if request.name in listed:
                continue
            req = self.requests[(ci, ri, 0)]
            if (
                req.parent is not None
                and self.requests[(ci, ri, self.selected.get((ci, ri), 0))].full_name in listed
            ):
                continue
            return False
        return True

    def _node_selector(self, results: list[_Result]) -> NodeSelector | None:
        fields: list[NodeSelectorRequirement] = []
        expressions: list[NodeSelectorRequirement] = []
        for r in results:
            slice_, device = r.device.slice, r.device.spec
            if slice_.per_device_node_selection:
                node_name, selector = device.node_name, device.node_selector
            else:
                node_name, selector = slice_.node_name, slice_.node_selector
            if node_name or device.binds_to_node:
                return _on_node(self.node.name)
            if selector is not None:
                terms = selector.terms
                if len(terms) == 1:
                    for src, dst in (
                        (terms[0].match_fields, fields),
                        (terms[0].match_expressions, expressions),
                    ):
                        for requirement in src:
                            if requirement not in dst:
                                dst.append(requirement)
                elif len(terms) > 1:
                    raise AllocationError(
                        "create NodeSelector for claim: unsupported ResourceSlice.NodeSelector "
                        f"with {len(terms)} terms"
                    )
        if not fields and not expressions:
            return None
        return NodeSelector((NodeSelectorTerm(tuple(expressions), tuple(fields)),))
