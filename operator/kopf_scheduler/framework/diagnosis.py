"""Why a pod did not fit: per-node statuses and the ``0/N nodes are available: ...`` message.

The message is what users read in ``kubectl describe pod`` and what tooling greps for, so it is
built exactly like the reference's ``FitError.Error()``: a PreFilter message replaces the per-node
histogram, the histogram lines are ``"<count> <reason>"`` sorted as strings, and a PostFilter
(preemption) message is appended without its own period.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence, ValuesView
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kopf_scheduler.framework.interface import Code, Status

if TYPE_CHECKING:
    from kopf_scheduler.api.objects import Pod
    from kopf_scheduler.framework.types import NodeInfo

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

    __slots__ = ("_codes", "_lazy", "_statuses", "absent_nodes_status")

    def __init__(self) -> None:
        self._statuses: dict[str, Status] = {}
        self._codes: set[Code] = set()  # every code ever set (a superset once overwritten)
        self._lazy: list[Callable[[], None]] = []
        self.absent_nodes_status = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    def set(self, node_name: str, status: Status) -> None:
        self._statuses[node_name] = status
        self._codes.add(status.code)

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

    def values(self) -> ValuesView[Status]:
        """The statuses at once: Mapping's default looks every node up again."""
        self._materialize()
        return self._statuses.values()

    def infos_with_code(self, code: Code, infos: Sequence[NodeInfo]) -> list[NodeInfo]:
        """``infos`` whose status (explicit or absent) has this code; at once when none can.

        Preemption asks this for Unschedulable over every node; when every node was
        Unresolvable (a request larger than any node) that was a lookup per node for nothing.
        """
        self._materialize()
        if code not in self._codes and self.absent_nodes_status.code != code:
            return []
        get, absent = self._statuses.get, self.absent_nodes_status
        return [info for info in infos if get(info.name, absent).code == code]

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

    def __init__(self, pod: Pod | None, num_all_nodes: int, diagnosis: Diagnosis) -> None:
        super().__init__()
        self.pod = pod
        self.num_all_nodes = num_all_nodes
        self.diagnosis = diagnosis
        self._histogram: tuple[int, str] | None = None

    def __str__(self) -> str:
        # The message is asked for up to three times per failed attempt (before and after
        # PostFilter, then for the event); its node histogram walks every node's status once.
        statuses = self.diagnosis.node_to_status
        size = len(statuses)
        if self._histogram is None or self._histogram[0] != size:
            self._histogram = (size, _histogram(self.num_all_nodes, statuses))
        return _with_messages(self._histogram[1], self.num_all_nodes, self.diagnosis)


def _histogram(num_all_nodes: int, statuses: NodeToStatus) -> str:
    """``3 Insufficient cpu, 2 node(s) had untolerated taint ...``: reasons counted over nodes."""
    per_status: dict[int, tuple[Status, int]] = {}  # statuses are often shared by many nodes
    for status in statuses.values():
        hit = per_status.get(id(status))
        per_status[id(status)] = (status, hit[1] + 1 if hit is not None else 1)
    counts: dict[str, int] = {}
    for status, n in per_status.values():
        for reason in status.reasons:
            counts[reason] = counts.get(reason, 0) + n
    absent = num_all_nodes - len(statuses)
    if absent > 0:
        for reason in statuses.absent_nodes_status.reasons:
            counts[reason] = counts.get(reason, 0) + absent
    return ", ".join(sorted(f"{n} {reason}" for reason, n in counts.items()))


def _with_messages(histogram: str, num_all_nodes: int, diagnosis: Diagnosis) -> str:
    msg = f"0/{num_all_nodes} nodes are available:"
    if diagnosis.pre_filter_msg:
        msg += f" {diagnosis.pre_filter_msg}."
    elif histogram:
        msg += f" {histogram}."
    if diagnosis.post_filter_msg:
        msg += f" {diagnosis.post_filter_msg}"
    return msg


def fit_error_message(num_all_nodes: int, diagnosis: Diagnosis) -> str:
    histogram = "" if diagnosis.pre_filter_msg else _histogram(num_all_nodes, diagnosis.node_to_status)
    return _with_messages(histogram, num_all_nodes, diagnosis)


def truncate_message(message: str, limit: int = NOTE_LENGTH_LIMIT) -> str:
    """Shorten an Event note the way the reference does (``... `` suffix) to fit the apiserver limit."""
    if len(message) <= limit:
        return message
    suffix = " ..."
    return message[: limit - len(suffix)] + suffix
