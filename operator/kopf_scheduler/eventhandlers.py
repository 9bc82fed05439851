"""Watch events -> cache and queue (the reference's ``pkg/scheduler/eventhandlers.go``).

Unassigned pods that one of our profiles is responsible for live in the queue; assigned pods of
any scheduler live in the cache. Every change that may make a waiting pod schedulable is turned
into a ``ClusterEvent`` for the queue, which moves only the pods whose rejecting plugins care.

The edge hands parsed objects (``Pod``/``Node``, and each other kind's typed view: api/kinds.py;
a PodGroup's also feeds the cache's pod group states). Terminal pods
count as deleted, as the reference's pod informer never lists them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kopf_scheduler.api.objects import Node, Pod
from kopf_scheduler.api.podgroup import PodGroup
from kopf_scheduler.cache.cache import CacheError
from kopf_scheduler.cache.interface import SchedulerCache
from kopf_scheduler.framework.events import (
    EVENT_ASSIGNED_POD_ADD,
    EVENT_ASSIGNED_POD_DELETE,
    EVENT_NODE_ADD,
    EVENT_NODE_DELETE,
    EVENT_UNSCHEDULED_POD_ADD,
    ActionType,
    node_scheduling_properties_change,
    object_event,
    pod_scheduling_properties_change,
)
from kopf_scheduler.queue.interface import SchedulingQueue

__all__ = ["EventHandlers"]

log = logging.getLogger(__name__)


def _le_priority(priority: int) -> Callable[[Pod], bool]:
    return lambda pod: pod.priority <= priority


class EventHandlers:
    """``reject_waiting_pod(pod) -> bool`` (the scheduler's, wired by ``new_engine``) rejects a
    deleted pod that waits at Permit, as the reference's ``RejectWaitingPod``: its binding cycle
    then unreserves and forgets it. Forgetting it here instead would free its room in the cache
    while its Reserve plugins still hold theirs and its binding cycle still waits to bind it."""

    def __init__(
        self,
        cache: SchedulerCache,
        queue: SchedulingQueue,
        is_responsible: Callable[[Pod], bool],
        *,
        reject_waiting_pod: Callable[[Pod], bool] | None = None,
    ) -> None:
        self.cache = cache
        self.queue = queue
        self.is_responsible = is_responsible
        self.reject_waiting_pod = reject_waiting_pod

    # -- pods --

    def add_pod(self, pod: Pod) -> None:
        if pod.is_terminal:
            self.delete_pod(pod)
            return
        if pod.pod_group:
            self.cache.pod_groups.set_pod(pod)
        if pod.node_name:
            if self.queue.is_known(pod.uid):
                self.queue.delete(pod)  # bound by someone else while queued
            self._add_assigned(pod)
        elif self.is_responsible(pod):
            if self.cache.is_assumed(pod.uid):
                return  # being bound by us; a re-list must not queue it again
            self.queue.add(pod)
            if pod.pod_group:
                # A new member may complete its gang's minCount (the reference sends this event
                # whenever GenericWorkload is on; only GangScheduling, for members, listens).
                self.queue.move_all_to_active_or_backoff(EVENT_UNSCHEDULED_POD_ADD, None, pod)

    def update_pod(self, old: Pod, new: Pod) -> None:
        if new.is_terminal:
            self.delete_pod(new if new.node_name else old)
            return
        if new.pod_group:
            self.cache.pod_groups.set_pod(new)
        if old.node_name:
            self._update_assigned(old, new)
        elif new.node_name:
            # A binding: account it, and make sure it is no longer queued.
            self._add_assigned(new)
            if self.is_responsible(old):
                self.queue.delete(old)
        elif self.is_responsible(old):
            self._update_in_queue(old, new)

    def delete_pod(self, pod: Pod, *, final_state_unknown: bool = False) -> None:
        """``final_state_unknown``: the object may be stale (missed the delete), clean up both sides."""
        if pod.pod_group:
            self.cache.pod_groups.delete_pod(pod)
        if final_state_unknown:
            self._delete_assigned(pod)
            if self.is_responsible(pod):
                self._delete_from_queue(pod)
            return
        if pod.node_name:
            self._delete_assigned(pod)
        elif self.is_responsible(pod):
            self._delete_from_queue(pod)

    def _add_assigned(self, pod: Pod) -> None:
        try:
            self.cache.add_pod(pod)
        except CacheError:
            log.exception("cache add_pod failed for %s", pod.key)
        self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_ADD, None, pod)

    def _update_assigned(self, old: Pod, new: Pod) -> None:
        try:
            self.cache.update_pod(old, new)
        except CacheError:
            log.exception("cache update_pod failed for %s", new.key)
        for event in pod_scheduling_properties_change(old, new):
            self.queue.move_all_to_active_or_backoff(event, old, new)

    def _delete_assigned(self, pod: Pod) -> None:
        try:
            self.cache.remove_pod(pod)
        except CacheError:
            log.exception("cache remove_pod failed for %s", pod.key)
        self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, pod, None)

    def _update_in_queue(self, old: Pod, new: Pod) -> None:
        if old.resource_version and old.resource_version == new.resource_version:
            return  # a resync carrying the same object
        if self.cache.is_assumed(new.uid):
            if new.deletion_timestamp and not old.deletion_timestamp:
                if self.queue.is_known(new.uid):
                    # Still in its cycle (waiting at Permit): should it come back, it comes back
                    # as being deleted, and is dropped, as the reference requeues the informer's
                    # latest version of a failed pod.
                    self.queue.update(old, new)
                self._handle_assumed_pod_deletion(new)
            return
        self.queue.update(old, new)
        if old.nominated_node_name and old.nominated_node_name != new.nominated_node_name:
            # Lower-or-equal priority pods treated the nominated pod as if it were on that node.
            self.queue.move_all_to_active_or_backoff(
                EVENT_ASSIGNED_POD_DELETE, old, None, _le_priority(old.priority)
            )

    def _delete_from_queue(self, pod: Pod) -> None:
        self.queue.delete(pod)
        if self.cache.is_assumed(pod.uid):
            self._handle_assumed_pod_deletion(pod)
        elif pod.nominated_node_name:
            self.queue.move_all_to_active_or_backoff(
                EVENT_ASSIGNED_POD_DELETE, pod, None, _le_priority(pod.priority)
            )

    def _handle_assumed_pod_deletion(self, pod: Pod) -> None:
        assumed = self.cache.get_pod(pod.uid)
        if assumed is None:
            return
        rejected = self.reject_waiting_pod is not None and self.reject_waiting_pod(assumed)
        if not rejected:
            try:
                self.cache.forget_pod(assumed)
            except CacheError:
                log.exception("cache forget_pod failed for %s", pod.key)
        self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, assumed, None)

    # -- nodes --

    def add_node(self, node: Node) -> None:
        self.cache.add_node(node)
        self.queue.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, node)

    def update_node(self, old: Node, new: Node) -> None:
        self.cache.update_node(old, new)
        for event in node_scheduling_properties_change(old, new):
            self.queue.move_all_to_active_or_backoff(event, old, new)

    def delete_node(self, node: Node) -> None:
        self.queue.move_all_to_active_or_backoff(EVENT_NODE_DELETE, node, None)
        try:
            self.cache.remove_node(node)
        except CacheError:
            log.warning("node %s was not in the cache", node.name)

    # -- other objects: each the kind's typed view (api/kinds.py), parsed at the edge --

    def add_object(self, kind: str, obj: Any) -> None:
        self.cache.add_object(kind, obj)
        if isinstance(obj, PodGroup):
            self.cache.pod_groups.set_group(obj)
        event = object_event(kind, ActionType.ADD)
        if event is not None:
            self.queue.move_all_to_active_or_backoff(event, None, obj)

    def update_object(self, kind: str, old: Any, new: Any) -> None:
        self.cache.update_object(kind, new)
        if isinstance(new, PodGroup):
            self.cache.pod_groups.set_group(new)
        event = object_event(kind, ActionType.UPDATE)
        if event is not None:
            self.queue.move_all_to_active_or_backoff(event, old, new)

    def delete_object(self, kind: str, obj: Any) -> None:
        self.cache.delete_object(kind, obj)
        if isinstance(obj, PodGroup):
            self.cache.pod_groups.delete_group(obj.key)
        event = object_event(kind, ActionType.DELETE)
        if event is not None:
            self.queue.move_all_to_active_or_backoff(event, obj, None)
