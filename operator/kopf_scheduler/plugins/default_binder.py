"""DefaultBinder: binds through the ClusterClient (``pods/binding``), the only I/O a plugin does.

Like the reference's (``util.BindPod``), a Binding the apiserver refused for a transient reason
(500 InternalError, 503 ServiceUnavailable, connection refused: :class:`TransientError`) is
retried at once, up to four attempts with client-go's ``DefaultBackoff`` between them (10 ms,
x5 each time, +10 % jitter). A retry after a 500 may find the pod bound by the first attempt:
that 409 reaches the scheduler, which reads the pod back and counts a bind to the chosen node as
done, so a pod is never bound twice nor forgotten. Other errors fail the binding cycle at once
and the pod goes back to the queue (backoff), as there.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.framework.client import ApiError, TransientError
from kopf_scheduler.framework.interface import CycleState, Plugin, Status

__all__ = ["BIND_ATTEMPTS", "DefaultBinder"]

# client-go's retry.DefaultBackoff: Steps 4, Duration 10 ms, Factor 5, Jitter 0.1.
BIND_ATTEMPTS = 4
BIND_BACKOFF_SECONDS = 0.010
BIND_BACKOFF_FACTOR = 5.0
BIND_BACKOFF_JITTER = 0.1


class DefaultBinder(Plugin):
    """Bind. Any API failure becomes an Error status carrying the exception (as ``AsStatus(err)``),
    so the scheduler can tell a Conflict/NotFound from a retriable ApiError via ``status.error``."""

    name = "DefaultBinder"

    # Injectable for tests: how to wait between attempts, and the jitter's source.
    sleep: Callable[[float], Awaitable[None]] = staticmethod(asyncio.sleep)
    rng: random.Random = random.Random()

    async def bind(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        client = self.handle.client if self.handle is not None else None
        if client is None:
            return Status.as_error(RuntimeError("DefaultBinder: the framework handle has no cluster client"))
        delay = BIND_BACKOFF_SECONDS
        for attempt in range(1, BIND_ATTEMPTS + 1):
            try:
                await client.bind(pod, node_name)
                return None
            except TransientError as exc:
                if attempt == BIND_ATTEMPTS:
                    return Status.as_error(exc)
            except ApiError as exc:
                return Status.as_error(exc)
            await self.sleep(delay * (1 + BIND_BACKOFF_JITTER * self.rng.random()))
            delay *= BIND_BACKOFF_FACTOR
        raise AssertionError("unreachable")
