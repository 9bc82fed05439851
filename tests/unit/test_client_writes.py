"""KubeClusterClient's write policies on a real loopback socket: PodScheduled patches retried as
``util.PatchPodStatus``, events as client-go's broadcaster, nothing sent by a fenced replica."""

from __future__ import annotations

import asyncio

import pytest
import test_http11
from test_http11 import RESET, Server, ok

from kopf_scheduler.api.objects import parse_pod
from kopf_scheduler.cluster import client as client_module
from kopf_scheduler.cluster.apiclient import ApiClient
from kopf_scheduler.cluster.client import KubeClusterClient
from kopf_scheduler.cluster.connection import ConnectionInfo, Credentials
from kopf_scheduler.framework.client import Fenced

server = pytest.fixture(test_http11.server.__wrapped__, name="server")  # type: ignore[attr-defined]
STATUS_503 = b'{"kind":"Status","code":503,"reason":"ServiceUnavailable","message":"try later"}'
STATUS_403 = b'{"kind":"Status","code":403,"reason":"Forbidden","message":"no"}'
POD = parse_pod(
    {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "1"},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
)


def _client(server: Server, fence: list[bool] | None = None) -> KubeClusterClient:
    api = ApiClient(Credentials(ConnectionInfo(server=server.url, token="t")))
    return KubeClusterClient(api, fence=(lambda: fence[0]) if fence is not None else None)


async def test_the_podscheduled_patch_is_retried_on_503_as_patch_pod_status(server: Server) -> None:
    server.handlers += [ok(STATUS_503, "503 Service Unavailable")] * 2 + [ok(b"{}", "200 OK")]
    client = _client(server)
    try:
        await client._set_scheduled_false(POD, "Unschedulable", "0/1 nodes are available", None)
    finally:
        await client.api.close()
    assert server.paths() == [b"/api/v1/namespaces/ns/pods/p/status"] * 3


async def test_the_podscheduled_patch_is_not_retried_on_a_final_answer(server: Server) -> None:
    server.handlers += [ok(STATUS_403, "403 Forbidden"), ok(b"{}", "200 OK")]
    client = _client(server)
    try:
        await client._set_scheduled_false(POD, "Unschedulable", "0/1 nodes are available", None)
    finally:
        await client.api.close()
    assert len(server.seen) == 1


async def test_an_event_without_an_answer_is_tried_again(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client_module, "EVENT_RETRY_SECONDS", 0.2)
    server.handlers += [lambda _: [RESET], ok(b"{}")]
    client = _client(server)
    try:
        await client.record_scheduled(POD, "n1")
    finally:
        await client.api.close()
    assert server.paths() == [b"/apis/events.k8s.io/v1/namespaces/ns/events"] * 2
    first, second = (request for _, _, request in server.seen)
    assert first.split(b"\r\n\r\n", 1)[1] == second.split(b"\r\n\r\n", 1)[1]  # the same event, same name


async def test_an_event_with_an_error_answer_is_not_tried_again(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client_module, "EVENT_RETRY_SECONDS", 0.05)
    server.handlers += [ok(STATUS_403, "403 Forbidden"), ok(b"{}")]
    client = _client(server)
    try:
        await client.record_scheduled(POD, "n1")
        await asyncio.sleep(0.2)
    finally:
        await client.api.close()
    assert len(server.seen) == 1


async def test_a_fenced_replica_sends_no_write_and_stops_retrying(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client_module, "EVENT_RETRY_SECONDS", 0.2)
    leading = [True]

    def lose_the_lead(_: bytes) -> list[bytes]:
        leading[0] = False  # the lead is lost while the event's answer is lost
        return [RESET]

    server.handlers += [lose_the_lead, ok(b"{}"), ok(b"{}")]
    client = _client(server, leading)
    try:
        await client.record_scheduled(POD, "n1")
        with pytest.raises(Fenced):
            await client.bind(POD, "n1")
        await client.set_nominated_node(POD, "n2")
    finally:
        await client.api.close()
    assert len(server.seen) == 1
