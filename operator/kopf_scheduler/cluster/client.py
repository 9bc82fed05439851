"""The real :class:`~kopf_scheduler.framework.client.ClusterClient`: every write the engine asks of
the cluster, over :class:`~kopf_scheduler.cluster.apiclient.ApiClient`.

The write semantics follow kube-scheduler: ``pods/binding`` for binds, events.k8s.io/v1 events,
the ``PodScheduled`` condition by strategic-merge patch of ``pods/status`` (merge key ``type``),
``DisruptionTarget`` then a delete for preemption, PVC/PV writes for VolumeBinding's PreBind and
ResourceClaim writes for DynamicResources.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import random
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from kopf_scheduler.api.objects import Pod
from kopf_scheduler.api.podgroup import PodGroup
from kopf_scheduler.cluster.apiclient import ApiClient
from kopf_scheduler.framework.client import ApiError, Conflict, Fenced, NotFound, TransientError
from kopf_scheduler.framework.diagnosis import truncate_message

if TYPE_CHECKING:  # api/resource.py is imported by the claim writes, when a claim is written
    from kopf_scheduler.api.resource import ResourceClaim

__all__ = [
    "MERGE",
    "REPORTING_CONTROLLER",
    "STRATEGIC",
    "KubeClusterClient",
]

logger = logging.getLogger(__name__)

REPORTING_CONTROLLER = "kopf-scheduler"
STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
# client-go's retry.DefaultBackoff (10 ms, x5, 4 steps, 10 % jitter) as util.PatchPodStatus uses it.
DEFAULT_BACKOFF_STEPS = 4
# client-go's events broadcaster: maxTriesPerEvent and its sleep between tries.
EVENT_MAX_TRIES = 12
EVENT_RETRY_SECONDS = 10.0
EVENT_SERIES_WINDOW = 6 * 60.0  # client-go's events: isomorphic events within 6 min become a series


def now_rfc3339(micro: bool = False) -> str:
    t = dt.datetime.now(dt.UTC)
    if micro:
        return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod_path(namespace: str, name: str, sub: str = "") -> str:
    path = f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}"
    return f"{path}/{sub}" if sub else path


def _real_uid(pod: Pod) -> str | None:
    # parse_pod falls back to "ns/name" when the object has no uid (test objects); that is no UID.
    return pod.uid if pod.uid and "/" not in pod.uid else None


def _pod_ref(pod: Pod) -> dict[str, Any]:
    ref: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name}
    if uid := _real_uid(pod):
        ref["uid"] = uid
    if pod.resource_version:
        ref["resourceVersion"] = pod.resource_version
    return ref


def _pod_group_ref(group: PodGroup) -> dict[str, Any]:
    ref: dict[str, Any] = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "namespace": group.namespace,
        "name": group.name,
    }
    if group.uid:
        ref["uid"] = group.uid
    return ref


def _condition(pod: Pod, ctype: str) -> Mapping[str, Any] | None:
    status = pod.raw.get("status") if isinstance(pod.raw, Mapping) else None
    for cond in (status or {}).get("conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == ctype:
            return cond
    return None


class KubeClusterClient:
    """Every write the engine asks of the cluster, over :class:`ApiClient`.

    Event and condition writes are best-effort like kube-scheduler's (it logs their errors and goes
    on): they never fail a scheduling or binding cycle. ``bind``/``evict``/``bind_volumes`` raise.
    """

    def __init__(
        self,
        api: ApiClient,
        *,
        instance: str | None = None,
        series_cache: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
        fence: Callable[[], bool] | None = None,
    ) -> None:
        self.api = api
        self._fence = fence
        self.reporting_instance = instance or f"{REPORTING_CONTROLLER}-{socket.gethostname()}"
        # Isomorphic events (same pod, reason, note) within the window become a series on one object.
        # Least recently observed first, so expired series are found at the front.
        self._series: OrderedDict[tuple[str, str, str, str], tuple[str, str, int, float]] = OrderedDict()
        self._series_cache = series_cache
        self._clock = clock

    async def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        """``api.request``, with writes fenced: a replica that may not act sends nothing."""
        fence = self._fence
        if fence is not None and method != "GET" and not fence():
            raise Fenced(f"{method} {path}: not sent, this replica does not hold the lead")
        return await self.api.request(method, path, **kwargs)

    # --- binding ------------------------------------------------------------------------------

    async def bind(self, pod: Pod, node_name: str) -> None:
        meta: dict[str, Any] = {"namespace": pod.namespace, "name": pod.name}
        if uid := _real_uid(pod):
            meta["uid"] = uid  # the apiserver checks it as a precondition: no binding a recreated pod
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
        }
        await self._request("POST", _pod_path(pod.namespace, pod.name, "binding"), body=body)

    async def bound_node(self, pod: Pod) -> str:
        raw = await self._request("GET", _pod_path(pod.namespace, pod.name))
        meta = raw.get("metadata") or {}
        uid = _real_uid(pod)
        if uid and meta.get("uid") != uid:
            return ""  # another pod of that name now: ours is not bound anywhere
        return str((raw.get("spec") or {}).get("nodeName") or "")

    # --- events and conditions ----------------------------------------------------------------

    async def record_scheduled(self, pod: Pod, node_name: str) -> None:
        note = f"Successfully assigned {pod.namespace}/{pod.name} to {node_name}"
        await self._event(pod, "Normal", "Scheduled", "Binding", note)

    async def record_failed(
        self, pod: Pod, reason: str, message: str, nominated_node: str | None = None
    ) -> None:
        await asyncio.gather(
            self._event(pod, "Warning", "FailedScheduling", "Scheduling", truncate_message(message)),
            self._set_scheduled_false(pod, reason, message, nominated_node),
        )

    async def record_skipped_deleting(self, pod: Pod) -> None:
        note = f"skip schedule deleting pod: {pod.namespace}/{pod.name}"
        await self._event(pod, "Warning", "FailedScheduling", "Scheduling", note)

    async def _set_scheduled_false(
        self, pod: Pod, reason: str, message: str, nominated_node: str | None
    ) -> None:
        """One status patch for the condition and the nomination, skipped when neither changes."""
        status: dict[str, Any] = {}
        if nominated_node is not None and nominated_node != pod.nominated_node_name:
            status["nominatedNodeName"] = nominated_node or None
        old = _condition(pod, "PodScheduled")
        if not (
            old and (old.get("status"), old.get("reason"), old.get("message")) == ("False", reason, message)
        ):  # podutil.UpdatePodCondition: an unchanged condition is not written
            status["conditions"] = [self._scheduled_false(old, pod, reason, message)]
        if not status:
            return
        try:
            await self._patch_pod_status(pod, status)
        except NotFound:
            pass
        except ApiError as exc:
            logger.warning("Failed to update the PodScheduled condition of %s: %s", pod.key, exc)

    async def _patch_pod_status(self, pod: Pod, status: Mapping[str, Any]) -> None:
        """``util.PatchPodStatus``: the patch retried on what ``util.Retriable`` names (a refused
        connection, 500 InternalError, 503) with client-go's ``retry.DefaultBackoff``."""
        path = _pod_path(pod.namespace, pod.name, "status")
        delay = 0.01
        for step in range(DEFAULT_BACKOFF_STEPS):
            try:
                await self._request("PATCH", path, body={"status": status}, content_type=STRATEGIC)
                return
            except TransientError:
                if step == DEFAULT_BACKOFF_STEPS - 1:
                    raise
            await asyncio.sleep(delay * (1 + 0.1 * random.random()))
            delay *= 5

    @staticmethod
    def _scheduled_false(
        old: Mapping[str, Any] | None, pod: Pod, reason: str, message: str
    ) -> dict[str, Any]:
        cond: dict[str, Any] = {
            "type": "PodScheduled",
            "status": "False",
            "reason": reason,
            "message": message,
            "lastProbeTime": None,
            # The transition time moves only when the status does.
            "lastTransitionTime": (old or {}).get("lastTransitionTime")
            if old and old.get("status") == "False"
            else now_rfc3339(),
        }
        if pod.generation:
            cond["observedGeneration"] = pod.generation
        return cond

    async def set_nominated_node(self, pod: Pod, node_name: str) -> None:
        if pod.nominated_node_name == node_name:
            return
        try:
            await self._patch_pod_status(pod, {"nominatedNodeName": node_name or None})
        except NotFound:
            pass
        except ApiError as exc:
            logger.warning("Failed to set nominatedNodeName of %s: %s", pod.key, exc)

    async def set_pod_group_conditions(
        self, namespace: str, name: str, conditions: Sequence[Mapping[str, Any]]
    ) -> None:
        path = f"/apis/scheduling.k8s.io/v1beta1/namespaces/{namespace}/podgroups/{name}/status"
        await self._request(
            "PATCH",
            path,
            body={"status": {"conditions": [dict(c) for c in conditions]}},
            content_type="application/merge-patch+json",
        )

    async def _event(
        self,
        pod: Pod,
        type_: str,
        reason: str,
        action: str,
        note: str,
        related: Pod | Mapping[str, Any] | None = None,
    ) -> None:
        key = (pod.uid, reason, action, note)
        now = self._clock()
        self._expire_series(now)
        try:
            prior = self._series.get(key)
            if prior is not None and now - prior[3] < EVENT_SERIES_WINDOW:
                name, namespace, count, _ = prior
                count += 1
                self._series[key] = (name, namespace, count, now)
                self._series.move_to_end(key)
                try:
                    await self._request(
                        "PATCH",
                        f"/apis/events.k8s.io/v1/namespaces/{quote(namespace)}/events/{quote(name)}",
                        body={"series": {"count": count, "lastObservedTime": now_rfc3339(micro=True)}},
                        content_type=MERGE,
                    )
                    return
                except NotFound:
                    pass  # the event expired: start over
            name = f"{pod.name}.{time.time_ns():x}"
            body: dict[str, Any] = {
                "apiVersion": "events.k8s.io/v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": pod.namespace},
                "eventTime": now_rfc3339(micro=True),
                "reportingController": REPORTING_CONTROLLER,
                "reportingInstance": self.reporting_instance,
                "action": action,
                "reason": reason,
                "regarding": _pod_ref(pod),
                "note": note,
                "type": type_,
            }
            if related is not None:
                body["related"] = _pod_ref(related) if isinstance(related, Pod) else dict(related)
            self._series[key] = (name, pod.namespace, 1, now)
            await self._post_event(pod.namespace, body)
            while len(self._series) > self._series_cache:
                self._series.popitem(last=False)
        except ApiError as exc:
            logger.warning("Failed to record the %s event of %s: %s", reason, pod.key, exc)

    async def _post_event(self, namespace: str, body: Mapping[str, Any]) -> None:
        """client-go's events broadcaster: a write that got no answer is tried again, up to 12
        tries, the first retry after a random part of 10 s and the rest 10 s apart; an answer
        (even an error) is final. A replica that lost the lead meanwhile sends nothing more."""
        path = f"/apis/events.k8s.io/v1/namespaces/{quote(namespace)}/events"
        for tries in range(1, EVENT_MAX_TRIES + 1):
            try:
                await self._request("POST", path, body=body)
                return
            except Conflict:
                return  # AlreadyExists: an earlier try landed after all
            except Fenced:
                raise
            except ApiError as exc:
                if exc.status != 0 or tries == EVENT_MAX_TRIES:
                    raise
                pause = EVENT_RETRY_SECONDS * (random.random() if tries == 1 else 1.0)
                logger.info("Unable to write an event (%s); retrying in %.1fs", exc, pause)
                await asyncio.sleep(pause)

    def _expire_series(self, now: float) -> None:
        """Forget series last observed a window ago, as client-go's ``finishSeries`` does: they can
        never be extended, and keeping them (one per pod ever scheduled, ``Scheduled`` events
        never repeat) grew the map with the pods ever seen up to ``series_cache``."""
        series = self._series
        while series:
            key, (_, _, _, last) = next(iter(series.items()))
            if now - last < EVENT_SERIES_WINDOW:
                return
            del series[key]

    # --- preemption ---------------------------------------------------------------------------

    async def evict(self, victim: Pod, preemptor: Pod | PodGroup, message: str) -> None:
        """DisruptionTarget=True (PreemptionByScheduler), then delete, then a ``Preempted`` event."""
        if isinstance(preemptor, PodGroup):
            # The group's preemption has the whole cluster as its domain, named "cluster".
            note = f"Preempted by podgroup {preemptor.uid} on node cluster"
            related: dict[str, Any] = _pod_group_ref(preemptor)
        else:
            default = f"{preemptor.scheduler_name}: preempting to accommodate a higher priority pod"
            message = message or default
            note = f"Preempted by pod {preemptor.uid} on node {victim.node_name}"
            related = _pod_ref(preemptor)
        old = _condition(victim, "DisruptionTarget")
        if not (old and old.get("status") == "True" and old.get("reason") == "PreemptionByScheduler"):
            cond = {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "PreemptionByScheduler",
                "message": message,
                "lastTransitionTime": now_rfc3339(),
            }
            try:
                await self._request(
                    "PATCH",
                    _pod_path(victim.namespace, victim.name, "status"),
                    body={"status": {"conditions": [cond]}},
                    content_type=STRATEGIC,
                )
            except NotFound:
                return  # already gone: nothing to preempt
        delete_body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid := _real_uid(victim):
            delete_body["preconditions"] = {"uid": uid}
        try:
            await self._request("DELETE", _pod_path(victim.namespace, victim.name), body=delete_body)
        except NotFound:
            return
        except Conflict:
            return  # a different pod of that name now: not our victim
        await self._event(
            victim,
            "Normal",
            "Preempted",
            "Preempting",
            note,
            related=related,
        )

    # --- volumes ------------------------------------------------------------------------------

    async def bind_volumes(self, pod: Pod, claims: Sequence[tuple[str, str]]) -> None:
        """Dynamic claims get the selected-node annotation; static ones bind their PV's claimRef.

        ``pod.node_name`` is the node chosen (VolumeBinding's PreBind gets the assumed pod).
        """
        node = pod.node_name
        if not node:
            raise ApiError(f"bind_volumes for {pod.key}: the pod has no node")
        await asyncio.gather(*(self._bind_claim(claim, pv, node) for claim, pv in claims))

    async def _bind_claim(self, claim_key: str, pv_name: str, node: str) -> None:
        # Imported here, as api/kinds.py's parsers import it: not before a pod with volumes to bind.
        from kopf_scheduler.api.storage import (
            ANN_BOUND_BY_CONTROLLER,
            ANN_SELECTED_NODE,
            parse_persistent_volume,
            parse_persistent_volume_claim,
        )

        namespace, _, name = claim_key.partition("/")
        pvc_path = f"/api/v1/namespaces/{quote(namespace)}/persistentvolumeclaims/{quote(name)}"
        if not pv_name:
            await self._request(
                "PATCH",
                pvc_path,
                body={"metadata": {"annotations": {ANN_SELECTED_NODE: node}}},
                content_type=MERGE,
            )
            return
        pvc = parse_persistent_volume_claim(await self._request("GET", pvc_path))
        claim_ref = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "namespace": namespace,
            "name": name,
            "uid": pvc.metadata.uid,
            "resourceVersion": pvc.metadata.resource_version,
        }
        pv_path = f"/api/v1/persistentvolumes/{quote(pv_name)}"
        pv = parse_persistent_volume(await self._request("GET", pv_path))
        owner = pv.claim_ref
        if owner is not None and owner.name:
            if owner.uid == pvc.metadata.uid and owner.name == name:
                return  # already bound to this claim
            if (owner.name, owner.namespace) != (name, namespace):
                raise Conflict(f"PV {pv_name} is already claimed by {owner.namespace}/{owner.name}", 409)
        # resourceVersion in the patch makes it a compare-and-swap: a concurrent binder gets 409.
        await self._request(
            "PATCH",
            pv_path,
            body={
                "metadata": {
                    "resourceVersion": pv.metadata.resource_version,
                    "annotations": {ANN_BOUND_BY_CONTROLLER: "yes"},
                },
                "spec": {"claimRef": claim_ref},
            },
            content_type=MERGE,
        )

    # --- resource claims (DynamicResources) -------------------------------------------------------

    # Claims go out built from their typed fields (api/resource.claim_to_api) and come back parsed.

    async def get_resource_claim(self, namespace: str, name: str) -> ResourceClaim:
        from kopf_scheduler.api.resource import parse_resource_claim

        return parse_resource_claim(await self._request("GET", _claim_path(namespace, name)))

    async def update_resource_claim(self, claim: ResourceClaim) -> ResourceClaim:
        from kopf_scheduler.api.resource import claim_to_api, parse_resource_claim

        path = _claim_path(claim.metadata.namespace, claim.metadata.name)
        return parse_resource_claim(await self._request("PUT", path, body=claim_to_api(claim)))

    async def update_resource_claim_status(self, claim: ResourceClaim) -> ResourceClaim:
        from kopf_scheduler.api.resource import claim_to_api, parse_resource_claim

        path = _claim_path(claim.metadata.namespace, claim.metadata.name, "status")
        return parse_resource_claim(await self._request("PUT", path, body=claim_to_api(claim)))

    async def unreserve_resource_claim(self, namespace: str, name: str, claim_uid: str, pod_uid: str) -> None:
        await self._request(
            "PATCH",
            _claim_path(namespace, name, "status"),
            body={
                "metadata": {"uid": claim_uid},
                "status": {"reservedFor": [{"$patch": "delete", "uid": pod_uid}]},
            },
            content_type=STRATEGIC,
        )

    async def create_resource_claim(self, claim: ResourceClaim) -> ResourceClaim:
        from kopf_scheduler.api.resource import claim_to_api, parse_resource_claim

        path = f"/apis/resource.k8s.io/v1/namespaces/{quote(claim.metadata.namespace)}/resourceclaims"
        return parse_resource_claim(await self._request("POST", path, body=claim_to_api(claim)))

    async def delete_resource_claim(self, namespace: str, name: str, uid: str) -> None:
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            await self._request("DELETE", _claim_path(namespace, name), body=body)
        except NotFound:
            return

    async def set_pod_extended_resource_claim_status(self, pod: Pod, status: Mapping[str, Any]) -> None:
        await self._request(
            "PATCH",
            _pod_path(pod.namespace, pod.name, "status"),
            body={"status": {"extendedResourceClaimStatus": dict(status)}},
            content_type=STRATEGIC,
        )


def _claim_path(namespace: str, name: str, sub: str = "") -> str:
    path = f"/apis/resource.k8s.io/v1/namespaces/{quote(namespace)}/resourceclaims/{quote(name)}"
    return f"{path}/{sub}" if sub else path
