"""NodeResourcesBalancedAllocation: prefer nodes whose resource fractions stay close together.

Since 1.37 the score is the change in balance the pod brings: ``50 + (50 + b_with - b_without) / 2``
where ``b = (1 - std(fractions)) * 100`` over the configured resources, from the node's actual
requests (not the non-zero defaults), with and without the pod. So a node the pod balances beats
one that is merely already balanced. Best-effort pods skip (so they do not all pile onto the same
node). The pod's requests are its status-aware ones with pod-level resources, as the NodeInfo
accounting uses (``Pod.requests``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.config.profile import ARGS_CONFIG, ValidDefaults
from kopf_scheduler.framework.interface import (
    Code,
    CycleState,
    Handle,
    Plugin,
    SignFragments,
    Status,
)
from kopf_scheduler.framework.types import NodeInfo
from kopf_scheduler.plugins.resource_allocation import (
    ResourceAllocationScorer,
    ResourceSpec,
    balanced_score,
    balanced_score_vector,
    default_resources,
    sign_resources,
)

if TYPE_CHECKING:
    from kopf_scheduler.framework.snapshot import Snapshot

__all__ = ["NodeResourcesBalancedAllocation", "NodeResourcesBalancedAllocationArgs"]

NAME = "NodeResourcesBalancedAllocation"
PRE_SCORE_STATE_KEY = "PreScore" + NAME


@dataclass
class NodeResourcesBalancedAllocationArgs(ValidDefaults):
    """Resources default to cpu and memory; every weight must be 1 (weights are meaningless here)."""

    __pydantic_config__ = ARGS_CONFIG

    resources: list[ResourceSpec] = field(default_factory=default_resources)

    def __post_init__(self) -> None:
        if not self.resources:
            self.resources = default_resources()
        errs = []
        seen: set[str] = set()
        for i, res in enumerate(self.resources):
            if res.name in seen:
                errs.append(f'resources[{i}].name: Duplicate value: "{res.name}"')
            seen.add(res.name)
            if res.weight != 1:
                errs.append(f"resources[{i}].weight: Invalid value: {res.weight}: must be 1")
        if errs:
            raise ValueError("; ".join(errs))


@dataclass(slots=True)
class _PreScoreState:
    pod_requests: list[int]

    def clone(self) -> _PreScoreState:
        return self


class NodeResourcesBalancedAllocation(Plugin):
    """PreScore, Score (with a numpy form)."""

    name = NAME

    def sign(self, pod: Pod) -> tuple[SignFragments, Status | None]:
        return sign_resources(self.handle, pod)
    Args = NodeResourcesBalancedAllocationArgs

    def __init__(
        self, args: NodeResourcesBalancedAllocationArgs | None = None, handle: Handle | None = None
    ) -> None:
        args = args if args is not None else NodeResourcesBalancedAllocationArgs()
        super().__init__(args, handle)
        self.scorer = ResourceAllocationScorer(
            args.resources, balanced_score, balanced_score_vector, use_requested=True
        )

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status | None:
        requests = self.scorer.pod_requests(pod)
        if not any(requests):
            return Status(Code.SKIP)  # best-effort pod
        state.write(PRE_SCORE_STATE_KEY, _PreScoreState(requests))
        return None

    def _pod_requests(self, state: CycleState, pod: Pod) -> list[int]:
        s = state.get(PRE_SCORE_STATE_KEY)
        return s.pod_requests if isinstance(s, _PreScoreState) else self.scorer.pod_requests(pod)

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> tuple[int, Status | None]:
        return self.scorer.score(node_info, self._pod_requests(state, pod)), None

    def score_vector(
        self, state: CycleState, pod: Pod, snapshot: Snapshot, idx: np.ndarray
    ) -> np.ndarray | None:
        return self.scorer.score_rows(snapshot, idx, self._pod_requests(state, pod))
