"""DefaultBinder: binds through the ClusterClient (``pods/binding``), the only I/O a plugin does."""

from __future__ import annotations

from kopf_scheduler.api.objects import PodSpec
from kopf_scheduler.framework.client import ApiError
from kopf_scheduler.framework.interface import CycleState, Plugin, Status

__all__ = ["DefaultBinder"]


class DefaultBinder(Plugin):
    """Bind. Any API failure becomes an Error status carrying the exception (as ``AsStatus(err)``),
    so the scheduler can tell a Conflict/NotFound from a retriable ApiError via ``status.error``."""

    name = "DefaultBinder"

    async def bind(self, state: CycleState, pod: PodSpec, node_name: str) -> Status | None:
        client = getattr(self.handle, "client", None)
        if client is None:
            return Status.as_error(RuntimeError("DefaultBinder: the framework handle has no cluster client"))
        try:
            await client.bind(pod, node_name)
        except ApiError as exc:
            return Status.as_error(exc)
        return None
