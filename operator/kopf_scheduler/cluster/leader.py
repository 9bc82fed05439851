"""Leader election on Kopf's peering: Kopf keeps our keep-alive in the ClusterKopfPeering object.

Kopf pauses only its *own* watchers when a higher-priority peer is alive, and exposes that state
nowhere; our scheduling loop and informers run outside Kopf. So this gate reads the same peering
object and applies Kopf's rule (``process_peering_event``): we lead while no *live* peer (``lastseen
+ lifetime`` in the future) has a priority higher than or equal to ours. Peers that vanish by
SIGKILL stop renewing; the gate re-evaluates at their deadline, so a standby takes over within the
lifetime (10 s by default) of the leader's last keep-alive.

Priorities are ``PRIORITY_BASE - start time in ms``: distinct per replica, and a restarted replica
ranks *below* the running leader, so a rollout does not bounce the leadership back and forth.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Mapping
from typing import Any

from kopf_scheduler.cluster.client import ApiClient
from kopf_scheduler.cluster.informer import Informer, InformerHandlers, ResourceKind

__all__ = ["PEERING_PATH", "LeaderGate", "evaluate", "start_priority"]

logger = logging.getLogger(__name__)

PEERING_PATH = "/apis/kopf.dev/v1/clusterkopfpeerings"
PRIORITY_BASE = 10**13  # ms since the epoch stays below this until the year 2286


def start_priority(now: float | None = None) -> int:
    return PRIORITY_BASE - int((time.time() if now is None else now) * 1000)


def _parse_time(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def evaluate(
    status: Mapping[str, Any], identity: str, priority: int, now: float | None = None
) -> tuple[bool, float | None]:
    """``(leading, when to look again)``: the earliest deadline of a peer that blocks us."""
    now = time.time() if now is None else now
    blockers: list[float] = []
    for peer_id, info in status.items():
        if peer_id == identity or not isinstance(info, Mapping):
            continue
        try:
            lifetime = float(info.get("lifetime", 60))
            lastseen = _parse_time(str(info["lastseen"])) if info.get("lastseen") else now
            peer_priority = int(info.get("priority", 0))
        except (TypeError, ValueError, KeyError):
            continue
        deadline = lastseen + lifetime
        if deadline > now and peer_priority >= priority:
            blockers.append(deadline)
    if blockers:
        return False, min(blockers)
    return True, None


class LeaderGate:
    """``leading`` is set while we are the elected scheduler; ``changed`` pulses on transitions."""

    def __init__(self, api: ApiClient | None, peering: str, identity: str, priority: int) -> None:
        self.api = api
        self.peering = peering
        self.identity = identity
        self.priority = priority
        self.leading = asyncio.Event()
        self.standby = asyncio.Event()
        self.standby.set()
        self._status: Mapping[str, Any] = {}
        self._wake = asyncio.Event()
        self.transitions = 0

    @classmethod
    def standalone(cls) -> LeaderGate:
        gate = cls(None, "", "standalone", 0)
        gate._set(True)
        return gate

    def _set(self, leading: bool) -> None:
        if leading == self.leading.is_set():
            return
        self.transitions += 1
        if leading:
            self.standby.clear()
            self.leading.set()
            logger.info("Leading: no live peer with a higher priority than %d", self.priority)
        else:
            self.leading.clear()
            self.standby.set()
            logger.info("Standing by: a live peer has a higher priority than %d", self.priority)

    def _observe(self, body: Mapping[str, Any]) -> None:
        self._status = body.get("status") or {}
        self._wake.set()

    async def run(self) -> None:
        if self.api is None:
            return
        informer: Informer[Mapping[str, Any]] = Informer(
            self.api,
            ResourceKind(
                "ClusterKopfPeering", PEERING_PATH, {"fieldSelector": f"metadata.name={self.peering}"}
            ),
            InformerHandlers(
                parse=lambda raw: raw,
                add=self._observe,
                update=lambda old, new: self._observe(new),
                delete=lambda raw: self._observe({}),
            ),
            watch_timeout=60,
        )
        watcher = asyncio.ensure_future(informer.run())
        try:
            await informer.synced.wait()
            while True:
                self._wake.clear()
                leading, recheck = evaluate(self._status, self.identity, self.priority)
                self._set(leading)
                timeout = max(0.05, recheck - time.time() + 0.05) if recheck is not None else None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout)
        finally:
            watcher.cancel()
