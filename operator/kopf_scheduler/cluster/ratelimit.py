"""A client-side token bucket, as client-go's ``flowcontrol.NewTokenBucketRateLimiter`` (qps, burst).

kube-scheduler's ``clientConnection.qps``/``burst`` (50/100 by default, ``--kube-api-qps`` and
``--kube-api-burst``) bound how fast it talks to the apiserver: every request first waits for a
token. The bucket holds ``burst`` tokens, starts full and refills at ``qps`` a second; a request that
finds it empty reserves the next token anyway and sleeps until it is due (golang.org/x/time/rate's
reservation, which ``Wait`` uses), so waiting requests go in the order they asked and the rate
holds however many wait. ``qps <= 0`` means no limit, as client-go makes no limiter then.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

__all__ = ["ClientThrottle", "Throttle", "TokenBucket"]

logger = logging.getLogger(__name__)

# client-go logs a throttled request at these waits (rest/request.go).
LONG_THROTTLE = 0.05
EXTRA_LONG_THROTTLE = 1.0


class TokenBucket:
    """``qps`` tokens a second, at most ``burst`` saved up; ``acquire`` waits for one."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self.qps = float(qps)
        self.burst = max(int(burst), 0)
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(self.burst)
        self._last = clock()

    @property
    def limited(self) -> bool:
        return self.qps > 0

    def reserve(self) -> float:
        """Take a token now (going into debt if none is left); return how long to wait for it."""
        if not self.limited:
            return 0.0
        now = self._clock()
        elapsed = max(now - self._last, 0.0)
        self._last = now
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.qps)
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    async def acquire(self, what: str = "") -> float:
        """Wait for a token; return the seconds waited."""
        delay = self.reserve()
        if delay > 0:
            await self._sleep(delay)
            if delay > EXTRA_LONG_THROTTLE:
                logger.info("Waited for %.3fs due to client-side throttling, request: %s", delay, what)
            elif delay > LONG_THROTTLE:
                logger.debug("Waited for %.3fs due to client-side throttling, request: %s", delay, what)
        return delay


class Throttle(Protocol):
    """What ``ApiClient`` asks before each attempt of a request."""

    async def acquire(self, what: str = "") -> float: ...


EVENTS_API = "/apis/events.k8s.io/"


class ClientThrottle:
    """kube-scheduler's two clients' buckets: events are posted through a clientset of their own
    (``createClients``: the event broadcaster's), so they do not spend the tokens binds need."""

    def __init__(self, qps: float, burst: int, **kwargs: Any) -> None:
        self.requests = TokenBucket(qps, burst, **kwargs)
        self.events = TokenBucket(qps, burst, **kwargs)

    async def acquire(self, what: str = "") -> float:
        bucket = self.events if EVENTS_API in what else self.requests
        return await bucket.acquire(what)
