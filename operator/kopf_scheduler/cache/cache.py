"""The scheduler cache (the reference's ``backend/cache/cache.go`` and ``node_tree.go``).

It holds a NodeInfo per node with the pods bound (or assumed) to it. Scheduling cycles read a
``Snapshot`` refreshed by ``update_snapshot``, which copies only the NodeInfos whose generation
moved past the snapshot's: NodeInfos are kept in most-recently-changed order, so the walk stops at
the first unchanged one and a refresh after one bind touches one node.

Assumed pods: the scheduler adds a pod to its chosen node before binding (``assume_pod``) so the
next cycle sees its resources. The watch confirms it (``add_pod`` with the same UID); a failed bind
forgets it. With a TTL, an assumed pod whose binding finished but was never confirmed expires.
"""

from __future__ import annotations

import logging
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kopf_scheduler.api import kinds
from kopf_scheduler.api.kinds import ObjectStore
from kopf_scheduler.api.objects import Node, Pod
from kopf_scheduler.cache.podgroups import PodGroupStates
from kopf_scheduler.framework.snapshot import Snapshot
from kopf_scheduler.framework.types import ImageState, NodeInfo, next_generation

__all__ = ["Cache", "CacheError", "NodeTree", "object_key", "zone_key"]

log = logging.getLogger(__name__)

ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"
LEGACY_ZONE_LABEL = "failure-domain.beta.kubernetes.io/zone"
LEGACY_REGION_LABEL = "failure-domain.beta.kubernetes.io/region"


class CacheError(Exception):
    """An event that contradicts the cache's state (the reference logs and carries on)."""


def zone_key(labels: Mapping[str, str]) -> str:
    """``utilnode.GetZoneKey``: region and zone, empty when the node has neither."""
    zone = labels.get(ZONE_LABEL) or labels.get(LEGACY_ZONE_LABEL, "")
    region = labels.get(REGION_LABEL) or labels.get(LEGACY_REGION_LABEL, "")
    if not zone and not region:
        return ""
    return f"{region}:\x00:{zone}"


def object_key(kind: str, obj: object) -> str:
    """``ns/name`` for namespaced kinds, ``name`` for cluster-scoped ones (docs/design.md)."""
    return kinds.by_name(kind).key_of(obj)


class NodeTree:
    """Node names per zone; ``list()`` interleaves zones round-robin so that sampling a prefix of
    the nodes spreads across zones, as the reference's nodeTree does."""

    def __init__(self) -> None:
        self._tree: dict[str, list[str]] = {}
        self._zones: list[str] = []
        self._zone_of: dict[str, str] = {}
        self.version = 0
        self._cached: list[str] | None = None

    def __len__(self) -> int:
        return len(self._zone_of)

    def __contains__(self, name: object) -> bool:
        return name in self._zone_of

    def add(self, node: Node) -> None:
        if node.name in self._zone_of:
            return
        zone = zone_key(node.labels)
        names = self._tree.get(zone)
        if names is None:
            self._tree[zone] = names = []
            self._zones.append(zone)
        names.append(node.name)
        self._zone_of[node.name] = zone
        self._changed()

    def remove(self, name: str) -> None:
        zone = self._zone_of.pop(name, None)
        if zone is None:
            return
        names = self._tree[zone]
        names.remove(name)
        if not names:
            del self._tree[zone]
            self._zones.remove(zone)
        self._changed()

    def update(self, node: Node) -> None:
        """Re-place a node whose zone changed (it goes to the end of its new zone)."""
        old_zone = self._zone_of.get(node.name)
        if old_zone is not None and old_zone == zone_key(node.labels):
            return
        self.remove(node.name)
        self.add(node)

    def _changed(self) -> None:
        self.version += 1
        self._cached = None

    def list(self) -> list[str]:
        if self._cached is not None:
            return self._cached
        out: list[str] = []
        columns = [self._tree[z] for z in self._zones]
        depth = max((len(c) for c in columns), default=0)
        for i in range(depth):
            for col in columns:
                if i < len(col):
                    out.append(col[i])
        self._cached = out
        return out


@dataclass(slots=True)
class _PodState:
    pod: Pod


@dataclass(slots=True)
class _ImageEntry:
    size: int
    nodes: set[str]


class Cache:
    """Assumed pods never expire: the reference's ``durationToExpireAssumedPod`` is 0 by default,
    so an assumed pod waits for the watch to confirm it or for ``forget_pod``."""

    def __init__(self) -> None:
        # Most recently changed last: update_snapshot walks it backwards.
        self._nodes: OrderedDict[str, NodeInfo] = OrderedDict()
        self._tree = NodeTree()
        self._pods: dict[str, _PodState] = {}
        self._assumed: set[str] = set()
        self._images: dict[str, _ImageEntry] = {}
        self._node_images: dict[str, tuple[str, ...]] = {}
        self._snapshot_tree_version: weakref.WeakKeyDictionary[Snapshot, int] = weakref.WeakKeyDictionary()
        self.objects: ObjectStore = {}  # kind -> key -> typed view
        self.pod_groups = PodGroupStates(self.is_assumed)

    # -- nodes --

    def _touch(self, name: str) -> None:
        self._nodes.move_to_end(name)

    def _node_info(self, name: str) -> NodeInfo:
        info = self._nodes.get(name)
        if info is None:
            info = NodeInfo()
            self._nodes[name] = info
        return info

    def add_node(self, node: Node) -> NodeInfo:
        nodes = self._nodes
        info = nodes.get(node.name)
        if info is None:
            nodes[node.name] = info = NodeInfo()  # added last: the most recently changed already
        else:
            if info.node is not None:
                self._remove_images(info.node.name)
            self._touch(node.name)
        self._tree.add(node)
        self._add_images(node, info)
        info.set_node(node)
        return info

    def update_node(self, old: Node | None, new: Node) -> NodeInfo:
        info = self._nodes.get(new.name)
        if info is None:
            info = self._node_info(new.name)
            self._tree.add(new)
        else:
            self._remove_images(new.name)
            if new.name in self._tree:
                self._tree.update(new)
            else:
                self._tree.add(new)  # a ghost coming back
        self._add_images(new, info)
        info.set_node(new)
        self._touch(new.name)
        return info

    def remove_node(self, node: Node | str) -> None:
        """Drop a node; while pods remain on it, a ghost NodeInfo (no node) keeps their accounting."""
        name = node if isinstance(node, str) else node.name
        info = self._nodes.get(name)
        if info is None:
            raise CacheError(f"node {name} is not found")
        info.node = None
        info.generation = next_generation()
        if info.pods:
            self._touch(name)
        else:
            del self._nodes[name]
        self._tree.remove(name)
        self._remove_images(name)

    def _add_images(self, node: Node, info: NodeInfo) -> None:
        if not node.images:  # no status.images (a node no kubelet reports on): nothing to count
            self._node_images[node.name] = ()
            info.image_states = {}
            return
        names: list[str] = []
        for image_names, size in node.images:
            for image in image_names:
                entry = self._images.get(image)
                if entry is None:
                    self._images[image] = _ImageEntry(size, {node.name})
                else:
                    entry.nodes.add(node.name)
                names.append(image)
        self._node_images[node.name] = tuple(dict.fromkeys(names))
        info.image_states = self._summaries(node.name)

    def _remove_images(self, node_name: str) -> None:
        for image in self._node_images.pop(node_name, ()):
            entry = self._images.get(image)
            if entry is None:
                continue
            entry.nodes.discard(node_name)
            if not entry.nodes:
                del self._images[image]

    def _summaries(self, node_name: str) -> dict[str, ImageState]:
        out: dict[str, ImageState] = {}
        for image in self._node_images.get(node_name, ()):
            entry = self._images[image]
            out[image] = ImageState(entry.size, len(entry.nodes))
        return out

    def image_state(self, image: str) -> ImageState | None:
        """Size and number of nodes having ``image`` (ImageLocality's spread)."""
        entry = self._images.get(image)
        return None if entry is None else ImageState(entry.size, len(entry.nodes))

    # -- pods --

    def _add_pod(self, pod: Pod, assumed: bool) -> None:
        info = self._node_info(pod.node_name)
        info.add_pod(pod)
        self._touch(pod.node_name)
        self._pods[pod.uid] = _PodState(pod)
        if assumed:
            self._assumed.add(pod.uid)

    def _remove_pod(self, pod: Pod) -> None:
        info = self._nodes.get(pod.node_name)
        if info is None:
            log.error("node %s of pod %s not found when removing it", pod.node_name, pod.key)
        else:
            info.remove_pod(pod)
            if not info.pods and info.node is None:
                del self._nodes[pod.node_name]
            else:
                self._touch(pod.node_name)
        self._pods.pop(pod.uid, None)
        self._assumed.discard(pod.uid)

    def _update_pod(self, old: Pod, new: Pod) -> None:
        self._remove_pod(old)
        self._add_pod(new, assumed=False)

    def assume_pod(self, pod: Pod) -> None:
        """Account ``pod`` (a copy with ``node_name`` set) on its node before it is bound."""
        if not pod.node_name:
            raise CacheError(f"assumed pod {pod.key} has no node")
        if pod.uid in self._pods:
            raise CacheError(f"pod {pod.key} is in the cache, so can't be assumed")
        self._add_pod(pod, assumed=True)

    def finish_binding(self, pod: Pod) -> None:
        """Binding is done. Where the reference would start the assumed pod's expiry nothing
        happens: expiry is off (see the class docstring); the watch confirms the pod."""

    def forget_pod(self, pod: Pod) -> None:
        """Undo ``assume_pod`` (binding failed or the pod went away)."""
        state = self._pods.get(pod.uid)
        if state is None:
            return
        if pod.node_name and state.pod.node_name != pod.node_name:
            raise CacheError(
                f"pod {pod.key} was assumed on {pod.node_name} but assigned to {state.pod.node_name}"
            )
        if pod.uid not in self._assumed:
            raise CacheError(f"only assumed pod can be forgotten: {pod.key}")
        self._remove_pod(state.pod)

    def add_pod(self, pod: Pod) -> None:
        """A bound pod from the watch; confirms an assumed pod (moving it if bound elsewhere)."""
        state = self._pods.get(pod.uid)
        if state is None:
            self._add_pod(pod, assumed=False)
        elif pod.uid in self._assumed:
            if state.pod.node_name != pod.node_name:
                log.info(
                    "pod %s was added to %s, not %s where it was assumed",
                    pod.key,
                    pod.node_name,
                    state.pod.node_name,
                )
            self._update_pod(state.pod, pod)
        else:
            # Already added (e.g. replayed by a re-list): take the newer version.
            self._update_pod(state.pod, pod)

    def update_pod(self, old: Pod, new: Pod) -> None:
        state = self._pods.get(new.uid)
        if state is None:
            self._add_pod(new, assumed=False)
            return
        if new.uid in self._assumed:
            # The watch's add must come first; an update for an assumed pod confirms it too.
            self._update_pod(state.pod, new)
            return
        self._update_pod(state.pod, new)

    def remove_pod(self, pod: Pod) -> None:
        state = self._pods.get(pod.uid)
        if state is None:
            return
        self._remove_pod(state.pod)

    def is_assumed(self, pod: Pod | str) -> bool:
        uid = pod if isinstance(pod, str) else pod.uid
        return uid in self._assumed

    def get_pod(self, uid: str) -> Pod | None:
        state = self._pods.get(uid)
        return None if state is None else state.pod

    # -- snapshots --

    def update_snapshot(self, snapshot: Snapshot) -> int:
        """Bring ``snapshot`` up to date; returns how many NodeInfos were copied into it."""
        if not len(snapshot) and len(self._tree):
            return self._build_snapshot(snapshot)
        changed: dict[str, NodeInfo] = {}
        for name in reversed(self._nodes):
            info = self._nodes[name]
            if info.generation <= snapshot.generation:
                break
            if info.node is not None:
                changed[name] = info
        if self._nodes:
            snapshot.generation = max(
                snapshot.generation, self._nodes[next(reversed(self._nodes))].generation
            )

        rebuild = (
            len(snapshot) != len(self._tree)
            or self._snapshot_tree_version.get(snapshot) != self._tree.version
        )
        clones: dict[str, NodeInfo] = {}
        for name, info in changed.items():
            clone = self._clone(info)
            clones[name] = clone
            if rebuild:
                continue
            i = snapshot.index.get(name)
            if i is None or not snapshot.replace(i, clone):
                rebuild = True
        if rebuild:
            infos: list[NodeInfo] = []
            for name in self._tree.list():
                got = clones.get(name) or snapshot.get(name)
                if got is None:
                    got = self._clone(self._nodes[name])
                infos.append(got)
            snapshot.rebuild(infos)
            self._snapshot_tree_version[snapshot] = self._tree.version
        return len(clones)

    def _build_snapshot(self, snapshot: Snapshot) -> int:
        """``update_snapshot`` of an empty snapshot (the first cycle's): every node is copied, so
        the rows are the tree's nodes cloned in its order, without the changed-node bookkeeping."""
        nodes = self._nodes
        copied = 0
        for name in reversed(nodes):
            info = nodes[name]
            if info.generation <= snapshot.generation:
                break
            if info.node is not None:
                copied += 1
        snapshot.generation = max(snapshot.generation, nodes[next(reversed(nodes))].generation)
        clone = self._clone
        snapshot.rebuild([clone(nodes[name]) for name in self._tree.list()])
        self._snapshot_tree_version[snapshot] = self._tree.version
        return copied

    def restore_snapshot_nodes(self, snapshot: Snapshot, names: Iterable[str]) -> None:
        for name in names:
            i = snapshot.index.get(name)
            info = self._nodes.get(name)
            if i is None or info is None or info.node is None:
                continue
            if not snapshot.replace(i, self._clone(info)):
                snapshot.generation = 0  # cannot happen for rows only edited; start over if it does

    def _clone(self, info: NodeInfo) -> NodeInfo:
        clone = info.clone()
        # Image spread is computed when the node is copied, as the reference's NodeInfo.Snapshot().
        clone.image_states = self._summaries(info.name)
        return clone

    def snapshot(self) -> Snapshot:
        snap = Snapshot()
        self.update_snapshot(snap)
        return snap

    # -- inspection --

    def node_names(self) -> list[str]:
        """Nodes in the zone-interleaved order snapshots use."""
        return list(self._tree.list())

    def get_node_info(self, name: str) -> NodeInfo | None:
        return self._nodes.get(name)

    def node_infos(self) -> Iterable[NodeInfo]:
        return self._nodes.values()

    def node_count(self) -> int:
        return len(self._tree)

    def pod_count(self) -> int:
        return len(self._pods)

    def pods(self) -> list[Pod]:
        return [state.pod for state in self._pods.values()]

    def assumed_pods(self) -> list[Pod]:
        return [self._pods[uid].pod for uid in self._assumed]

    # -- other objects (handle.objects) --

    # ``obj`` is the kind's typed view (``kinds.Kind.parse``, run at the edge).
    def add_object(self, kind: str, obj: Any) -> str:
        key = object_key(kind, obj)
        self.objects.setdefault(kind, {})[key] = obj
        return key

    def update_object(self, kind: str, obj: Any) -> str:
        return self.add_object(kind, obj)

    def delete_object(self, kind: str, obj: Any) -> Any | None:
        return self.objects.get(kind, {}).pop(object_key(kind, obj), None)

    def get_object(self, kind: str, key: str) -> Any | None:
        return self.objects.get(kind, {}).get(key)
