"""Every write the engine asks of the cluster, as one async protocol.

The engine never talks to the apiserver itself: the operator edge implements this protocol over
HTTP (``cluster.client``), ``simulate`` and the unit tests implement it in memory. Keeping the
writes in one narrow seam is what lets the same scheduling code run offline and in the cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from kopf_scheduler.api.objects import Pod
    from kopf_scheduler.api.podgroup import PodGroup
    from kopf_scheduler.api.resource import ResourceClaim

__all__ = ["ApiError", "ClusterClient", "Conflict", "Fenced", "NotFound", "TransientError"]


class ApiError(Exception):
    """A failed API call that may succeed when retried (5xx, timeouts, connection errors).

    ``str()`` is what the apiserver said (its Status message), as client-go's errors read, so
    a FailedScheduling note quotes the same text as the reference's; ``status`` is the HTTP code
    (0: no response) and ``reason`` the Status reason (``InternalError``, ``Conflict``, ...).
    """

    def __init__(self, message: str, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class TransientError(ApiError):
    """The failures the reference retries at once (``util.Retriable``): a 500 InternalError or
    503 ServiceUnavailable answer, or a refused connection. DefaultBinder retries its Binding on
    these (4 attempts, 10 ms backoff x5, as ``util.BindPod``); any other error fails at once."""


class Conflict(ApiError):
    """409: the pod is already bound (by us in another replica, or by someone else)."""


class NotFound(ApiError):
    """404: the pod (or node) is gone."""


class Fenced(ApiError):
    """Nothing was sent: this replica no longer holds the lead (its renew deadline passed).

    Like any failed write: a bind fails and the pod goes back to the queue (whoever leads next
    schedules it); an event or condition is dropped.
    """


@runtime_checkable
class ClusterClient(Protocol):
    async def bind(self, pod: Pod, node_name: str) -> None:
        """POST ``pods/binding`` once; raise Conflict, NotFound, TransientError or ApiError.

        No retry here: the retry policy is DefaultBinder's, as in the reference."""
        ...

    async def bound_node(self, pod: Pod) -> str:
        """The node this pod (this uid) is bound to now, "" if none; raise NotFound or ApiError.

        Read back after a bind whose outcome is unknown (its response lost, or a 409 that may be
        our own earlier attempt): until the watch shows the bind, that is the only way to know.
        """
        ...

    async def record_scheduled(self, pod: Pod, node_name: str) -> None:
        """Normal ``Scheduled`` event: ``Successfully assigned ns/name to node``."""
        ...

    async def record_failed(
        self, pod: Pod, reason: str, message: str, nominated_node: str | None = None
    ) -> None:
        """Warning ``FailedScheduling`` event and ``PodScheduled=False`` with reason and message;
        with ``nominated_node`` (``""`` clears) also ``status.nominatedNodeName``, in the same
        status write when both change (the reference's ``updatePod``).

        The engine passes the full message; the implementation truncates the event note to the
        apiserver's 1,024-character limit (``diagnosis.truncate_message``, as the reference's
        ``truncateMessage``), because only the edge knows which field carries the limit.
        """
        ...

    async def record_skipped_deleting(self, pod: Pod) -> None:
        """Warning ``FailedScheduling`` event ``skip schedule deleting pod: ns/name`` and nothing
        else (no condition): a popped pod already being deleted (the reference's ``skipPodSchedule``)."""
        ...

    async def set_nominated_node(self, pod: Pod, node_name: str) -> None:
        """Set (or with "" clear) ``status.nominatedNodeName``."""
        ...

    async def evict(self, victim: Pod, preemptor: Pod | PodGroup, message: str) -> None:
        """Preemption: add the DisruptionTarget condition to the victim, then delete it (the
        preemptor is a pod, or a PodGroup under workload-aware preemption)."""
        ...

    async def bind_volumes(self, pod: Pod, claims: Sequence[tuple[str, str]]) -> None:
        """VolumeBinding's PreBind: ``(claim key ns/name, pv name or "" for dynamic provisioning)``."""
        ...

    # -- DynamicResources (resource.k8s.io/v1 ResourceClaims) --
    # Optimistic concurrency through ``metadata.resourceVersion``, as the reference's Update calls:
    # a stale one raises Conflict, a deleted claim NotFound.

    async def get_resource_claim(self, namespace: str, name: str) -> ResourceClaim:
        """GET the claim (the reference re-reads it after a conflict)."""
        ...

    async def update_resource_claim(self, claim: ResourceClaim) -> ResourceClaim:
        """PUT the claim (metadata: the allocation finalizer); return what the apiserver stored."""
        ...

    async def update_resource_claim_status(self, claim: ResourceClaim) -> ResourceClaim:
        """PUT ``resourceclaims/status`` (allocation, reservedFor); return what was stored."""
        ...

    async def unreserve_resource_claim(self, namespace: str, name: str, claim_uid: str, pod_uid: str) -> None:
        """Drop ``pod_uid`` from ``status.reservedFor`` (a strategic-merge delete guarded by the claim's
        uid, as the reference's Unreserve patch)."""
        ...

    # DRAExtendedResource: the claim the scheduler makes for a pod's extended resources.

    async def create_resource_claim(self, claim: ResourceClaim) -> ResourceClaim:
        """POST the claim (``metadata.generateName``); return what was stored (its name)."""
        ...

    async def delete_resource_claim(self, namespace: str, name: str, uid: str) -> None:
        """DELETE the claim, preconditioned on its uid; a claim already gone is not an error."""
        ...

    async def set_pod_extended_resource_claim_status(self, pod: Pod, status: Mapping[str, Any]) -> None:
        """Patch ``status.extendedResourceClaimStatus`` (request mappings, the claim's name)."""
        ...

    async def set_pod_group_conditions(
        self, namespace: str, name: str, conditions: Sequence[Mapping[str, Any]]
    ) -> None:
        """Write ``status.conditions`` of a PodGroup (``scheduling.k8s.io/v1beta1``) as given;
        raise NotFound or ApiError."""
        ...
