"""The prefetch's pipelined listings against a real kube-apiserver (cluster/prefetch.py): Go's
net/http server answers HTTP/1.1 requests written at once on one TLS connection in order, and each
answer is what a plain GET of the same target gets, also when one answer spans many TLS records
and the next answers follow it in the same reads."""

from __future__ import annotations

import http.client
import json
import ssl
import uuid
from typing import Any
from urllib.parse import urlsplit

import pytest

from kopf_scheduler.cluster.connection import Credentials, from_kubeconfig
from kopf_scheduler.cluster.prefetch import OBJECT_LISTINGS, PAGE_SIZE, Prefetch, list_target
from kopf_scheduler_workbench.controlplane import ControlPlane

pytestmark = pytest.mark.integration


def _plain_get(credentials: Credentials, target: str) -> Any:
    """The same target on a connection of its own, through the standard library's client."""
    split = urlsplit(credentials.server)
    context = credentials.info.as_ssl_context()
    assert isinstance(context, ssl.SSLContext)
    connection = http.client.HTTPSConnection(split.hostname or "", split.port, context=context, timeout=30)
    try:
        connection.request(
            "GET", target, headers={**credentials.info.as_http_headers(), "Accept": "application/json"}
        )
        response = connection.getresponse()
        assert response.status == 200
        return json.loads(response.read())
    finally:
        connection.close()


def _without_version(listing: Any) -> Any:
    """A listing without its resourceVersion: a consistent read's is the store's latest revision,
    which the apiserver's own writes (leases) move between the two reads."""
    listing["metadata"].pop("resourceVersion", None)
    return listing


def test_pipelined_listings_equal_plain_gets(control_plane: ControlPlane) -> None:
    namespace = f"prefetch-{uuid.uuid4().hex[:6]}"
    control_plane.kubectl("create", "namespace", namespace)
    configmaps = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"c{i}"},
                "data": {"k": "x" * 4096},
            }
            for i in range(40)
        ],
    }
    control_plane.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(configmaps))
    large = (f"/api/v1/namespaces/{namespace}/configmaps", {})  # ~170 KB, in the middle of the batch
    asks = (*OBJECT_LISTINGS[:9], large, *OBJECT_LISTINGS[9:])
    credentials = from_kubeconfig(control_plane.kubeconfig)

    early = Prefetch.start(credentials, (), asks).take()

    for path, params in asks:
        target = list_target(path, params, PAGE_SIZE)
        status, body = early[target].result(timeout=30)
        assert status == 200, (target, body[:200])
        assert _without_version(json.loads(body)) == _without_version(_plain_get(credentials, target)), target
    listed = json.loads(early[list_target(*large, PAGE_SIZE)].result()[1])
    assert sorted(item["metadata"]["name"] for item in listed["items"]) == sorted(f"c{i}" for i in range(40))
