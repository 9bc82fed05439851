"""Pod group states (the reference's ``backend/cache/podgroupstate.go``).

Each PodGroup key maps to the PodGroup object (once observed) and to every pod that names the group,
pending or bound: gang admission counts all of them (``all_pods_count``), the group cycle and
Permit count those placed, bound or assumed by us (``scheduled_count``). A group's state can exist
before its PodGroup object does, as the reference's can, since pods may be created first.
"""

from __future__ import annotations

from collections.abc import Callable

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.api.podgroup import PodGroup, pod_group_key

__all__ = ["PodGroupStates"]


class PodGroupStates:
    """``is_assumed(uid)`` is the cache's: an assumed member counts as scheduled before its bind is seen."""

    def __init__(self, is_assumed: Callable[[str], bool]) -> None:
        self._is_assumed = is_assumed
        self._groups: dict[str, PodGroup] = {}
        self._members: dict[str, dict[str, Pod]] = {}

    # -- feeding (event handlers) --

    def set_group(self, group: PodGroup) -> None:
        self._groups[group.key] = group

    def delete_group(self, key: str) -> None:
        self._groups.pop(key, None)

    def set_pod(self, pod: Pod) -> None:
        key = pod.pod_group_key
        if key:
            self._members.setdefault(key, {})[pod.uid] = pod

    def delete_pod(self, pod: Pod) -> None:
        key = pod.pod_group_key
        members = self._members.get(key)
        if members is not None:
            members.pop(pod.uid, None)
            if not members:
                del self._members[key]

    # -- reading (PodGroupManager) --

    def get(self, namespace: str, name: str) -> PodGroup | None:
        return self._groups.get(pod_group_key(namespace, name))

    def groups(self) -> list[PodGroup]:
        return list(self._groups.values())

    def members(self, namespace: str, name: str) -> list[Pod]:
        return list(self._members.get(pod_group_key(namespace, name), {}).values())

    def all_pods_count(self, namespace: str, name: str) -> int:
        return len(self._members.get(pod_group_key(namespace, name), ()))

    def _placed(self, pod: Pod) -> bool:
        return bool(pod.node_name) or self._is_assumed(pod.uid)

    def scheduled_count(self, namespace: str, name: str) -> int:
        members = self._members.get(pod_group_key(namespace, name), {})
        return sum(1 for pod in members.values() if self._placed(pod))

    def unscheduled_pods(self, namespace: str, name: str) -> list[Pod]:
        members = self._members.get(pod_group_key(namespace, name), {})
        return [pod for pod in members.values() if not self._placed(pod)]
