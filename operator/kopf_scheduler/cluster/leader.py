"""Leader election on Kopf's peering object, with a Lease's guarantees.

The replicas keep their entries in the ``status`` of one ClusterKopfPeering, in Kopf's format
(``{identity: {priority, lifetime, lastseen}}``, which Kopf reads with room for new fields), plus
one field of ours: ``leading``. Kopf's own peering loop is not used: it ends the whole process once
an apiserver outage outlasts its retries, it never checks that its own keep-alive landed, and it
compares the peers' wall clocks. This module applies client-go's leader-election rules
(``tools/leaderelection``) to that object instead:

- **One holder, claimed by compare-and-swap.** A replica claims or renews by reading the object and
  patching its own entry with ``leading: true`` *on the resourceVersion it read*; a 409 means
  someone wrote in between, and it reads again. It claims only when no other entry that says
  ``leading`` is alive. Two replicas can never both win the same read.
- **Alive means changed recently, as seen here.** A peer's entry is alive while its content changed
  less than its lifetime ago *by this replica's monotonic clock* (client-go's ``observedTime``):
  peers' wall clocks are never compared, so skew does not matter, and an entry that never changes
  (no ``lastseen``, a dead replica, garbage) stops counting after one lifetime.
- **The holder fences itself.** It may act (schedule, bind, write events) only until
  ``renew_deadline`` after it *sent* the read of its last successful renewal. A standby first sees
  that renewal no earlier than it landed, and waits ``lifetime`` (> ``renew_deadline``) past that,
  so the old holder has stopped acting before a new one starts. A leader that is paused, cut off, or
  whose keep-alive writes fail while its binds succeed stops within the renew deadline and then
  competes again like anyone else.
- **Being cut off never promotes.** Claiming needs a successful read and write; a standby that cannot
  reach the apiserver stays a standby.

The window, as with a Lease: requests the holder sent before its deadline may still land after it
(the gap ``lifetime - renew_deadline``, 5 s by default, covers them), and the clocks are assumed to
run at the same *rate* (not to agree).

Priorities (``PRIORITY_BASE - start time in ms``) are still written for Kopf's readers, but the
holder keeps the lead until it fails to renew or releases it: a newer replica never preempts it,
so a rollout moves leadership once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import logging
import math
import random
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import orjson

from kopf_scheduler.framework.client import ApiError, Conflict, NotFound

__all__ = [
    "PEERING_PATH",
    "ElectionTiming",
    "LeaderGate",
    "PeerObservations",
    "PeeringStore",
    "start_priority",
]

logger = logging.getLogger(__name__)

PEERING_PATH = "/apis/kopf.dev/v1/clusterkopfpeerings"
PRIORITY_BASE = 10**13  # ms since the epoch stays below this until the year 2286
JITTER = 1.2  # client-go's JitterFactor: candidates retry every retry_period * [1, 1.2)
STALE_FACTOR = 2.0  # entries unchanged for this many of their lifetimes are removed by the holder


def start_priority(now: float | None = None) -> int:
    return PRIORITY_BASE - int((time.time() if now is None else now) * 1000)


@dataclasses.dataclass(frozen=True)
class ElectionTiming:
    """kube-scheduler's ``leaderElection`` durations and defaults (15 s, 10 s, 2 s)."""

    lifetime: float = 15.0  # leaseDuration: how long a silent holder blocks the others
    renew_deadline: float = 10.0  # how long the holder acts on its last successful renewal
    retry_period: float = 2.0  # how often the holder renews and the others try

    def __post_init__(self) -> None:
        # The same rules as client-go's NewLeaderElector, in its words.
        if self.lifetime <= self.renew_deadline:
            raise ValueError("leaseDuration must be greater than renewDeadline")
        if self.renew_deadline <= JITTER * self.retry_period:
            raise ValueError("renewDeadline must be greater than retryPeriod*JitterFactor")
        if self.retry_period <= 0:
            raise ValueError("retryPeriod must be greater than zero")

    @property
    def max_peer_lifetime(self) -> float:
        """The longest lifetime a peer's entry is believed: a hostile one cannot block for ever."""
        return max(4 * self.lifetime, 60.0)


class PeeringStore(Protocol):
    """The peering object as the election needs it; raises NotFound, Conflict or ApiError."""

    async def read(self) -> tuple[Mapping[str, Any], str]:
        """``(status, resourceVersion)`` read from the apiserver now (never from a cache)."""
        ...

    async def write(self, entries: Mapping[str, Any], resource_version: str | None) -> None:
        """Merge ``entries`` into ``status`` (``None`` removes one); with a resourceVersion, only
        if the object has not changed since (else Conflict)."""
        ...

    async def create(self) -> None:
        """Create the empty object (Conflict if it exists)."""
        ...


class ApiPeeringStore:
    """:class:`PeeringStore` over the apiserver (one ClusterKopfPeering by name)."""

    def __init__(self, api: Any, name: str) -> None:
        self.api = api  # cluster.client.ApiClient; Any keeps this module free of aiohttp at import
        self.name = name
        self.path = f"{PEERING_PATH}/{name}"

    async def read(self) -> tuple[Mapping[str, Any], str]:
        body = await self.api.request("GET", self.path)
        meta = body.get("metadata") or {}
        status = body.get("status")
        return (status if isinstance(status, Mapping) else {}), str(meta.get("resourceVersion") or "")

    async def write(self, entries: Mapping[str, Any], resource_version: str | None) -> None:
        patch: dict[str, Any] = {"status": dict(entries)}
        if resource_version:
            patch["metadata"] = {"resourceVersion": resource_version}
        await self.api.request("PATCH", self.path, body=patch, content_type="application/merge-patch+json")

    async def create(self) -> None:
        body = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": self.name}}
        await self.api.request("POST", PEERING_PATH, body=body)


@dataclasses.dataclass
class _Seen:
    content: bytes
    since: float  # local monotonic time this content was first seen
    leading: bool
    lifetime: float
    process: str  # the writing process's nonce: two processes misconfigured with one identity differ


def _content(info: Any) -> bytes:
    try:
        return orjson.dumps(info, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return repr(info).encode()


class PeerObservations:
    """Each peer entry's content and when this replica first saw it (client-go's observedTime)."""

    def __init__(self, timing: ElectionTiming, process: str = "") -> None:
        self.timing = timing
        self.process = process
        self.seen: dict[str, _Seen] = {}

    def _lifetime(self, info: Any) -> float:
        try:
            value = float(info.get("lifetime"))
        except (AttributeError, TypeError, ValueError):
            return self.timing.lifetime
        if not math.isfinite(value):
            return self.timing.lifetime
        return min(max(value, 1.0), self.timing.max_peer_lifetime)

    def update(self, status: Mapping[str, Any], now: float) -> None:
        """Record what a read returned; ``now`` must be taken *after* the read returned."""
        for peer in [p for p in self.seen if p not in status]:
            del self.seen[peer]
        for peer, info in status.items():
            content = _content(info)
            prior = self.seen.get(peer)
            if prior is not None and prior.content == content:
                continue
            leading = isinstance(info, Mapping) and info.get("leading") is True
            process = str(info.get("process") or "") if isinstance(info, Mapping) else ""
            self.seen[peer] = _Seen(content, now, leading, self._lifetime(info), process)

    def holders(self, identity: str, now: float) -> dict[str, float]:
        """Other peers claiming the lead whose entries are alive, with when they expire here.

        Our own entry counts too when another process wrote it (two replicas given one ``POD_ID``):
        without that, each would take the other's renewals for its own and both would lead.
        """
        return {
            peer: seen.since + seen.lifetime
            for peer, seen in self.seen.items()
            if (peer != identity or seen.process != self.process)
            and seen.leading
            and now < seen.since + seen.lifetime
        }

    def taken(self, identity: str, now: float) -> bool:
        """Whether another live process writes our entry: then we must not write it at all."""
        seen = self.seen.get(identity)
        return (
            seen is not None
            and seen.process != self.process
            and seen.leading
            and now < seen.since + seen.lifetime
        )

    def stale(self, identity: str, now: float) -> list[str]:
        """Entries unchanged for ``STALE_FACTOR`` lifetimes: dead replicas or garbage, to remove."""
        return [
            peer
            for peer, seen in self.seen.items()
            if peer != identity and now - seen.since > STALE_FACTOR * seen.lifetime
        ]


class LeaderGate:
    """``leading`` is set while we hold the lead; ``may_act()`` is the fence for every write."""

    def __init__(
        self,
        store: PeeringStore | None,
        identity: str,
        priority: int,
        timing: ElectionTiming | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wallclock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.identity = identity
        self.priority = priority
        self.timing = timing or ElectionTiming()
        self.clock = clock
        self.wallclock = wallclock
        self.leading = asyncio.Event()
        self.standby = asyncio.Event()
        self.standby.set()
        self.process = uuid.uuid4().hex[:12]
        self.observations = PeerObservations(self.timing, self.process)
        self.transitions = 0
        self.last_error: str | None = None
        self._held_until = -math.inf if store is not None else math.inf
        self.renewed_at: float | None = None  # by ``clock``: when our last successful renewal was sent
        self._presence_written = -math.inf
        self._expiry: asyncio.TimerHandle | None = None
        self._released = False

    @classmethod
    def standalone(cls) -> LeaderGate:
        gate = cls(None, "standalone", 0)
        gate._set(True)
        return gate

    # -- the fence --

    def may_act(self) -> bool:
        """Whether this replica may write now (thread-safe: a float compare; read by /metrics)."""
        return self.clock() < self._held_until

    def is_leading(self) -> bool:
        return self.leading.is_set() and self.may_act()

    def _set(self, leading: bool) -> None:
        if leading == self.leading.is_set():
            return
        self.transitions += 1
        if leading:
            self.standby.clear()
            self.leading.set()
            logger.info("Leading: holding the peering's lead as %s", self.identity)
        else:
            self.leading.clear()
            self.standby.set()
            logger.info("Standing by: %s does not hold the lead", self.identity)

    def _expire(self) -> None:
        """At the renew deadline: stand down even if the renewal is still waiting for an answer."""
        self._expiry = None
        if not self.may_act():
            if self.leading.is_set():
                logger.warning(
                    "No renewal landed within the renew deadline (%gs): stopping", self.timing.renew_deadline
                )
            self._set(False)

    def _hold(self, sent: float) -> None:
        self.renewed_at = sent
        self._held_until = sent + self.timing.renew_deadline
        if self._expiry is not None:
            self._expiry.cancel()
        with contextlib.suppress(RuntimeError):  # no running loop: a synchronous unit test
            loop = asyncio.get_running_loop()
            delay = max(0.0, self._held_until - self.clock())
            self._expiry = loop.call_later(delay, self._expire)
        self._set(True)

    def _drop(self) -> None:
        self._held_until = -math.inf
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        self._set(False)

    # -- one round: client-go's tryAcquireOrRenew --

    def entry(self, leading: bool) -> dict[str, Any]:
        """Our entry, in Kopf's format (``lastseen`` for readers only: nobody compares it)."""
        lastseen = dt.datetime.fromtimestamp(self.wallclock(), dt.UTC).isoformat(timespec="microseconds")
        return {
            "priority": self.priority,
            "lifetime": math.ceil(self.timing.lifetime),
            "lastseen": lastseen,
            "leading": leading,
            "process": self.process,
        }

    async def attempt(self) -> bool:
        """Claim or renew the lead; True while we hold it. Raises nothing but cancellation.

        A 409 (another replica's keep-alive landed between our read and our write) is read again
        at once, a few times, rather than costing a retry period of the renew deadline.
        """
        for _ in range(3):
            outcome = await self._round()
            if outcome is not None:
                return outcome
        return self.may_act()

    async def _round(self) -> bool | None:
        assert self.store is not None
        sent = self.clock()
        try:
            status, version = await self.store.read()
        except NotFound:
            with contextlib.suppress(Conflict):
                await self.store.create()
            return None
        except ApiError as exc:
            return await self._after_failure(f"reading the peering object failed: {exc}")
        now = self.clock()
        self.observations.update(status, now)
        holders = self.observations.holders(self.identity, now)
        if holders:
            if self.leading.is_set():
                logger.warning("Another replica holds the lead (%s): standing down", ", ".join(holders))
            self._drop()
            if self.observations.taken(self.identity, now):
                why = f"another process holds the lead as {self.identity}: is POD_ID unique?"
                if why != self.last_error:
                    logger.error("Leader election: %s", why)
                self.last_error = why
                return False  # writing our entry would overwrite that process's renewals
            await self._presence(status, now)
            return False
        entries: dict[str, Any] = {peer: None for peer in self.observations.stale(self.identity, now)}
        entries[self.identity] = self.entry(leading=True)
        try:
            await self.store.write(entries, version)
        except Conflict:
            return None  # someone wrote since our read: read again
        except ApiError as exc:
            return await self._after_failure(f"renewing the lead failed: {exc}")
        self.last_error = None
        for peer in entries:
            if peer != self.identity:
                logger.info("Removed the stale peering entry of %s", peer)
        self._hold(sent)
        return True

    async def _presence(self, status: Mapping[str, Any], now: float) -> None:
        """A standby's keep-alive (for Kopf's readers and ``kubectl get``), not a claim: no CAS."""
        mine = status.get(self.identity)
        current = isinstance(mine, Mapping) and mine.get("leading") is not True
        if current and now - self._presence_written < self.timing.lifetime / 3:
            return
        try:
            await self.store.write({self.identity: self.entry(leading=False)}, None)  # type: ignore[union-attr]
        except ApiError as exc:
            self.last_error = f"writing our standby entry failed: {exc}"
            return
        self._presence_written = now
        self.last_error = None

    async def _after_failure(self, why: str) -> bool:
        if why != self.last_error:
            logger.warning("Leader election: %s", why)
        self.last_error = why
        if not self.may_act():
            self._drop()
        return self.may_act()

    # -- the loop --

    async def run(self) -> None:
        """Renew every ``retry_period`` while holding; try every ``retry_period * [1, 1.2)`` otherwise."""
        if self.store is None:
            await asyncio.Event().wait()
        timeout = min(self.timing.renew_deadline / 2, 30.0)
        while not self._released:
            try:
                await asyncio.wait_for(self.attempt(), timeout)
            except TimeoutError:
                await self._after_failure(f"no answer from the apiserver within {timeout:g}s")
            period = self.timing.retry_period
            if not self.leading.is_set():
                period *= 1 + random.random() * (JITTER - 1)
            await asyncio.sleep(period)

    async def release(self) -> None:
        """Give the lead up at once (client-go's ReleaseOnCancel): our entry goes, a standby takes
        over at its next try. Call only once nothing of ours is in flight any more."""
        self._released = True
        was = self.may_act()
        self._drop()
        if self.store is None:
            return
        try:
            await asyncio.wait_for(self.store.write({self.identity: None}, None), 5.0)
        except (ApiError, TimeoutError) as exc:
            logger.warning("Could not remove our peering entry (%s); it expires on its own", exc)
        else:
            if was:
                logger.info("Released the lead")
