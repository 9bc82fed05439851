"""One read-only listing of a live cluster, as documents ``simulate``/``explain`` take.

The same collections the operator's informers cache (nodes, non-terminal pods, the kinds plugins
read, SchedulerProfile CRs), listed once with pagination and never watched or written. Profiles
resolve the way the operator resolves them: for each schedulerName the oldest valid resource
serves (see ``ProfileController``); a later or invalid one is left out with a note.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kopf_scheduler.api import kinds
from kopf_scheduler.api.kinds import POD_FIELD_SELECTOR
from kopf_scheduler.cluster.apiclient import ApiClient
from kopf_scheduler.cluster.connection import load_credentials
from kopf_scheduler.cluster.crd import GROUP, PLURAL, VERSION
from kopf_scheduler.cluster.informer import ResourceKind
from kopf_scheduler.config.profile import ProfileError
from kopf_scheduler.framework.client import NotFound
from kopf_scheduler.framework.profiles import load_profile

__all__ = ["ClusterListing", "list_cluster"]

# What the operator's informers hold, from the registry of kinds (not from the operator: no Kopf here).
_KINDS: tuple[ResourceKind, ...] = (
    ResourceKind("Node", kinds.by_name("Node").path),
    ResourceKind("Pod", kinds.by_name("Pod").path, {"fieldSelector": POD_FIELD_SELECTOR}),
    *(ResourceKind(k.kind, k.path) for k in kinds.OBJECT_KINDS),
)
_OPTIONAL_KINDS = tuple(ResourceKind(k.kind, k.path) for k in kinds.OPTIONAL_KINDS)
_PROFILES_PATH = f"/apis/{GROUP}/{VERSION}/{PLURAL}"


@dataclass
class ClusterListing:
    documents: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


async def _list(api: ApiClient, resource: ResourceKind) -> list[dict[str, Any]]:
    items, _ = await api.list_all(resource.path, resource.params)
    return items


def _created(item: Mapping[str, Any]) -> str:
    return str((item.get("metadata") or {}).get("creationTimestamp") or "")


def serving_profiles(items: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The SchedulerProfile resources in force, oldest valid one per schedulerName; notes on the rest."""
    served: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    for item in sorted(items, key=_created):
        name = str((item.get("metadata") or {}).get("name"))
        try:
            spec = load_profile(item.get("spec") or {})
        except ProfileError as exc:
            notes.append(f"SchedulerProfile {name} is invalid and left out: {exc}")
            continue
        if spec.scheduler_name in served:
            owner = served[spec.scheduler_name]["metadata"]["name"]
            notes.append(f"SchedulerProfile {name} left out: {spec.scheduler_name!r} is served by {owner}")
            continue
        served[spec.scheduler_name] = item
    return list(served.values()), notes


async def list_cluster(kubeconfig: str | None = None, context: str | None = None) -> ClusterListing:
    """Everything the scheduler would see, listed once (read-only)."""
    listing = ClusterListing()
    async with ApiClient(load_credentials(kubeconfig, context), user_agent="kopf-scheduler-explain") as api:
        for resource in _KINDS:
            for item in await _list(api, resource):
                listing.documents.append((f"cluster: {resource.kind}", item))
        for resource in _OPTIONAL_KINDS:  # PodGroups, where the apiserver serves them
            try:
                items = await _list(api, resource)
            except NotFound:
                continue
            listing.documents.extend((f"cluster: {resource.kind}", item) for item in items)
        try:
            profiles = await _list(api, ResourceKind("SchedulerProfile", _PROFILES_PATH))
        except NotFound:
            profiles = []
            listing.notes.append("no SchedulerProfile CRD: the default profile only")
    served, notes = serving_profiles(profiles)
    listing.notes.extend(notes)
    listing.documents.extend(("cluster: SchedulerProfile", item) for item in served)
    return listing
