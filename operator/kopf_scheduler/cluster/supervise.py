"""Keep a long-running coroutine alive: restart it with backoff, and say it is down meanwhile.

Leader election must outlive any fault of its own loop (an unexpected exception, a bug in a new
code path): a replica whose keep-alive task died would neither lead nor ever stand aside cleanly.
The reason it is down is published for ``/healthz`` until the restart.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, MutableMapping
from typing import Any

__all__ = ["supervise"]

logger = logging.getLogger(__name__)


async def supervise(
    name: str,
    factory: Callable[[], Coroutine[Any, Any, Any]],
    down: MutableMapping[str, str],
    *,
    first_delay: float = 0.5,
    max_delay: float = 10.0,
) -> None:
    """Run ``factory()`` for ever; while it waits to be restarted, ``down[name]`` says why."""
    delay = first_delay
    while True:
        try:
            await factory()
            why = "ended"
        except Exception as exc:
            why = f"failed: {exc!r}"
            logger.exception("%s %s; restarting in %.1fs", name, why, delay)
        else:
            logger.error("%s ended; restarting in %.1fs", name, delay)
        down[name] = why
        try:
            await asyncio.sleep(delay)
        finally:
            down.pop(name, None)
        delay = min(delay * 2, max_delay)
