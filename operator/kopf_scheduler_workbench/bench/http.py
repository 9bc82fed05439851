"""Micro-benchmark of the API client (not a test): our CPU per small request, transport by transport.

Starts the local control plane, then POSTs Scheduled-like events (the scheduler's most frequent
request with the binding) at a fixed concurrency through ``ApiClient``, once per variant of its
transport, interleaved round by round, and prints the process CPU per request and the rate:

- ``httptools``: the lean pool as shipped (``cluster.http11``, llhttp's parser);
- ``h11``: the same pool with h11's state machine and parser instead (each request also goes
  through h11's ``send``, minimal headers, since h11 parses an answer only to a request it saw);
- ``hand-written``: the pool before httptools, loaded from git at ``--baseline`` (default
  ``2d4cdab``, the last commit with it) when this runs from a checkout;
- ``aiohttp``: the lean pool off, what listings, watches and proxied traffic use.

``--canned`` replaces the control plane with a child process that answers every request with a
kube-apiserver-like ``201 Created`` (its headers, a created Event as the body): the client's CPU
without the apiserver's competing for the same cores, for a steadier comparison on a busy machine.

``python -m kopf_scheduler_workbench.bench.http [--requests 3000] [--concurrency 32] [--rounds 3]
[--variants httptools h11 hand-written aiohttp] [--canned]``
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import multiprocessing
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

from kopf_scheduler.cluster import http11
from kopf_scheduler.cluster.apiclient import ApiClient
from kopf_scheduler.cluster.connection import ConnectionInfo, Credentials, load_credentials
from kopf_scheduler.cluster.http11 import ConnectionClosed, Http11Pool, ProtocolError, Response
from kopf_scheduler.cluster.run import run_loop
from kopf_scheduler_workbench.controlplane import ControlPlane

# Not a dependency: the h11 variant runs where it is installed. Imported by name (typed Any) so that
# mypy gives the same answer whether or not this machine has it.
h11: Any = importlib.import_module("h11") if importlib.util.find_spec("h11") is not None else None

__all__ = ["main"]

EVENTS = "/apis/events.k8s.io/v1/namespaces/default/events"
VARIANTS = ("httptools", "h11", "hand-written", "aiohttp")


def _event(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"bench-{i}.{time.time_ns():x}", "namespace": "default"},
        "eventTime": "2026-11-25T08:00:00.000000Z",
        "reportingController": "kopf-scheduler",
        "reportingInstance": "bench",
        "action": "Binding",
        "reason": "Scheduled",
        "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": "default", "name": f"p{i}"},
        "note": f"Successfully assigned default/p{i} to node-1",
        "type": "Normal",
    }


# --- h11 ----------------------------------------------------------------------------------------


class _H11Conn(asyncio.Protocol):
    """``http11._Conn``'s contract (begin, answered, keep, closed) on h11's state machine."""

    def __init__(self, max_header: int, max_body: int) -> None:
        self.h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=max_header)
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[Response] | None = None
        self.closed = False
        self.idle_since = 0.0
        self.max_body = max_body
        self.keep = False
        self.answered = True
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.body_size = 0

    def begin(self, waiter: asyncio.Future[Response]) -> None:
        self.waiter = waiter
        self.answered = False
        self.keep = False
        self.body = []
        self.body_size = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self.answered:
            self._close()
            return
        conn = self.h11
        conn.receive_data(data)
        try:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    return
                if isinstance(event, h11.Response):
                    self.status, self.headers = event.status_code, list(event.headers)
                elif isinstance(event, h11.Data):
                    self.body_size += len(event.data)
                    if self.body_size > self.max_body:
                        raise ProtocolError(f"response body over {self.max_body} bytes")
                    self.body.append(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    self._answer()
                    return
                elif isinstance(event, h11.ConnectionClosed):
                    raise ConnectionClosed("connection closed", received=True)
                # InformationalResponse: interim, skipped
        except (h11.RemoteProtocolError, ProtocolError, ConnectionClosed) as exc:
            self.answered = True
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_exception(
                    exc if not isinstance(exc, h11.RemoteProtocolError) else ProtocolError(exc)
                )
            self._close()

    def _answer(self) -> None:
        conn = self.h11
        self.answered = True
        self.keep = conn.our_state is h11.DONE and conn.their_state is h11.DONE and not conn.trailing_data[0]
        if self.keep:
            conn.start_next_cycle()
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(Response(self.status, self.headers, b"".join(self.body)))

    def _close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionClosed(f"connection closed: {exc}", received=False))


class H11Pool(Http11Pool):
    """The lean pool on h11: the request also goes through h11 (its state machine must see it)."""

    connection_class = cast(Any, _H11Conn)

    async def _exchange(self, conn: Any, method: str, target: str, data: bytes, timeout: float) -> Response:
        if not conn.closed:
            body = memoryview(data)[data.index(b"\r\n\r\n") + 4 :]
            headers = [("Host", self.host)]
            if body:
                headers.append(("Content-Length", str(len(body))))
            conn.h11.send(h11.Request(method=method, target=target, headers=headers))
            if body:
                conn.h11.send(h11.Data(data=cast(bytes, body)))  # a view: no copy
            conn.h11.send(h11.EndOfMessage())
        return await super()._exchange(conn, method, target, data, timeout)


# --- the hand-written parser, from git ----------------------------------------------------------


def _hand_written(rev: str) -> type[Http11Pool] | None:
    """The pool as it was at ``rev`` (its ``request`` returned ``(status, body)``), or None."""
    root = Path(http11.__file__).resolve().parents[3]
    try:
        source = subprocess.run(
            ["git", "-C", str(root), "show", f"{rev}:operator/kopf_scheduler/cluster/http11.py"],
            check=True,
            capture_output=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    spec = importlib.util.spec_from_loader("kopf_scheduler_bench_http11_hand", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    exec(compile(source, f"http11.py@{rev}", "exec"), module.__dict__)
    old: Any = module.Http11Pool

    class HandWritten(old):
        async def request(self, *args: Any) -> Response:
            status, body = await super().request(*args)
            return Response(status, [], body)

    return HandWritten


def _client(name: str, creds: Credentials, hand_written: type[Http11Pool] | None) -> ApiClient | None:
    if name == "aiohttp":
        return ApiClient(creds, lean_requests=False)
    if name == "httptools":
        return ApiClient(creds)
    pool_class = (H11Pool if h11 is not None else None) if name == "h11" else hand_written
    if pool_class is None:
        return None
    api = ApiClient(creds)
    api.pool_class = pool_class
    return api


# --- a canned apiserver -------------------------------------------------------------------------

_CANNED_BODY = (
    b'{"kind":"Event","apiVersion":"events.k8s.io/v1","metadata":{"name":"bench-1.18a","namespace":'
    b'"default","uid":"0d6c7a0e-1111-2222-3333-444455556666","resourceVersion":"12345",'
    b'"creationTimestamp":"2026-11-25T08:00:00Z"},"eventTime":"2026-11-25T08:00:00.000000Z",'
    b'"reportingController":"kopf-scheduler","reportingInstance":"bench","action":"Binding",'
    b'"reason":"Scheduled","regarding":{"kind":"Pod","namespace":"default","name":"p1","apiVersion":"v1"},'
    b'"note":"Successfully assigned default/p1 to node-1","type":"Normal"}'
)
_CANNED = (
    b"HTTP/1.1 201 Created\r\nAudit-Id: 6a0f2b7e-3c1d-4a5b-9e8f-0123456789ab\r\n"
    b"Cache-Control: no-cache, private\r\nContent-Type: application/json\r\n"
    b"X-Kubernetes-Pf-Flowschema-Uid: 5f8f2c7e-aaaa-bbbb-cccc-000000000001\r\n"
    b"X-Kubernetes-Pf-Prioritylevel-Uid: 5f8f2c7e-aaaa-bbbb-cccc-000000000002\r\n"
    b"Date: Wed, 25 Nov 2026 08:00:00 GMT\r\nContent-Length: %d\r\n\r\n%s"
) % (len(_CANNED_BODY), _CANNED_BODY)


class _CannedServer(asyncio.Protocol):
    def __init__(self) -> None:
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (end := self.buf.find(b"\r\n\r\n")) >= 0:
            length = 0
            for line in self.buf[:end].split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length :]
            assert self.transport is not None
            self.transport.write(_CANNED)


def _serve_canned(ports: Any) -> None:
    async def serve() -> None:
        server = await asyncio.get_running_loop().create_server(_CannedServer, "127.0.0.1", 0)
        ports.put(server.sockets[0].getsockname()[1])
        await server.serve_forever()

    run_loop(serve())


async def _measure(
    creds: Credentials, requests: int, concurrency: int, rounds: int, variants: list[str], baseline: str
) -> None:
    hand_written = _hand_written(baseline) if "hand-written" in variants else None
    clients = {name: api for name in variants if (api := _client(name, creds, hand_written)) is not None}
    for name in set(variants) - set(clients):
        print(f"{name}: not available (h11 not installed, or no git checkout with {baseline})")
    limit = asyncio.Semaphore(concurrency)
    seq = 0
    results: dict[str, list[float]] = {name: [] for name in clients}

    async def post(api: ApiClient) -> None:
        nonlocal seq
        seq += 1
        async with limit:
            await api.request("POST", EVENTS, body=_event(seq))

    try:
        for _ in range(rounds):
            for name, api in clients.items():
                await asyncio.gather(*(post(api) for _ in range(concurrency * 4)))  # connections open
                cpu, wall = time.process_time(), time.perf_counter()
                await asyncio.gather(*(post(api) for _ in range(requests)))
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                per_request = cpu / requests * 1e6
                results[name].append(per_request)
                print(f"{name:>12}  {per_request:6.0f} us CPU/request  {requests / wall:6.0f} requests/s")
        print(
            "median us CPU/request: "
            + ", ".join(f"{n} {sorted(r)[len(r) // 2]:.0f}" for n, r in results.items())
        )
    finally:
        for api in clients.values():
            await api.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--baseline", default="2d4cdab", help="the git revision of the hand-written pool")
    parser.add_argument("--canned", action="store_true", help="a canned answer instead of kube-apiserver")
    args = parser.parse_args(argv)
    if args.canned:
        context = multiprocessing.get_context("spawn")
        ports = context.Queue()
        child = context.Process(target=_serve_canned, args=(ports,), daemon=True)
        child.start()
        info = ConnectionInfo(server=f"http://127.0.0.1:{ports.get(timeout=30)}", token="t0k3n")
        try:
            creds = Credentials(info)
            run_loop(
                _measure(creds, args.requests, args.concurrency, args.rounds, args.variants, args.baseline)
            )
        finally:
            child.terminate()
        return 0
    plane = ControlPlane()
    plane.start()
    try:
        run_loop(
            _measure(
                load_credentials(str(plane.kubeconfig)),
                args.requests,
                args.concurrency,
                args.rounds,
                args.variants,
                args.baseline,
            )
        )
    finally:
        plane.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
