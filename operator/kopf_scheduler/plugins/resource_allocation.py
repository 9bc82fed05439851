"""Shared resource scorer for NodeResourcesFit and NodeResourcesBalancedAllocation.

Mirrors the reference's ``resourceAllocationScorer``: per configured resource it derives the
node's allocatable, what is already requested there (allocated) and allocated + the pod's request
(requested), skipping resources the node does not offer (allocatable 0) and scalar resources the
pod does not request, then hands the three lists to a scorer (only BalancedAllocation reads
``allocated``: since 1.37 it scores the change in balance the pod brings).
Every scorer exists twice, scalar (the reference) and numpy over snapshot rows (speed); the
arithmetic is integer (or IEEE float in the same order) so both agree exactly.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from kopf_scheduler.api import kinds
from kopf_scheduler.api.types import CPU, EPHEMERAL_STORAGE, MEMORY, Resource
from kopf_scheduler.config.profile import ARGS_CONFIG
from kopf_scheduler.dra.extended import is_dra_extended_resource_name
from kopf_scheduler.framework import signers
from kopf_scheduler.framework.interface import MAX_NODE_SCORE, Handle, SignFragments, Status
from kopf_scheduler.framework.snapshot import BASE_COLUMNS

if TYPE_CHECKING:
    from kopf_scheduler.api.objects import Pod
    from kopf_scheduler.framework.snapshot import Snapshot
    from kopf_scheduler.framework.types import NodeInfo

__all__ = [
    "MAX_CUSTOM_PRIORITY_SCORE",
    "MAX_UTILIZATION",
    "ResourceAllocationScorer",
    "ResourceSpec",
    "UtilizationShapePoint",
    "balance",
    "balance_vector",
    "balanced_score",
    "balanced_score_vector",
    "broken_linear",
    "is_extended_resource_name",
    "is_scalar_resource_name",
    "least_requested_score",
    "most_requested_score",
    "sign_resources",
    "validate_qualified_name",
]

MAX_UTILIZATION = 100
MAX_CUSTOM_PRIORITY_SCORE = 10

@dataclass
class ResourceSpec:
    """A scored resource and its weight; weight 0 defaults to 1 as the v1 defaulting does."""

    __pydantic_config__ = ARGS_CONFIG

    name: str
    weight: int = 1

    def __post_init__(self) -> None:
        if self.weight == 0:
            self.weight = 1


@dataclass
class UtilizationShapePoint:
    __pydantic_config__ = ARGS_CONFIG

    utilization: int
    score: int


def default_resources() -> list[ResourceSpec]:
    return [ResourceSpec(name=CPU, weight=1), ResourceSpec(name=MEMORY, weight=1)]


# --- resource names (schedutil / v1helper) ------------------------------------------------------

_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def validate_qualified_name(value: str) -> str | None:
    """``ValidateLabelName``: an optional DNS-1123 prefix, '/', and a name of at most 63 chars."""
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return "prefix part must be non-empty"
        if len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix):
            return "prefix part must be a valid DNS-1123 subdomain"
    else:
        return "a qualified name must have at most one '/' separating an optional prefix from the name"
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _QUALIFIED_NAME.match(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character"
        )
    return None


def _is_native(name: str) -> bool:
    return "/" not in name or "kubernetes.io/" in name


def is_extended_resource_name(name: str) -> bool:
    """``v1helper.IsExtendedResourceName``: domain-qualified, not native, not a quota name."""
    if _is_native(name) or name.startswith("requests."):
        return False
    return validate_qualified_name("requests." + name) is None


def is_scalar_resource_name(name: str) -> bool:
    """``schedutil.IsScalarResourceName``: extended, hugepages, prefixed native, attachable volumes."""
    return (
        is_extended_resource_name(name)
        or name.startswith("hugepages-")
        or "kubernetes.io/" in name
        or name.startswith("attachable-volumes-")
    )


# --- scorers -------------------------------------------------------------------------------------


def _trunc_div(a: int, b: int) -> int:
    """Go's integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def least_requested_score(requested: int, capacity: int) -> int:
    if capacity == 0 or requested > capacity:
        return 0
    return ((capacity - requested) * MAX_NODE_SCORE) // capacity


def most_requested_score(requested: int, capacity: int) -> int:
    if capacity == 0:
        return 0
    # Pods without requests get defaults, so requested may exceed capacity.
    requested = min(requested, capacity)
    return (requested * MAX_NODE_SCORE) // capacity


def broken_linear(shape: Sequence[tuple[int, int]], p: int) -> int:
    """``helper.BuildBrokenLinearFunction`` over (utilization, score) points."""
    for i, (util, score) in enumerate(shape):
        if p <= util:
            if i == 0:
                return score
            pu, ps = shape[i - 1]
            return ps + _trunc_div((score - ps) * (p - pu), util - pu)
    return shape[-1][1]


def balanced_score(requested: Sequence[int], allocated: Sequence[int], allocatable: Sequence[int]) -> int:
    """``balancedResourceScorer`` (1.37): 50 plus half of (50 + balance with pod - balance without).

    So a pod that leaves the balance unchanged scores 75, one that improves it more, one that worsens
    it less; the division truncates toward zero as Go's does.
    """
    with_pod = balance(requested, allocatable)
    without_pod = balance(allocated, allocatable)
    half = MAX_NODE_SCORE // 2
    return half + _trunc_div(half + with_pod - without_pod, 2)


def balance(requested: Sequence[int], allocatable: Sequence[int]) -> int:
    """The reference's std-dev based balance (``balancedResourceScore``): ``int((1 - std) * 100)``."""
    fractions: list[float] = []
    total = 0.0
    for req, alloc in zip(requested, allocatable, strict=True):
        if alloc == 0:
            continue
        fraction = float(req) / float(alloc)
        if fraction > 1:
            fraction = 1.0
        total += fraction
        fractions.append(fraction)
    std = 0.0
    if len(fractions) == 2:
        std = abs((fractions[0] - fractions[1]) / 2)
    elif len(fractions) > 2:
        mean = total / len(fractions)
        acc = 0.0
        for fraction in fractions:
            acc = acc + (fraction - mean) * (fraction - mean)
        std = float(np.sqrt(acc / len(fractions)))
    return int((1 - std) * MAX_NODE_SCORE)


def balanced_score_vector(
    requested: Sequence[np.ndarray], allocated: Sequence[np.ndarray], allocatable: Sequence[np.ndarray]
) -> np.ndarray:
    """Per-resource columns over rows -> scores, bit-identical to ``balanced_score``."""
    half = MAX_NODE_SCORE // 2
    if len(allocatable) == 2 and bool(allocatable[0].all()) and bool(allocatable[1].all()):
        # The default resources (cpu, memory) offered on every row: one formula for all rows, the
        # allocatables converted once for both balances.
        d0, d1 = allocatable[0].astype(np.float64), allocatable[1].astype(np.float64)
        diff = half + _balance_of_two(requested, d0, d1) - _balance_of_two(allocated, d0, d1)
    else:
        diff = half + balance_vector(requested, allocatable) - balance_vector(allocated, allocatable)
    # Go's division truncates toward zero; numpy's // floors.
    out: np.ndarray = half + np.where(diff >= 0, diff // 2, -((-diff) // 2))
    return out.astype(np.int64)


def _balance_of_two(requested: Sequence[np.ndarray], d0: np.ndarray, d1: np.ndarray) -> np.ndarray:
    """``balance_vector`` of two resources offered on every row (``d0``, ``d1``: the allocatables
    as float64): the same operations, so the same bits (int64 / float64 converts as ``astype``)."""
    f0 = np.minimum(requested[0] / d0, 1.0)
    f1 = np.minimum(requested[1] / d1, 1.0)
    std = np.abs((f0 - f1) / 2)
    out: np.ndarray = ((1 - std) * MAX_NODE_SCORE).astype(np.int64)
    return out


def balance_vector(requested: Sequence[np.ndarray], allocatable: Sequence[np.ndarray]) -> np.ndarray:
    """``balance`` over rows, bit-identical to it."""
    r = len(requested)
    n = len(requested[0]) if r else 0
    out = np.full(n, MAX_NODE_SCORE, dtype=np.int64)
    if n == 0 or r == 0:
        return out
    valid = [a != 0 for a in allocatable]
    # Rows sharing a validity pattern use the same formula; usually there is one pattern.
    if all(bool(v.all()) for v in valid):
        groups: list[tuple[np.ndarray | slice, list[int]]] = [(slice(None), list(range(r)))]
    else:
        keys = np.zeros(n, dtype=np.int64)
        for j, v in enumerate(valid):
            keys |= v.astype(np.int64) << j
        groups = []
        for key in np.unique(keys):
            groups.append((np.flatnonzero(keys == key), [j for j in range(r) if (int(key) >> j) & 1]))
    for rows, cols in groups:
        fr = [
            np.minimum(requested[j][rows].astype(np.float64) / allocatable[j][rows].astype(np.float64), 1.0)
            for j in cols
        ]
        if len(fr) == 2:
            std = np.abs((fr[0] - fr[1]) / 2)
        elif len(fr) > 2:
            total = fr[0] * 0.0
            for f in fr:
                total = total + f
            mean = total / len(fr)
            acc = fr[0] * 0.0
            for f in fr:
                acc = acc + (f - mean) * (f - mean)
            std = np.sqrt(acc / len(fr))
        else:
            continue  # zero or one fraction: std 0, score 100
        out[rows] = ((1 - std) * MAX_NODE_SCORE).astype(np.int64)
    return out


# (requested, allocated, allocatable) per resource -> score; scalar and over snapshot rows.
ScalarScorer = Callable[[Sequence[int], Sequence[int], Sequence[int]], int]
VectorScorer = Callable[[Sequence[np.ndarray], Sequence[np.ndarray], Sequence[np.ndarray]], np.ndarray]


def _weighted_floor_mean(
    requested: Sequence[np.ndarray],
    allocatable: Sequence[np.ndarray],
    weights: Sequence[int],
    per: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> np.ndarray:
    """sum(score_i * w_i) // sum(w_i) over the resources a row offers (allocatable != 0)."""
    n = len(requested[0]) if requested else 0
    ns = np.zeros(n, dtype=np.int64)
    ws = np.zeros(n, dtype=np.int64)
    all_valid = True
    for req, alloc, w in zip(requested, allocatable, weights, strict=True):
        valid = alloc != 0
        if valid.all():
            ns += per(req, alloc) * w
            ws += w
            continue
        all_valid = False
        if not valid.any():
            continue
        ns += np.where(valid, per(req, np.where(valid, alloc, 1)), 0) * w
        ws += valid * w
    if all_valid and n and ws[0] > 0:
        return ns // ws[0]
    return np.where(ws > 0, ns // np.maximum(ws, 1), 0).astype(np.int64)


def least_allocated(weights: Sequence[int]) -> tuple[ScalarScorer, VectorScorer]:

    def scalar(requested: Sequence[int], allocated: Sequence[int], allocatable: Sequence[int]) -> int:
        node_score = weight_sum = 0
        for i, (req, alloc) in enumerate(zip(requested, allocatable, strict=True)):
            if alloc == 0:
                continue
            node_score += least_requested_score(req, alloc) * weights[i]
            weight_sum += weights[i]
        return node_score // weight_sum if weight_sum else 0

    def vector(
        requested: Sequence[np.ndarray], allocated: Sequence[np.ndarray], allocatable: Sequence[np.ndarray]
    ) -> np.ndarray:
        def per(req: np.ndarray, cap: np.ndarray) -> np.ndarray:
            return np.where(req > cap, 0, ((cap - req) * MAX_NODE_SCORE) // cap)

        return _weighted_floor_mean(requested, allocatable, weights, per)

    return scalar, vector


def most_allocated(weights: Sequence[int]) -> tuple[ScalarScorer, VectorScorer]:

    def scalar(requested: Sequence[int], allocated: Sequence[int], allocatable: Sequence[int]) -> int:
        node_score = weight_sum = 0
        for i, (req, alloc) in enumerate(zip(requested, allocatable, strict=True)):
            if alloc == 0:
                continue
            node_score += most_requested_score(req, alloc) * weights[i]
            weight_sum += weights[i]
        return node_score // weight_sum if weight_sum else 0

    def vector(
        requested: Sequence[np.ndarray], allocated: Sequence[np.ndarray], allocatable: Sequence[np.ndarray]
    ) -> np.ndarray:
        def per(req: np.ndarray, cap: np.ndarray) -> np.ndarray:
            return (np.minimum(req, cap) * MAX_NODE_SCORE) // cap

        return _weighted_floor_mean(requested, allocatable, weights, per)

    return scalar, vector


def _broken_linear_vector(shape: Sequence[tuple[int, int]], p: np.ndarray) -> np.ndarray:
    out = np.full(p.shape, shape[-1][1], dtype=np.int64)
    done = np.zeros(p.shape, dtype=bool)
    for i, (util, score) in enumerate(shape):
        hit = (p <= util) & ~done
        if i == 0:
            out[hit] = score
        else:
            pu, ps = shape[i - 1]
            num = (score - ps) * (p[hit] - pu)
            den = util - pu
            out[hit] = ps + np.sign(num) * (np.abs(num) // den)
        done |= hit
    return out


def requested_to_capacity_ratio(
    weights: Sequence[int], points: Sequence[UtilizationShapePoint]
) -> tuple[ScalarScorer, VectorScorer]:
    # Shape scores are 0..10; the scheduler's scores are 0..100.
    shape = [(p.utilization, p.score * (MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE)) for p in points]

    def resource_score(req: int, cap: int) -> int:
        if cap == 0 or req > cap:
            return broken_linear(shape, MAX_UTILIZATION)
        return broken_linear(shape, req * MAX_UTILIZATION // cap)

    def scalar(requested: Sequence[int], allocated: Sequence[int], allocatable: Sequence[int]) -> int:
        node_score = weight_sum = 0
        for i, (req, alloc) in enumerate(zip(requested, allocatable, strict=True)):
            if alloc == 0:
                continue
            s = resource_score(req, alloc)
            if s > 0:
                node_score += s * weights[i]
                weight_sum += weights[i]
        if weight_sum == 0:
            return 0
        # math.Round of a non-negative ratio, in integers: floor(x + 1/2).
        return (2 * node_score + weight_sum) // (2 * weight_sum)

    def vector(
        requested: Sequence[np.ndarray], allocated: Sequence[np.ndarray], allocatable: Sequence[np.ndarray]
    ) -> np.ndarray:
        n = len(requested[0]) if requested else 0
        ns = np.zeros(n, dtype=np.int64)
        ws = np.zeros(n, dtype=np.int64)
        for req, alloc, w in zip(requested, allocatable, weights, strict=True):
            valid = alloc != 0
            cap = np.where(valid, alloc, 1)
            util = np.where(req > alloc, MAX_UTILIZATION, (req * MAX_UTILIZATION) // cap)
            per = _broken_linear_vector(shape, util)
            counted = valid & (per > 0)
            ns += np.where(counted, per * w, 0)
            ws += counted * w
        return np.where(ws > 0, (2 * ns + ws) // np.maximum(2 * ws, 1), 0).astype(np.int64)

    return scalar, vector


# --- the scorer -----------------------------------------------------------------------------------


class ResourceAllocationScorer:
    """Builds (requested, allocatable) per configured resource for one node or for snapshot rows.

    ``use_requested`` picks the node's actual requests for cpu/memory (BalancedAllocation)
    instead of the non-zero requests (NodeResourcesFit), and the pod's actual requests instead of
    its requests with per-container defaults for missing cpu/memory.
    """

    def __init__(
        self,
        resources: Sequence[ResourceSpec],
        scalar: ScalarScorer,
        vector: VectorScorer,
        *,
        use_requested: bool,
    ) -> None:
        self.resources = list(resources)
        self.names = [r.name for r in self.resources]
        self.scalar = scalar
        self.vector = vector
        self.use_requested = use_requested

    def pod_requests(self, pod: Pod) -> list[int]:
        """``calculatePodResourceRequestList``.

        BalancedAllocation (``use_requested``) reads the status-aware requests with pod-level
        resources; NodeResourcesFit's scorer is built without those options in the reference, so
        it reads container-level spec requests with per-container cpu/memory defaults.
        """
        res = pod.requests if self.use_requested else pod.score_requests
        return [res.get(name) for name in self.names]

    def _alloc_used(self, info: NodeInfo, name: str, pod_request: int) -> tuple[int, int]:
        """``calculateResourceAllocatableRequest``: (allocatable, already requested on the node)."""
        requested = info.requested if self.use_requested else info.non_zero_requested
        if pod_request == 0 and is_scalar_resource_name(name):
            return 0, 0
        if name == CPU:
            return info.allocatable.milli_cpu, requested.milli_cpu
        if name == MEMORY:
            return info.allocatable.memory, requested.memory
        if name == EPHEMERAL_STORAGE:
            return info.allocatable.ephemeral_storage, info.requested.ephemeral_storage
        if name in info.allocatable.scalar:
            return info.allocatable.scalar[name], info.requested.scalar.get(name, 0)
        return 0, 0

    def score(self, info: NodeInfo, pod_requests: Sequence[int]) -> int:
        requested = [0] * len(self.names)
        allocated = [0] * len(self.names)
        allocatable = [0] * len(self.names)
        for i, name in enumerate(self.names):
            alloc, used = self._alloc_used(info, name, pod_requests[i])
            if alloc == 0:
                continue
            allocatable[i] = alloc
            allocated[i] = used
            requested[i] = used + pod_requests[i]
        return self.scalar(requested, allocated, allocatable)

    def score_rows(self, snapshot: Snapshot, idx: np.ndarray, pod_requests: Sequence[int]) -> np.ndarray:
        arrays = snapshot.arrays
        n = len(idx)
        full = n == len(arrays.unschedulable) and (n == 0 or (idx[0] == 0 and idx[-1] == n - 1))
        zero = np.zeros(n, dtype=np.int64)
        reqs: list[np.ndarray] = []
        useds: list[np.ndarray] = []
        allocs: list[np.ndarray] = []
        for i, name in enumerate(self.names):
            pr = pod_requests[i]
            col = -1
            if not (pr == 0 and is_scalar_resource_name(name)):
                if name in (CPU, MEMORY):
                    col = 0 if name == CPU else 1
                    used = arrays.requested if self.use_requested else arrays.non_zero_requested
                elif name == EPHEMERAL_STORAGE:
                    col, used = 2, arrays.requested
                elif name in arrays.columns and name not in BASE_COLUMNS:
                    col, used = arrays.columns[name], arrays.requested
            if col < 0:
                reqs.append(zero)
                useds.append(zero)
                allocs.append(zero)
                continue
            a = arrays.allocatable[:, col]
            u = used[:, col]
            if not full:
                a, u = a[idx], u[idx]
            allocs.append(a)
            offered = a != 0
            useds.append(np.where(offered, u, 0))
            reqs.append(np.where(offered, u + pr, 0))
        return self.vector(reqs, useds, allocs)


def dra_delegated(handle: Handle | None, request: Resource) -> frozenset[str]:
    """Requested extended resources a DeviceClass stands for (DRAExtendedResource): DRA decides
    those per node, by devices, where the node does not offer them as allocatable."""
    if not request.scalar or handle is None:
        return frozenset()
    classes = kinds.objects_of(handle.objects, kinds.DEVICE_CLASS)
    if not classes:
        return frozenset()
    by_name = handle.dra.extended_resources.classes(classes)
    scalar = request.scalar.items()
    return frozenset(n for n, q in scalar if q and is_dra_extended_resource_name(n) and n in by_name)


def sign_resources(handle: Handle | None, pod: Pod) -> tuple[SignFragments, Status | None]:
    """Sign for NodeResourcesFit and BalancedAllocation: the pod's requests, unless DRA decides
    one of them."""
    if dra_delegated(handle, pod.filter_requests):
        msg = "signature disabled when dra extended resources are used in the cluster"
        return [], Status.unschedulable(msg)
    return [(signers.RESOURCES, signers.resources(pod))], None
