"""An in-memory ``ClusterClient``: records every write, for ``simulate`` and unit tests.

Binding mimics the apiserver's rules that matter to the scheduler: a second bind of the same pod
is a Conflict, a pod listed in ``missing`` is NotFound, and ``fail_bind`` injects errors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kopf_scheduler.api.objects import PodSpec
from kopf_scheduler.framework.client import Conflict, NotFound

__all__ = ["FakeClusterClient", "RecordedEvent"]


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    type: str  # Normal | Warning
    reason: str  # Scheduled | FailedScheduling | Preempted
    pod: str  # ns/name
    message: str


@dataclass
class FakeClusterClient:
    bindings: dict[str, str] = field(default_factory=dict)  # pod key -> node
    events: list[RecordedEvent] = field(default_factory=list)
    conditions: dict[str, tuple[str, str]] = field(default_factory=dict)  # pod key -> (reason, message)
    nominations: dict[str, str] = field(default_factory=dict)
    evicted: list[str] = field(default_factory=list)
    bound_volumes: list[tuple[str, tuple[tuple[str, str], ...]]] = field(default_factory=list)
    missing: set[str] = field(default_factory=set)
    fail_bind: dict[str, Exception] = field(default_factory=dict)
    on_bind: Callable[[PodSpec, str], None] | None = None
    on_evict: Callable[[PodSpec], None] | None = None

    async def bind(self, pod: PodSpec, node_name: str) -> None:
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

    async def record_scheduled(self, pod: PodSpec, node_name: str) -> None:
        msg = f"Successfully assigned {pod.key} to {node_name}"
        self.events.append(RecordedEvent("Normal", "Scheduled", pod.key, msg))
        self.conditions.pop(pod.key, None)

    async def record_failed(self, pod: PodSpec, reason: str, message: str) -> None:
        self.events.append(RecordedEvent("Warning", "FailedScheduling", pod.key, message))
        self.conditions[pod.key] = (reason, message)

    async def set_nominated_node(self, pod: PodSpec, node_name: str) -> None:
        if node_name:
            self.nominations[pod.key] = node_name
        else:
            self.nominations.pop(pod.key, None)

    async def evict(self, victim: PodSpec, preemptor: PodSpec, message: str) -> None:
        self.evicted.append(victim.key)
        self.events.append(RecordedEvent("Normal", "Preempted", victim.key, message))
        if self.on_evict is not None:
            self.on_evict(victim)

    async def bind_volumes(self, pod: PodSpec, claims: Sequence[tuple[str, str]]) -> None:
        self.bound_volumes.append((pod.key, tuple(claims)))

    def failed_messages(self, key: str) -> list[str]:
        return [e.message for e in self.events if e.pod == key and e.reason == "FailedScheduling"]
