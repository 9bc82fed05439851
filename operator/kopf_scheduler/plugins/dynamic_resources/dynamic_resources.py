"""The DynamicResources plugin (the reference's ``dynamicresources.go``).

PreEnqueue holds a pod until its claims exist; PreFilter gathers the claims, checks their classes
and builds one :class:`~kopf_scheduler.dra.allocator.Allocator` for the cycle; Filter allocates per node
(the allocator's first solution); Score prefers nodes where ``firstAvailable`` got an earlier
subrequest; Reserve marks the chosen allocations pending, so the next pod's PreFilter counts their
devices as taken; PreBind writes ``status.allocation`` and ``reservedFor`` (with the allocation
finalizer); Unreserve and PostFilter undo. Failures use the reference's messages.

API writes the reference makes synchronously from PostFilter and Unreserve (deallocation, dropping
a reservation) are started here as background tasks: those extension points are synchronous in
this engine. Their outcome reaches the queue through the claim's watch events, as in the reference.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np

from kopf_scheduler.api import kinds
from kopf_scheduler.api.kinds import Objects
from kopf_scheduler.api.types import NodeSelector
from kopf_scheduler.config import features as feature_gates
from kopf_scheduler.config.profile import ARGS_CONFIG, Before, ValidDefaults
from kopf_scheduler.dra.features import DEFAULT_FEATURES, Features
from kopf_scheduler.dra.manager import ClaimTracker, DraManager
from kopf_scheduler.framework.client import ApiError, Conflict
from kopf_scheduler.framework.events import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
)
from kopf_scheduler.framework.interface import (
    Code,
    CycleState,
    Handle,
    Plugin,
    PodGroupPostFilterResult,
    PodGroupSimulation,
    PostFilterResult,
    PreFilterResult,
    PreQueueingHintResult,
    SignFragments,
    Status,
)
from kopf_scheduler.plugins.helper import default_normalize_score

from .claims import ClaimLookupError, check_owner, pod_claim_names
from .extended_resources import (
    SPECIAL_NAME,
    extended_requests,
    find_extended_claim,
    node_claim,
    requests_and_mappings,
    special_claim,
)

if TYPE_CHECKING:  # api/resource.py is imported with the first DRA object (api/kinds.py's parsers)
    from kopf_scheduler.api.objects import Pod
    from kopf_scheduler.api.podgroup import PodGroup
    from kopf_scheduler.api.resource import AllocationResult, DeviceClass, ResourceClaim
    from kopf_scheduler.dra.allocator import Allocator
    from kopf_scheduler.framework.snapshot import Snapshot
    from kopf_scheduler.framework.types import NodeInfo

__all__ = [
    "GROUP_CLAIMS_RELEASED",
    "STATE_KEY",
    "STATE_NOT_FOUND",
    "DynamicResources",
    "DynamicResourcesArgs",
]

log = logging.getLogger(__name__)

STATE_KEY = "PreFilterDynamicResources"
STATE_NOT_FOUND = "not found"  # framework.ErrNotFound, what reading absent cycle state returns
# PodGroupPostFilter's answer once it has looked at every member (whatever it found to undo).
GROUP_CLAIMS_RELEASED = "deallocation and deletion of ResourceClaims completed"
FINALIZER = "resource.kubernetes.io/delete-protection"  # resourceapi.Finalizer
FIRST_AVAILABLE_MAX = 8  # resourceapi.FirstAvailableDeviceRequestMaxSize
CONFLICT_RETRIES = 5  # retry.DefaultRetry's steps

_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+)ms)?$")


def _seconds(value: Any) -> float:
    if isinstance(value, int | float):
        return float(value)
    match = _DURATION.match(str(value))
    if not match or not any(match.groups()):
        raise ValueError(f"invalid duration {value!r}")
    h, m, s, ms = (float(g) if g else 0.0 for g in match.groups())
    return h * 3600 + m * 60 + s + ms / 1000


def allocator_features(gates: feature_gates.FeatureGates) -> Features:
    """The allocator's features from the process's gates (the reference's NewSchedulerFeaturesFromGates)."""
    if gates == feature_gates.FeatureGates():
        return DEFAULT_FEATURES
    return Features(
        admin_access=gates.enabled("DRAAdminAccess"),
        prioritized_list=gates.enabled("DRAPrioritizedList"),
        partitionable_devices=gates.enabled("DRAPartitionableDevices"),
        device_taints=gates.enabled("DRADeviceTaints"),
        consumable_capacity=gates.enabled("DRAConsumableCapacity"),
        device_binding_and_status=gates.enabled("DRADeviceBindingConditions")
        and gates.enabled("DRAResourceClaimDeviceStatus"),
        fractional_capacity_range=gates.enabled("DRAFractionalCapacityRange"),
        extended_resource=gates.enabled("DRAExtendedResource"),
    )


def _duration(value: Any) -> float:
    seconds = _seconds(value)
    if seconds < 0:
        raise ValueError("must be non-negative")
    return seconds


@dataclass
class DynamicResourcesArgs(ValidDefaults):
    """``DynamicResourcesArgs`` with v1.37.2's defaults (durations as Go spells them, or seconds)."""

    __pydantic_config__ = ARGS_CONFIG

    filter_timeout: Annotated[float, Before(_duration)] = field(
        default=10.0, metadata={"alias": "filterTimeout"}
    )
    binding_timeout: Annotated[float, Before(_duration)] = field(
        default=600.0, metadata={"alias": "bindingTimeout"}
    )


@dataclass(slots=True)
class _ClaimInfo:
    available_on: NodeSelector | None = None  # an allocated claim's node selector
    # The same, when it only names nodes (node-local devices: a matchFields metadata.name In term).
    on_nodes: frozenset[str] | None = None
    allocation: AllocationResult | None = None  # set at Reserve for claims allocated here


@dataclass(slots=True)
class _StateData:
    claims: list[ResourceClaim] = field(default_factory=list)
    infos: list[_ClaimInfo] = field(default_factory=list)
    allocator: Allocator | None = None
    node_allocations: dict[str, list[AllocationResult]] = field(default_factory=dict)
    unavailable: set[int] = field(default_factory=set)
    # DRAExtendedResource: the index of the pod's extended-resource claim in ``claims`` (last), the
    # amounts it stands for, and per node the claim with that node's requests and the mappings.
    extended_index: int | None = None
    extended: dict[str, int] = field(default_factory=dict)
    node_extended: dict[str, tuple[ResourceClaim, list[dict[str, str]]]] = field(default_factory=dict)
    # The claims Filter allocates at every node, when none is made per node (no extended-resource
    # claim), and whether any allocated claim restricts the nodes: set at PreFilter's end.
    allocating: list[ResourceClaim] | None = None
    restricted: bool = False

    def clone(self) -> _StateData:
        return self  # as the reference: shared between the cycle and its clones

    def to_allocate(self) -> list[tuple[int, ResourceClaim]]:
        return [(i, c) for i, c in enumerate(self.claims) if c.status.allocation is None]


@dataclass(slots=True)
class _PodGroupStateData:
    """In the group's cycle state (``podGroupStateData``): each member's state as its PreFilter
    made it, by (namespace, name), for PodGroupPostFilter. It exists once a member reached
    PreFilter in the group's cycle; a cycle that tried none has none."""

    pods: dict[tuple[str, str], _StateData] = field(default_factory=dict)

    def clone(self) -> _PodGroupStateData:
        return self  # as the reference: one per group cycle, shared


def _kobj(claim: ResourceClaim) -> str:
    return claim.key


def _unresolvable(message: str) -> Status:
    return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, message)


class DynamicResources(Plugin):
    name = "DynamicResources"

    def sign(self, pod: Pod) -> tuple[SignFragments, Status | None]:
        if pod.resource_claims:
            return [], Status.unschedulable("pods with dra resource claims are not signable")
        return [], None

    Args = DynamicResourcesArgs

    # Seconds between PreBind's looks at a claim's binding conditions.
    poll_interval: float = 5.0

    def __init__(self, args: DynamicResourcesArgs | None = None, handle: Handle | None = None) -> None:
        args = args if args is not None else DynamicResourcesArgs()
        super().__init__(args, handle)
        self.filter_timeout = args.filter_timeout
        self.binding_timeout = args.binding_timeout
        self.features = allocator_features(feature_gates.current())
        # The engine's DRA manager (claims in flight, CEL and pool caches), shared by every profile.
        self.dra: DraManager = handle.dra if handle is not None else DraManager({})
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- object access --

    @property
    def _objects(self) -> Objects:
        return self.handle.objects if self.handle is not None else {}

    def _classes(self) -> Mapping[str, DeviceClass]:
        return kinds.objects_of(self._objects, kinds.DEVICE_CLASS)

    @property
    def tracker(self) -> ClaimTracker:
        return self.dra.claims

    def _pod_claims(self, pod: Pod) -> list[ResourceClaim]:
        """The pod's claims in spec order; raise ClaimLookupError with the reference's text."""
        tracker = self.tracker
        out = []
        for _, name, must_check_owner in pod_claim_names(pod):
            claim = tracker.get(pod.namespace, name)
            if claim is None:
                raise ClaimLookupError(f'resourceclaim.resource.k8s.io "{name}" not found')
            if claim.metadata.deleting:
                raise ClaimLookupError(f'resourceclaim "{name}" is being deleted')
            if must_check_owner:
                check_owner(pod, claim)
            out.append(claim)
        return out

    # -- queueing --

    def events_to_register(self) -> Iterable[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.NODE,
                    ActionType.ADD | ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_ALLOCATABLE,
                )
            ),
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.RESOURCE_CLAIM, ActionType.ADD | ActionType.UPDATE | ActionType.DELETE
                ),
                self.is_schedulable_after_claim_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM),
                self.is_schedulable_after_pod_update,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.DEVICE_CLASS, ActionType.ADD | ActionType.UPDATE)
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.RESOURCE_SLICE, ActionType.ADD | ActionType.UPDATE)
            ),
        ]

    def is_schedulable_after_claim_change(
        self, pod: Pod, old: ResourceClaim | None, new: ResourceClaim | None
    ) -> QueueingHint:
        if new is None:
            # A deleted claim frees its devices for everyone.
            allocated = old is not None and old.status.allocation is not None
            return QueueingHint.QUEUE if allocated else QueueingHint.QUEUE_SKIP
        if old is not None and old.status.allocation is not None and new.status.allocation is None:
            return QueueingHint.QUEUE  # deallocated: its devices are free
        try:
            names = pod_claim_names(pod)
        except ClaimLookupError:
            return QueueingHint.QUEUE_SKIP
        if new.metadata.namespace != pod.namespace or not any(n == new.metadata.name for _, n, _ in names):
            return QueueingHint.QUEUE_SKIP
        if old is None:
            return QueueingHint.QUEUE
        if old.status == new.status:
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE

    def pre_queueing_keys(self, pod: Pod) -> list[tuple[str, str]]:
        """``podResourceClaimIndexFunc``: (namespace, name) of each claim the pod names, directly or
        as its template's generated claim in its status; entries without one are left out (the
        reference's index skips extended-resource claims too: the scheduler makes those itself)."""
        statuses = dict(pod.resource_claim_statuses) if pod.resource_claim_statuses else {}
        out = []
        for entry in pod.resource_claims:
            name = entry.resource_claim_name
            if name is None and entry.resource_claim_template_name is not None:
                name = statuses.get(entry.name)
            if name is not None:
                out.append((pod.namespace, name))
        return out

    def pre_queueing_hint(self, event: ClusterEvent, old: Any, new: Any) -> PreQueueingHintResult | None:
        """``preQueueingHint``: a claim event concerns the pods naming the claim, unless it frees
        devices (deallocated, or deleted while allocated): then every pod. What
        ``is_schedulable_after_claim_change`` answers Queue for is exactly those, so a pod left out
        gets QueueSkip from it (the capability's contract)."""
        if event.resource != EventResource.RESOURCE_CLAIM:
            return None
        # No isinstance (api/resource.py loads with the first DRA object): an object that is no
        # claim raises here, and the queue then asks every pod, as the hint raising would have it.
        freed = old is not None and old.status.allocation is not None
        if freed and (new is None or new.status.allocation is None):
            return PreQueueingHintResult(all_pods=True)
        meta = (new if new is not None else old).metadata
        return PreQueueingHintResult(frozenset({(meta.namespace, meta.name)}))

    def is_schedulable_after_pod_update(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        target = new if new is not None else pod
        try:
            self._pod_claims(target)
        except ClaimLookupError:
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE

    def pre_enqueue(self, pod: Pod) -> Status | None:
        if not pod.resource_claims:
            return None
        try:
            self._pod_claims(pod)
        except ClaimLookupError as exc:
            return _unresolvable(str(exc))
        return None

    # -- scheduling cycle --

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        s = _StateData()
        state.write(STATE_KEY, s)
        group_state = state.pod_group_state
        if group_state is not None:  # a gang member's: kept for the group's PodGroupPostFilter
            group = group_state.get(STATE_KEY)
            if group is None:
                group = _PodGroupStateData()
                group_state.write(STATE_KEY, group)
            group.pods[(pod.namespace, pod.name)] = s
        return self._pre_filter(s, pod)

    def _pre_filter(self, s: _StateData, pod: Pod) -> tuple[PreFilterResult | None, Status | None]:
        classes = self._classes()
        if not pod.resource_claims and not (classes and pod.filter_requests.scalar):
            return None, Status(Code.SKIP)
        try:
            claims = self._pod_claims(pod) if pod.resource_claims else []
        except ClaimLookupError as exc:
            return None, _unresolvable(str(exc))
        tracker = self.tracker
        extended = extended_requests(pod, self.dra.extended_resources.classes(classes)) if classes else {}
        if extended:
            claims.append(find_extended_claim(pod, tracker.all()) or special_claim(pod))
            s.extended_index, s.extended = len(claims) - 1, extended
        if not claims:
            return None, Status(Code.SKIP)
        infos = [_ClaimInfo() for _ in claims]
        to_allocate = 0
        for index, claim in enumerate(claims):
            allocation = claim.status.allocation
            if allocation is not None:
                if allocation.node_selector is not None:
                    infos[index].available_on = allocation.node_selector
                    infos[index].on_nodes = _named_nodes(allocation.node_selector)
                continue
            to_allocate += 1
            if tracker.get_pending(claim.metadata.uid) is not None:
                return None, _unresolvable(
                    f"resource claim {_kobj(claim)} is in the process of being allocated"
                )
            if index == s.extended_index:
                continue  # its requests are made per node, from the classes found above
            for request in claim.spec.requests:
                name = request.name
                if request.exactly is not None:
                    status = self._validate_class(classes, request.exactly.device_class_name, name)
                    if status is not None:
                        return None, status
                elif request.first_available:
                    for sub in request.first_available:
                        status = self._validate_class(classes, sub.device_class_name, f"{name}/{sub.name}")
                        if status is not None:
                            return None, status
                else:
                    return None, _unresolvable(
                        f"resource claim {_kobj(claim)}, request {name}: unknown request type"
                    )
        if to_allocate:
            # Imported here, for the first claim to allocate: the allocator, its pools and CEL are
            # ~15 ms of imports that a cluster without claims would otherwise pay at start-up.
            from kopf_scheduler.dra.allocator import Allocator

            s.allocator = Allocator(
                self.features,
                tracker.allocated_state(),
                classes,
                self.dra.taint_rules.slices(
                    list(kinds.objects_of(self._objects, kinds.RESOURCE_SLICE).values()),
                    list(kinds.objects_of(self._objects, kinds.DEVICE_TAINT_RULE).values()),
                ),
                self.dra.cel,
                self.dra.pools,
            )
        s.claims, s.infos = claims, infos
        if s.extended_index is None:
            s.allocating = [c for _, c in s.to_allocate()]
        s.restricted = any(info.available_on is not None for info in infos)
        return None, None

    @staticmethod
    def _validate_class(classes: Mapping[str, DeviceClass], class_name: str, request: str) -> Status | None:
        if not class_name:
            return Status(Code.ERROR, f"request {request}: unsupported request type")
        if class_name not in classes:
            return _unresolvable(f"request {request}: device class {class_name} does not exist")
        return None

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status | None:
        s = state.get(STATE_KEY)
        if s is None:
            return Status(Code.ERROR, STATE_NOT_FOUND)
        if not s.claims:
            return None
        node = node_info.node
        if node is None:
            return Status(Code.ERROR, "node not found")
        for_node: ResourceClaim | None = None
        if s.extended_index is not None:
            extended_claim = s.claims[s.extended_index]
            if extended_claim.spec.requests:
                return _unresolvable("cannot schedule extended resource claim")
            # On a node offering the resource through a device plugin, NodeResourcesFit counts it.
            needed = {n: q for n, q in s.extended.items() if node_info.allocatable.scalar.get(n, 0) == 0}
            if not needed and s.extended_index == 0:
                return None  # no other claim, nothing for DRA on this node
            if needed and extended_claim.status.allocation is None:
                by_name = self.dra.extended_resources.classes(self._classes())
                requests, mappings = requests_and_mappings(pod, needed, by_name)
                for_node = node_claim(extended_claim, requests)
                s.node_extended[node.name] = (for_node, mappings)
        unavailable = (
            [
                i
                for i, info in enumerate(s.infos)
                if info.available_on is not None
                and (
                    node.name not in info.on_nodes
                    if info.on_nodes is not None
                    else not info.available_on.matches(node.name, node.labels)
                )
            ]
            if s.restricted
            else []
        )
        if s.allocator is not None:
            from kopf_scheduler.dra.allocator import AllocationError, InvalidPoolsError

            claims = (
                s.allocating
                if s.allocating is not None
                else [
                    for_node if i == s.extended_index and for_node is not None else c
                    for i, c in s.to_allocate()
                ]
            )
            try:
                results = s.allocator.allocate(node, claims)
            except InvalidPoolsError as exc:
                return _unresolvable(str(exc))
            except AllocationError as exc:
                return Status(Code.ERROR, str(exc))
            if results is None or len(results) != len(claims):
                return _unresolvable("cannot allocate all claims")
            allocations = results
        if unavailable:
            s.unavailable.update(unavailable)
            return _unresolvable("resourceclaim not available on the node")
        if s.allocator is not None:
            s.node_allocations[node.name] = allocations
        return None

    def filter_vector(
        self, state: CycleState, pod: Pod, snapshot: Snapshot, idx: np.ndarray
    ) -> np.ndarray | None:
        """Claims all allocated already: only their node selectors decide, without a per-node call
        (rejected rows get their status from ``filter`` when a diagnosis needs it). Claims to
        allocate take the per-node path."""
        s = state.get(STATE_KEY)
        if s is None or s.allocator is not None:
            return None
        infos = snapshot.node_infos
        mask = np.ones(len(idx), dtype=bool)
        for info in s.infos:
            if info.available_on is None:
                continue
            if info.on_nodes is not None:
                names = info.on_nodes
                ok = [infos[r].node is not None and infos[r].node.name in names for r in idx.tolist()]
            else:
                sel = info.available_on
                ok = [
                    (n := infos[r].node) is not None and sel.matches(n.name, n.labels) for r in idx.tolist()
                ]
            mask &= np.asarray(ok, dtype=bool)
        return mask

    def post_filter(
        self, state: CycleState, pod: Pod, node_statuses: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status | None]:
        s = state.get(STATE_KEY)
        if s is None:
            return None, Status(Code.ERROR, STATE_NOT_FOUND)
        if not s.claims:
            return None, Status(Code.UNSCHEDULABLE)  # no claims to deallocate: let preemption try
        return None, self._deallocate_or_delete(pod, s)

    def pod_group_post_filter(
        self, state: CycleState, group: PodGroup, members: Sequence[Pod], simulation: PodGroupSimulation
    ) -> tuple[PodGroupPostFilterResult | None, Status | None]:
        """``PodGroupPostFilter``: what PostFilter would do for each member that reached PreFilter
        in the group's cycle (deallocate a claim unavailable where it was tried, or delete its
        extended-resource claim), before DefaultPreemption evicts anyone. Without the group's state
        (no member reached PreFilter: PlacementFeasible ruled the group out first, or every member
        was rejected by an earlier PreFilter plugin) it is the reference's error, "not found".

        The reference's other steps need gates this scheduler refuses to turn on: releasing the
        PodGroup's own claims (DRAWorkloadResourceClaims), and leaving CompositePodGroups and
        topology-aware groups alone (CompositePodGroup, TopologyAwareWorkloadScheduling)."""
        group_state = state.get(STATE_KEY)
        if group_state is None:
            return None, Status(Code.ERROR, STATE_NOT_FOUND)
        for pod in members:
            s = group_state.pods.get((pod.namespace, pod.name))
            if s is not None:
                self._deallocate_or_delete(pod, s)
        return None, Status(Code.UNSCHEDULABLE, GROUP_CLAIMS_RELEASED)

    def _deallocate_or_delete(self, pod: Pod, s: _StateData) -> Status:
        """``deallocateOrDeletePodClaims``: deallocate one claim of the pod unavailable where it
        was tried (reserved for nobody else), else delete its extended-resource claim; the status
        says which it did."""
        for index in sorted(s.unavailable):
            claim = s.claims[index]
            if index == s.extended_index:
                continue
            reserved = claim.status.reserved_for
            if not reserved or (len(reserved) == 1 and reserved[0].uid == pod.uid):
                # No allocation, no reservations, no device status: deallocated.
                from kopf_scheduler.api.resource import ResourceClaimStatus

                new = dataclasses.replace(claim, status=ResourceClaimStatus())
                self._background(self._update_status(new), f"deallocate ResourceClaim {_kobj(claim)}")
                return Status(Code.UNSCHEDULABLE, "deallocation of ResourceClaim completed")
        if s.extended_index is not None:
            extended_claim = s.claims[s.extended_index]
            if extended_claim.metadata.name != SPECIAL_NAME:
                self._background(
                    self._delete_claim(extended_claim), f"delete ResourceClaim {_kobj(extended_claim)}"
                )
                return Status(Code.UNSCHEDULABLE, "deletion of ResourceClaim completed")
        return Status(Code.UNSCHEDULABLE)

    def score(self, state: CycleState, pod: Pod, node: NodeInfo) -> tuple[int, Status | None]:
        s = state.get(STATE_KEY)
        if s is None:
            return 0, Status(Code.ERROR, STATE_NOT_FOUND)
        if not s.claims:
            return 0, None
        allocations = s.node_allocations.get(node.node.name) if node.node is not None else None
        if allocations is None:
            return 0, None
        return _score(s.claims, allocations), None

    def score_vector(
        self, state: CycleState, pod: Pod, snapshot: object, idx: np.ndarray
    ) -> np.ndarray | None:
        s = state.get(STATE_KEY)
        if s is None or s.claims:
            return None  # the per-node path reports the error, or scores allocations
        return np.zeros(len(idx), dtype=np.int64)

    def normalize_score(self, state: CycleState, pod: Pod, scores: np.ndarray) -> Status | None:
        s = state.get(STATE_KEY)
        if s is not None and s.claims:  # all zeros otherwise, which normalizing keeps
            default_normalize_score(scores, reverse=False)
        return None

    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        s = state.get(STATE_KEY)
        if s is None:
            return Status(Code.ERROR, STATE_NOT_FOUND)
        to_allocate = s.to_allocate()
        if not to_allocate or s.allocator is None:
            return None
        allocations = s.node_allocations.get(node_name)
        if not allocations:
            if all(i == s.extended_index for i, _ in to_allocate):
                return None  # only the extended-resource claim, and this node needs no device for it
            return Status(Code.ERROR, "claim allocation not found for node")
        if len(allocations) != len(to_allocate):
            return Status(
                Code.ERROR,
                f"internal error, have {len(allocations)} allocations, "
                f"{len(to_allocate)} claims to allocate, want {len(to_allocate)} claims",
            )
        tracker = self.tracker
        for (index, claim), allocation in zip(to_allocate, allocations, strict=True):
            s.infos[index].allocation = allocation
            if index == s.extended_index and node_name in s.node_extended:
                claim = s.node_extended[node_name][0]
            pending = dataclasses.replace(
                claim,
                finalizers=claim.finalizers
                if FINALIZER in claim.finalizers
                else (*claim.finalizers, FINALIZER),
                status=dataclasses.replace(claim.status, allocation=allocation),
            )
            tracker.signal_pending(claim.metadata.uid, pending)
        return None

    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        s = state.get(STATE_KEY)
        if s is None or not s.claims:
            return
        tracker = self.tracker
        for index, claim in enumerate(s.claims):
            meta = claim.metadata
            if tracker.remove_pending(meta.uid):
                tracker.restore(meta.namespace, meta.name)
            if index == s.extended_index:
                if meta.name != SPECIAL_NAME:  # made in the API by PreBind: it goes
                    self._background(self._delete_claim(claim), f"delete ResourceClaim {_kobj(claim)}")
                continue
            if claim.status.allocation is not None and claim.is_reserved_for(pod.uid):
                client = self.handle.client if self.handle is not None else None
                if client is not None:
                    self._background(
                        client.unreserve_resource_claim(meta.namespace, meta.name, meta.uid, pod.uid),
                        f"unreserve ResourceClaim {_kobj(claim)}",
                    )

    # -- binding cycle --

    def pre_bind_pre_flight(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        s = state.get(STATE_KEY)
        if s is None:
            return Status(Code.ERROR, STATE_NOT_FOUND)
        if not s.claims:
            return Status(Code.SKIP)
        return None

    async def pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        s = state.get(STATE_KEY)
        if s is None:
            return Status(Code.ERROR, STATE_NOT_FOUND)
        if not s.claims:
            return None
        done: list[str] = []
        for index, claim in enumerate(s.claims):
            if claim.is_reserved_for(pod.uid):
                continue
            try:
                if index == s.extended_index:
                    if s.infos[index].allocation is None:
                        continue  # no device asked of DRA on this node
                    s.claims[index] = await self._bind_extended_claim(s, index, pod, node_name)
                    continue
                s.claims[index] = await self._bind_claim(s, index, pod)
            except (ApiError, _BindError) as exc:
                return Status(Code.ERROR, str(exc))
            if s.infos[index].allocation is not None:
                done.append(claim.metadata.uid)
        for uid in done:
            self.tracker.remove_pending(uid)
        if any(_has_binding_conditions(c) for c in s.claims):
            return await self._wait_for_binding_conditions(s, pod)
        return None

    async def _bind_extended_claim(
        self, s: _StateData, index: int, pod: Pod, node_name: str
    ) -> ResourceClaim:
        """Create the extended-resource claim (if still in memory), allocate and reserve it as any
        claim, then name it in the pod's status with the container mappings."""
        client = self.handle.client if self.handle is not None else None
        if client is None:
            raise _BindError("no cluster client to write ResourceClaims")
        for_node, mappings = s.node_extended.get(node_name) or (None, [])
        pending_uid = s.claims[index].metadata.uid
        if s.claims[index].metadata.name == SPECIAL_NAME:
            if for_node is None:
                raise _BindError(f"extended resource claim not found for node {node_name}")
            # Created by generateName: no name, no uid, no status.
            from kopf_scheduler.api.resource import ResourceClaimStatus

            body = dataclasses.replace(
                for_node,
                metadata=dataclasses.replace(for_node.metadata, name="", uid=""),
                status=ResourceClaimStatus(),
            )
            try:
                created = await client.create_resource_claim(body)
            except ApiError as exc:
                raise _BindError(f"create claim for extended resources {pod.namespace}/: {exc}") from None
            s.claims[index] = created
        claim = await self._bind_claim(s, index, pod)
        self.tracker.remove_pending(pending_uid)
        if not mappings:
            raise _BindError(
                f"nil or empty request mappings, no update of pod {pod.namespace}/{pod.name} "
                "ExtendedResourceClaimStatus"
            )
        try:
            await client.set_pod_extended_resource_claim_status(
                pod, {"requestMappings": mappings, "resourceClaimName": claim.metadata.name}
            )
        except ApiError as exc:
            raise _BindError(
                f"update pod {pod.namespace}/{pod.name} ExtendedResourceClaimStatus: {exc}"
            ) from None
        return claim

    async def _delete_claim(self, claim: ResourceClaim) -> None:
        """Drop the allocation finalizer and delete (the reference's deleteClaim)."""
        client = self.handle.client if self.handle is not None else None
        if client is None:
            return
        namespace, name = claim.metadata.namespace, claim.metadata.name
        current = claim
        for attempt in range(CONFLICT_RETRIES):
            if attempt:
                current = await client.get_resource_claim(namespace, name)
            if FINALIZER not in current.finalizers:
                break
            body = dataclasses.replace(
                current, finalizers=tuple(f for f in current.finalizers if f != FINALIZER)
            )
            try:
                await client.update_resource_claim(body)
                break
            except Conflict:
                continue
        await client.delete_resource_claim(namespace, name, claim.metadata.uid)

    async def _bind_claim(self, s: _StateData, index: int, pod: Pod) -> ResourceClaim:
        namespace, name = s.claims[index].metadata.namespace, s.claims[index].metadata.name
        # One write at a time per claim, each from the newest version this scheduler knows (its own
        # last write included): pods sharing a claim bind concurrently, and writing from the copy
        # PreFilter saw made most of their reservations conflict and be read back (a GET and a
        # failed PUT each). Conflicts with other writers are still retried below.
        async with self.tracker.write_lock(namespace, name):
            latest = self.tracker.get(namespace, name)
            if latest is None or latest.metadata.uid != s.claims[index].metadata.uid:
                latest = s.claims[index]
            return await self._write_claim(latest, s.infos[index].allocation, pod, namespace, name)

    async def _write_claim(
        self, claim: ResourceClaim, allocation: AllocationResult | None, pod: Pod, namespace: str, name: str
    ) -> ResourceClaim:
        client = self.handle.client if self.handle is not None else None
        if client is None:
            raise _BindError("no cluster client to write ResourceClaims")
        from kopf_scheduler.api.resource import ConsumerReference

        binding = ConsumerReference("pods", pod.name, pod.uid)
        for attempt in range(CONFLICT_RETRIES):
            if attempt:
                claim = await client.get_resource_claim(namespace, name)
            try:
                if claim.metadata.deleting:
                    raise _BindError(f"claim {namespace}/{name} got deleted in the meantime")
                if allocation is not None:
                    if claim.status.allocation is not None:
                        raise _BindError(f"claim {namespace}/{name} got allocated elsewhere in the meantime")
                    if FINALIZER not in claim.finalizers:
                        try:
                            claim = await client.update_resource_claim(
                                dataclasses.replace(claim, finalizers=(*claim.finalizers, FINALIZER))
                            )
                        except ApiError as exc:
                            if isinstance(exc, Conflict):
                                raise
                            raise _BindError(f"add finalizer to claim {namespace}/{name}: {exc}") from None
                    written: AllocationResult | None = allocation
                else:
                    written = claim.status.allocation
                if written is None:
                    raise _BindError(f"claim {namespace}/{name} got deallocated elsewhere in the meantime")
                if written.allocation_timestamp is None:
                    written = dataclasses.replace(written, allocation_timestamp=_now_rfc3339())
                status = dataclasses.replace(
                    claim.status, allocation=written, reserved_for=(*claim.status.reserved_for, binding)
                )
                try:
                    stored = await client.update_resource_claim_status(
                        dataclasses.replace(claim, status=status)
                    )
                except Conflict:
                    raise
                except ApiError as exc:
                    what = (
                        "add allocation and reservation to"
                        if allocation is not None
                        else "add reservation to"
                    )
                    raise _BindError(f"{what} claim {namespace}/{name}: {exc}") from None
            except Conflict:
                if attempt + 1 == CONFLICT_RETRIES:
                    raise
                await asyncio.sleep(0.01 * (attempt + 1))
                continue
            self.tracker.assume(stored)
            return stored
        raise _BindError(f"claim {namespace}/{name}: too many conflicts")  # unreachable

    async def _wait_for_binding_conditions(self, s: _StateData, pod: Pod) -> Status | None:
        deadline = time.monotonic() + self.binding_timeout
        while True:
            ready = True
            for claim in s.claims:
                meta = claim.metadata
                current = self.tracker.get(meta.namespace, meta.name) or claim
                outcome = _binding_conditions_outcome(current)
                if outcome is False:
                    return Status(Code.ERROR, f"device binding failed: claim={meta.name}")
                if outcome is None:
                    ready = False
            if ready:
                return None
            if time.monotonic() >= deadline:
                return Status(Code.ERROR, "device binding timeout")
            await asyncio.sleep(self.poll_interval)

    # -- background writes --

    async def _update_status(self, claim: ResourceClaim) -> None:
        client = self.handle.client if self.handle is not None else None
        if client is not None:
            await client.update_resource_claim_status(claim)

    def _background(self, coro: Any, what: str) -> None:
        try:
            task = asyncio.get_running_loop().create_task(coro)
        except RuntimeError:
            coro.close()
            log.warning("%s: no event loop to run it in", what)
            return
        self._tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.warning("%s failed: %s", what, t.exception())

        task.add_done_callback(done)


class _BindError(Exception):
    pass


def _named_nodes(selector: NodeSelector) -> frozenset[str] | None:
    if len(selector.terms) != 1:
        return None
    (term,) = selector.terms
    if term.match_expressions or len(term.match_fields) != 1:
        return None
    (req,) = term.match_fields
    if req.key != "metadata.name" or req.operator != "In":
        return None
    return frozenset(req.values)


def _now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _score(claims: Sequence[ResourceClaim], allocations: Sequence[AllocationResult]) -> int:
    """``computeScore``: earlier ``firstAvailable`` subrequests score higher."""
    score = 0
    pending = iter(allocations)
    for claim in claims:
        allocation = claim.status.allocation or next(pending, None)
        if allocation is None:
            return 0
        if all(request.exactly is not None for request in claim.spec.requests):
            continue  # no firstAvailable: nothing to score
        chosen = {r.request for r in allocation.results if "/" in r.request}
        for request in claim.spec.requests:
            if request.exactly is not None:
                continue
            for i, sub in enumerate(request.first_available):
                if f"{request.name}/{sub.name}" in chosen:
                    score += FIRST_AVAILABLE_MAX - i
    return score


def _has_binding_conditions(claim: ResourceClaim) -> bool:
    allocation = claim.status.allocation
    return allocation is not None and any(r.binding_conditions for r in allocation.results)


def _binding_conditions_outcome(claim: ResourceClaim) -> bool | None:
    """True when every device's binding conditions are met, False when one failed, else None."""
    allocation = claim.status.allocation
    if allocation is None:
        return True
    devices = {d.device_id: d for d in claim.status.devices}
    ready = True
    for result in allocation.results:
        if not result.binding_conditions:
            continue
        device = devices.get(result.device_id)
        conditions = device.conditions if device is not None else {}
        if any(conditions.get(c) == "True" for c in result.binding_failure_conditions):
            return False
        if not all(conditions.get(c) == "True" for c in result.binding_conditions):
            ready = False
    return True if ready else None
