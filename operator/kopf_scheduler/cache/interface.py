"""The scheduler cache's seam (the reference's ``backend/cache/interface.go``).

The scheduler and the event handlers program against ``SchedulerCache``; the one implementation
is ``cache.Cache``. Assigned pods (any scheduler's) and nodes go in; an assumed pod is one this
scheduler placed whose binding the watch has not confirmed yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from kopf_scheduler.api.objects import NodeSpec, PodSpec
    from kopf_scheduler.framework.snapshot import Snapshot
    from kopf_scheduler.framework.types import NodeInfo

__all__ = ["SchedulerCache"]


class SchedulerCache(Protocol):
    """Named apart from ``Cache`` (the implementation); the reference's ``Cache`` interface."""

    # kind -> key -> raw object: what ``Handle.objects`` reads
    @property
    def objects(self) -> Mapping[str, Mapping[str, Mapping[str, Any]]]: ...

    # -- nodes --

    def add_node(self, node: NodeSpec) -> NodeInfo: ...

    def update_node(self, old: NodeSpec | None, new: NodeSpec) -> NodeInfo: ...

    def remove_node(self, node: NodeSpec | str) -> None: ...

    # -- pods --

    def add_pod(self, pod: PodSpec) -> None: ...

    def update_pod(self, old: PodSpec, new: PodSpec) -> None: ...

    def remove_pod(self, pod: PodSpec) -> None: ...

    def get_pod(self, uid: str) -> PodSpec | None: ...

    # -- the scheduler's own placements --

    def assume_pod(self, pod: PodSpec) -> None: ...

    def finish_binding(self, pod: PodSpec) -> None: ...

    def forget_pod(self, pod: PodSpec) -> None: ...

    def is_assumed(self, pod: PodSpec | str) -> bool: ...

    # -- other kinds (handle.objects) --

    def add_object(self, kind: str, raw: Mapping[str, Any]) -> str: ...

    def update_object(self, kind: str, raw: Mapping[str, Any]) -> str: ...

    def delete_object(self, kind: str, raw: Mapping[str, Any]) -> Mapping[str, Any] | None: ...

    # -- per cycle --

    def update_snapshot(self, snapshot: Snapshot) -> int: ...
