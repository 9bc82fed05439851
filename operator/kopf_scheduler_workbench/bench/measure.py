"""Measuring instruments for the side-by-side benchmarks: pod watch, process samplers, percentiles.

The runner talks to the apiserver through the workbench's REST helper (``kopf_scheduler_workbench.rest``:
its request counts, creation and watches are there).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import psutil

from kopf_scheduler.api import kinds
from kopf_scheduler_workbench.rest import Api

__all__ = [
    "PodTracker",
    "ProcessSampler",
    "percentile",
    "throughput_windows",
]


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100), the way scheduler_perf reports its data items."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return float(ordered[min(rank, len(ordered)) - 1])


def throughput_windows(
    bound_at: Iterable[float], start: float, end: float, window: float = 1.0
) -> list[float]:
    """Pods bound per second in consecutive windows from ``start``; a final partial window is dropped.

    Like scheduler_perf's throughput collector, which samples the scheduled-pod count every second;
    a trailing fraction of a window would report a rate from a handful of pods.
    """
    count = int((end - start) // window)
    if count <= 0:
        return []
    bins = [0] * count
    for t in bound_at:
        i = int((t - start) // window)
        if 0 <= i < count:
            bins[i] += 1
    return [b / window for b in bins]


@dataclass
class PodTracker:
    """Watches the tracked pods of one namespace; records when each is first seen bound."""

    api: Api
    namespace: str
    label_selector: str
    bound_at: dict[str, float] = field(default_factory=dict)
    node_of: dict[str, str] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None
    _ready: asyncio.Event = field(default_factory=asyncio.Event)

    def _observe(self, obj: Mapping[str, Any], event_type: str) -> None:
        name = str(obj["metadata"]["name"])
        self.seen.add(name)
        if event_type == "DELETED":
            self.deleted.add(name)
        node = (obj.get("spec") or {}).get("nodeName")
        if node and name not in self.bound_at:
            self.bound_at[name] = time.monotonic()
            self.node_of[name] = str(node)
            self._changed.set()

    async def _run(self, deadline: float) -> None:
        path = kinds.POD.collection(self.namespace)
        while time.monotonic() < deadline:  # bounded: re-list and re-watch until the deadline
            listing = await self.api.request(
                "GET", f"{path}?{urlencode({'labelSelector': self.label_selector})}"
            )
            for item in listing.get("items") or []:
                self._observe(item, "ADDED")
            rv = str(listing["metadata"]["resourceVersion"])
            self._ready.set()
            params = {"labelSelector": self.label_selector, "resourceVersion": rv, "allowWatchBookmarks": "1"}
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                async for event in self.api.watch_lines(
                    path, params, min(300.0, deadline - time.monotonic())
                ):
                    if event.get("type") == "ERROR":
                        break  # 410 Gone: re-list
                    if event.get("type") != "BOOKMARK":
                        self._observe(event["object"], str(event.get("type")))

    async def start(self, deadline: float) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(deadline))
        await asyncio.wait_for(self._ready.wait(), 60)

    async def wait_bound(self, names: Iterable[str], timeout: float) -> bool:
        """True once every pod in ``names`` was seen bound; False on timeout."""
        wanted = set(names)
        deadline = time.monotonic() + timeout
        while not wanted <= self.bound_at.keys():
            left = deadline - time.monotonic()
            if left <= 0 or (self._task is not None and self._task.done()):
                return False
            self._changed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(left, 1.0))
        return True

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


class ProcessSampler:
    """CPU seconds and peak RSS of one process (and its children), polled from a thread.

    Polling in a thread keeps the samples regular even while the runner's event loop is busy
    creating objects; 0.2 s is fine-grained enough for a peak of a heap that grows over seconds.
    """

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        self.proc = psutil.Process(pid)
        self.interval = interval
        self.peak_rss = 0
        self._last_cpu = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def cpu_seconds(self) -> float:
        """User + system CPU so far; the last good value once the process is gone."""
        try:
            procs = [self.proc, *self.proc.children(recursive=True)]
            total = 0.0
            for p in procs:
                with contextlib.suppress(psutil.Error):
                    t = p.cpu_times()
                    total += t.user + t.system
            self._last_cpu = max(self._last_cpu, total)
        except psutil.Error:
            pass
        return self._last_cpu

    def runqueue_wait_seconds(self) -> float | None:
        """Seconds this process's threads (and its children's) spent runnable but waiting for a CPU.

        From ``/proc/<pid>/task/*/schedstat`` (Linux). On a saturated machine it tells a scheduler
        starved of CPU from one waiting on the apiserver; None where schedstat is not available.
        """
        total = 0.0
        found = False
        try:
            procs = [self.proc, *self.proc.children(recursive=True)]
        except psutil.Error:
            return None
        for p in procs:
            try:
                tasks = Path(f"/proc/{p.pid}/task").iterdir()
                for task in tasks:
                    with contextlib.suppress(OSError, ValueError, IndexError):
                        total += int((task / "schedstat").read_text().split()[1]) / 1e9
                        found = True
            except OSError:
                continue
        return total if found else None

    def _sample(self) -> None:
        try:
            rss = self.proc.memory_info().rss
            for child in self.proc.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    rss += child.memory_info().rss
        except psutil.Error:
            return
        self.peak_rss = max(self.peak_rss, rss)
        self.cpu_seconds()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def start(self) -> ProcessSampler:
        self._sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._sample()
        self._stop.set()
        self._thread.join(timeout=5)
