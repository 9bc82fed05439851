"""NodePorts: a pod's host ports must be free on the node (0.0.0.0 conflicts with every IP)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.api.types import HostPort
from kopf_scheduler.framework import signers
from kopf_scheduler.framework.interface import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    Code,
    CycleState,
    EventResource,
    Plugin,
    PreFilterResult,
    QueueingHint,
    SignFragments,
    Status,
)
from kopf_scheduler.framework.types import HostPortInfo, NodeInfo

__all__ = ["NodePorts", "fits_ports"]

NAME = "NodePorts"
PRE_FILTER_STATE_KEY = "PreFilter" + NAME
ERR_REASON = "node(s) didn't have free ports for the requested pod ports"


def fits_ports(wanted: Sequence[HostPort], used: HostPortInfo) -> bool:
    return not any(used.check_conflict(port) for port in wanted)


@dataclass(slots=True)
class _PreFilterState:
    ports: tuple[HostPort, ...]

    def clone(self) -> _PreFilterState:
        return self


class NodePorts(Plugin):
    """PreFilter (Skip without host ports), Filter, EnqueueExtensions."""

    name = NAME

    def sign(self, pod: Pod) -> tuple[SignFragments, Status | None]:
        return [(signers.HOST_PORTS, signers.host_ports(pod))], None

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        if not pod.host_ports:
            return None, Status(Code.SKIP)
        state.write(PRE_FILTER_STATE_KEY, _PreFilterState(pod.host_ports))
        return None, None

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status | None:
        s = state.get(PRE_FILTER_STATE_KEY)
        if not isinstance(s, _PreFilterState):
            return Status.as_error(KeyError(f'reading "{PRE_FILTER_STATE_KEY}" from cycleState: not found'))
        if fits_ports(s.ports, node_info.used_ports):
            return None
        return Status.unschedulable(ERR_REASON)

    def events_to_register(self) -> Iterable[ClusterEventWithHint]:
        # Container ports are immutable, so only deletions (and new nodes) can free ports.
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE),
                self.is_schedulable_after_pod_deleted,
            ),
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD)),
        ]

    def is_schedulable_after_pod_deleted(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        if not isinstance(old, Pod):
            return QueueingHint.QUEUE
        if not old.node_name and not old.nominated_node_name:
            return QueueingHint.QUEUE_SKIP
        if not old.host_ports:
            return QueueingHint.QUEUE_SKIP
        in_use = HostPortInfo()
        for port in old.host_ports:
            in_use.add(port)
        if fits_ports(pod.host_ports, in_use):
            return QueueingHint.QUEUE_SKIP  # no port in common
        return QueueingHint.QUEUE
