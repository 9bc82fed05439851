"""DynamicResources, as far as it shows for pods without ResourceClaims (the reference's
``plugins/dynamicresources``; DRA is on by default in v1.37, and the default profile runs this
plugin right before DefaultPreemption).

Device allocation is not modelled: a pod's ``resourceClaims`` are not read. What is modelled is
the part every pod meets. PreFilter records (empty) state and skips. PostFilter runs before
DefaultPreemption and, for a pod without claims, declines (Unschedulable, no message) so
preemption runs next — unless PreFilter never ran because an earlier PreFilter plugin rejected
the pod as UnschedulableAndUnresolvable (missing PVC, unbound Immediate PVC, ...). Then its state
is missing, its PostFilter fails with the cycle state's ``not found``, and that error ends the
PostFilter phase: the reference's FailedScheduling note reads
``0/3 nodes are available: persistentvolumeclaim "data" not found. not found`` with no
preemption part, and the pod's nomination is left as it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from kopf_scheduler.framework.interface import (
    Code,
    CycleState,
    Plugin,
    PostFilterResult,
    PreFilterResult,
    Status,
)

if TYPE_CHECKING:
    from kopf_scheduler.api.objects import Pod
    from kopf_scheduler.framework.types import NodeInfo

__all__ = ["STATE_KEY", "STATE_NOT_FOUND", "DynamicResources"]

STATE_KEY = "PreFilterDynamicResources"
STATE_NOT_FOUND = "not found"  # framework.ErrNotFound, what reading absent cycle state returns


class _StateData:
    """The reference's stateData; no claims are tracked here."""

    __slots__ = ()

    def clone(self) -> _StateData:
        return self


class DynamicResources(Plugin):
    name = "DynamicResources"

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        state.write(STATE_KEY, _StateData())
        return None, Status(Code.SKIP)

    def post_filter(
        self, state: CycleState, pod: Pod, node_statuses: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status | None]:
        if state.get(STATE_KEY) is None:
            return None, Status(Code.ERROR, STATE_NOT_FOUND)
        return None, Status(Code.UNSCHEDULABLE)  # no claims to deallocate: let preemption try

    def score(self, state: CycleState, pod: Pod, node: NodeInfo) -> tuple[int, Status | None]:
        # The reference has no PreScore to skip Score: it runs for every pod and node, and a pod
        # without claims scores 0 (its -v=10 log lists DynamicResources with 0 on every node).
        if state.get(STATE_KEY) is None:
            return 0, Status(Code.ERROR, STATE_NOT_FOUND)
        return 0, None

    def score_vector(
        self, state: CycleState, pod: Pod, snapshot: object, idx: np.ndarray
    ) -> np.ndarray | None:
        if state.get(STATE_KEY) is None:
            return None  # the per-node path reports the error
        return np.zeros(len(idx), dtype=np.int64)

    def pre_bind_pre_flight(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        if state.get(STATE_KEY) is None:
            return Status(Code.ERROR, STATE_NOT_FOUND)
        return Status(Code.SKIP)  # no claims to write in PreBind

    async def pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        return None
