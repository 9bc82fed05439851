"""Why a pod did not fit: per-node statuses and the ``0/N nodes are available: ...`` message.

The message is what users read in ``kubectl describe pod`` and what tooling greps for, so it is
built exactly like the reference's ``FitError.Error()``: a PreFilter message replaces the per-node
histogram, the histogram lines are ``"<count> <reason>"`` sorted as strings, and a PostFilter
(preemption) message is appended without its own period.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kopf_scheduler.framework.interface import Code, Status

if TYPE_CHECKING:
    from kopf_scheduler.api.objects import PodSpec

__all__ = [
    "NOTE_LENGTH_LIMIT",
    "NO_NODES_AVAILABLE_MSG",
    "Diagnosis",
    "FitError",
    "NoNodesAvailable",
    "NodeToStatus",
    "truncate_message",
]

NO_NODES_AVAILABLE_MSG = "no nodes available to schedule pods"
NOTE_LENGTH_LIMIT = 1024  # the apiserver's limit on an Event's note


class NoNodesAvailable(Exception):
    """The snapshot has no nodes at all (the reference's ``ErrNoNodesAvailable``)."""

    def __init__(self) -> None:
        super().__init__(NO_NODES_AVAILABLE_MSG)


class NodeToStatus(Mapping[str, Status]):
    """Statuses of rejected nodes, plus one status standing for every node not listed.

    As a Mapping it holds only the nodes evaluated and rejected; ``status_for`` answers for any
    node, falling back to ``absent_nodes_status`` (UnschedulableAndUnresolvable by default,
    so preemption does not try nodes a PreFilter already ruled out).
    """

    __slots__ = ("_lazy", "_statuses", "absent_nodes_status")

    def __init__(self) -> None:
        self._statuses: dict[str, Status] = {}
        self._lazy: list[Callable[[], None]] = []
        self.absent_nodes_status = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    def set(self, node_name: str, status: Status) -> None:
        self._statuses[node_name] = status

    def defer(self, fill: Callable[[], None]) -> None:
        """Register work that fills in statuses only if someone reads them (vector filters)."""
        self._lazy.append(fill)

    def _materialize(self) -> None:
        while self._lazy:
            self._lazy.pop(0)()

    def set_absent_nodes_status(self, status: Status) -> None:
        self.absent_nodes_status = status

    def status_for(self, node_name: str) -> Status:
        self._materialize()
        return self._statuses.get(node_name, self.absent_nodes_status)

    def __getitem__(self, node_name: str) -> Status:
        self._materialize()
        return self._statuses[node_name]

    def __iter__(self) -> Iterator[str]:
        self._materialize()
        return iter(self._statuses)

    def __len__(self) -> int:
        self._materialize()
        return len(self._statuses)

    def nodes_for_status_code(self, code: Code, all_nodes: list[str]) -> list[str]:
        """Node names whose status (explicit or absent) has this code (preemption's candidates)."""
        self._materialize()
        return [n for n in all_nodes if self._statuses.get(n, self.absent_nodes_status).code == code]


@dataclass(slots=True)
class Diagnosis:
    node_to_status: NodeToStatus = field(default_factory=NodeToStatus)
    unschedulable_plugins: set[str] = field(default_factory=set)
    pending_plugins: set[str] = field(default_factory=set)
    pre_filter_msg: str = ""
    post_filter_msg: str = ""

    def add_plugin_status(self, status: Status) -> None:
        """Remember which plugin rejected the pod so the queue can requeue it on the right events."""
        if not status.plugin:
            return
        if status.is_rejected():
            self.unschedulable_plugins.add(status.plugin)
        if status.code == Code.PENDING:
            self.pending_plugins.add(status.plugin)


class FitError(Exception):
    """No node fits the pod; ``str()`` is the FailedScheduling message."""

    def __init__(self, pod: PodSpec | None, num_all_nodes: int, diagnosis: Diagnosis) -> None:
        super().__init__()
        self.pod = pod
        self.num_all_nodes = num_all_nodes
        self.diagnosis = diagnosis

    def __str__(self) -> str:
        return fit_error_message(self.num_all_nodes, self.diagnosis)


def fit_error_message(num_all_nodes: int, diagnosis: Diagnosis) -> str:
    msg = f"0/{num_all_nodes} nodes are available:"
    if diagnosis.pre_filter_msg:
        msg += f" {diagnosis.pre_filter_msg}."
    else:
        statuses = diagnosis.node_to_status
        counts: dict[str, int] = {}
        for status in statuses.values():
            for reason in status.reasons:
                counts[reason] = counts.get(reason, 0) + 1
        absent = num_all_nodes - len(statuses)
        if absent > 0:
            for reason in statuses.absent_nodes_status.reasons:
                counts[reason] = counts.get(reason, 0) + absent
        histogram = sorted(f"{n} {reason}" for reason, n in counts.items())
        if histogram:
            msg += f" {', '.join(histogram)}."
    if diagnosis.post_filter_msg:
        msg += f" {diagnosis.post_filter_msg}"
    return msg


def truncate_message(message: str, limit: int = NOTE_LENGTH_LIMIT) -> str:
    """Shorten an Event note the way the reference does (``... `` suffix) to fit the apiserver limit."""
    if len(message) <= limit:
        return message
    suffix = " ..."
    return message[: limit - len(suffix)] + suffix
