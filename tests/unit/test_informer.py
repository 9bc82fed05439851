"""The informer against misbehaving servers: a real socket server behind a real ApiClient.

Each server speaks HTTP/1.1 by hand, so it can do what kube-apiserver never does on purpose but a
proxy, a dying apiserver or a vanished peer does: answer a watch with an empty 200 and close, send
a line that is not JSON, send an ERROR event whose code is not an integer, break the chunked
encoding, or accept and then say nothing at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from kopf_scheduler.api.types import ObjectError
from kopf_scheduler.cluster.apiclient import WATCH_GRACE_SECONDS, ApiClient
from kopf_scheduler.cluster.connection import ConnectionInfo, Credentials
from kopf_scheduler.cluster.informer import (
    MIN_WATCH_TIMEOUT,
    Backoff,
    Informer,
    InformerHandlers,
    ResourceKind,
    _BackoffManager,
)

PATH = "/api/v1/things"
QUICK = Backoff(initial=0.05, cap=0.2)


def obj(name: str, rv: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv)}}


def event(kind: str, name: str, rv: int) -> bytes:
    return json.dumps({"type": kind, "object": obj(name, rv)}).encode() + b"\n"


@dataclass
class Request:
    at: float
    watch: bool
    query: dict[str, str]


# A watch answer: what to do on the socket, step by step. bytes are sent as one chunk of a chunked
# body, ("raw", bytes) as they are, ("answer", bytes) as the whole answer; a float is a pause; "end"
# finishes the body, "hold" says nothing more until the test ends, "empty-and-close" answers with an
# empty 200 and closes. At the end of the script the connection is closed.
Step = bytes | float | str | tuple[str, bytes]
WatchScript = list[Step]


@dataclass
class Server:
    """Lists from ``lists`` in turn (the last one again when they run out); watches from ``watches``
    in turn (the last one again)."""

    lists: list[tuple[Any, int]]  # (items, resourceVersion)
    watches: list[WatchScript]
    requests: list[Request] = field(default_factory=list)
    port: int = 0
    _server: asyncio.Server | None = None
    _held: list[asyncio.StreamWriter] = field(default_factory=list)
    _handlers: set[asyncio.Task[Any]] = field(default_factory=set)

    async def start(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._held:
            writer.close()
        for task in self._handlers:
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 2)

    def watch_requests(self) -> list[Request]:
        return [r for r in self.requests if r.watch]

    def list_requests(self) -> list[Request]:
        return [r for r in self.requests if not r.watch]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                target = head.split(b" ", 2)[1].decode()
                url = urlsplit(target)
                assert url.path == PATH, url.path
                query = dict(parse_qsl(url.query))
                watch = query.get("watch") == "1"
                self.requests.append(Request(time.monotonic(), watch, query))
                if not watch:
                    n = len(self.list_requests()) - 1
                    items, rv = self.lists[min(n, len(self.lists) - 1)]
                    meta = {"resourceVersion": str(rv)}
                    body = json.dumps(
                        {"kind": "ThingList", "apiVersion": "v1", "metadata": meta, "items": items}
                    ).encode()
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
                    )
                    await writer.drain()
                    continue
                n = len(self.watch_requests()) - 1
                if not await self._answer_watch(self.watches[min(n, len(self.watches) - 1)], writer):
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._handlers.discard(task)
            writer.close()

    async def _answer_watch(self, script: WatchScript, writer: asyncio.StreamWriter) -> bool:
        """Play ``script``; whether the connection stays open for another request."""
        started = False
        for step in script:
            if step == "hold":
                self._held.append(writer)
                await asyncio.sleep(3600)
            if step == "empty-and-close":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
                return False
            if isinstance(step, tuple) and step[0] == "answer":
                writer.write(step[1])
                await writer.drain()
                return True
            if not started:
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                )
                started = True
            if isinstance(step, float):
                await writer.drain()
                await asyncio.sleep(step)
            elif isinstance(step, tuple):
                writer.write(step[1])
            elif step == "end":
                writer.write(b"0\r\n\r\n")
                await writer.drain()
                return True
            elif isinstance(step, bytes):
                writer.write(b"%x\r\n%s\r\n" % (len(step), step))
            await writer.drain()
        return False


@dataclass
class Seen:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


@contextlib.asynccontextmanager
async def running(
    server: Server,
    parse: Callable[[Any], Any] = lambda raw: raw,
    invalid: Callable[[Any, ObjectError], None] = lambda raw, exc: None,
    **options: Any,
) -> AsyncIterator[tuple[Informer[Any], Seen, asyncio.Task[None]]]:
    """An informer on a real ApiClient to ``server``, running until the block ends."""
    await server.start()
    api = ApiClient(Credentials(ConnectionInfo(server=f"http://127.0.0.1:{server.port}", token="t")))
    seen = Seen()
    informer: Informer[Any] = Informer(
        api,
        ResourceKind("Thing", PATH),
        InformerHandlers(
            parse=parse,
            add=lambda o: seen.added.append(o["metadata"]["name"]),
            update=lambda old, new: seen.updated.append(new["metadata"]["name"]),
            delete=lambda o: seen.deleted.append(o["metadata"]["name"]),
            invalid=invalid,
        ),
        **options,
    )
    task = asyncio.ensure_future(informer.run())
    try:
        yield informer, seen, task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await api.close()
        await server.stop()


async def until(condition: Callable[[], bool], timeout: float, what: str) -> float:
    """Seconds until ``condition`` held; fails after ``timeout``."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            pytest.fail(f"not within {timeout}s: {what}")
        await asyncio.sleep(0.01)
    return time.monotonic() - started


def names(informer: Informer[Any]) -> set[str]:
    return {key.split("/", 1)[1] for key in informer.store}


async def test_the_first_watch_waits_for_watch_after_and_starts_from_the_listing() -> None:
    """The runtime holds the watches until its first cycle is through: listed at once, watched
    only once the event is set, from the listing's version (nothing between them is missed)."""
    gate = asyncio.Event()
    server = Server(lists=[([obj("a", 1)], 1)], watches=[[event("ADDED", "b", 2), "hold"]])
    async with running(server, watch_after=gate) as (informer, _, task):
        await until(informer.synced.is_set, 10, "the listing")
        await asyncio.sleep(0.3)
        assert server.watch_requests() == [] and names(informer) == {"a"}
        gate.set()
        await until(lambda: names(informer) == {"a", "b"}, 10, "the watch's event")
        assert not task.done()
    (watch,) = server.watch_requests()
    assert watch.query["resourceVersion"] == "1"


# --- a watch closed at once -------------------------------------------------------------------


async def test_a_watch_closed_at_once_is_retried_with_backoff_not_in_a_loop() -> None:
    """Every watch answered with an empty 200 and a close: client-go's reflector takes a watch that
    ends within a second with no event for a failure, backs off (0.8 s doubling, jittered) and
    lists again. Ten seconds see a handful of requests, not hundreds."""
    server = Server(lists=[([obj("a", 1)], 1)], watches=[["empty-and-close"]])
    async with running(server) as (informer, seen, task):
        await asyncio.sleep(10)
        assert not task.done()
        requests = len(server.requests)
        watches = len(server.watch_requests())
    print(f"10 s of watches closed at once: {watches} watches, {requests} requests in all")
    assert requests <= 12, [(round(r.at, 2), r.watch) for r in server.requests]
    # Backed off, not given up: at t=0, by 1.6 s and by 4.8 s at the latest (jitter included).
    assert watches >= 3
    assert seen.added == ["a"] and informer.relists in (watches - 1, watches)


def test_the_backoff_is_client_gos_reflector_backoff() -> None:
    manager = _BackoffManager(Backoff())
    bases = [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]
    for base in bases:
        assert base <= manager.step() < 2 * base
    manager.last_reset -= 121  # two minutes since the last reset: back to the start
    assert 0.8 <= manager.step() < 1.6


# --- what the stream may carry ---------------------------------------------------------------


async def test_malformed_lines_and_error_codes_end_the_watch_not_the_informer() -> None:
    """A line that is not JSON, an ERROR event whose code is not an integer, a line that is JSON
    but no event, a broken chunked encoding: each ends that watch (client-go: a decoding error is
    an InternalError, and its reflector lists again after the backoff); the informer lives on, the
    re-lists deliver what the broken watches missed (deletions included), later events arrive."""
    server = Server(
        lists=[
            ([obj("a", 1)], 1),
            ([obj("a", 1), obj("b", 2), obj("x", 3), obj("c", 4)], 4),  # x: after the bad line
            ([obj("b", 2), obj("x", 3), obj("c", 4), obj("d", 5)], 5),  # a deleted meanwhile
            ([obj("b", 2), obj("x", 3), obj("c", 4), obj("d", 5)], 5),
        ],
        watches=[
            [event("ADDED", "b", 2), b"{this is not json\n", event("ADDED", "x", 3), "hold"],
            [b'{"type": "ERROR", "object": {"kind": "Status", "code": "410"}}\n', "hold"],
            [b"[1, 2, 3]\n", "hold"],
            # A good event, then a chunk cut short by a close: aiohttp's payload error ends this
            # watch as a reset does, and the next one starts at once from the good event.
            [event("ADDED", "e", 6), 0.2, ("raw", b'64\r\n{"type": "MOD')],
            [event("MODIFIED", "e", 7), "hold"],
        ],
    )
    async with running(server, backoff=QUICK) as (informer, seen, task):
        await until(lambda: informer.resource_version == "7", 10, f"the last event ({server.requests})")
        assert not task.done()
        assert names(informer) == {"b", "x", "c", "d", "e"}
        assert seen.deleted == ["a"] and informer.missed_deletions == 1
        assert seen.updated == ["e"]
        lists = server.list_requests()
        watches = server.watch_requests()
    assert len(lists) == 4 and len(watches) == 5
    # The first listing is a consistent read, paginated (no version: the watch cache ignores the
    # limit at "0"); each re-list asks for at least what was seen (client-go's
    # relistResourceVersion), from the watch cache; each watch starts from the last version seen.
    assert [r.query.get("resourceVersion") for r in lists] == [None, "2", "4", "5"]
    assert [r.query.get("resourceVersionMatch") for r in lists] == [None, *["NotOlderThan"] * 3]
    assert {r.query.get("limit") for r in lists} == {str(informer.page_size)}
    assert [r.query["resourceVersion"] for r in watches] == ["1", "4", "5", "5", "6"]


async def test_an_unexpected_exception_is_logged_and_the_informer_lists_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A listing whose ``items`` is not a list makes the client raise a TypeError, not an ApiError:
    logged with its traceback, backed off, listed again; the task lives on."""
    server = Server(lists=[(5, 1), ([obj("a", 1)], 1)], watches=[[event("ADDED", "b", 2), "hold"]])
    async with running(server, backoff=QUICK) as (informer, _, task):
        await until(lambda: informer.resource_version == "2", 5, "the watch after the second listing")
        assert names(informer) == {"a", "b"} and not task.done()
    failures = [r for r in caplog.records if r.levelname == "ERROR" and "unexpectedly" in r.getMessage()]
    assert len(failures) == 1 and failures[0].exc_info is not None
    assert failures[0].exc_info[0] is TypeError


async def test_unexpected_exceptions_in_parsing_cost_one_object() -> None:
    """A parser that raises something other than ObjectError: the object is reported invalid, the
    informer goes on with the others."""
    server = Server(lists=[([obj("boom", 1), obj("a", 1)], 1)], watches=[[event("ADDED", "b", 2), "hold"]])
    invalid: list[str] = []

    def parse(raw: dict[str, Any]) -> dict[str, Any]:
        if raw["metadata"]["name"] == "boom":
            raise RuntimeError("a parser bug")
        return raw

    def report(raw: Any, exc: ObjectError) -> None:
        invalid.append(exc.message)

    async with running(server, parse, report) as (informer, _, task):
        await until(lambda: informer.resource_version == "2", 5, "the watch event")
        assert names(informer) == {"a", "b"} and not task.done()
    assert invalid == ["RuntimeError: a parser bug"]


async def test_a_429_is_waited_out_and_the_watch_made_again_without_a_list() -> None:
    """client-go's isWatchErrorRetriable: a 429 (or a refused connection) says the apiserver is
    busy or away, not that the list is stale: back off, then watch again from the same version."""
    status = json.dumps({"kind": "Status", "code": 429, "reason": "TooManyRequests", "message": "busy"})
    too_many = b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: %d\r\n\r\n%s" % (
        len(status),
        status.encode(),
    )
    server = Server(
        lists=[([obj("a", 1)], 1)], watches=[[("answer", too_many)], [event("ADDED", "b", 2), "hold"]]
    )
    async with running(server, backoff=Backoff(initial=0.3)) as (informer, _, task):
        await until(lambda: informer.resource_version == "2", 5, "the second watch's event")
        assert not task.done()
    first, second = server.watch_requests()
    assert len(server.list_requests()) == 1 and second.query["resourceVersion"] == "1"
    assert second.at - first.at >= 0.3


# --- a dead connection -----------------------------------------------------------------------


def test_a_dead_watch_connection_is_noticed_within_a_minute_by_default() -> None:
    informer: Informer[Any] = Informer(
        None,  # type: ignore[arg-type]
        ResourceKind("Thing", PATH),
        InformerHandlers(parse=dict, add=print, update=print, delete=print),
    )
    assert (informer.min_watch_timeout, informer.watch_grace) == (MIN_WATCH_TIMEOUT, WATCH_GRACE_SECONDS)
    assert informer.dead_connection_seconds <= 60
    assert all(25 <= informer._watch_timeout() < 50 for _ in range(1000))


async def test_a_watch_that_is_never_answered_is_given_up_within_the_bound() -> None:
    """The server reads the watch request and never answers (a peer gone without FIN or RST): the
    informer gives the watch up within ``dead_connection_seconds``, backs off, lists and watches
    again."""
    server = Server(lists=[([obj("a", 1)], 1)], watches=[["hold"], [event("ADDED", "b", 2), "hold"]])
    async with running(server, min_watch_timeout=1, watch_grace=1.0, backoff=QUICK) as (informer, _, task):
        await until(lambda: len(server.watch_requests()) == 2, 10, "a second watch")
        first, second = server.watch_requests()
        await until(lambda: informer.resource_version == "2", 5, "the second watch's event")
        assert not task.done()
    took = second.at - first.at
    print(f"an unanswered watch given up and made again after {took:.2f}s")
    assert first.query["timeoutSeconds"] == "1"
    assert 2.0 <= took <= informer.dead_connection_seconds + 1.0


@pytest.mark.parametrize(
    "stall",
    [
        [],
        # A chunk size that is not hex, mid-stream: aiohttp 3.14 raises nothing and waits for more.
        [0.2, ("raw", b"zz\r\nnope\r\n")],
    ],
    ids=["silent", "bad-chunk-size"],
)
async def test_a_watch_gone_silent_midstream_is_made_again_from_the_last_version(stall: list[Step]) -> None:
    """The stream delivers an event, then nothing, never closing: at the deadline the informer
    watches again at once from that event's version, without a re-list."""
    server = Server(
        lists=[([obj("a", 1)], 1)],
        watches=[[event("ADDED", "b", 2), *stall, "hold"], [event("ADDED", "c", 3), "hold"]],
    )
    async with running(server, min_watch_timeout=1, watch_grace=1.0, backoff=QUICK) as (informer, _, task):
        await until(lambda: informer.resource_version == "3", 10, "the second watch's event")
        first, second = server.watch_requests()
        assert not task.done() and names(informer) == {"a", "b", "c"}
    took = second.at - first.at
    print(f"a silent watch made again after {took:.2f}s")
    assert second.query["resourceVersion"] == "2" and len(server.list_requests()) == 1
    # The deadline counts from before the first watch's connection is made (the listing went on the
    # lean pool: the first watch opens aiohttp's first connection), so it may close a few ms short.
    assert 1.95 <= took <= informer.dead_connection_seconds + 0.5
