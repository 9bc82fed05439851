"""An in-memory ``ClusterClient``: records every write. The product's own (``simulate``,
``explain``, the engine benchmarks), which unit tests use too (``testing.fake_client``).

Binding mimics the apiserver's rules that matter to the scheduler: a second bind of the same pod
is a Conflict, a pod listed in ``missing`` is NotFound, and ``fail_bind`` injects errors. Given the
cluster's ``objects`` (the dict the plugins read as ``handle.objects``), ``bind_volumes`` also plays
the PV controller and the external provisioner, so VolumeBinding's PreBind sees its claims bound.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kopf_scheduler.api import kinds
from kopf_scheduler.api.kinds import ObjectStore
from kopf_scheduler.api.meta import ObjectMeta
from kopf_scheduler.api.objects import Pod
from kopf_scheduler.api.podgroup import PodGroup
from kopf_scheduler.api.resource import ResourceClaim
from kopf_scheduler.api.storage import (
    ANN_BIND_COMPLETED,
    ANN_BOUND_BY_CONTROLLER,
    ANN_SELECTED_NODE,
    ClaimRef,
    PersistentVolume,
    PersistentVolumeClaim,
)
from kopf_scheduler.framework.client import Conflict, NotFound

__all__ = ["MemoryClusterClient", "RecordedEvent"]


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    type: str  # Normal | Warning
    reason: str  # Scheduled | FailedScheduling | Preempted
    pod: str  # ns/name
    message: str


@dataclass
class MemoryClusterClient:
    bindings: dict[str, str] = field(default_factory=dict)  # pod key -> node
    events: list[RecordedEvent] = field(default_factory=list)
    conditions: dict[str, tuple[str, str]] = field(default_factory=dict)  # pod key -> (reason, message)
    nominations: dict[str, str] = field(default_factory=dict)
    evicted: list[str] = field(default_factory=list)
    bound_volumes: list[tuple[str, tuple[tuple[str, str], ...]]] = field(default_factory=list)
    missing: set[str] = field(default_factory=set)
    fail_bind: dict[str, Exception] = field(default_factory=dict)
    on_bind: Callable[[Pod, str], None] | None = None
    on_evict: Callable[[Pod], None] | None = None
    preemptions: dict[str, list[str]] = field(default_factory=dict)  # preemptor key -> victim keys
    objects: ObjectStore | None = None
    claim_writes: list[tuple[str, str]] = field(default_factory=list)  # (claim key, what)
    extended_claim_statuses: dict[str, dict[str, Any]] = field(default_factory=dict)  # pod key -> status
    pod_group_conditions: dict[str, list[dict[str, Any]]] = field(
        default_factory=dict
    )  # group key -> conditions
    _version: int = 0

    async def bind(self, pod: Pod, node_name: str) -> None:
        key = pod.key
        if key in self.fail_bind:
            raise self.fail_bind[key]
        if key in self.missing:
            raise NotFound(f'pods "{pod.name}" not found', 404)
        if key in self.bindings:
            raise Conflict(f"pod {key} is already assigned to node {self.bindings[key]!r}", 409)
        self.bindings[key] = node_name
        if self.on_bind is not None:
            self.on_bind(pod, node_name)

    async def bound_node(self, pod: Pod) -> str:
        if pod.key in self.missing:
            raise NotFound(f'pods "{pod.name}" not found', 404)
        return self.bindings.get(pod.key, "")

    async def record_scheduled(self, pod: Pod, node_name: str) -> None:
        msg = f"Successfully assigned {pod.key} to {node_name}"
        self.events.append(RecordedEvent("Normal", "Scheduled", pod.key, msg))
        self.conditions.pop(pod.key, None)

    async def record_failed(
        self, pod: Pod, reason: str, message: str, nominated_node: str | None = None
    ) -> None:
        self.events.append(RecordedEvent("Warning", "FailedScheduling", pod.key, message))
        self.conditions[pod.key] = (reason, message)
        if nominated_node is not None and nominated_node != pod.nominated_node_name:
            await self.set_nominated_node(pod, nominated_node)

    async def record_skipped_deleting(self, pod: Pod) -> None:
        msg = f"skip schedule deleting pod: {pod.key}"
        self.events.append(RecordedEvent("Warning", "FailedScheduling", pod.key, msg))

    async def set_nominated_node(self, pod: Pod, node_name: str) -> None:
        if node_name:
            self.nominations[pod.key] = node_name
        else:
            self.nominations.pop(pod.key, None)

    async def evict(self, victim: Pod, preemptor: Pod | PodGroup, message: str) -> None:
        self.evicted.append(victim.key)
        self.preemptions.setdefault(preemptor.key, []).append(victim.key)
        self.events.append(RecordedEvent("Normal", "Preempted", victim.key, message))
        if self.on_evict is not None:
            self.on_evict(victim)

    async def bind_volumes(self, pod: Pod, claims: Sequence[tuple[str, str]]) -> None:
        self.bound_volumes.append((pod.key, tuple(claims)))
        if self.objects is None:
            return
        for claim_key, pv_name in claims:
            pvc = kinds.objects_of(self.objects, kinds.PERSISTENT_VOLUME_CLAIM).get(claim_key)
            if pvc is None:
                continue
            if pv_name:
                self._bind(pvc, pv_name, by_controller=True)
            else:
                self._provision(pvc, pod.node_name)

    # -- ResourceClaims: the apiserver's optimistic concurrency over ``objects["ResourceClaim"]`` --
    # Each write stores a new view with a new resourceVersion, as a watch would deliver it.

    def _claims(self) -> dict[str, ResourceClaim]:
        if self.objects is None:
            self.objects = {}
        return kinds.store_of(self.objects, kinds.RESOURCE_CLAIM)

    def _stored_claim(self, namespace: str, name: str) -> ResourceClaim:
        stored = self._claims().get(f"{namespace}/{name}")
        if stored is None:
            raise NotFound(f'resourceclaims.resource.k8s.io "{name}" not found', 404)
        return stored

    async def get_resource_claim(self, namespace: str, name: str) -> ResourceClaim:
        return self._stored_claim(namespace, name)

    def _write_claim(self, claim: ResourceClaim, *, status: bool) -> ResourceClaim:
        namespace, name = claim.metadata.namespace, claim.metadata.name
        stored = self._stored_claim(namespace, name)
        have = stored.metadata.resource_version
        if claim.metadata.resource_version and claim.metadata.resource_version != have:
            raise Conflict(
                f'Operation cannot be fulfilled on resourceclaims.resource.k8s.io "{name}": the object has '
                "been modified; please apply your changes to the latest version and try again",
                409,
            )
        version = self._next_version()
        if status:
            new = dataclasses.replace(
                stored,
                status=claim.status,
                metadata=dataclasses.replace(stored.metadata, resource_version=version),
            )
        else:  # the object: metadata (finalizers, labels...), the spec being immutable
            new = dataclasses.replace(
                stored,
                finalizers=claim.finalizers,
                metadata=dataclasses.replace(claim.metadata, resource_version=version),
            )
        self._claims()[claim.key] = new
        self.claim_writes.append((claim.key, "status" if status else "metadata"))
        return new

    async def update_resource_claim(self, claim: ResourceClaim) -> ResourceClaim:
        return self._write_claim(claim, status=False)

    async def update_resource_claim_status(self, claim: ResourceClaim) -> ResourceClaim:
        return self._write_claim(claim, status=True)

    async def unreserve_resource_claim(self, namespace: str, name: str, claim_uid: str, pod_uid: str) -> None:
        stored = self._stored_claim(namespace, name)
        if stored.metadata.uid and stored.metadata.uid != claim_uid:
            raise Conflict(f"resourceclaim {namespace}/{name}: uid precondition failed", 409)
        reserved = tuple(r for r in stored.status.reserved_for if r.uid != pod_uid)
        self._claims()[stored.key] = dataclasses.replace(
            stored,
            status=dataclasses.replace(stored.status, reserved_for=reserved),
            metadata=dataclasses.replace(stored.metadata, resource_version=self._next_version()),
        )
        self.claim_writes.append((stored.key, "unreserve"))

    async def create_resource_claim(self, claim: ResourceClaim) -> ResourceClaim:
        self._version += 1
        meta = claim.metadata
        new = dataclasses.replace(
            claim,
            metadata=dataclasses.replace(
                meta,
                name=meta.name or f"{claim.generate_name or 'claim-'}{self._version:05d}",
                uid=f"sim-claim-{self._version}",
                resource_version=self._next_version(),
            ),
        )
        self._claims()[new.key] = new
        self.claim_writes.append((new.key, "create"))
        return new

    async def delete_resource_claim(self, namespace: str, name: str, uid: str) -> None:
        stored = self._claims().get(f"{namespace}/{name}")
        if stored is not None and stored.metadata.uid in (uid, ""):
            del self._claims()[f"{namespace}/{name}"]
            self.claim_writes.append((f"{namespace}/{name}", "delete"))

    async def set_pod_extended_resource_claim_status(self, pod: Pod, status: Mapping[str, Any]) -> None:
        self.extended_claim_statuses[pod.key] = copy.deepcopy(dict(status))

    def _next_version(self) -> str:
        self._version += 1
        return f"sim-{self._version}"

    def _bind(self, pvc: PersistentVolumeClaim, pv_name: str, *, by_controller: bool) -> None:
        """What the PV controller does: PV claimRef, then PVC volumeName + bind-completed.

        New views replace the old ones, as a watch would deliver new objects.
        """
        assert self.objects is not None
        pvs = kinds.store_of(self.objects, kinds.PERSISTENT_VOLUME)
        pvcs = kinds.store_of(self.objects, kinds.PERSISTENT_VOLUME_CLAIM)
        meta = pvc.metadata
        pv = pvs.get(pv_name) or PersistentVolume(ObjectMeta(name=pv_name))
        pv_annotations = dict(pv.metadata.annotations)
        if by_controller:
            pv_annotations[ANN_BOUND_BY_CONTROLLER] = "yes"
        pvs[pv_name] = dataclasses.replace(
            pv,
            metadata=dataclasses.replace(
                pv.metadata, resource_version=self._next_version(), annotations=pv_annotations
            ),
            claim_ref=ClaimRef(meta.name, meta.namespace, meta.uid),
            phase="Bound",
        )
        annotations = {**meta.annotations, ANN_BIND_COMPLETED: "yes"}
        if by_controller:
            annotations[ANN_BOUND_BY_CONTROLLER] = "yes"
        pvcs[pvc.key] = dataclasses.replace(
            pvc,
            metadata=dataclasses.replace(
                meta, resource_version=self._next_version(), annotations=annotations
            ),
            volume_name=pv_name,
            phase="Bound",
        )

    def _provision(self, pvc: PersistentVolumeClaim, node_name: str) -> None:
        """Selected-node annotation, then an external provisioner's PV (no node affinity) and binding."""
        assert self.objects is not None
        meta = pvc.metadata
        selected = dataclasses.replace(
            pvc,
            metadata=dataclasses.replace(
                meta, annotations={**meta.annotations, ANN_SELECTED_NODE: node_name}
            ),
        )
        pv_name = f"pvc-{meta.uid or meta.name}"
        kinds.store_of(self.objects, kinds.PERSISTENT_VOLUME)[pv_name] = PersistentVolume(
            ObjectMeta(name=pv_name),
            class_name=pvc.class_name,
            capacity=pvc.requested_storage,
            access_modes=pvc.access_modes or frozenset({"ReadWriteOnce"}),
        )
        self._bind(selected, pv_name, by_controller=False)

    def failed_messages(self, key: str) -> list[str]:
        return [e.message for e in self.events if e.pod == key and e.reason == "FailedScheduling"]

    async def set_pod_group_conditions(
        self, namespace: str, name: str, conditions: Sequence[Mapping[str, Any]]
    ) -> None:
        key = f"{namespace}/{name}"
        self.pod_group_conditions[key] = [dict(c) for c in conditions]
        groups = (self.objects or {}).get(kinds.POD_GROUP.kind, {})
        stored = groups.get(key)
        if isinstance(stored, PodGroup):  # a new view replaces the old, as the watch would deliver
            groups[key] = dataclasses.replace(stored, conditions=tuple(dict(c) for c in conditions))
