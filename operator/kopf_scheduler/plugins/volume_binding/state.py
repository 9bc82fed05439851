"""VolumeBinding's cycle state and the statuses about it."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kopf_scheduler.framework.interface import Code, Status

if TYPE_CHECKING:  # api/storage.py is imported with the first storage object (api/kinds.py's parsers)
    from kopf_scheduler.api.storage import CSIStorageCapacity, PersistentVolume, PersistentVolumeClaim

STATE_KEY = "VolumeBinding"


@dataclass(slots=True)
class PodVolumes:
    """One node's decisions: static (pvc, pv) bindings and claims left to dynamic provisioning."""

    static_bindings: list[tuple[PersistentVolumeClaim, PersistentVolume]] = field(default_factory=list)
    dynamic_provisions: list[PersistentVolumeClaim] = field(default_factory=list)
    # claim key -> the CSIStorageCapacity that showed room for it on this node (scoring)
    node_capacities: dict[str, CSIStorageCapacity] = field(default_factory=dict)


@dataclass(slots=True)
class StateData:
    skip: bool = False
    bound_claims: list[PersistentVolumeClaim] = field(default_factory=list)
    claims_to_bind: list[PersistentVolumeClaim] = field(default_factory=list)
    unbound_volumes: dict[str, list[PersistentVolume]] = field(default_factory=dict)
    pod_volumes_by_node: dict[str, PodVolumes] = field(default_factory=dict)
    has_static_bindings: bool = False
    all_bound: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def clone(self) -> StateData:
        # As the reference: decisions found by Filter are shared with preemption's copies.
        return self


def state_not_found() -> Status:
    """The cycle state's own ``not found``: the reference's getStateData returns it unwrapped."""
    return Status(Code.ERROR, "not found")


def no_pod_volume_for_node(node_name: str) -> Status:
    """The reference's ``errNoPodVolumeForNode`` wrapped with the Go-quoted node name."""
    return Status.as_error(LookupError(f'no pod volume found for node "{node_name}"'))


class VolumeError(Exception):
    """An internal error that becomes an Error status (the reference's ``AsStatus(err)``)."""
