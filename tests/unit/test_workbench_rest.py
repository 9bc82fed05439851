"""The workbench's REST helper: paths from the registry of kinds, and the client on a real socket."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from kopf_scheduler.api import kinds
from kopf_scheduler_workbench.rest import MERGE_PATCH, Api, RequestError, collection, item_path, object_path


def test_paths_come_from_the_registry() -> None:
    pod = {"kind": "Pod", "metadata": {"name": "p 1", "namespace": "team-a"}}
    assert collection(pod) == "/api/v1/namespaces/team-a/pods"
    assert item_path(pod) == "/api/v1/namespaces/team-a/pods/p%201"
    assert collection({"kind": "Pod", "metadata": {"name": "p"}}) == "/api/v1/namespaces/default/pods"
    assert item_path({"kind": "Node", "metadata": {"name": "n"}}) == "/api/v1/nodes/n"
    assert object_path(kinds.POD, "p", "ns", "binding") == "/api/v1/namespaces/ns/pods/p/binding"
    assert (
        object_path(kinds.RESOURCE_CLAIM, "c", "ns")
        == "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c"
    )
    assert kinds.EVENT.path == "/apis/events.k8s.io/v1/events"
    with pytest.raises(KeyError):
        collection({"kind": "Unheard", "metadata": {"name": "x"}})


class Server:
    """A small apiserver stand-in: answers from a script per (method, path), records what came."""

    def __init__(self) -> None:
        self.script: dict[tuple[str, str], list[tuple[int, Any]]] = {}
        self.seen: list[tuple[str, str, str, str, Any]] = []  # method, path, query, content type, body
        self.auth: set[str | None] = set()

    async def handle(self, request: web.Request) -> web.Response:
        text = await request.text()
        body = json.loads(text) if text else None
        self.seen.append((request.method, request.path, request.query_string, request.content_type, body))
        self.auth.add(request.headers.get("Authorization"))
        answers = self.script.get((request.method, request.path)) or [(404, {"reason": "NotFound"})]
        status, payload = answers.pop(0) if len(answers) > 1 else answers[0]
        return web.json_response(payload, status=status)


@pytest.fixture
async def served() -> AsyncIterator[tuple[Server, Api]]:
    server = Server()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    api = Api(f"http://127.0.0.1:{port}/", "t0k3n", concurrency=2)
    try:
        yield server, api
    finally:
        await api.close()
        await runner.cleanup()


async def test_transient_answers_are_retried_and_a_landed_create_is_done(
    served: tuple[Server, Api],
) -> None:
    server, api = served
    server.script[("GET", "/api/v1/nodes")] = [(503, {}), (429, {}), (200, {"items": [1]})]
    assert await api.request("GET", "/api/v1/nodes") == {"items": [1]}
    assert len(server.seen) == 3
    # A POST whose first try landed (the 500 came after it was stored): 409 on the retry is done.
    server.script[("POST", "/api/v1/nodes")] = [(500, {}), (409, {"reason": "AlreadyExists"})]
    assert await api.request("POST", "/api/v1/nodes", {"metadata": {"name": "n"}}) == {}
    # The same 409 on a first try is an error, with its status.
    server.script[("POST", "/api/v1/nodes")] = [(409, {"reason": "AlreadyExists"})]
    with pytest.raises(RequestError) as err:
        await api.request("POST", "/api/v1/nodes", {"metadata": {"name": "n"}})
    assert err.value.status == 409


async def test_patch_delete_and_the_token(served: tuple[Server, Api]) -> None:
    server, api = served
    path = object_path(kinds.POD, "p", "ns", "status")
    server.script[("PATCH", path)] = [(200, {"ok": True})]
    assert await api.patch(path, {"status": {"phase": "Running"}}) == {"ok": True}
    assert server.seen[-1][3:] == (MERGE_PATCH, {"status": {"phase": "Running"}})
    await api.delete(object_path(kinds.POD, "gone", "ns"), grace_period=0)  # 404: gone already is fine
    assert server.seen[-1][4] == {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
    with pytest.raises(RequestError) as err:
        await api.request("GET", object_path(kinds.POD, "gone", "ns"))
    assert err.value.status == 404
    assert server.auth == {"Bearer t0k3n"}


async def test_list_all_follows_continue_tokens(served: tuple[Server, Api]) -> None:
    server, api = served
    server.script[("GET", kinds.POD.path)] = [
        (200, {"metadata": {"continue": "c1"}, "items": [1, 2]}),
        (200, {"metadata": {"continue": ""}, "items": [3]}),
    ]
    assert await api.list_all(kinds.POD, labelSelector="a=b") == [1, 2, 3]
    queries = [q for m, p, q, _, _ in server.seen if p == kinds.POD.path]
    assert queries == ["limit=500&labelSelector=a%3Db", "limit=500&labelSelector=a%3Db&continue=c1"]
