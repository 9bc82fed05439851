"""The manifests' ClusterRole grants every request the scheduler makes (issue 26: the bind
read-back's GET of a pod was refused with 403, so a lost bind answer could never be checked).

The list is not written by hand: every method of the ``ClusterClient`` protocol is called through
the real ``KubeClusterClient`` as the ServiceAccount, against the real apiserver, and each request
it sent is recorded; the informers' kinds come from the operator's own tables. No request may be
refused, and ``kubectl auth can-i`` as the ServiceAccount must say yes to each (verb, resource).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import re
import subprocess
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from kopf_scheduler.api.kinds import POD_FIELD_SELECTOR
from kopf_scheduler.api.objects import Pod, parse_pod
from kopf_scheduler.api.resource import parse_resource_claim
from kopf_scheduler.cluster.apiclient import ApiClient
from kopf_scheduler.cluster.client import KubeClusterClient
from kopf_scheduler.cluster.connection import load_credentials
from kopf_scheduler.cluster.informer import ResourceKind
from kopf_scheduler.cluster.runtime import OBJECT_KINDS, OPTIONAL_KINDS, PROFILES_PATH
from kopf_scheduler.framework.client import ApiError, ClusterClient
from kopf_scheduler_workbench.controlplane import ControlPlane

from .test_operator_helpers import create, deploy, fresh_namespace, get_json, node, pod

pytestmark = pytest.mark.integration

VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
_PATH = re.compile(
    r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<resource>[^/]+)(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$"
)


def access(method: str, url: str) -> tuple[str, str, str]:
    """(verb, resource.group, subresource) a request needs, as RBAC reads its path."""
    path = urlsplit(url).path
    m = _PATH.match(path)
    assert m is not None, path
    verb = VERBS[method]
    if method == "GET" and not m["name"]:
        verb = "list"
    resource = m["resource"] + (f".{m['group']}" if m["group"] else "")
    return verb, resource, m["sub"] or ""


class RecordingApi(ApiClient):
    """The real client, noting each request it sends and the HTTP status it got."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent: list[tuple[str, str, int]] = []

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            out = await super().request(method, path, **kwargs)
        except ApiError as exc:
            self.sent.append((method, path, exc.status))
            raise
        self.sent.append((method, path, 200))
        return out


def can_i(plane: ControlPlane, kubeconfig: Path, verb: str, resource: str, sub: str = "") -> bool:
    """``kubectl auth can-i`` as the ServiceAccount. For a kind this apiserver does not serve
    (PodGroups without GenericWorkload) kubectl cannot find its group and asks about a core
    resource of that name; then the SelfSubjectAccessReview it would send is sent with the group."""
    args = ["auth", "can-i", verb, resource, "-A"]
    if sub:
        args.append(f"--subresource={sub}")
    try:
        return plane.kubectl(*args, kubeconfig=kubeconfig).strip() == "yes"
    except subprocess.CalledProcessError as exc:  # `can-i` exits 1 for "no"
        if "doesn't have a resource type" not in str(exc.stderr):
            assert str(exc.stdout).strip() == "no", (exc.stdout, exc.stderr)
            return False
    name, _, group = resource.partition(".")
    attributes = {"verb": verb, "group": group, "resource": name, "subresource": sub}
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes},
    }
    path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
    out = plane.kubectl("create", "--raw", path, "-f", "-", input=json.dumps(review), kubeconfig=kubeconfig)
    return bool(json.loads(out)["status"].get("allowed"))


def _fetch(plane: ControlPlane, namespace: str, name: str) -> Pod:
    return parse_pod(get_json(plane, "pod", name, "-n", namespace))


async def _exercise(api: RecordingApi, plane: ControlPlane, ns: str, tag: str) -> set[str]:
    """Call every ClusterClient method once (a few twice, for their second path) as the SA."""
    client = KubeClusterClient(api)
    called: set[str] = set()
    node_name = f"rbac-{tag}"

    async def call(name: str, *args: Any, tolerate: tuple[type[BaseException], ...] = ()) -> Any:
        called.add(name)
        try:
            return await getattr(client, name)(*args)
        except tolerate:
            return None

    bindee, victim, preemptor = (_fetch(plane, ns, n) for n in ("bindee", "victim", "preemptor"))
    await call("bind", bindee, node_name)
    assert await call("bound_node", bindee) == node_name  # the read-back: a GET of the pod
    await call("record_scheduled", bindee, node_name)
    for _ in range(2):  # the second is the event series' PATCH
        await call("record_failed", preemptor, "Unschedulable", "0/1 nodes are available.", node_name)
    await call("record_skipped_deleting", preemptor)  # skipPodSchedule's event: a POST of events
    await call("set_nominated_node", _fetch(plane, ns, "preemptor"), "")
    await call("evict", victim, preemptor, "preempting")
    # PodGroups are served only with GenericWorkload on (not this plane): the request is made all the same.
    conditions = [{"type": "PodGroupInitiallyScheduled", "status": "False", "reason": "Unschedulable"}]
    await call("set_pod_group_conditions", ns, "group", conditions, tolerate=(ApiError,))
    bound = _fetch(plane, ns, "bindee")  # VolumeBinding's PreBind gets the pod with its node
    await call("bind_volumes", bound, [(f"{ns}/dynamic", ""), (f"{ns}/static", f"pv-{tag}")])
    claim = await call(
        "create_resource_claim",
        parse_resource_claim(
            {"metadata": {"namespace": ns, "generateName": "claim-"}, "spec": {"devices": {"requests": []}}}
        ),
    )
    name = claim.metadata.name
    claim = await call("get_resource_claim", ns, name)
    claim = await call(
        "update_resource_claim",
        dataclasses.replace(claim, finalizers=("resource.kubernetes.io/delete-protection",)),
    )
    claim = await call("update_resource_claim_status", claim)
    await call("unreserve_resource_claim", ns, name, claim.metadata.uid, bindee.uid)
    await call(
        "set_pod_extended_resource_claim_status", bindee, {"requestMappings": []}, tolerate=(ApiError,)
    )
    claim = await call("get_resource_claim", ns, name)
    await call("update_resource_claim", dataclasses.replace(claim, finalizers=()))
    await call("delete_resource_claim", ns, name, claim.metadata.uid)
    return called


def test_every_request_of_the_client_is_granted_to_the_service_account(control_plane: ControlPlane) -> None:
    sa = deploy(control_plane)
    ns = fresh_namespace(control_plane, "rbac")
    tag = uuid.uuid4().hex[:6]
    create(control_plane, node(f"rbac-{tag}"))
    create(
        control_plane,
        pod("bindee", ns),
        pod("preemptor", ns),
        pod("victim", ns, node_name=f"rbac-{tag}"),
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "dynamic", "namespace": ns},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "static", "namespace": ns},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
                "storageClassName": "",
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": f"pv-{tag}"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "hostPath": {"path": "/tmp/x"},
                "storageClassName": "",
            },
        },
    )

    async def go() -> tuple[set[str], list[tuple[str, str, int]]]:
        async with RecordingApi(load_credentials(str(sa))) as api:
            called = await _exercise(api, control_plane, ns, tag)
            return called, api.sent

    called, sent = asyncio.run(go())
    protocol = {
        name for name, _ in inspect.getmembers(ClusterClient, inspect.isfunction) if not name.startswith("_")
    }
    assert called == protocol, f"not exercised: {protocol - called}"
    refused = [(m, p, s) for m, p, s in sent if s in (401, 403)]
    assert not refused, refused
    assert node_of_pod(control_plane, ns, "bindee") == f"rbac-{tag}"

    needed = {access(method, path) for method, path, _ in sent}
    for kind in informed_kinds():  # list+watch informers, as the operator builds them
        _, resource, _ = access("GET", kind.path)
        needed |= {("list", resource, ""), ("watch", resource, "")}
    # The leader writes a SchedulerProfile's status (``write_profile_status``).
    needed.add(("patch", access("GET", PROFILES_PATH)[1], "status"))
    denied = [need for need in sorted(needed) if not can_i(control_plane, sa, *need)]
    assert not denied, denied
    assert len(needed) > 40, needed  # the client's requests and the informers' kinds
    # The bind read-back as it happens in a cluster: a GET of a pod as the ServiceAccount.
    got = get_json_as(control_plane, sa, "pod", "bindee", "-n", ns)
    assert got["spec"]["nodeName"] == f"rbac-{tag}"


def informed_kinds() -> list[ResourceKind]:
    return [
        ResourceKind("Pod", "/api/v1/pods", {"fieldSelector": POD_FIELD_SELECTOR}),
        ResourceKind("Node", "/api/v1/nodes"),
        *OBJECT_KINDS,
        *(kind for _, _, kind in OPTIONAL_KINDS),
        ResourceKind("SchedulerProfile", PROFILES_PATH),
    ]


def node_of_pod(plane: ControlPlane, ns: str, name: str) -> str:
    return str(get_json(plane, "pod", name, "-n", ns)["spec"].get("nodeName") or "")


def get_json_as(plane: ControlPlane, kubeconfig: Path, *args: str) -> Any:
    return json.loads(plane.kubectl("get", *args, "-o", "json", kubeconfig=kubeconfig))
