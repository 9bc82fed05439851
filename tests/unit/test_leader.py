"""Leader election on the peering object, in simulated time: never two replicas that may act.

The store is an in-memory ClusterKopfPeering with the apiserver's optimistic concurrency (a write
on a stale resourceVersion is a 409); every replica has its own monotonic clock (offset) and wall
clock (skewed), and the invariant is checked at every simulated step.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping
from typing import Any

import pytest

from kopf_scheduler.cluster.leader import ElectionTiming, LeaderGate, PeerObservations, start_priority
from kopf_scheduler.framework.client import ApiError, Conflict, NotFound

TIMING = ElectionTiming(lifetime=15.0, renew_deadline=10.0, retry_period=2.0)
STEP = 0.25


class Store:
    """One peering object; ``broken`` identities fail their reads and/or writes."""

    def __init__(self) -> None:
        self.status: dict[str, Any] | None = None
        self.rv = 0
        self.fail_reads: set[str] = set()
        self.fail_writes: set[str] = set()

    def view(self, identity: str) -> StoreView:
        return StoreView(self, identity)


class StoreView:
    def __init__(self, store: Store, identity: str) -> None:
        self.store = store
        self.identity = identity

    async def read(self) -> tuple[Mapping[str, Any], str]:
        await asyncio.sleep(0)  # let a concurrent replica's read or write in between
        if self.identity in self.store.fail_reads:
            raise ApiError("connection refused")
        if self.store.status is None:
            raise NotFound("not found", 404)
        return dict(self.store.status), str(self.store.rv)

    async def write(self, entries: Mapping[str, Any], resource_version: str | None) -> None:
        await asyncio.sleep(0)
        if self.identity in self.store.fail_writes:
            raise ApiError("the keep-alive write was refused", 500)
        if self.store.status is None:
            raise NotFound("not found", 404)
        if resource_version is not None and resource_version != str(self.store.rv):
            raise Conflict("the object has been modified", 409)
        for key, value in entries.items():
            if value is None:
                self.store.status.pop(key, None)
            else:
                self.store.status[key] = value
        self.store.rv += 1

    async def create(self) -> None:
        if self.store.status is not None:
            raise Conflict("exists", 409)
        self.store.status = {}
        self.store.rv += 1


class World:
    """Simulated time; each replica's clocks are offset from it (monotonic) and skewed (wall)."""

    def __init__(self, count: int = 2, wall_skew: float = 0.0) -> None:
        self.now = 1000.0
        self.store = Store()
        self.paused: set[int] = set()
        self.gates: list[LeaderGate] = []
        self.next_try = [0.0] * count
        for i in range(count):
            offset = 12345.0 * i  # monotonic clocks of different machines share no origin
            gate = LeaderGate(
                self.store.view(f"r{i}"),  # type: ignore[arg-type]
                f"r{i}",
                start_priority(1_700_000_000 + i),
                TIMING,
                clock=lambda offset=offset: self.now + offset,  # type: ignore[misc]
                wallclock=lambda i=i: 1_700_000_000 + self.now + wall_skew * i,  # type: ignore[misc]
            )
            self.gates.append(gate)
        self.leads: list[list[float]] = [[] for _ in range(count)]

    def acting(self) -> list[int]:
        return [i for i, g in enumerate(self.gates) if g.may_act()]

    async def run(self, seconds: float, rng: random.Random | None = None) -> None:
        end = self.now + seconds
        while self.now < end:
            due = [
                i for i, g in enumerate(self.gates) if i not in self.paused and self.now >= self.next_try[i]
            ]
            if rng is not None:
                rng.shuffle(due)
            await asyncio.gather(*(self.gates[i].attempt() for i in due))
            for i in due:
                jitter = 1.0 if rng is None else 1 + 0.2 * rng.random()
                self.next_try[i] = self.now + TIMING.retry_period * (
                    1 if self.gates[i].leading.is_set() else jitter
                )
            acting = self.acting()
            assert len(acting) <= 1, f"two replicas may act at t={self.now}: {acting}"
            for i in acting:
                self.leads[i].append(self.now)
            self.now += STEP


async def test_one_claims_the_other_stands_by() -> None:
    world = World()
    await world.run(10)
    assert world.acting() == [0] or world.acting() == [1]
    holder = world.acting()[0]
    status = world.store.status or {}
    assert status[f"r{holder}"]["leading"] is True
    assert status[f"r{1 - holder}"]["leading"] is False
    assert set(status[f"r{holder}"]) >= {"priority", "lifetime", "lastseen"}  # Kopf's format kept


async def test_paused_leader_is_replaced_and_stands_down_after_resume() -> None:
    world = World()
    await world.run(6)
    leader = world.acting()[0]
    other = 1 - leader
    world.paused.add(leader)
    paused_at = world.now
    await world.run(25)
    assert world.acting() == [other]
    took_over = world.leads[other][0]
    latest = paused_at + TIMING.lifetime + 2 * TIMING.retry_period
    assert paused_at + TIMING.lifetime - STEP <= took_over <= latest
    world.paused.clear()
    await world.run(10)  # the invariant is asserted at every step inside
    assert world.acting() == [other]
    assert not world.gates[leader].leading.is_set()
    assert (world.store.status or {})[f"r{leader}"]["leading"] is False


async def test_wall_clocks_six_seconds_apart_never_give_two_leaders() -> None:
    for skew in (6.0, -6.0, 3600.0):
        world = World(wall_skew=skew)
        await world.run(8)
        leader = world.acting()[0]
        world.paused.add(leader)
        await world.run(20)
        world.paused.clear()
        await world.run(20)
        assert len(world.acting()) == 1


async def test_failing_keepalive_writes_stop_the_leader_within_the_renew_deadline() -> None:
    world = World()
    await world.run(6)
    leader = world.acting()[0]
    world.store.fail_writes.add(f"r{leader}")
    broken_at = world.now
    await world.run(30)
    last = max(world.leads[leader])
    assert last < broken_at + TIMING.renew_deadline
    assert world.acting() == [1 - leader]


async def test_a_standby_that_cannot_read_never_promotes() -> None:
    world = World()
    await world.run(6)
    leader = world.acting()[0]
    world.store.fail_reads.update({"r0", "r1"})  # the apiserver is away for both
    await world.run(75)
    assert world.acting() == []
    assert not world.leads[1 - leader]
    world.store.fail_reads.clear()
    await world.run(20)
    assert len(world.acting()) == 1


async def test_release_hands_over_at_the_next_try() -> None:
    world = World()
    await world.run(6)
    leader = world.acting()[0]
    world.paused.add(leader)
    await world.gates[leader].release()
    released_at = world.now
    await world.run(6)
    other = 1 - leader
    assert world.leads[other] and world.leads[other][0] <= released_at + TIMING.retry_period * 1.2 + STEP


async def test_malformed_and_hostile_entries_block_at_most_a_bounded_time() -> None:
    world = World(count=1)
    world.store.status = {
        "ghost": {"leading": True},  # no lastseen, no lifetime: Kopf counted it alive for ever
        "liar": {"leading": True, "lifetime": 10**9, "priority": 10**15},
        "junk": ["not", "an", "entry"],
        "nan": {"leading": True, "lifetime": "NaN"},
    }
    await world.run(TIMING.max_peer_lifetime + TIMING.retry_period * 2)
    assert world.acting() == [0]
    assert world.leads[0][0] <= 1000.0 + TIMING.max_peer_lifetime + TIMING.retry_period + STEP
    await world.run(TIMING.max_peer_lifetime * 2)
    assert set(world.store.status or {}) == {"r0"}  # the holder removed the stale entries


async def test_random_pauses_failures_and_interleavings_never_give_two_leaders() -> None:
    for seed in range(40):
        rng = random.Random(seed)
        world = World(count=3, wall_skew=rng.uniform(-10, 10))
        for _ in range(12):
            world.paused = {i for i in range(3) if rng.random() < 0.3}
            world.store.fail_writes = {f"r{i}" for i in range(3) if rng.random() < 0.15}
            world.store.fail_reads = {f"r{i}" for i in range(3) if rng.random() < 0.15}
            await world.run(rng.uniform(1, 20), rng)
        world.paused.clear()
        world.store.fail_writes.clear()
        world.store.fail_reads.clear()
        await world.run(TIMING.max_peer_lifetime + 10, rng)
        assert len(world.acting()) == 1, seed


def test_observations_use_local_time_of_change_only() -> None:
    obs = PeerObservations(TIMING)
    entry = {"leading": True, "lifetime": 15, "lastseen": "1999-01-01T00:00:00+00:00"}
    obs.update({"a": entry}, now=100.0)
    assert obs.holders("me", 114.0) == {"a": 115.0}  # a wall clock in the past changes nothing
    obs.update({"a": dict(entry)}, now=110.0)  # same content: not a renewal
    assert obs.holders("me", 115.5) == {}
    obs.update({"a": {**entry, "lastseen": "1999-01-01T00:00:02+00:00"}}, now=116.0)
    assert obs.holders("me", 130.0) == {"a": 131.0}
    assert obs.holders("a", 130.0) == {}


def test_timing_is_validated_as_client_go_does() -> None:
    with pytest.raises(ValueError, match="leaseDuration must be greater than renewDeadline"):
        ElectionTiming(10, 10, 2)
    with pytest.raises(ValueError, match="renewDeadline must be greater than retryPeriod"):
        ElectionTiming(15, 2, 2)


def test_start_priority_prefers_older_replicas() -> None:
    assert start_priority(1000.0) > start_priority(1000.5)


async def test_two_processes_with_one_identity_never_both_lead() -> None:
    """A misconfigured Deployment (one POD_ID for two replicas) must not give two leaders."""
    world = World()
    twin = world.gates[1]
    same = LeaderGate(
        world.store.view("r0"),  # type: ignore[arg-type]
        "r0",
        twin.priority,
        TIMING,
        clock=twin.clock,
        wallclock=twin.wallclock,
    )
    world.gates[1] = same
    await world.run(10)
    assert len(world.acting()) == 1
    holder = world.acting()[0]
    world.paused.add(holder)
    await world.run(25)
    assert world.acting() == [1 - holder]
    world.paused.clear()
    await world.run(20)
    assert world.acting() == [1 - holder]
