"""ImageLocality: prefer nodes that already hold the pod's images, weighted by how rare they are.

Each present image contributes ``size * num_nodes_with_it / total_nodes`` (spreading images
widely counts less, so pods do not pile onto the one node that pulled first); the sum is clamped
to [23 MiB, 1000 MiB * (containers + image volumes)] and scaled to 0..100.
"""

from __future__ import annotations

import numpy as np

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.api.volumes import IMAGE
from kopf_scheduler.framework import signers
from kopf_scheduler.framework.interface import (
    MAX_NODE_SCORE,
    CycleState,
    Plugin,
    SignFragments,
    Status,
)
from kopf_scheduler.framework.snapshot import Snapshot
from kopf_scheduler.framework.types import ImageState, NodeInfo

__all__ = ["ImageLocality", "normalized_image_name"]

MB = 1024 * 1024
MIN_THRESHOLD = 23 * MB
MAX_CONTAINER_THRESHOLD = 1000 * MB


def normalized_image_name(name: str) -> str:
    """Add ``:latest`` when the name carries no tag (a ':' after the last '/')."""
    if name.rfind(":") <= name.rfind("/"):
        name += ":latest"
    return name


def scaled_image_score(state: ImageState, total_nodes: int) -> int:
    spread = float(state.num_nodes) / float(total_nodes)
    return int(float(state.size) * spread)


def calculate_priority(sum_scores: int, num_containers: int) -> int:
    max_threshold = MAX_CONTAINER_THRESHOLD * num_containers
    if sum_scores < MIN_THRESHOLD:
        sum_scores = MIN_THRESHOLD
    elif sum_scores > max_threshold:
        sum_scores = max_threshold
    num, den = MAX_NODE_SCORE * (sum_scores - MIN_THRESHOLD), max_threshold - MIN_THRESHOLD
    # Go's truncating division (den is negative for a pod without containers).
    q = abs(num) // abs(den)
    return q if (num >= 0) == (den > 0) else -q


def calculate_priority_vector(sums: np.ndarray, num_containers: int) -> np.ndarray:
    """``calculate_priority`` over an int64 array (same clamping order and truncating division)."""
    max_threshold = MAX_CONTAINER_THRESHOLD * num_containers
    clamped = np.where(
        sums < MIN_THRESHOLD, MIN_THRESHOLD, np.where(sums > max_threshold, max_threshold, sums)
    )
    num = MAX_NODE_SCORE * (clamped - MIN_THRESHOLD)
    den = max_threshold - MIN_THRESHOLD
    q = np.abs(num) // abs(den)
    return np.where((num >= 0) == (den > 0), q, -q).astype(np.int64)


def _container_images(pod: Pod) -> tuple[list[str], int]:
    """Images of init and regular containers and of image volumes, and how many there are
    (images may be empty); image volumes count like containers since 1.33's ImageVolume."""
    images = [c.image for c in pod.init_containers]
    images += [c.image for c in pod.containers]
    images += [vol.source.image_reference for vol in pod.volumes if vol.source.kind == IMAGE]
    return images, len(images)


class ImageLocality(Plugin):
    """Score (needs ``handle.snapshot`` for the total number of nodes)."""

    name = "ImageLocality"

    def sign(self, pod: Pod) -> tuple[SignFragments, Status | None]:
        return [(signers.IMAGE_NAMES, tuple(sorted({normalized_image_name(i) for i in pod.images})))], None

    def _total_nodes(self) -> int:
        return len(self.handle.snapshot.list()) if self.handle is not None else 0

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> tuple[int, Status | None]:
        total = self._total_nodes()
        images, count = _container_images(pod)
        total_score = 0
        if total > 0:
            states = node_info.image_states
            for image in images:
                st = states.get(normalized_image_name(image))
                if st is not None:
                    total_score += scaled_image_score(st, total)
        return calculate_priority(total_score, count), None

    def score_vector(
        self, state: CycleState, pod: Pod, snapshot: Snapshot, idx: np.ndarray
    ) -> np.ndarray | None:
        """Only rows whose node holds one of the pod's images get a non-constant sum, so the work is
        per (pod image, node having it) from the snapshot's image index, not per node."""
        image_rows = snapshot.image_rows
        total = self._total_nodes()
        images, count = _container_images(pod)
        acc: np.ndarray | None = None
        if total > 0:
            for image in images:  # a repeated image counts once per container, as in score()
                hit = image_rows(normalized_image_name(image))
                if hit is None:
                    continue
                rows, sizes, nums = hit
                if acc is None:
                    acc = np.zeros(len(snapshot.node_infos), dtype=np.int64)
                # scaled_image_score: int(float(size) * (float(num_nodes) / float(total))), in float64
                acc[rows] += (sizes * (nums / float(total))).astype(np.int64)
        if acc is None:
            return np.full(len(idx), calculate_priority(0, count), dtype=np.int64)
        return calculate_priority_vector(acc[idx], count)
