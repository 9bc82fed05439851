"""The scheduler cache's seam (the reference's ``backend/cache/interface.go``).

The scheduler and the event handlers program against ``SchedulerCache``; the one implementation
is ``cache.Cache``. Assigned pods (any scheduler's) and nodes go in; an assumed pod is one this
scheduler placed whose binding the watch has not confirmed yet.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from kopf_scheduler.api.kinds import Objects

if TYPE_CHECKING:
    from kopf_scheduler.api.objects import Node, Pod
    from kopf_scheduler.cache.podgroups import PodGroupStates
    from kopf_scheduler.framework.snapshot import Snapshot
    from kopf_scheduler.framework.types import NodeInfo

__all__ = ["SchedulerCache"]


class SchedulerCache(Protocol):
    """Named apart from ``Cache`` (the implementation); the reference's ``Cache`` interface."""

    # kind -> key -> raw object: what ``Handle.objects`` reads
    @property
    def objects(self) -> Objects: ...

    # -- nodes --

    def add_node(self, node: Node) -> NodeInfo: ...

    def update_node(self, old: Node | None, new: Node) -> NodeInfo: ...

    def remove_node(self, node: Node | str) -> None: ...

    # -- pods --

    def add_pod(self, pod: Pod) -> None: ...

    def update_pod(self, old: Pod, new: Pod) -> None: ...

    def remove_pod(self, pod: Pod) -> None: ...

    def get_pod(self, uid: str) -> Pod | None: ...

    # -- the scheduler's own placements --

    def assume_pod(self, pod: Pod) -> None: ...

    def finish_binding(self, pod: Pod) -> None: ...

    def forget_pod(self, pod: Pod) -> None: ...

    def is_assumed(self, pod: Pod | str) -> bool: ...

    # -- other kinds (handle.objects) --

    # ``obj``: the kind's typed view (``api.kinds.Kind.parse``, run at the edge).
    def add_object(self, kind: str, obj: Any) -> str: ...

    def update_object(self, kind: str, obj: Any) -> str: ...

    def delete_object(self, kind: str, obj: Any) -> Any | None: ...

    # -- per cycle --

    def update_snapshot(self, snapshot: Snapshot) -> int: ...

    def restore_snapshot_nodes(self, snapshot: Snapshot, names: Iterable[str]) -> None:
        """Put the cache's copies of these nodes back into ``snapshot`` after a what-if edited them."""
        ...

    # -- pod groups (all pods naming a PodGroup, pending or bound, and the PodGroup objects) --

    @property
    def pod_groups(self) -> PodGroupStates: ...
