"""The invariant checker's input read from a live apiserver (the cluster-reading half of the checker).

Apart from :mod:`kopf_scheduler_workbench.testing.invariants` so that the checker itself stays pure
(dicts in, a report out; unit tests feed it by hand) and the product's own listing for
``simulate``/``explain`` (``kopf_scheduler.cluster.listing``) knows nothing of the checker. Read
through the workbench's REST helper, with the registry's paths.
"""

from __future__ import annotations

import asyncio

from kopf_scheduler.api import kinds
from kopf_scheduler_workbench.rest import Api, RequestError
from kopf_scheduler_workbench.testing.invariants import ClusterState

__all__ = ["fetch_state", "fetch_state_async"]


async def fetch_state_async(api: Api) -> ClusterState:
    """Pods, nodes, namespaces, events, DeviceClasses, ResourceClaims and PodGroups, listed once."""
    try:
        pod_groups = await api.list_all(kinds.POD_GROUP)
    except RequestError as exc:
        if exc.status != 404:
            raise
        pod_groups = []  # the API is not served (GenericWorkload off)
    pods, nodes, events, namespaces, classes, claims = await asyncio.gather(
        *(
            api.list_all(kind)
            for kind in (
                kinds.POD,
                kinds.NODE,
                kinds.EVENT,
                kinds.NAMESPACE,
                kinds.DEVICE_CLASS,
                kinds.RESOURCE_CLAIM,
            )
        )
    )
    return ClusterState(
        pods=pods,
        nodes=nodes,
        events=events,
        namespaces=namespaces,
        device_classes=classes,
        resource_claims=claims,
        pod_groups=pod_groups,
    )


def fetch_state(kubeconfig: str, context: str | None = None) -> ClusterState:
    """:func:`fetch_state_async` on its own event loop, for tests and scripts."""

    async def go() -> ClusterState:
        async with Api.from_kubeconfig(kubeconfig, context) as api:
            return await fetch_state_async(api)

    return asyncio.run(go())
