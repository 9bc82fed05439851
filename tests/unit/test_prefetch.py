"""The informers' first listing pages sent before the runtime exists (cluster/prefetch.py), against
test_http11's hand-written server on a real loopback socket: the informer's listing takes the early
answer instead of asking, and asks as usual when the early answer failed. The small listings'
pipelined answers against a server that answers only once every request has arrived, in one
write or split anywhere, and a stream that breaks midway."""

from __future__ import annotations

import inspect
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager

import pytest
import test_http11
from test_http11 import CLOSE, Handler, Server, answer

from kopf_scheduler.api import kinds
from kopf_scheduler.cluster import prefetch
from kopf_scheduler.cluster.apiclient import ApiClient
from kopf_scheduler.cluster.connection import ConnectionInfo, Credentials
from kopf_scheduler.cluster.informer import Informer
from kopf_scheduler.cluster.prefetch import FIRST_LISTINGS, OBJECT_LISTINGS, PAGE_SIZE, Prefetch, list_target

server = pytest.fixture(test_http11.server.__wrapped__, name="server")  # type: ignore[attr-defined]

NODES = b'{"kind":"NodeList","metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":"n1"}}]}'
PODS = b'{"kind":"PodList","metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":"p1"}}]}'
NODES_TARGET = list_target("/api/v1/nodes", {}, PAGE_SIZE).encode()


def chunked(body: bytes, status: bytes = b"200 OK") -> list[bytes]:
    """The answer in two chunks, written apart (as the apiserver streams a large listing)."""
    half = len(body) // 2
    head = b"HTTP/1.1 " + status + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
    return [
        head + b"%x\r\n%s\r\n" % (half, body[:half]),
        b"%x\r\n%s\r\n0\r\n\r\n" % (len(body) - half, body[half:]),
    ]


def by_target(answers: dict[bytes, list[list[bytes]]]) -> Handler:
    """Answers by request target, in turn (the two early requests come in any order)."""
    return lambda request: answers[request.split(b" ")[1]].pop(0)


def _credentials(server: Server) -> Credentials:
    return Credentials(ConnectionInfo(server=server.url, token="t"))


def test_the_early_requests_are_the_runtimes_first_pages() -> None:
    """What is prefetched is what the Node and Pod informers ask first, or it is never taken."""
    runtimes = (
        (kinds.by_name("Node").path, {}),
        (kinds.by_name("Pod").path, {"fieldSelector": kinds.POD_FIELD_SELECTOR}),
    )
    assert runtimes == FIRST_LISTINGS
    assert inspect.signature(Informer).parameters["page_size"].default == PAGE_SIZE
    assert tuple((kind.path, {}) for kind in kinds.OBJECT_KINDS) == OBJECT_LISTINGS  # the runtime's kinds


def _list_body(kind: str, name: str) -> bytes:
    return b'{"kind":"%sList","metadata":{"resourceVersion":"7"},"items":[{"metadata":{"name":"%s"}}]}' % (
        kind.encode(),
        name.encode(),
    )


IN_TURN = (("/api/v1/services", {}), ("/api/v1/namespaces", {}), ("/apis/apps/v1/replicasets", {}))


async def _list_in_turn(api: ApiClient) -> list[list[str]]:
    names = []
    for path, _ in IN_TURN:
        items, version = await api.list_all(path, page_size=PAGE_SIZE)
        assert version == "7"
        names.append([item["metadata"]["name"] for item in items])
    return names


async def test_the_object_kinds_are_asked_in_turn_on_one_connection(server: Server) -> None:
    """One connection (one handshake) for the small listings, the requests pipelined on it; the
    informers take every answer and ask nothing."""
    server.handlers += [
        lambda _: [answer(_list_body("Service", "s1"), "200 OK")],
        lambda _: [*chunked(_list_body("Namespace", "default"))],
        lambda _: [answer(_list_body("ReplicaSet", "r1"), "200 OK")],
    ]
    credentials = _credentials(server)
    async with ApiClient(credentials) as api:
        api.prefetched = Prefetch.start(credentials, (), IN_TURN).take()
        assert await _list_in_turn(api) == [["s1"], ["default"], ["r1"]]
    assert server.paths() == [list_target(path, {}, PAGE_SIZE).encode() for path, _ in IN_TURN]
    assert {number for _, number, _ in server.seen} == {1}  # one connection
    assert all(request.startswith(b"GET /") for _, _, request in server.seen)  # nothing left between
    assert b"Connection: close" in server.seen[-1][2] and b"Connection: close" not in server.seen[0][2]


async def test_a_connection_lost_in_turn_leaves_the_rest_to_the_informers(server: Server) -> None:
    """The first answer arrives; the connection closes at the second request: the second and the
    third are asked again by their informers, on connections of their own."""
    server.handlers += [
        lambda _: [answer(_list_body("Service", "s1"), "200 OK")],
        lambda _: [CLOSE],
        lambda _: [answer(_list_body("Namespace", "default"), "200 OK")],
        lambda _: [answer(_list_body("ReplicaSet", "r1"), "200 OK")],
    ]
    credentials = _credentials(server)
    async with ApiClient(credentials) as api:
        api.prefetched = Prefetch.start(credentials, (), IN_TURN).take()
        assert await _list_in_turn(api) == [["s1"], ["default"], ["r1"]]
    targets = [list_target(path, {}, PAGE_SIZE).encode() for path, _ in IN_TURN]
    assert server.paths() == [targets[0], targets[1], targets[1], targets[2]]
    assert [number for _, number, _ in server.seen][:2] == [1, 1] and server.seen[2][1] != 1


async def test_the_listing_takes_the_early_answer_and_asks_nothing(server: Server) -> None:
    pods = list_target("/api/v1/pods", FIRST_LISTINGS[1][1], PAGE_SIZE).encode()
    server.handlers += [
        by_target({NODES_TARGET: [[*chunked(NODES), CLOSE]], pods: [[answer(PODS, "200 OK")]]})
    ] * 2
    early = Prefetch.start(_credentials(server), in_turn=())
    async with ApiClient(_credentials(server)) as api:
        api.prefetched = early.take()
        nodes, nodes_version = await api.list_all("/api/v1/nodes", page_size=PAGE_SIZE)
        listed, _ = await api.list_all("/api/v1/pods", FIRST_LISTINGS[1][1], page_size=PAGE_SIZE)
    assert [n["metadata"]["name"] for n in nodes] == ["n1"] and nodes_version == "9"
    assert [p["metadata"]["name"] for p in listed] == ["p1"]
    assert sorted(server.paths()) == sorted([NODES_TARGET, pods])  # the two early requests only
    assert all(b"\r\nAuthorization: Bearer t\r\n" in request for _, _, request in server.seen)
    assert api.prefetched == {}  # each taken once


@pytest.mark.parametrize(
    "early",
    [
        [answer(b'{"kind":"Status","code":500,"reason":"InternalError"}', "500 Internal Server Error")],
        [b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n{", CLOSE],  # cut short
    ],
    ids=["error-answer", "closed-mid-body"],
)
async def test_a_failed_early_answer_is_asked_for_again(server: Server, early: list[bytes]) -> None:
    handler = by_target({NODES_TARGET: [early, [answer(NODES, "200 OK")]]})
    server.handlers += [handler, handler]
    credentials = _credentials(server)
    async with ApiClient(credentials) as api:
        api.prefetched = Prefetch.start(credentials, (("/api/v1/nodes", {}),), ()).take()
        nodes, version = await api.list_all("/api/v1/nodes", page_size=PAGE_SIZE)
    assert [n["metadata"]["name"] for n in nodes] == ["n1"] and version == "9"
    assert server.paths() == [NODES_TARGET, NODES_TARGET]


def test_nothing_is_sent_through_a_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    proxied = Credentials(
        ConnectionInfo(server="http://127.0.0.1:9", token="t", proxy_url="http://proxy:3128")
    )
    assert Prefetch.start(proxied).take() == {}
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    from_env = Credentials(ConnectionInfo(server="http://127.0.0.1:9", token="t", trust_env=True))
    assert Prefetch.start(from_env).take() == {}
    assert prefetch.MAX_BODY_BYTES >= 64 << 20


@contextmanager
def pipelined_server(requests: int, writes: list[bytes]) -> Iterator[tuple[str, list[bytes]]]:
    """A loopback server that reads until ``requests`` request heads have arrived (a client that
    waits for an answer before its next request gets none), then writes ``writes`` one write
    each, apart, and closes. Yields its URL and the heads it read."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(5)
    heads: list[bytes] = []

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(5)
            data = b""
            while data.count(b"\r\n\r\n") < requests:
                received = conn.recv(65536)
                if not received:
                    return
                data += received
            heads.extend(data.split(b"\r\n\r\n")[:requests])
            for piece in writes:
                conn.sendall(piece)
                time.sleep(0.005)  # arrive in separate reads

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", heads
    finally:
        thread.join(10)
        listener.close()


ANSWERS = [
    answer(_list_body("Service", "s1"), "200 OK"),
    b"HTTP/1.1 100 Continue\r\n\r\n" + b"".join(chunked(_list_body("Namespace", "default"))),
    answer(b'{"kind":"Status","code":500}', "500 Internal Server Error"),
    answer(_list_body("ReplicaSet", "r1"), "200 OK"),
]
FOUR: tuple[tuple[str, dict[str, str]], ...] = (*IN_TURN[:2], ("/api/v1/pods", {}), IN_TURN[2])
STREAM = b"".join(ANSWERS)
MID_SECOND_HEAD = len(ANSWERS[0]) + len(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Enc")
MID_FOURTH_STATUS = len(STREAM) - len(ANSWERS[3]) + len(b"HTTP/1")


def _pipelined(url: str, asks: tuple[tuple[str, dict[str, str]], ...]) -> list[Future[tuple[int, bytes]]]:
    early = Prefetch.start(Credentials(ConnectionInfo(server=url, token="t")), (), asks, timeout=3).take()
    return [early[list_target(path, params, PAGE_SIZE)] for path, params in asks]


@pytest.mark.parametrize(
    "writes",
    [
        [STREAM],
        [STREAM[:MID_SECOND_HEAD], STREAM[MID_SECOND_HEAD:MID_FOURTH_STATUS], STREAM[MID_FOURTH_STATUS:]],
    ],
    ids=["one-write", "split-mid-head"],
)
def test_pipelined_answers_resolve_each_future_in_order(writes: list[bytes]) -> None:
    """Every request is written before any answer (the server answers only then); the answers,
    however they arrive, go each to its own request: a 1xx before one is skipped, a chunked body is
    whole, an error answer is handed over as it is (its informer asks again)."""
    with pipelined_server(len(FOUR), writes) as (url, heads):
        futures = _pipelined(url, FOUR)
        answers = [future.result(timeout=5) for future in futures]
    assert answers == [
        (200, _list_body("Service", "s1")),
        (200, _list_body("Namespace", "default")),
        (500, b'{"kind":"Status","code":500}'),
        (200, _list_body("ReplicaSet", "r1")),
    ]
    assert [head.split(b" ")[1] for head in heads] == [
        list_target(path, params, PAGE_SIZE).encode() for path, params in FOUR
    ]
    assert [b"Connection: close" in head for head in heads] == [False, False, False, True]


@pytest.mark.parametrize(
    "writes",
    [
        [ANSWERS[0] + ANSWERS[1] + ANSWERS[2][:20]],  # closed in the third answer's head
        [ANSWERS[0] + ANSWERS[1]],  # closed between answers
    ],
    ids=["mid-answer", "between-answers"],
)
def test_a_stream_broken_after_the_second_answer_fails_the_rest(writes: list[bytes]) -> None:
    with pipelined_server(len(FOUR), writes) as (url, _):
        futures = _pipelined(url, FOUR)
        assert futures[0].result(timeout=5) == (200, _list_body("Service", "s1"))
        assert futures[1].result(timeout=5) == (200, _list_body("Namespace", "default"))
        for future in futures[2:]:
            assert isinstance(future.exception(timeout=5), ConnectionError)


def test_an_answer_over_the_size_bound_fails_it_and_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prefetch, "MAX_BODY_BYTES", len(_list_body("Service", "s1")))
    writes = [ANSWERS[0] + answer(_list_body("Namespace", "kube-system"), "200 OK") + ANSWERS[3]]
    with pipelined_server(len(IN_TURN), writes) as (url, _):
        futures = _pipelined(url, IN_TURN)
        assert futures[0].result(timeout=5) == (200, _list_body("Service", "s1"))
        failures = [future.exception(timeout=5) for future in futures[1:]]
    assert all(failure is not None for failure in failures) and failures[0] is failures[1]
