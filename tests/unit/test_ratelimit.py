"""The client-side token bucket (client-go's flowcontrol) and ApiClient's use of it on a real socket."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohttp import web

from kopf_scheduler.cluster.apiclient import ApiClient
from kopf_scheduler.cluster.connection import ConnectionInfo, Credentials
from kopf_scheduler.cluster.ratelimit import ClientThrottle, TokenBucket


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def test_burst_then_one_token_per_interval() -> None:
    clock = FakeClock()
    bucket = TokenBucket(10, 3, clock=clock)
    # A full bucket: the first `burst` requests go at once, then each waits 1/qps longer.
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert [round(bucket.reserve(), 6) for _ in range(3)] == [0.1, 0.2, 0.3]
    # Time pays the debt back: 0.35 s later the next token is due 0.05 s on.
    clock.now += 0.35
    assert bucket.reserve() == pytest.approx(0.05)


def test_refill_is_capped_at_burst() -> None:
    clock = FakeClock()
    bucket = TokenBucket(100, 2, clock=clock)
    clock.now += 3600  # an hour idle saves up no more than `burst`
    assert [bucket.reserve() for _ in range(2)] == [0.0, 0.0]
    assert bucket.reserve() == pytest.approx(0.01)


def test_no_qps_is_no_limit() -> None:
    bucket = TokenBucket(0, 0)
    assert not bucket.limited
    assert all(bucket.reserve() == 0.0 for _ in range(1000))


async def test_acquire_sleeps_what_it_reserved() -> None:
    clock = FakeClock()
    bucket = TokenBucket(4, 1, clock=clock, sleep=clock.sleep)
    waited = [await bucket.acquire("GET /x") for _ in range(3)]
    assert waited == [0.0, 0.25, 0.5] and clock.slept == [0.25, 0.5]


async def test_events_have_their_own_bucket() -> None:
    clock = FakeClock()
    throttle = ClientThrottle(1, 1, clock=clock, sleep=clock.sleep)
    assert await throttle.acquire("POST /api/v1/namespaces/a/pods/p/binding") == 0.0
    # The binds' bucket is empty; an event still goes at once (kube-scheduler's event client).
    assert await throttle.acquire("POST /apis/events.k8s.io/v1/namespaces/a/events") == 0.0
    assert await throttle.acquire("POST /api/v1/namespaces/a/pods/q/binding") == pytest.approx(1.0)


async def test_api_client_requests_keep_the_rate_on_a_real_socket() -> None:
    """30 requests at qps 100 / burst 10: the first 10 at once, the other 20 spread over ~0.2 s."""
    arrivals: list[float] = []

    async def handle(request: web.Request) -> web.Response:
        arrivals.append(time.monotonic())
        return web.json_response({})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    credentials = Credentials(ConnectionInfo(server=f"http://127.0.0.1:{port}", token="t"))
    api = ApiClient(credentials, rate_limiter=TokenBucket(100, 10))
    try:
        started = time.monotonic()
        await asyncio.gather(*(api.request("GET", f"/api/v1/namespaces/n{i}") for i in range(30)))
        elapsed = time.monotonic() - started
    finally:
        await api.close()
        await runner.cleanup()
    assert len(arrivals) == 30
    # 20 tokens beyond the burst at 100/s: at least 0.19 s (never faster than the rate).
    assert elapsed >= 0.19
    offsets = sorted(t - started for t in arrivals)
    assert offsets[-1] >= 0.19
    # Any 0.1 s window sees at most burst + 10 arrivals.
    assert max(sum(1 for t in offsets if s <= t < s + 0.1) for s in offsets) <= 20


@pytest.mark.parametrize("qps", [None, 20.0])
async def test_the_runtime_gives_each_client_its_bucket_at_construction(qps: float | None) -> None:
    """clientConnection.qps/burst: the main client's two buckets (requests, events) and the leader
    election's own bucket, as kube-scheduler's clientsets; no --kube-api-qps: no client-side limit."""
    from kopf_scheduler.cluster.runtime import Options, SchedulerRuntime

    credentials = Credentials(ConnectionInfo(server="http://127.0.0.1:1", token="t"))
    runtime = SchedulerRuntime(
        Options(metrics_port=None, identity="unit", kube_api_qps=qps, kube_api_burst=30), credentials
    )
    try:
        main, election = runtime.api.rate_limiter, runtime.election_api and runtime.election_api.rate_limiter
        if qps is None:
            assert main is None and election is None
        else:
            assert isinstance(main, ClientThrottle) and isinstance(election, TokenBucket)
            buckets = [main.requests, main.events, election]
            assert [(b.qps, b.burst) for b in buckets] == [(20.0, 30)] * 3
            assert len({id(b) for b in buckets}) == 3  # none shares another's tokens
    finally:
        await runtime.api.close()
        if runtime.election_api is not None:
            await runtime.election_api.close()
