"""Pods nominated to nodes by preemption (the reference's ``backend/queue/nominator.go``).

A nominated pod is treated by lower-or-equal priority pods as if it were already on its node,
so the nominator must always hold the latest version of the pod and forget it once bound.
"""

from __future__ import annotations

from kopf_scheduler.api.objects import Pod

__all__ = ["Nominator"]


class Nominator:
    def __init__(self) -> None:
        self._by_node: dict[str, list[Pod]] = {}
        self._node_of: dict[str, str] = {}

    def add_nominated_pod(self, pod: Pod, node_name: str = "") -> None:
        """Nominate ``pod`` to ``node_name`` (or to its ``status.nominatedNodeName`` when empty).

        Any previous nomination is dropped first, as in the reference; a pod already bound is
        never nominated.
        """
        self.delete_nominated_pod_if_exists(pod)
        node = node_name or pod.nominated_node_name
        if not node or pod.node_name:
            return
        self._node_of[pod.uid] = node
        pods = self._by_node.setdefault(node, [])
        pods.append(pod)

    def delete_nominated_pod_if_exists(self, pod: Pod) -> None:
        node = self._node_of.pop(pod.uid, None)
        if node is None:
            return
        pods = self._by_node.get(node, [])
        self._by_node[node] = [p for p in pods if p.uid != pod.uid]
        if not self._by_node[node]:
            del self._by_node[node]

    def update_nominated_pod(self, old: Pod, new: Pod) -> None:
        """Keep a nomination across an update that does not itself carry it.

        The reference keeps the in-memory nomination only when neither version carries a
        nominatedNodeName (the status patch lags behind the nomination); an update that adds,
        changes or clears it wins.
        """
        node = ""
        if not old.nominated_node_name and not new.nominated_node_name:
            node = self._node_of.get(old.uid, "")
        self.add_nominated_pod(new, node)

    def nominated_pods_for_node(self, node_name: str) -> list[Pod]:
        return list(self._by_node.get(node_name, ()))

    def nominated_node_of(self, uid: str) -> str:
        return self._node_of.get(uid, "")

    def __len__(self) -> int:
        return len(self._node_of)
