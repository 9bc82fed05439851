"""The VolumeBinding plugin: PreFilter..PreBind and its events (``volume_binding.go``,
with the binder's find/assume/bind steps as its methods; the reference's ``binder.go``)."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kopf_scheduler.api.objects import Pod, labels_of
from kopf_scheduler.api.selectors import parse_label_selector
from kopf_scheduler.api.types import ObjectError
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
    ANN_SELECTED_NODE,
    MIGRATED_PLUGINS_ANNOTATION,
    NOT_SUPPORTED_PROVISIONER,
    annotations_of,
    claim_of_volume,
    claim_selector,
    meta,
    not_found,
    pod_uses_claim,
    pv_class,
    pv_matches_node,
    pvc_class,
    quantity,
    resource_version,
    spec,
    storage_capacity,
    storage_request,
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
from kopf_scheduler.plugins.volume_binding.pv_util import (
    PV,
    PVC,
    STORAGE_CLASS,
    access_modes,
    bind_volume_to_claim,
    claim_key,
    claim_ref,
    is_fully_bound,
    is_volume_bound_to_claim,
    match_topology_terms,
    object_name,
    pvc_volume_name,
    volume_mode,
)
from kopf_scheduler.plugins.volume_binding.scorer import broken_linear
from kopf_scheduler.plugins.volume_binding.state import (
    STATE_KEY,
    PodVolumes,
    StateData,
    VolumeError,
    no_pod_volume_for_node,
    state_not_found,
)

__all__ = ["UtilizationShapePoint", "VolumeBinding", "VolumeBindingArgs"]


STORAGE_CAPACITY_SCORING = FEATURE_GATES["StorageCapacityScoring"]


ERR_REASON_BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"


ERR_REASON_NODE_CONFLICT = "node(s) didn't match PersistentVolume's node affinity"


ERR_REASON_NOT_ENOUGH_SPACE = "node(s) did not have enough free storage"


ERR_REASON_PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"


ERR_UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"


WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"


class VolumeBinding(Plugin):
    """The reference's VolumeBinding plugin, over raw objects in ``handle.objects``."""

    name = "VolumeBinding"

    def sign(self, pod: Pod) -> tuple[SignFragments, Status | None]:
        return [(signers.VOLUMES, signers.volumes(pod))], None
    Args = VolumeBindingArgs

    # Seconds between PreBind's looks at the claims while the PV controller binds them.
    poll_interval: float = 1.0

    def __init__(self, args: VolumeBindingArgs | None = None, handle: Handle | None = None) -> None:
        args = args if args is not None else VolumeBindingArgs.model_validate({})
        super().__init__(args, handle)
        self.bind_timeout = float(args.bind_timeout_seconds)
        self.pv_cache = AssumeCache(PV)
        self.pvc_cache = AssumeCache(PVC)
        self._shape: tuple[tuple[int, int], ...] | None = None
        if STORAGE_CAPACITY_SCORING:
            factor = MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE
            self._shape = tuple((p.utilization, p.score * factor) for p in args.shape)

    # -- object access --

    @property
    def _objects(self) -> Mapping[str, Mapping[str, Any]]:
        return self.handle.objects if self.handle is not None else {}

    def _storage_class(self, name: str) -> Mapping[str, Any] | None:
        return self._objects.get(STORAGE_CLASS, {}).get(name)

    def _is_delay_binding_mode(self, pvc: Mapping[str, Any]) -> bool:
        """``IsDelayBindingMode``: no class or an unknown class means Immediate."""
        class_name = pvc_class(pvc)
        if not class_name:
            return False
        sc = self._storage_class(class_name)
        if sc is None:
            return False
        mode = sc.get("volumeBindingMode")
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
    def _after_storage_capacity_change(pod: Pod, old: Any, new: Any) -> QueueingHint:
        """Queue for a new CSIStorageCapacity or one whose volume limit grew."""
        if old is None:
            return QueueingHint.QUEUE

        def limit(capacity: Mapping[str, Any]) -> Any:
            size = capacity.get("maximumVolumeSize")
            return size if size is not None else capacity.get("capacity")

        old_limit, new_limit = limit(old), limit(new)
        if new_limit is not None and (
            old_limit is None or math.ceil(quantity(new_limit)) > math.ceil(quantity(old_limit))
        ):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    @staticmethod
    def _after_csi_driver_change(pod: Pod, old: Any, new: Any) -> QueueingHint:
        """Queue a pod with an inline CSI volume of a driver that stopped tracking capacity."""
        name = meta(new).get("name")
        for vol in pod.volumes:
            csi = vol.get("csi")
            if not isinstance(csi, Mapping) or csi.get("driver") != name:
                continue
            if spec(old).get("storageCapacity") is True and spec(new).get("storageCapacity") is not True:
                return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    @staticmethod
    def _after_csi_node_change(pod: Pod, old: Any, new: Any) -> QueueingHint:
        if old is None:
            return QueueingHint.QUEUE
        if annotations_of(old).get(MIGRATED_PLUGINS_ANNOTATION) != annotations_of(new).get(
            MIGRATED_PLUGINS_ANNOTATION
        ):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    @staticmethod
    def _after_pvc_change(pod: Pod, old: Any, new: Any) -> QueueingHint:
        return QueueingHint.QUEUE if pod_uses_claim(pod, new, ephemeral=True) else QueueingHint.QUEUE_SKIP

    @staticmethod
    def _after_storage_class_change(pod: Pod, old: Any, new: Any) -> QueueingHint:
        if old is None:
            return QueueingHint.QUEUE
        if (old.get("allowedTopologies") or None) != (new.get("allowedTopologies") or None):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    # -- PreFilter --

    def _pod_has_pvcs(self, pod: Pod) -> tuple[bool, str | None]:
        has_pvc = False
        claims = self._objects.get(PVC, {})
        for vol in pod.volumes:
            claim = claim_of_volume(pod, vol)
            if claim is None:
                continue
            name, ephemeral = claim
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
            status = pvc.get("status") or {}
            if status.get("phase") == "Lost":
                return has_pvc, (
                    f'persistentvolumeclaim "{object_name(pvc)}" bound to non-existent persistentvolume '
                    f'"{pvc_volume_name(pvc)}"'
                )
            if meta(pvc).get("deletionTimestamp"):
                return has_pvc, f'persistentvolumeclaim "{object_name(pvc)}" is being deleted'
            if ephemeral:
                err = volume_is_for_pod(pod, pvc)
                if err:
                    return has_pvc, err
        return has_pvc, None

    def _get_pod_volume_claims(self, pod: Pod) -> tuple[list[Any], list[Any], list[Any]]:
        """(bound, unbound delayed, unbound immediate incl. pre-bound) claims, through the assume cache."""
        bound: list[Mapping[str, Any]] = []
        delayed: list[Mapping[str, Any]] = []
        immediate: list[Mapping[str, Any]] = []
        objects = self._objects
        for vol in pod.volumes:
            claim = claim_of_volume(pod, vol)
            if claim is None:
                continue
            key = f"{pod.namespace}/{claim[0]}"
            pvc = self.pvc_cache.get(objects, key)
            if pvc is None:
                raise VolumeError(f'error getting PVC "{key}": {not_found(PVC, claim[0])}')
            if claim[1]:
                err = volume_is_for_pod(pod, pvc)
                if err:
                    raise VolumeError(err)
            if is_fully_bound(pvc):
                bound.append(pvc)
            elif self._is_delay_binding_mode(pvc) and not pvc_volume_name(pvc):
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
        unbound_volumes: dict[str, list[Mapping[str, Any]]] = {}
        if delayed:
            classes = {pvc_class(pvc) for pvc in delayed}
            for class_name in classes:
                unbound_volumes[class_name] = []
            for _, pv in self.pv_cache.items(self._objects):
                bucket = unbound_volumes.get(pv_class(pv))
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
            to_match: list[Mapping[str, Any]] = []
            to_provision: list[Mapping[str, Any]] = []
            for pvc in data.claims_to_bind:
                selected = annotations_of(pvc).get(ANN_SELECTED_NODE)
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
        self, claims: Sequence[Mapping[str, Any]], node_name: str, node_labels: Mapping[str, str]
    ) -> tuple[bool, bool]:
        """(node affinity satisfied, PVs found) for bound claims; stops at the first failure."""
        objects = self._objects
        for pvc in claims:
            pv = self.pv_cache.get(objects, pvc_volume_name(pvc))
            if pv is None:
                return True, False
            if not pv_matches_node(pv, node_name, node_labels):
                return False, True
        return True, True

    def _find_matching_volumes(
        self,
        claims: Sequence[Mapping[str, Any]],
        unbound_volumes: Mapping[str, Sequence[Mapping[str, Any]]],
        node_name: str,
        node_labels: Mapping[str, str],
    ) -> tuple[bool, list[tuple[Mapping[str, Any], Mapping[str, Any]]], list[Mapping[str, Any]]]:
        """Smallest fitting PV per claim, claims sorted by request so small claims pick first."""
        found = True
        chosen: set[str] = set()
        bindings: list[tuple[Mapping[str, Any], Mapping[str, Any]]] = []
        unmatched: list[Mapping[str, Any]] = []
        for pvc in sorted(claims, key=storage_request):
            pv = self._find_matching_volume(
                pvc, unbound_volumes.get(pvc_class(pvc), ()), node_name, node_labels, chosen
            )
            if pv is None:
                unmatched.append(pvc)
                found = False
                continue
            chosen.add(object_name(pv))
            bindings.append((pvc, pv))
        return found, bindings, unmatched

    @staticmethod
    def _find_matching_volume(
        pvc: Mapping[str, Any],
        volumes: Iterable[Mapping[str, Any]],
        node_name: str,
        node_labels: Mapping[str, str],
        excluded: set[str],
    ) -> Mapping[str, Any] | None:
        """``FindMatchingVolume`` (scheduler path): a PV pre-bound to the claim, else the smallest fit."""
        requested = storage_request(pvc)
        requested_class = pvc_class(pvc)
        try:
            selector = claim_selector(pvc)
        except ObjectError as exc:
            raise VolumeError(
                f"error creating internal label selector for claim: {claim_key(pvc)}: {exc}"
            ) from None
        claim_modes = access_modes(pvc)
        claim_mode = volume_mode(pvc)
        smallest: Mapping[str, Any] | None = None
        smallest_qty = None
        for pv in volumes:
            if object_name(pv) in excluded:
                continue
            if claim_ref(pv) is not None and not is_volume_bound_to_claim(pv, pvc):
                continue
            capacity = storage_capacity(pv)
            if capacity < requested:
                continue
            if volume_mode(pv) != claim_mode:
                continue
            if meta(pv).get("deletionTimestamp"):
                continue
            affinity_ok = pv_matches_node(pv, node_name, node_labels)
            if is_volume_bound_to_claim(pv, pvc):
                # A pre-bound PV that cannot reach the node means no match at all.
                return pv if affinity_ok else None
            if (pv.get("status") or {}).get("phase") != "Available":
                continue
            if selector is not None and not selector.matches(labels_of(pv)):
                continue
            if pv_class(pv) != requested_class:
                continue
            if not affinity_ok:
                continue
            if not claim_modes <= access_modes(pv):
                continue
            if smallest is None or smallest_qty is None or smallest_qty > capacity:
                smallest, smallest_qty = pv, capacity
        return smallest

    def _check_volume_provisions(
        self,
        claims: Sequence[Mapping[str, Any]],
        node_name: str,
        node_labels: Mapping[str, str],
        capacities: dict[str, Mapping[str, Any]],
    ) -> tuple[bool, bool, list[Mapping[str, Any]]]:
        """(provisioning possible, enough storage, claims to provision); the first failure decides.

        ``capacities`` receives, per claim, the CSIStorageCapacity that has room for it here.
        """
        provisions: list[Mapping[str, Any]] = []
        for pvc in claims:
            class_name = pvc_class(pvc)
            if not class_name:
                raise VolumeError(f'no class for claim "{claim_key(pvc)}"')
            sc = self._storage_class(class_name)
            if sc is None:
                raise VolumeError(f'failed to find storage class "{class_name}"')
            provisioner = str(sc.get("provisioner") or "")
            if not provisioner or provisioner == NOT_SUPPORTED_PROVISIONER:
                return False, True, []
            if not match_topology_terms(sc.get("allowedTopologies"), node_labels):
                return False, True, []
            sufficient, capacity = self._has_enough_capacity(provisioner, pvc, class_name, node_labels)
            if not sufficient:
                return True, False, []
            if capacity is not None:
                capacities[claim_key(pvc)] = capacity
            provisions.append(pvc)
        return True, True, provisions

    def _has_enough_capacity(
        self, provisioner: str, pvc: Mapping[str, Any], class_name: str, node_labels: Mapping[str, str]
    ) -> tuple[bool, Mapping[str, Any] | None]:
        """Storage capacity tracking: only for CSI drivers that opt in (CSIDriver.spec.storageCapacity).

        Returns whether there is room and the CSIStorageCapacity object that has it.
        """
        requests = (spec(pvc).get("resources") or {}).get("requests") or {}
        if "storage" not in requests:
            return True, None
        driver = self._objects.get("CSIDriver", {}).get(provisioner)
        if driver is None or not spec(driver).get("storageCapacity"):
            return True, None
        size = quantity(requests["storage"])
        for capacity in self._objects.get("CSIStorageCapacity", {}).values():
            if capacity.get("storageClassName") != class_name:
                continue
            limit = capacity.get("maximumVolumeSize")
            if limit is None:
                limit = capacity.get("capacity")
            if limit is None or quantity(limit) < size:
                continue
            topology = capacity.get("nodeTopology")
            if topology is None:
                continue
            try:
                selector = parse_label_selector(topology, "nodeTopology")
            except ObjectError:
                continue
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
                acc = per_class.setdefault(pv_class(pv), [0, 0])
                acc[0] += math.ceil(storage_request(pvc))
                acc[1] += math.ceil(storage_capacity(pv))
        else:
            # Dynamic provisioning: the free capacity CSIStorageCapacity reports for the node's
            # topology (per class, the last claim's capacity object, requests summed).
            for pvc in pod_volumes.dynamic_provisions:
                capacity = pod_volumes.node_capacities.get(claim_key(pvc))
                if capacity is None:
                    continue
                acc = per_class.setdefault(pvc_class(pvc), [0, 0])
                acc[1] = math.ceil(quantity(capacity.get("capacity")))
                acc[0] += math.ceil(storage_request(pvc))
        return self._score_classes(per_class.values()), None

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
            claim = claim_of_volume(pod, vol)
            if claim is None:
                continue
            pvc = self.pvc_cache.get(objects, f"{pod.namespace}/{claim[0]}")
            if pvc is None or not is_fully_bound(pvc):
                return False
        return True

    def _assume_pod_volumes(self, pod: Pod, node_name: str, pod_volumes: PodVolumes) -> bool:
        """``AssumePodVolumes``: record the node's decisions in the assume caches; True when nothing to do."""
        if self._are_pod_volumes_bound(pod):
            return True
        objects = self._objects
        new_bindings: list[tuple[Mapping[str, Any], Mapping[str, Any]]] = []
        for pvc, pv in pod_volumes.static_bindings:
            new_pv, dirty = bind_volume_to_claim(pv, pvc)
            if dirty:
                base = objects.get(PV, {}).get(object_name(pv), pv)
                self.pv_cache.assume(object_name(pv), base, new_pv)
            new_bindings.append((pvc, new_pv))
        new_provisions: list[Mapping[str, Any]] = []
        for pvc in pod_volumes.dynamic_provisions:
            clone = copy.deepcopy(dict(pvc))
            clone_meta = dict(clone.get("metadata") or {})
            clone_meta["annotations"] = {
                **dict(clone_meta.get("annotations") or {}),
                ANN_SELECTED_NODE: node_name,
            }
            clone["metadata"] = clone_meta
            key = claim_key(pvc)
            self.pvc_cache.assume(key, objects.get(PVC, {}).get(key, pvc), clone)
            new_provisions.append(clone)
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
            self.pv_cache.restore(object_name(pv))
        for pvc in pod_volumes.dynamic_provisions:
            self.pvc_cache.restore(claim_key(pvc))

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
        objects = self._objects
        # Versions seen before our writes: until the watch shows a newer one, "not yet visible" is
        # not a failure (the reference compares against the objects its Update calls returned).
        base_pv_versions = {
            object_name(pv): resource_version(objects.get(PV, {}).get(object_name(pv)))
            for _, pv in pod_volumes.static_bindings
        }
        base_pvc_versions = {
            claim_key(pvc): resource_version(objects.get(PVC, {}).get(claim_key(pvc)))
            for pvc in pod_volumes.dynamic_provisions
        }
        claims = [(claim_key(pvc), object_name(pv)) for pvc, pv in pod_volumes.static_bindings]
        claims += [(claim_key(pvc), "") for pvc in pod_volumes.dynamic_provisions]
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
        objects = self._objects
        node_info = self.handle.snapshot.get(node_name) if self.handle is not None else None
        node = node_info.node if node_info is not None else None
        if node is None:
            raise VolumeError(f'failed to get node "{node_name}": {not_found("Node", node_name)}')
        pvs = objects.get(PV, {})
        pvcs = objects.get(PVC, {})
        for pvc_assumed, pv_assumed in pod_volumes.static_bindings:
            pv_name = object_name(pv_assumed)
            pv = pvs.get(pv_name)
            if pv is None:
                raise VolumeError(f"failed to check binding: {not_found(PV, pv_name)}")
            key = claim_key(pvc_assumed)
            pvc = pvcs.get(key)
            if pvc is None:
                raise VolumeError(f"failed to check binding: {not_found(PVC, object_name(pvc_assumed))}")
            if not is_volume_bound_to_claim(pv, pvc_assumed):
                if resource_version(pv) == base_pv_versions.get(pv_name):
                    return False  # our update is not visible yet
                ref = claim_ref(pv)
                if ref is None or not ref.get("uid"):
                    raise VolumeError(f'ClaimRef got reset for pv "{pv_name}"')
                raise VolumeError(f'pv "{pv_name}" was bound to another claim')
            if not pv_matches_node(pv, node.name, node.labels):
                raise VolumeError(
                    f'pv "{pv_name}" node affinity doesn\'t match node "{node.name}": '
                    "no matching NodeSelectorTerms"
                )
            if not is_fully_bound(pvc):
                return False
        for claim in pod_volumes.dynamic_provisions:
            key = claim_key(claim)
            pvc = pvcs.get(key)
            if pvc is None:
                raise VolumeError(f"failed to check provisioning pvc: {not_found(PVC, object_name(claim))}")
            selected = annotations_of(pvc).get(ANN_SELECTED_NODE)
            if selected != node_name:
                if resource_version(pvc) == base_pvc_versions.get(key):
                    return False  # our update is not visible yet
                if not annotations_of(pvc):
                    raise VolumeError(f'selectedNode annotation reset for PVC "{object_name(pvc)}"')
                # The provisioner removes the annotation to ask for another scheduling attempt.
                raise VolumeError(f'provisioning failed for PVC "{object_name(pvc)}"')
            volume_name = pvc_volume_name(pvc)
            if volume_name:
                pv = pvs.get(volume_name)
                if pv is None:
                    return False  # the PV may not have reached the watch yet
                if not pv_matches_node(pv, node.name, node.labels):
                    raise VolumeError(
                        f'pv "{volume_name}" node affinity doesn\'t match node "{node.name}": '
                        "no matching NodeSelectorTerms"
                    )
            if not is_fully_bound(pvc):
                return False
        return True
