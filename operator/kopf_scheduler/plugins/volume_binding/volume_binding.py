"""The VolumeBinding plugin: PreFilter..PreBind and its events (``volume_binding.go``,
with the binder's find/assume/bind steps as its methods; the reference's ``binder.go``)."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from kopf_scheduler.api import kinds
from kopf_scheduler.api.kinds import Objects
from kopf_scheduler.api.objects import Pod
from kopf_scheduler.api.volumes import CSI
from kopf_scheduler.framework import signers
from kopf_scheduler.framework.interface import (
    MAX_NODE_SCORE,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    Code,
    CycleState,
    EventResource,
    Handle,
    Plugin,
    PreFilterResult,
    QueueingHint,
    SignFragments,
    Status,
)
from kopf_scheduler.framework.types import NodeInfo
from kopf_scheduler.plugins._volumes import (
    MIGRATED_PLUGINS_ANNOTATION,
    NOT_SUPPORTED_PROVISIONER,
    not_found,
    pod_uses_claim,
    volume_is_for_pod,
)
from kopf_scheduler.plugins.feature import FEATURE_GATES
from kopf_scheduler.plugins.volume_binding.args import (
    MAX_CUSTOM_PRIORITY_SCORE,
    MAX_UTILIZATION,
    UtilizationShapePoint,
    VolumeBindingArgs,
)
from kopf_scheduler.plugins.volume_binding.assume_cache import AssumeCache
from kopf_scheduler.plugins.volume_binding.pv_util import bind_volume_to_claim, with_selected_node
from kopf_scheduler.plugins.volume_binding.scorer import broken_linear
from kopf_scheduler.plugins.volume_binding.state import (
    STATE_KEY,
    PodVolumes,
    StateData,
    VolumeError,
    no_pod_volume_for_node,
    state_not_found,
)

if TYPE_CHECKING:  # api/storage.py is imported with the first storage object (api/kinds.py's parsers)
    from kopf_scheduler.api.storage import (
        CSIDriver,
        CSINode,
        CSIStorageCapacity,
        PersistentVolume,
        PersistentVolumeClaim,
        StorageClass,
    )
    from kopf_scheduler.framework.snapshot import Snapshot

__all__ = ["UtilizationShapePoint", "VolumeBinding", "VolumeBindingArgs"]


STORAGE_CAPACITY_SCORING = FEATURE_GATES["StorageCapacityScoring"]


ERR_REASON_BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"


ERR_REASON_NODE_CONFLICT = "node(s) didn't match PersistentVolume's node affinity"


ERR_REASON_NOT_ENOUGH_SPACE = "node(s) did not have enough free storage"


ERR_REASON_PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"


ERR_UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"


WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"

PVC = kinds.PERSISTENT_VOLUME_CLAIM.kind
PV = kinds.PERSISTENT_VOLUME.kind


class VolumeBinding(Plugin):
    """The reference's VolumeBinding plugin, over the storage views in ``handle.objects``."""

    name = "VolumeBinding"

    def sign(self, pod: Pod) -> tuple[SignFragments, Status | None]:
        return [(signers.VOLUMES, signers.volumes(pod))], None

    Args = VolumeBindingArgs

    # Seconds between PreBind's looks at the claims while the PV controller binds them.
    poll_interval: float = 1.0

    def __init__(self, args: VolumeBindingArgs | None = None, handle: Handle | None = None) -> None:
        args = args if args is not None else VolumeBindingArgs()
        super().__init__(args, handle)
        self.bind_timeout = float(args.bind_timeout_seconds)
        self.pv_cache = AssumeCache(kinds.PERSISTENT_VOLUME)
        self.pvc_cache = AssumeCache(kinds.PERSISTENT_VOLUME_CLAIM)
        self._shape: tuple[tuple[int, int], ...] | None = None
        if STORAGE_CAPACITY_SCORING:
            factor = MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE
            self._shape = tuple((p.utilization, p.score * factor) for p in args.shape)

    # -- object access --

    @property
    def _objects(self) -> Objects:
        return self.handle.objects if self.handle is not None else {}

    def _storage_class(self, name: str) -> StorageClass | None:
        return kinds.objects_of(self._objects, kinds.STORAGE_CLASS).get(name)

    def _is_delay_binding_mode(self, pvc: PersistentVolumeClaim) -> bool:
        """``IsDelayBindingMode``: no class or an unknown class means Immediate."""
        class_name = pvc.class_name
        if not class_name:
            return False
        sc = self._storage_class(class_name)
        if sc is None:
            return False
        mode = sc.volume_binding_mode
        if not mode:
            raise VolumeError(f'VolumeBindingMode not set for StorageClass "{class_name}"')
        return mode == WAIT_FOR_FIRST_CONSUMER

    # -- events --

    def events_to_register(self) -> Iterable[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.STORAGE_CLASS, ActionType.ADD | ActionType.UPDATE),
                self._after_storage_class_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.PVC, ActionType.ADD | ActionType.UPDATE), self._after_pvc_change
            ),
            ClusterEventWithHint(ClusterEvent(EventResource.PV, ActionType.ADD | ActionType.UPDATE)),
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.CSI_NODE, ActionType.ADD | ActionType.UPDATE),
                self._after_csi_node_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.CSI_DRIVER, ActionType.UPDATE), self._after_csi_driver_change
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.CSI_STORAGE_CAPACITY, ActionType.ADD | ActionType.UPDATE),
                self._after_storage_capacity_change,
            ),
        ]

    @staticmethod
    def _after_storage_capacity_change(
        pod: Pod, old: CSIStorageCapacity | None, new: CSIStorageCapacity
    ) -> QueueingHint:
        """Queue for a new CSIStorageCapacity or one whose volume limit grew."""
        if old is None:
            return QueueingHint.QUEUE
        old_limit, new_limit = old.volume_limit, new.volume_limit
        if new_limit is not None and (old_limit is None or math.ceil(new_limit) > math.ceil(old_limit)):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    @staticmethod
    def _after_csi_driver_change(pod: Pod, old: CSIDriver, new: CSIDriver) -> QueueingHint:
        """Queue a pod with an inline CSI volume of a driver that stopped tracking capacity."""
        name = new.metadata.name
        for vol in pod.volumes:
            if vol.source.kind != CSI or vol.source.csi_driver != name:
                continue
            if old.storage_capacity and not new.storage_capacity:
                return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    @staticmethod
    def _after_csi_node_change(pod: Pod, old: CSINode | None, new: CSINode) -> QueueingHint:
        if old is None:
            return QueueingHint.QUEUE
        if old.metadata.annotations.get(MIGRATED_PLUGINS_ANNOTATION) != new.metadata.annotations.get(
            MIGRATED_PLUGINS_ANNOTATION
        ):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    @staticmethod
    def _after_pvc_change(
        pod: Pod, old: PersistentVolumeClaim | None, new: PersistentVolumeClaim
    ) -> QueueingHint:
        return QueueingHint.QUEUE if pod_uses_claim(pod, new, ephemeral=True) else QueueingHint.QUEUE_SKIP

    @staticmethod
    def _after_storage_class_change(pod: Pod, old: StorageClass | None, new: StorageClass) -> QueueingHint:
        if old is None:
            return QueueingHint.QUEUE
        if old.allowed_topologies != new.allowed_topologies:
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    # -- PreFilter --

    def _pod_has_pvcs(self, pod: Pod) -> tuple[bool, str | None]:
        has_pvc = False
        claims = kinds.objects_of(self._objects, kinds.PERSISTENT_VOLUME_CLAIM)
        for vol in pod.volumes:
            name = vol.claim_name
            if name is None:
                continue
            ephemeral = vol.ephemeral
            has_pvc = True
            pvc = claims.get(f"{pod.namespace}/{name}")
            if pvc is None:
                if ephemeral:
                    return (
                        has_pvc,
                        "waiting for ephemeral volume controller to create the persistentvolumeclaim "
                        f'"{name}"',
                    )
                return has_pvc, not_found(PVC, name)
            if pvc.phase == "Lost":
                return has_pvc, (
                    f'persistentvolumeclaim "{pvc.metadata.name}" bound to non-existent persistentvolume '
                    f'"{pvc.volume_name}"'
                )
            if pvc.metadata.deleting:
                return has_pvc, f'persistentvolumeclaim "{pvc.metadata.name}" is being deleted'
            if ephemeral:
                err = volume_is_for_pod(pod, pvc)
                if err:
                    return has_pvc, err
        return has_pvc, None

    def _get_pod_volume_claims(
        self, pod: Pod
    ) -> tuple[list[PersistentVolumeClaim], list[PersistentVolumeClaim], list[PersistentVolumeClaim]]:
        """(bound, unbound delayed, unbound immediate incl. pre-bound) claims, through the assume cache."""
        bound: list[PersistentVolumeClaim] = []
        delayed: list[PersistentVolumeClaim] = []
        immediate: list[PersistentVolumeClaim] = []
        objects = self._objects
        for vol in pod.volumes:
            if vol.claim_name is None:
                continue
            key = f"{pod.namespace}/{vol.claim_name}"
            pvc = self.pvc_cache.get(objects, key)
            if pvc is None:
                raise VolumeError(f'error getting PVC "{key}": {not_found(PVC, vol.claim_name)}')
            if vol.ephemeral:
                err = volume_is_for_pod(pod, pvc)
                if err:
                    raise VolumeError(err)
            if pvc.is_fully_bound:
                bound.append(pvc)
            elif self._is_delay_binding_mode(pvc) and not pvc.volume_name:
                delayed.append(pvc)
            else:
                immediate.append(pvc)
        return bound, delayed, immediate

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        has_pvc, err = self._pod_has_pvcs(pod)
        if err is not None:
            return None, Status.unresolvable(err)
        if not has_pvc:
            state.write(STATE_KEY, StateData(skip=True))
            return None, Status(Code.SKIP)
        try:
            bound, delayed, immediate = self._get_pod_volume_claims(pod)
        except VolumeError as exc:
            return None, Status.as_error(exc)
        if immediate:
            return None, Status.unresolvable(ERR_UNBOUND_IMMEDIATE)
        unbound_volumes: dict[str, list[PersistentVolume]] = {}
        if delayed:
            classes = {pvc.class_name for pvc in delayed}
            for class_name in classes:
                unbound_volumes[class_name] = []
            for _, pv in self.pv_cache.items(self._objects):
                bucket = unbound_volumes.get(pv.class_name)
                if bucket is not None:
                    bucket.append(pv)
        state.write(
            STATE_KEY, StateData(bound_claims=bound, claims_to_bind=delayed, unbound_volumes=unbound_volumes)
        )
        return None, None

    # -- Filter --

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status | None:
        data = state.get(STATE_KEY)
        if not isinstance(data, StateData):
            return state_not_found()
        if data.skip:
            return None
        node = node_info.node
        if node is None:
            return Status.as_error(ValueError("node not found"))
        try:
            pod_volumes, reasons = self._find_pod_volumes(pod, data, node.name, node.labels)
        except VolumeError as exc:
            return Status.as_error(exc)
        if reasons:
            return Status.unresolvable(*reasons)
        with data.lock:
            data.pod_volumes_by_node[node.name] = pod_volumes
            data.has_static_bindings = data.has_static_bindings or bool(pod_volumes.static_bindings)
        return None

    def _find_pod_volumes(
        self, pod: Pod, data: StateData, node_name: str, node_labels: Mapping[str, str]
    ) -> tuple[PodVolumes, list[str]]:
        pod_volumes = PodVolumes()
        unbound_ok = bound_ok = sufficient_storage = bound_pvs_found = True

        def reasons() -> list[str]:
            out = []
            if not bound_ok:
                out.append(ERR_REASON_NODE_CONFLICT)
            if not unbound_ok:
                out.append(ERR_REASON_BIND_CONFLICT)
            if not sufficient_storage:
                out.append(ERR_REASON_NOT_ENOUGH_SPACE)
            if not bound_pvs_found:
                out.append(ERR_REASON_PV_NOT_EXIST)
            return out

        if data.bound_claims:
            bound_ok, bound_pvs_found = self._check_bound_claims(data.bound_claims, node_name, node_labels)

        if data.claims_to_bind:
            from kopf_scheduler.api.storage import ANN_SELECTED_NODE

            to_match: list[PersistentVolumeClaim] = []
            to_provision: list[PersistentVolumeClaim] = []
            for pvc in data.claims_to_bind:
                selected = pvc.metadata.annotations.get(ANN_SELECTED_NODE)
                if selected is not None:
                    if selected != node_name:
                        unbound_ok = False  # fast path: provisioning already targets another node
                        return pod_volumes, reasons()
                    to_provision.append(pvc)
                else:
                    to_match.append(pvc)
            if to_match:
                unbound_ok, pod_volumes.static_bindings, unmatched = self._find_matching_volumes(
                    to_match, data.unbound_volumes, node_name, node_labels
                )
                to_provision.extend(unmatched)
            if to_provision:
                unbound_ok, sufficient_storage, pod_volumes.dynamic_provisions = (
                    self._check_volume_provisions(
                        to_provision, node_name, node_labels, pod_volumes.node_capacities
                    )
                )
        return pod_volumes, reasons()

    def _check_bound_claims(
        self, claims: Sequence[PersistentVolumeClaim], node_name: str, node_labels: Mapping[str, str]
    ) -> tuple[bool, bool]:
        """(node affinity satisfied, PVs found) for bound claims; stops at the first failure."""
        objects = self._objects
        for pvc in claims:
            pv = self.pv_cache.get(objects, pvc.volume_name)
            if pv is None:
                return True, False
            if not pv.matches_node(node_name, node_labels):
                return False, True
        return True, True

    def _find_matching_volumes(
        self,
        claims: Sequence[PersistentVolumeClaim],
        unbound_volumes: Mapping[str, Sequence[PersistentVolume]],
        node_name: str,
        node_labels: Mapping[str, str],
    ) -> tuple[bool, list[tuple[PersistentVolumeClaim, PersistentVolume]], list[PersistentVolumeClaim]]:
        """Smallest fitting PV per claim, claims sorted by request so small claims pick first."""
        found = True
        chosen: set[str] = set()
        bindings: list[tuple[PersistentVolumeClaim, PersistentVolume]] = []
        unmatched: list[PersistentVolumeClaim] = []
        for pvc in sorted(claims, key=lambda c: c.requested_storage):
            pv = self._find_matching_volume(
                pvc, unbound_volumes.get(pvc.class_name, ()), node_name, node_labels, chosen
            )
            if pv is None:
                unmatched.append(pvc)
                found = False
                continue
            chosen.add(pv.metadata.name)
            bindings.append((pvc, pv))
        return found, bindings, unmatched

    @staticmethod
    def _find_matching_volume(
        pvc: PersistentVolumeClaim,
        volumes: Iterable[PersistentVolume],
        node_name: str,
        node_labels: Mapping[str, str],
        excluded: set[str],
    ) -> PersistentVolume | None:
        """``FindMatchingVolume`` (scheduler path): a PV pre-bound to the claim, else the smallest fit."""
        requested = pvc.requested_storage
        selector = pvc.selector
        smallest: PersistentVolume | None = None
        smallest_qty = None
        for pv in volumes:
            if pv.metadata.name in excluded:
                continue
            bound_to_claim = pv.is_bound_to(pvc)
            if pv.claim_ref is not None and not bound_to_claim:
                continue
            capacity = pv.capacity
            if capacity < requested:
                continue
            if pv.volume_mode != pvc.volume_mode:
                continue
            if pv.metadata.deleting:
                continue
            affinity_ok = pv.matches_node(node_name, node_labels)
            if bound_to_claim:
                # A pre-bound PV that cannot reach the node means no match at all.
                return pv if affinity_ok else None
            if pv.phase != "Available":
                continue
            if selector is not None and not selector.matches(pv.metadata.labels):
                continue
            if pv.class_name != pvc.class_name:
                continue
            if not affinity_ok:
                continue
            if not pvc.access_modes <= pv.access_modes:
                continue
            if smallest is None or smallest_qty is None or smallest_qty > capacity:
                smallest, smallest_qty = pv, capacity
        return smallest

    def _check_volume_provisions(
        self,
        claims: Sequence[PersistentVolumeClaim],
        node_name: str,
        node_labels: Mapping[str, str],
        capacities: dict[str, CSIStorageCapacity],
    ) -> tuple[bool, bool, list[PersistentVolumeClaim]]:
        """(provisioning possible, enough storage, claims to provision); the first failure decides.

        ``capacities`` receives, per claim, the CSIStorageCapacity that has room for it here.
        """
        provisions: list[PersistentVolumeClaim] = []
        for pvc in claims:
            class_name = pvc.class_name
            if not class_name:
                raise VolumeError(f'no class for claim "{pvc.key}"')
            sc = self._storage_class(class_name)
            if sc is None:
                raise VolumeError(f'failed to find storage class "{class_name}"')
            provisioner = sc.provisioner
            if not provisioner or provisioner == NOT_SUPPORTED_PROVISIONER:
                return False, True, []
            if not sc.allows_topology(node_labels):
                return False, True, []
            sufficient, capacity = self._has_enough_capacity(provisioner, pvc, class_name, node_labels)
            if not sufficient:
                return True, False, []
            if capacity is not None:
                capacities[pvc.key] = capacity
            provisions.append(pvc)
        return True, True, provisions

    def _has_enough_capacity(
        self, provisioner: str, pvc: PersistentVolumeClaim, class_name: str, node_labels: Mapping[str, str]
    ) -> tuple[bool, CSIStorageCapacity | None]:
        """Storage capacity tracking: only for CSI drivers that opt in (CSIDriver.spec.storageCapacity).

        Returns whether there is room and the CSIStorageCapacity object that has it.
        """
        size = pvc.storage_request
        if size is None:
            return True, None
        driver = kinds.objects_of(self._objects, kinds.CSI_DRIVER).get(provisioner)
        if driver is None or not driver.storage_capacity:
            return True, None
        for capacity in kinds.objects_of(self._objects, kinds.CSI_STORAGE_CAPACITY).values():
            if capacity.storage_class_name != class_name:
                continue
            limit = capacity.volume_limit
            if limit is None or limit < size:
                continue
            selector = capacity.node_topology
            if selector is not None and selector.matches(node_labels):
                return True, capacity
        return False, None

    # -- Score --

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status | None:
        if self._shape is None:
            return Status(Code.SKIP)
        data = state.get(STATE_KEY)
        if not isinstance(data, StateData):
            return state_not_found()
        # With StorageCapacityScoring every pod with volume decisions is scored (dynamic
        # provisioning by the node's free capacity), not only those with static bindings.
        return None if data.has_static_bindings or STORAGE_CAPACITY_SCORING else Status(Code.SKIP)

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> tuple[int, Status | None]:
        if self._shape is None:
            return 0, None
        data = state.get(STATE_KEY)
        if not isinstance(data, StateData):
            return 0, state_not_found()
        pod_volumes = data.pod_volumes_by_node.get(node_info.name)
        if pod_volumes is None:
            return 0, None
        per_class: dict[str, list[int]] = {}
        if pod_volumes.static_bindings or not STORAGE_CAPACITY_SCORING:
            for pvc, pv in pod_volumes.static_bindings:
                acc = per_class.setdefault(pv.class_name, [0, 0])
                acc[0] += math.ceil(pvc.requested_storage)
                acc[1] += math.ceil(pv.capacity)
        else:
            # Dynamic provisioning: the free capacity CSIStorageCapacity reports for the node's
            # topology (per class, the last claim's capacity object, requests summed).
            for pvc in pod_volumes.dynamic_provisions:
                capacity = pod_volumes.node_capacities.get(pvc.key)
                if capacity is None:
                    continue
                acc = per_class.setdefault(pvc.class_name, [0, 0])
                acc[1] = math.ceil(capacity.capacity or 0)
                acc[0] += math.ceil(pvc.requested_storage)
        return self._score_classes(per_class.values()), None

    def score_vector(
        self, state: CycleState, pod: Pod, snapshot: Snapshot, idx: np.ndarray
    ) -> np.ndarray | None:
        """Zeros at once when no node has volume decisions for the pod (a pod without claims: with
        StorageCapacityScoring on, PreScore keeps every pod, so this is nearly every pod); otherwise
        None, and score() runs per node."""
        data = state.get(STATE_KEY)
        if self._shape is None or (isinstance(data, StateData) and not data.pod_volumes_by_node):
            return np.zeros(len(idx), dtype=np.int64)
        return None

    def _score_classes(self, resources: Iterable[Sequence[int]]) -> int:
        assert self._shape is not None
        total = weight = 0
        for requested, capacity in resources:
            if capacity == 0 or requested > capacity:
                total += broken_linear(self._shape, MAX_UTILIZATION)
            else:
                total += broken_linear(self._shape, requested * MAX_UTILIZATION // capacity)
            weight += 1
        if weight == 0:
            return 0
        return math.floor(total / weight + 0.5)  # math.Round: halves away from zero (scores are >= 0)

    # -- Reserve / Unreserve --

    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        data = state.get(STATE_KEY)
        if not isinstance(data, StateData):
            return state_not_found()
        pod_volumes = data.pod_volumes_by_node.get(node_name)
        if pod_volumes is None:
            data.all_bound = True  # the pod has no claims
            return None
        try:
            data.all_bound = self._assume_pod_volumes(pod, node_name, pod_volumes)
        except VolumeError as exc:
            return Status.as_error(exc)
        return None

    def _are_pod_volumes_bound(self, pod: Pod) -> bool:
        objects = self._objects
        for vol in pod.volumes:
            if vol.claim_name is None:
                continue
            pvc = self.pvc_cache.get(objects, f"{pod.namespace}/{vol.claim_name}")
            if pvc is None or not pvc.is_fully_bound:
                return False
        return True

    def _assume_pod_volumes(self, pod: Pod, node_name: str, pod_volumes: PodVolumes) -> bool:
        """``AssumePodVolumes``: record the node's decisions in the assume caches; True when nothing to do."""
        if self._are_pod_volumes_bound(pod):
            return True
        pvs = kinds.objects_of(self._objects, kinds.PERSISTENT_VOLUME)
        pvcs = kinds.objects_of(self._objects, kinds.PERSISTENT_VOLUME_CLAIM)
        new_bindings: list[tuple[PersistentVolumeClaim, PersistentVolume]] = []
        for pvc, pv in pod_volumes.static_bindings:
            new_pv, dirty = bind_volume_to_claim(pv, pvc)
            if dirty:
                name = pv.metadata.name
                self.pv_cache.assume(name, pvs.get(name, pv), new_pv)
            new_bindings.append((pvc, new_pv))
        new_provisions: list[PersistentVolumeClaim] = []
        for pvc in pod_volumes.dynamic_provisions:
            selected = with_selected_node(pvc, node_name)
            self.pvc_cache.assume(pvc.key, pvcs.get(pvc.key, pvc), selected)
            new_provisions.append(selected)
        pod_volumes.static_bindings = new_bindings
        pod_volumes.dynamic_provisions = new_provisions
        return False

    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        data = state.get(STATE_KEY)
        if not isinstance(data, StateData):
            return
        pod_volumes = data.pod_volumes_by_node.get(node_name)
        if pod_volumes is None:
            return
        for _, pv in pod_volumes.static_bindings:
            self.pv_cache.restore(pv.metadata.name)
        for pvc in pod_volumes.dynamic_provisions:
            self.pvc_cache.restore(pvc.key)

    # -- PreBind --

    def pre_bind_pre_flight(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        """Whether PreBind will write volume decisions for ``node_name`` (then binding may wait for
        the PV controller, and the scheduler publishes the node as nominatedNodeName first): Skip
        when Reserve found every claim bound (or the pod has none), None when the node has pending
        volume work, an Error when Filter recorded none for it or the cycle state is missing."""
        data = state.get(STATE_KEY)
        if not isinstance(data, StateData):
            return state_not_found()
        if data.all_bound:
            return Status(Code.SKIP)
        if node_name not in data.pod_volumes_by_node:
            return no_pod_volume_for_node(node_name)
        return None

    async def pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        """Ask the edge to write the volume decisions, then wait for the PV controller to bind.

        Calls ``await handle.client.bind_volumes(pod, claims)`` once, where ``claims`` is a list of
        ``(claim key "ns/name", pv name)`` in this order: static bindings first (pv name set), then
        claims left to dynamic provisioning (pv name ""). The edge is expected to make, for each:

        - pv name set: update the PV so that ``spec.claimRef`` references the claim (kind, apiVersion
          v1, namespace, name, uid, resourceVersion of the claim) and, unless the PV was already
          bound to that claim, add the annotation ``pv.kubernetes.io/bound-by-controller: "yes"``
          (``GetBindVolumeToClaim``); the PV controller then completes the PVC side;
        - pv name "": update the PVC to carry the annotation
          ``volume.kubernetes.io/selected-node: <pod.node_name>``, which tells the external
          provisioner to create a volume reachable from that node. ``pod.node_name`` is always the
          chosen node here (the plugin passes a copy of the pod with it set).

        It raises ``ApiError`` (or a subclass) on a failed write, and returns as soon as the writes
        are accepted; it does not wait. This plugin then waits (polling ``handle.objects``, fed by the
        watch) until every claim is fully bound (``spec.volumeName`` set and the
        ``pv.kubernetes.io/bind-completed`` annotation), failing early like the reference when the
        provisioner drops the selected-node annotation or the PV controller resets the claimRef,
        and giving up after ``bindTimeoutSeconds``. An in-memory client (simulate, tests) must act
        as the PV controller and mark the claims bound in its objects, or PreBind times out.
        """
        data = state.get(STATE_KEY)
        if not isinstance(data, StateData):
            return state_not_found()
        if data.all_bound:
            return None
        pod_volumes = data.pod_volumes_by_node.get(node_name)
        if pod_volumes is None:
            return no_pod_volume_for_node(node_name)
        client = self.handle.client if self.handle is not None else None
        if client is None:
            return Status.as_error(RuntimeError("VolumeBinding needs handle.client to bind volumes"))
        pvs = kinds.objects_of(self._objects, kinds.PERSISTENT_VOLUME)
        pvcs = kinds.objects_of(self._objects, kinds.PERSISTENT_VOLUME_CLAIM)
        # Versions seen before our writes: until the watch shows a newer one, "not yet visible" is
        # not a failure (the reference compares against the objects its Update calls returned).
        base_pv_versions = {
            pv.metadata.name: _resource_version(pvs.get(pv.metadata.name))
            for _, pv in pod_volumes.static_bindings
        }
        base_pvc_versions = {
            pvc.key: _resource_version(pvcs.get(pvc.key)) for pvc in pod_volumes.dynamic_provisions
        }
        claims = [(pvc.key, pv.metadata.name) for pvc, pv in pod_volumes.static_bindings]
        claims += [(pvc.key, "") for pvc in pod_volumes.dynamic_provisions]
        if pod.node_name != node_name:
            pod = dataclasses.replace(pod, node_name=node_name)
        try:
            await client.bind_volumes(pod, claims)
        except Exception as exc:  # the edge's ApiError family, or anything unexpected
            return Status.as_error(exc)
        deadline = time.monotonic() + self.bind_timeout
        while True:
            try:
                if self._check_bindings(pod_volumes, node_name, base_pv_versions, base_pvc_versions):
                    return None
            except VolumeError as exc:
                return Status.as_error(VolumeError(f"binding volumes: {exc}"))
            if time.monotonic() >= deadline:
                return Status.as_error(VolumeError("binding volumes: context deadline exceeded"))
            await asyncio.sleep(self.poll_interval)

    def _check_bindings(
        self,
        pod_volumes: PodVolumes,
        node_name: str,
        base_pv_versions: Mapping[str, str],
        base_pvc_versions: Mapping[str, str],
    ) -> bool:
        """``checkBindings`` on the watched objects: True when all claims are fully bound."""
        node_info = self.handle.snapshot.get(node_name) if self.handle is not None else None
        node = node_info.node if node_info is not None else None
        if node is None:
            raise VolumeError(f'failed to get node "{node_name}": {not_found("Node", node_name)}')
        pvs = kinds.objects_of(self._objects, kinds.PERSISTENT_VOLUME)
        pvcs = kinds.objects_of(self._objects, kinds.PERSISTENT_VOLUME_CLAIM)
        for pvc_assumed, pv_assumed in pod_volumes.static_bindings:
            pv_name = pv_assumed.metadata.name
            pv = pvs.get(pv_name)
            if pv is None:
                raise VolumeError(f"failed to check binding: {not_found(PV, pv_name)}")
            pvc = pvcs.get(pvc_assumed.key)
            if pvc is None:
                raise VolumeError(f"failed to check binding: {not_found(PVC, pvc_assumed.metadata.name)}")
            if not pv.is_bound_to(pvc_assumed):
                if pv.metadata.resource_version == base_pv_versions.get(pv_name):
                    return False  # our update is not visible yet
                if pv.claim_ref is None or not pv.claim_ref.uid:
                    raise VolumeError(f'ClaimRef got reset for pv "{pv_name}"')
                raise VolumeError(f'pv "{pv_name}" was bound to another claim')
            if not pv.matches_node(node.name, node.labels):
                raise VolumeError(
                    f'pv "{pv_name}" node affinity doesn\'t match node "{node.name}": '
                    "no matching NodeSelectorTerms"
                )
            if not pvc.is_fully_bound:
                return False
        from kopf_scheduler.api.storage import ANN_SELECTED_NODE

        for claim in pod_volumes.dynamic_provisions:
            key = claim.key
            pvc = pvcs.get(key)
            if pvc is None:
                raise VolumeError(f"failed to check provisioning pvc: {not_found(PVC, claim.metadata.name)}")
            annotations = pvc.metadata.annotations
            if annotations.get(ANN_SELECTED_NODE) != node_name:
                if pvc.metadata.resource_version == base_pvc_versions.get(key):
                    return False  # our update is not visible yet
                if not annotations:
                    raise VolumeError(f'selectedNode annotation reset for PVC "{pvc.metadata.name}"')
                # The provisioner removes the annotation to ask for another scheduling attempt.
                raise VolumeError(f'provisioning failed for PVC "{pvc.metadata.name}"')
            volume_name = pvc.volume_name
            if volume_name:
                pv = pvs.get(volume_name)
                if pv is None:
                    return False  # the PV may not have reached the watch yet
                if not pv.matches_node(node.name, node.labels):
                    raise VolumeError(
                        f'pv "{volume_name}" node affinity doesn\'t match node "{node.name}": '
                        "no matching NodeSelectorTerms"
                    )
            if not pvc.is_fully_bound:
                return False
        return True


def _resource_version(obj: PersistentVolume | PersistentVolumeClaim | None) -> str:
    return obj.metadata.resource_version if obj is not None else ""
