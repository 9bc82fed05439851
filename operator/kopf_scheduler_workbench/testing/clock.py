"""A manual clock for tests of time-driven behaviour (backoff, flushes, assumed-pod expiry)."""

from __future__ import annotations

__all__ = ["FakeClock"]


class FakeClock:
    """Callable like ``time.monotonic``; time moves only when a test says so."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def set(self, now: float) -> None:
        self.now = now
