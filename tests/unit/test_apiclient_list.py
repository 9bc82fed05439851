"""ApiClient.list_all: every page of a list followed by its continue token, and the list's
resourceVersion, against a hand-written server on a real loopback socket (test_http11's)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
import test_http11
from test_http11 import Server, ok

from kopf_scheduler.cluster import apiclient
from kopf_scheduler.cluster.apiclient import ApiClient
from kopf_scheduler.cluster.connection import ConnectionInfo, Credentials
from kopf_scheduler.framework.client import ApiError, NotFound

server = pytest.fixture(test_http11.server.__wrapped__, name="server")  # type: ignore[attr-defined]

PAGE_1 = (
    b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"5","continue":"c1"},'
    b'"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}'
)
PAGE_2 = (
    b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7"},'
    b'"items":[{"metadata":{"name":"c"}}]}'
)
NOT_FOUND = b'{"kind":"Status","code":404,"reason":"NotFound","message":"the server could not find it"}'


def _api(server: Server) -> ApiClient:
    return ApiClient(Credentials(ConnectionInfo(server=server.url, token="t")))


def _query(target: bytes) -> dict[str, list[str]]:
    return parse_qs(urlsplit(target.decode()).query)


async def test_list_all_follows_continue_tokens_and_returns_the_last_pages_version(server: Server) -> None:
    server.handlers += [ok(PAGE_1, "200 OK"), ok(PAGE_2, "200 OK")]
    async with _api(server) as api:
        items, version = await api.list_all("/api/v1/pods", {"fieldSelector": "spec.nodeName="}, page_size=2)
    assert [i["metadata"]["name"] for i in items] == ["a", "b", "c"]
    assert all((i["kind"], i["apiVersion"]) == ("Pod", "v1") for i in items)  # stamped from the list
    assert version == "7"
    first, second = (_query(p) for p in server.paths())
    assert first == {"fieldSelector": ["spec.nodeName="], "limit": ["2"]}
    assert second == {"fieldSelector": ["spec.nodeName="], "limit": ["2"], "continue": ["c1"]}


async def test_list_all_raises_the_error_of_a_page(server: Server) -> None:
    server.handlers += [ok(NOT_FOUND, "404 Not Found")]
    async with _api(server) as api:
        with pytest.raises(NotFound):
            await api.list_all("/apis/scheduling.k8s.io/v1beta1/podgroups")
    assert len(server.seen) == 1


async def test_listing_pages_go_on_the_lean_pool_and_on_aiohttp_after_one_missed_its_deadline(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No aiohttp before the first watch: pages on the lean pool (no Accept-Encoding, unlike
    aiohttp's); a page past its deadline (a slow link) fails, and the listings after it go on aiohttp,
    whose deadlines are idle-read ones only."""
    monkeypatch.setattr(apiclient, "LEAN_LIST_SECONDS", 0.3)
    server.handlers += [ok(PAGE_2, "200 OK"), lambda _: [], ok(PAGE_2, "200 OK")]  # the 2nd: no answer
    async with _api(server) as api:
        items, _ = await api.list_all("/api/v1/pods")
        assert [i["metadata"]["name"] for i in items] == ["c"] and api.lean_listings
        with pytest.raises(ApiError, match=r"within 0\.3s"):
            await api.list_all("/api/v1/pods")
        assert not api.lean_listings
        items, _ = await api.list_all("/api/v1/pods")
    assert [i["metadata"]["name"] for i in items] == ["c"]
    first, stalled, after = (request.lower() for _, _, request in server.seen)
    assert b"accept-encoding" not in first and b"accept-encoding" not in stalled
    assert b"accept-encoding" in after  # aiohttp's
