"""The invariant checker's input read from a live apiserver (the cluster-reading half of the checker).

Apart from :mod:`kopf_scheduler_workbench.testing.invariants` so that the checker itself stays pure
(dicts in, a report out; unit tests feed it by hand) and the product's own listing for
``simulate``/``explain`` (``kopf_scheduler.cluster.listing``) knows nothing of the checker.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kopf_scheduler.cluster.apiclient import ApiClient
from kopf_scheduler.cluster.connection import load_credentials
from kopf_scheduler.framework.client import NotFound
from kopf_scheduler_workbench.testing.invariants import ClusterState

__all__ = ["fetch_state", "fetch_state_async"]


async def fetch_state_async(api: ApiClient) -> ClusterState:
    """Pods, nodes, namespaces, events, DeviceClasses, ResourceClaims and PodGroups, listed once."""

    async def listing(path: str) -> list[dict[str, Any]]:
        items, _ = await api.list_all(path)
        return items

    try:
        pod_groups = await listing("/apis/scheduling.k8s.io/v1beta1/podgroups")
    except NotFound:  # the API is not served (GenericWorkload off)
        pod_groups = []
    pods, nodes, events, namespaces, classes, claims = await asyncio.gather(
        listing("/api/v1/pods"),
        listing("/api/v1/nodes"),
        listing("/apis/events.k8s.io/v1/events"),
        listing("/api/v1/namespaces"),
        listing("/apis/resource.k8s.io/v1/deviceclasses"),
        listing("/apis/resource.k8s.io/v1/resourceclaims"),
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
        async with ApiClient(load_credentials(kubeconfig, context)) as api:
            return await fetch_state_async(api)

    return asyncio.run(go())
